"""The wave equation ``∂ₜₜu = c²Δu`` as a first-order system on the periodic square
``[0, 2π)²``: ``∂ₜu = v``, ``∂ₜv = c²Δu``."""

from __future__ import annotations

import math

import equinox as eqx

from teng_eq.equations.base import array_module
from teng_eq.equations.system import PeriodicSystem
from teng_eq.errors import bad

#: The standing waves of ``standing2d``: ``(k₁, k₂, φ, A, B)`` per mode, u₀ = Σ A cos(k·x + φ),
#: v₀ = Σ B cos(k·x + φ): one mode starting from rest, one moving, one from velocity alone.
STANDING2D = ((1, 1, 0.0, 1.0, 0.0), (2, -1, math.pi / 3, 0.5, 0.5), (0, 3, 0.3, 0.0, 0.4))


def standing_waves(equation: Wave, x, t: float = 0.0):
    """``(u, v)`` at points ``x`` (coordinate first) and time t: each mode of
    :data:`STANDING2D` oscillates at ω = c|k|, its amplitude ``A cos ωt + (B/ω) sin ωt``
    in u and its time derivative in v."""
    xp = array_module(x)
    u = v = 0.0 * x[0]
    for k1, k2, phi, a, b in STANDING2D:
        w = equation.c * math.hypot(k1, k2)
        wave = xp.cos(k1 * x[0] + k2 * x[1] + phi)
        u = u + (a * math.cos(w * t) + b * math.sin(w * t) / w) * wave
        v = v + (b * math.cos(w * t) - a * w * math.sin(w * t)) * wave
    return u, v


#: The wave equation's initial conditions (each x ↦ (u₀, v₀)).
INITIAL_CONDITIONS = {"standing2d": standing_waves}


class Wave(PeriodicSystem):
    """``∂ₜu = v``, ``∂ₜv = c²Δu`` (``c`` the wave speed).

    Reference: exact (:func:`standing_waves`, a finite sum of standing waves). Invariant:
    the energy ``∫ v² + c²|∇u|² dx`` (twice the kinetic plus potential energy), since
    ``d/dt ∫ v² + c²|∇u|² = 2∫ v c²Δu + c² ∇u·∇v = 0`` on the periodic box.
    """

    c: float = eqx.field(static=True)

    dim = 2
    linear = True
    components = ("u", "v")
    initial_conditions = INITIAL_CONDITIONS

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not self.c > 0:
            raise bad(f"{prefix}.c", self.c, "must be a number > 0")

    def operator(self, u, t):
        return u["v"].value, self.c**2 * u["u"].lap

    def solution(self, x, t):
        return standing_waves(self, x, t)

    def invariants(self, u):
        grad = u["u"].grad
        return {"energy": u["v"].value ** 2 + self.c**2 * (grad[0] ** 2 + grad[1] ** 2)}
