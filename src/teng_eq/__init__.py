"""teng-eq: Time-Evolving Natural Gradient (Chen et al., ICML 2024) in JAX."""

import jax

# float64 everywhere in the numerics: TENG's per-step losses (~1e-15) and the
# references (~1e-12) sit far below float32's resolution. Set on import, before
# any array is made.
jax.config.update("jax_enable_x64", True)

from teng_eq.checkpoint import CheckpointStore  # noqa: E402
from teng_eq.config import ConfigError, FitConfig, NetworkConfig, RunConfig  # noqa: E402
from teng_eq.equations import Equation, Quadrature, build_equation, operator  # noqa: E402
from teng_eq.equations.allen_cahn import AllenCahn  # noqa: E402
from teng_eq.equations.burgers import Burgers  # noqa: E402
from teng_eq.equations.heat import Heat  # noqa: E402
from teng_eq.equations.periodic import paper_initial_condition  # noqa: E402
from teng_eq.integrators import EULER, HEUN, INTEGRATORS, RK4, Integrator, StepLog, TENGStep  # noqa: E402
from teng_eq.lstsq import SOLVERS, least_squares  # noqa: E402
from teng_eq.methods import TENG, Method, StepInfo  # noqa: E402
from teng_eq.metrics import global_relative_l2, relative_l2  # noqa: E402
from teng_eq.model import ParamSpace, PeriodicEmbedding, TENGNet  # noqa: E402
from teng_eq.reference import SpectralSolution, reference_solution  # noqa: E402
from teng_eq.simulation import (  # noqa: E402
    Diverged,
    Overfit,
    Problem,
    RunFailed,
    RunResult,
    StepRecord,
    prepare,
    run_simulation,
)
from teng_eq.stepper import FIXED, StageLog, Stepper, Stopping  # noqa: E402

__all__ = [
    "EULER", "HEUN", "INTEGRATORS", "RK4", "SOLVERS",
    "AllenCahn", "Burgers", "ConfigError", "Equation", "FitConfig", "Heat", "Integrator",
    "CheckpointStore", "Diverged", "FIXED",
    "Method", "NetworkConfig", "Overfit", "ParamSpace", "PeriodicEmbedding", "Problem", "Quadrature",
    "RunConfig", "RunFailed", "RunResult", "SpectralSolution", "StageLog", "StepInfo", "StepLog", "StepRecord",
    "Stepper", "Stopping", "TENG", "TENGNet", "TENGStep",
    "build_equation", "global_relative_l2", "least_squares", "operator",
    "paper_initial_condition", "prepare", "reference_solution", "relative_l2", "run_simulation",
]
