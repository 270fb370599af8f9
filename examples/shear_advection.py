"""Advection by a shear flow on the periodic square: ``∂ₜu = −c(x₂) ∂₁u`` on ``[0, 2π)²``,
``c(x₂) = s sin x₂`` (``shear`` s), no diffusion: a velocity that depends on x.

The characteristics are straight lines along x₁, each at its own speed, so the exact
solution is ``u(x, t) = u₀(x₁ − c(x₂) t, x₂)``, the run's reference. The flow is
divergence-free: it moves the solution (and any error) without growing or damping it,
``⟨−c∂₁e, e⟩ = 0``. Its linearised operator's coefficient of ∂₁ varies over x₂ with no
diffusion to damp its effect, where the frozen-coefficient transport estimate does not
hold: the run's default estimate carries that variable part by Lawson's RK4 in substeps.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations.periodic import PeriodicBox


def _two_modes(x):
    xp = jnp if isinstance(x, jax.Array) else np
    return xp.sin(x[0]) * xp.sin(x[1]) + 0.5 * xp.cos(2 * x[0] + x[1])


class ShearAdvection(PeriodicBox):
    """``∂ₜu = −s sin(x₂) ∂₁u`` (``shear`` s); exact by characteristics."""

    dim = 2
    initial_conditions = {"two_modes": _two_modes}
    shear: float = eqx.field(static=True)

    def operator(self, u, t):
        return -self.shear * jnp.sin(u.x[1]) * u.grad[0]

    def growth_rate(self, u, grad_u):
        """0: ``⟨−c(x₂)∂₁e, e⟩ = −½∫c ∂₁(e²) = 0`` (c does not depend on x₁)."""
        return 0.0

    def solution(self, x, t):
        """u₀ carried along the characteristics: ``u₀(x₁ − s sin(x₂) t, x₂)``."""
        xp = jnp if isinstance(x, jax.Array) else np
        return _two_modes(xp.stack([x[0] - self.shear * xp.sin(x[1]) * t, x[1]]))
