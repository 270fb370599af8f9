"""teng-eq: Time-Evolving Natural Gradient (Chen et al., ICML 2024) in JAX."""

import jax

# float64 everywhere in the numerics: TENG's per-step losses (~1e-14) and the
# references (~1e-12) sit far below float32's resolution. Set on import, before
# any array is made.
jax.config.update("jax_enable_x64", True)

from teng_eq.equations import (  # noqa: E402
    EQUATIONS,
    INITIAL_CONDITIONS,
    AllenCahn,
    Burgers,
    Equation,
    Heat,
    make_equation,
    operator,
    paper_initial_condition,
)
from teng_eq.model import ParamSpace, PeriodicEmbedding, TENGNet  # noqa: E402
