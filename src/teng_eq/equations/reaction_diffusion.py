"""Two-species reaction–diffusion: the Brusselator on the periodic square ``[0, 2π)²``."""

from __future__ import annotations

import math

import equinox as eqx

from teng_eq.equations.base import array_module
from teng_eq.equations.system import PeriodicSystem
from teng_eq.errors import bad
from teng_eq.reference.etdrk4 import Pseudospectral


def bumps(equation: Brusselator, x):
    """``(u₀, v₀)``: the steady state ``(a, b/a)`` disturbed by two smooth bumps,
    ``B₁ = e^{cos x₁ + cos x₂ − 2}`` and ``B₂ = e^{cos(x₁ − 2) + cos(2x₂ + 1) − 2}``:
    ``u₀ = a + ½B₁ − 0.3B₂``, ``v₀ = b/a − 0.4B₁ + 0.2B₂`` (Fourier modes beyond
    |k_i| = 15 below 1.5e-9, beyond 22 below 1e-13)."""
    xp = array_module(x)
    a, b = equation.a, equation.b
    bump = xp.exp(xp.cos(x[0]) + xp.cos(x[1]) - 2.0)
    other = xp.exp(xp.cos(x[0] - 2.0) + xp.cos(2.0 * x[1] + 1.0) - 2.0)
    return a + 0.5 * bump - 0.3 * other, b / a - 0.4 * bump + 0.2 * other


INITIAL_CONDITIONS = {"bumps2d": bumps}


class Brusselator(PeriodicSystem):
    """The Brusselator: ``∂ₜu = ν_u Δu + a − (b + 1)u + u²v``, ``∂ₜv = ν_v Δv + bu − u²v``.

    Its steady state ``(a, b/a)`` loses stability to oscillation for ``b > 1 + a²`` and to
    a Turing pattern for ``b > (1 + a√(ν_u/ν_v))²``. Reference: pseudo-spectral ETDRK4
    (:class:`~teng_eq.reference.etdrk4.Pseudospectral`), cubic nonlinearity. Resolution
    measured for the preset (a = 1, b = 3, ν = (0.05, 0.2), ``bumps2d``) by self-convergence
    (relative L² difference at T of the (n, dt) run to the (2n, dt) and (n, dt/2) runs):
    T = 4, n = 96, dt = 5e-3: 5e-14 and 9e-12 (n = 64: 7e-10, so T ≤ 2 keeps 64 modes).
    """

    a: float = eqx.field(static=True)
    b: float = eqx.field(static=True)

    dim = 2
    components = ("u", "v")
    initial_conditions = INITIAL_CONDITIONS

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        for key in ("a", "b"):
            if not getattr(self, key) > 0:
                raise bad(f"{prefix}.{key}", getattr(self, key), "must be a number > 0")

    def nonlinear(self, u, grad_u):
        u, v = u
        uuv = u * u * v
        return self.a - (self.b + 1.0) * u + uuv, self.b * u - uuv

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=3, resolution=((2.0, 64, 5e-3), (4.0, 96, 5e-3), (math.inf, 128, 5e-3)))
