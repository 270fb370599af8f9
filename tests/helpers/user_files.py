"""A user's own PDE as a new user writes it, outside the package: one Python file
(a periodic-box equation in the short form ``ν Δu + N(u, ∇u)``, like
``teng_eq/equations/heat.py``) and one yaml naming it by ``impl``, written into a
test's folder."""

from __future__ import annotations

from pathlib import Path

#: u₀ of the user's file: band-limited (two Fourier modes), so that a 32² grid
#: resolves it and θ₀ fits in seconds, as ``sines2d`` does.
SINES = "xp.sin(x[0]) * xp.sin(x[1]) + 0.5 * xp.cos(2 * x[0] + x[1])"

MODULE = '''\
"""A user's PDE: ∂ₜu = ν Δu + a u (1 − u) on the periodic square (Fisher–KPP)."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations.periodic import PeriodicBox
from teng_eq.reference.etdrk4 import Pseudospectral


def waves(x):
    xp = jnp if isinstance(x, jax.Array) else np
    return {u0}


class {cls}(PeriodicBox):
    a: float = eqx.field(static=True)

    dim = 2
    initial_conditions = {{"waves": waves}}

    def nonlinear(self, u, grad_u):
        return self.a * u * (1 - u)

    def growth_rate(self, u, grad_u):
        """max over the grid of the reaction's derivative a (1 − 2u), at least 0."""
        return jnp.maximum(0.0, jnp.max(self.a * (1 - 2 * u)))

    def reference_scheme(self):
        return Pseudospectral(degree=2, resolution=((math.inf, 32, 0.01),))
'''

YAML = """\
# a user's equation, named by impl
impl: {module}:{cls}
name: {name}
nu: 0.1
a: {a}
lengths: [6.283185307179586, 6.283185307179586]
initial_condition: waves
"""


def write_user_module(folder: Path, *, u0: str = SINES, module: str = "my_pdes", cls: str = "Mine") -> Path:
    """``folder/<module>.py`` holding the equation class ``cls`` with u₀ ``u0`` (an
    expression in ``x`` and ``xp``, NumPy or jax.numpy)."""
    path = Path(folder) / f"{module}.py"
    path.write_text(MODULE.format(u0=u0, cls=cls))
    return path


def write_user_config(conf: Path, *, name: str = "mine", module: str = "my_pdes", cls: str = "Mine",
                      a: float = 1.0) -> Path:
    """``conf/equation/<name>.yaml`` naming ``module:cls`` (a user's config folder)."""
    path = Path(conf) / "equation" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(YAML.format(module=module, cls=cls, name=name, a=a))
    return path


SYSTEM_MODULE = '''\
"""A user's system on a line: ∂ₜu = κ u_xx − ω v, ∂ₜv = κ v_xx + ω u (rotating diffusion)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations.system import PeriodicSystem


def wave(x):
    xp = jnp if isinstance(x, jax.Array) else np
    return xp.cos(x[0]) + 0.3 * xp.sin(2 * x[0]), xp.sin(x[0]) - 0.3 * xp.cos(2 * x[0])


class RotDiff(PeriodicSystem):
    omega: float = eqx.field(static=True)
    kappa: float = eqx.field(static=True)

    dim = 1
    linear = True
    components = ("u", "v")
    initial_conditions = {"wave": wave}

    def operator(self, u, t):
        return (self.kappa * u["u"].lap - self.omega * u["v"].value,
                self.kappa * u["v"].lap + self.omega * u["u"].value)

    def stiff(self, u, t):
        """The diffusion κΔ of each component, for the IMEX steppers (the rotation explicit)."""
        return self.kappa * u["u"].lap, self.kappa * u["v"].lap


class ExactRotDiff(RotDiff):
    """RotDiff from ``wave`` with its exact solution: w = u + iv solves w_t = κ w_xx + iω w, and
    w₀ = e^{ix} − 0.3i e^{2ix}, so w = e^{iωt}(e^{−κt} e^{ix} − 0.3i e^{−4κt} e^{2ix})."""

    def solution(self, x, t):
        xp = jnp if isinstance(x, jax.Array) else np
        one, two = np.exp(-self.kappa * t), 0.3 * np.exp(-4 * self.kappa * t)
        a, b = x[0] + self.omega * t, 2 * x[0] + self.omega * t
        return one * xp.cos(a) + two * xp.sin(b), one * xp.sin(a) - two * xp.cos(b)
'''


def write_user_system(folder: Path, module: str = "my_system") -> Path:
    """``folder/<module>.py`` holding ``RotDiff``, a two-component system on a line in the
    operator form with its diffusion as its stiff part (no reference: the run's estimate is
    its error measure), and ``ExactRotDiff``, the same with its exact solution from ``wave``."""
    path = Path(folder) / f"{module}.py"
    path.write_text(SYSTEM_MODULE)
    return path
