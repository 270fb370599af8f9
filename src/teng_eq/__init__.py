"""teng-eq: Time-Evolving Natural Gradient (Chen et al., ICML 2024) in JAX."""

import jax

# float64 everywhere in the numerics: TENG's per-step losses (~1e-15) and the
# references (~1e-12) sit far below float32's resolution. Set on import, before
# any array is made.
jax.config.update("jax_enable_x64", True)

from teng_eq.checkpoint import CheckpointStore
from teng_eq.config import ConfigError, FitConfig, NetworkConfig, RunConfig
from teng_eq.equations import Equation, Quadrature, build_equation, operator
from teng_eq.equations.allen_cahn import AllenCahn
from teng_eq.equations.burgers import Burgers
from teng_eq.equations.heat import Heat
from teng_eq.equations.periodic import paper_initial_condition
from teng_eq.integrators import EULER, HEUN, INTEGRATORS, RK4, Integrator, StepLog, TENGStep
from teng_eq.lstsq import SOLVERS, least_squares
from teng_eq.methods import TENG, Method, StepInfo
from teng_eq.metrics import global_relative_l2, relative_l2
from teng_eq.model import ParamSpace, PeriodicEmbedding, TENGNet
from teng_eq.reference import SpectralSolution, reference_solution
from teng_eq.simulation import (
    Diverged,
    Overfit,
    Problem,
    RunFailed,
    RunResult,
    StepRecord,
    prepare,
    run_simulation,
)
from teng_eq.stepper import FIXED, StageLog, Stepper, Stopping

__all__ = [
    "EULER",
    "FIXED",
    "HEUN",
    "INTEGRATORS",
    "RK4",
    "SOLVERS",
    "TENG",
    "AllenCahn",
    "Burgers",
    "CheckpointStore",
    "ConfigError",
    "Diverged",
    "Equation",
    "FitConfig",
    "Heat",
    "Integrator",
    "Method",
    "NetworkConfig",
    "Overfit",
    "ParamSpace",
    "PeriodicEmbedding",
    "Problem",
    "Quadrature",
    "RunConfig",
    "RunFailed",
    "RunResult",
    "SpectralSolution",
    "StageLog",
    "StepInfo",
    "StepLog",
    "StepRecord",
    "Stepper",
    "Stopping",
    "TENGNet",
    "TENGStep",
    "build_equation",
    "global_relative_l2",
    "least_squares",
    "operator",
    "paper_initial_condition",
    "prepare",
    "reference_solution",
    "relative_l2",
    "run_simulation",
]
