"""teng-eq: Time-Evolving Natural Gradient (Chen et al., ICML 2024) in JAX.

Importing the package loads nothing heavy: the sweep callback and
``pipeline/analyze.py`` use it without JAX. The names below are loaded on first
use from the module that defines them (README "Architecture" lists every module).
"""

import importlib
import os
import sys

# float64 everywhere in the numerics: TENG's per-step losses (~1e-15) and the
# references (~1e-12) sit far below float32's resolution. JAX reads the variable
# when it is first imported; if it already is, switch it on directly.
os.environ["JAX_ENABLE_X64"] = "1"
if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_enable_x64", True)

#: Public name -> the module that defines it.
_LAZY = {
    "RunConfig": "teng_eq.config",
    "run_simulation": "teng_eq.simulation",
    "build_method": "teng_eq.simulation",
    "load_network": "teng_eq.simulation",
    "Problem": "teng_eq.methods.base",
    "Method": "teng_eq.methods.base",
    "TENGNet": "teng_eq.model",
    "ParamSpace": "teng_eq.model",
    "StageSolver": "teng_eq.stepper",
    "TENGStep": "teng_eq.integrators",
    "ButcherTableau": "teng_eq.integrators",
    "ConfigError": "teng_eq.errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'teng_eq' has no attribute {name!r}")
