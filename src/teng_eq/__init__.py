"""teng-eq: Time-Evolving Natural Gradient (Chen et al., ICML 2024) in JAX.

Importing the package loads nothing: the sweep callback and ``pipeline/analyze.py``
use it without JAX. Import what you need from the module that defines it
(docs/api/index.md lists them), e.g. ``from teng_eq.run.simulation import run_simulation``.
"""

import os
import sys

# float64 everywhere in the numerics: TENG's per-step losses (~1e-15) and the
# references (~1e-12) sit far below float32's resolution. JAX reads the variable
# when it is first imported; if it already is, switch it on directly.
os.environ["JAX_ENABLE_X64"] = "1"
if "jax" in sys.modules:
    sys.modules["jax"].config.update("jax_enable_x64", True)
