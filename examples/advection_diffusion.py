"""Advection–diffusion on the periodic square: ``∂ₜu = ν Δu − c·∇u`` on ``[0, 2π)²``.

The short form ``ν Δu + N(u, ∇u)`` with ``N = −c·∇u``. From the two-mode initial
condition ``sin x₁ sin x₂ + ½ cos(2x₁ + x₂)`` every mode is carried along by ``c`` and
decays at its own rate ``ν|k|²``: the exact solution, which is the run's reference.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations.periodic import PeriodicBox
from teng_eq.errors import bad


def _two_modes(x, shift=(0.0, 0.0), decay=(1.0, 1.0)):
    xp = jnp if isinstance(x, jax.Array) else np
    y1, y2 = x[0] - shift[0], x[1] - shift[1]
    return decay[0] * xp.sin(y1) * xp.sin(y2) + 0.5 * decay[1] * xp.cos(2 * y1 + y2)


class AdvectionDiffusion(PeriodicBox):
    """``∂ₜu = ν Δu − c·∇u`` with a constant velocity ``c`` (``velocity``)."""

    dim = 2
    initial_conditions = {"two_modes": _two_modes}
    velocity: tuple[float, ...] = eqx.field(static=True)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if len(self.velocity) != 2:
            raise bad(f"{prefix}.velocity", list(self.velocity), "must be 2 numbers")

    def nonlinear(self, u, grad_u):
        return -(self.velocity[0] * grad_u[0] + self.velocity[1] * grad_u[1])

    def growth_rate(self, u, grad_u):
        """0: ``⟨νΔe − c·∇e, e⟩ = −ν‖∇e‖²`` (advection moves the error, does not grow it)."""
        return 0.0

    def solution(self, x, t):
        """The two modes translated by ``c t``, each decayed by ``e^{−ν|k|²t}`` (|k|² = 2, 5)."""
        shift = (self.velocity[0] * t, self.velocity[1] * t)
        return _two_modes(x, shift, (np.exp(-2 * self.nu * t), np.exp(-5 * self.nu * t)))
