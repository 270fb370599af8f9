"""Anisotropic diffusion with a cross derivative: ``∂ₜu = a ∂₁²u + 2b ∂₁∂₂u + c ∂₂²u`` on
``[0, 2π)²`` (``a, c > 0``, ``b² < ac``: elliptic), an operator of general form.

Each Fourier mode ``cos(k·x − φ)`` decays at its own rate ``a k₁² + 2b k₁k₂ + c k₂²``: from
``u₀ = sin(x₁ + x₂) + ½ cos(x₁ − 2x₂)`` the exact solution is those two modes decayed,
the run's reference.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations.periodic import PeriodicBox
from teng_eq.errors import bad

#: The two modes of u₀: (wave vector, amplitude, phase) of ``amplitude · sin(k·x + phase)``.
MODES = (((1, 1), 1.0, 0.0), ((1, -2), 0.5, np.pi / 2))


def _modes(x, decays=(1.0, 1.0)):
    xp = jnp if isinstance(x, jax.Array) else np
    return sum(d * amp * xp.sin(k[0] * x[0] + k[1] * x[1] + phase) for (k, amp, phase), d in zip(MODES, decays))


class AnisotropicDiffusion(PeriodicBox):
    """``∂ₜu = a u₁₁ + 2b u₁₂ + c u₂₂`` (``a``, ``b``, ``c``); exact from the two modes."""

    dim = 2
    linear = True
    initial_conditions = {"two_modes": _modes}
    a: float = eqx.field(static=True)
    b: float = eqx.field(static=True)
    c: float = eqx.field(static=True)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not (self.a > 0 and self.c > 0 and self.b**2 < self.a * self.c):
            raise bad(f"{prefix}.b", self.b, f"must satisfy b² < a·c = {self.a * self.c} (a, c > 0): elliptic")

    def operator(self, u, t):
        return self.a * u.d(0, 0) + 2 * self.b * u.d(0, 1) + self.c * u.d(1, 1)

    def growth_rate(self, u, grad_u):
        """0: the operator's symbol −(a k₁² + 2b k₁k₂ + c k₂²) ≤ 0 (elliptic)."""
        return 0.0

    def solution(self, x, t):
        """Each mode decayed by ``exp(−(a k₁² + 2b k₁k₂ + c k₂²) t)``."""
        rates = [self.a * k[0] ** 2 + 2 * self.b * k[0] * k[1] + self.c * k[1] ** 2 for k, _, _ in MODES]
        return _modes(x, [np.exp(-r * t) for r in rates])
