"""A fourth-order equation with a forcing on a line, from a manufactured solution:
``∂ₜu = −κ ∂ₓ⁴u + f(x, t)`` on ``[0, 2π)``, stiff (its rates κk⁴).

Choose ``u*(x, t) = e^{−t/2} sin x + ½ cos(3x − t)`` and the forcing that makes it one,
``f = ∂ₜu* + κ ∂ₓ⁴u*``, by autodiff of u* itself; u* is the run's reference. For the
implicit steps (docs/guides/methods.md): the equation depends on t through its forcing.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations import Field
from teng_eq.equations.periodic import PeriodicBox


def manufactured(x, t):
    """u*(x, t), coordinate first (NumPy or JAX)."""
    xp = jnp if isinstance(x, jax.Array) or isinstance(t, jax.Array) else np
    return xp.exp(-t / 2) * xp.sin(x[0]) + 0.5 * xp.cos(3 * x[0] - t)


class ForcedHyperdiffusion(PeriodicBox):
    """``∂ₜu = −κ ∂ₓ⁴u + f`` (``kappa`` κ)."""

    dim = 1
    order = 4
    autonomous = False
    initial_conditions = {"manufactured": lambda x: manufactured(x, 0.0)}
    kappa: float = eqx.field(static=True)

    def forcing(self, points, t):
        """``f = ∂ₜu* + κ ∂ₓ⁴u*`` at the points, by autodiff of u*."""
        t = jnp.asarray(t, jnp.float64)
        u_t = jax.jvp(lambda s: manufactured(points.T, s), (t,), (jnp.ones_like(t),))[1]
        return u_t + self.kappa * Field(lambda p: manufactured(p.T, t), points).d(0, 0, 0, 0)

    def operator(self, u, t):
        return -self.kappa * u.d(0, 0, 0, 0) + self.forcing(u.points, t)

    def stiff(self, u, t):
        """The linear part −κ∂ₓ⁴u, taken implicitly by the IMEX steppers (``method=teng_ars222``)."""
        return -self.kappa * u.d(0, 0, 0, 0)

    def growth_rate(self, u, grad_u):
        """0: ``⟨−κ∂ₓ⁴e, e⟩ = −κ‖∂ₓ²e‖² ≤ 0`` (the forcing cancels in L[v] − L[w])."""
        return 0.0

    def solution(self, x, t):
        return manufactured(x, t)
