"""Diffusion with a variable coefficient and a forcing, from a manufactured solution:
``∂ₜu = ν ∇·(a(x)∇u) + f(x, t)`` on ``[0, 2π)²``, ``a = 1 + ½ sin x₁ sin x₂``.

Choose the solution ``u*(x, t) = e^{−t/2} sin x₁ cos x₂ + ½ sin(x₁ + x₂ − t)`` and the
forcing that makes it one, ``f = ∂ₜu* − ν ∇·(a∇u*)``, here by autodiff of u* itself:
the equation depends on x (its coefficient) and on t (its forcing), and u* is its
reference.
"""

import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations import Field
from teng_eq.equations.periodic import PeriodicBox


def manufactured(x, t):
    """u*(x, t), coordinate first (NumPy or JAX)."""
    xp = jnp if isinstance(x, jax.Array) or isinstance(t, jax.Array) else np
    return xp.exp(-t / 2) * xp.sin(x[0]) * xp.cos(x[1]) + 0.5 * xp.sin(x[0] + x[1] - t)


class ForcedDiffusion(PeriodicBox):
    """``∂ₜu = ν ∇·(a∇u) + f``, ``ν ∇·(a∇u) = ν (a Δu + ∇a·∇u)``."""

    dim = 2
    autonomous = False
    initial_conditions = {"manufactured": lambda x: manufactured(x, 0.0)}

    def diffusion(self, u: Field):
        x1, x2 = u.x
        a = 1 + 0.5 * jnp.sin(x1) * jnp.sin(x2)
        da = (0.5 * jnp.cos(x1) * jnp.sin(x2), 0.5 * jnp.sin(x1) * jnp.cos(x2))
        return self.nu * (a * u.lap + da[0] * u.grad[0] + da[1] * u.grad[1])

    def forcing(self, points, t):
        """``f = ∂ₜu* − ν ∇·(a∇u*)`` at the points, by autodiff of u*."""
        t = jnp.asarray(t, jnp.float64)
        u_t = jax.jvp(lambda s: manufactured(points.T, s), (t,), (jnp.ones_like(t),))[1]
        return u_t - self.diffusion(Field(lambda p: manufactured(p.T, t), points))

    def operator(self, u, t):
        return self.diffusion(u) + self.forcing(u.points, t)

    def growth_rate(self, u, grad_u):
        """0: ``⟨ν∇·(a∇e), e⟩ = −ν∫a|∇e|² ≤ 0`` (a ≥ ½; the forcing cancels in L[v] − L[w])."""
        return 0.0

    def solution(self, x, t):
        return manufactured(x, t)
