"""The wave equation ``∂ₜₜu = c²Δu`` as a first-order system on the periodic square
``[0, 2π)²``: ``∂ₜu = v``, ``∂ₜv = c²Δu``."""

from __future__ import annotations

import math

import equinox as eqx
import numpy as np

from teng_eq.equations.base import array_module
from teng_eq.equations.system import PeriodicSystem, matrix_symbol
from teng_eq.errors import bad

#: The standing waves of ``standing2d``: ``(k₁, k₂, φ, A, B)`` per mode, u₀ = Σ A cos(k·x + φ),
#: v₀ = Σ B cos(k·x + φ): one mode starting from rest, one moving, one from velocity alone.
STANDING2D = ((1, 1, 0.0, 1.0, 0.0), (2, -1, math.pi / 3, 0.5, 0.5), (0, 3, 0.3, 0.0, 0.4))


def _modes(c: float, t: float):
    """``(k₁, k₂, φ, a_u, a_v)`` of each mode of :data:`STANDING2D` at time t: it oscillates
    at ω = c|k|, its amplitude ``a_u = A cos ωt + (B/ω) sin ωt`` in u, ``a_v`` = its time
    derivative in v."""
    for k1, k2, phi, a, b in STANDING2D:
        w = c * math.hypot(k1, k2)
        yield (k1, k2, phi, a * math.cos(w * t) + b * math.sin(w * t) / w,
               b * math.cos(w * t) - a * w * math.sin(w * t))


def standing_waves(equation: Wave, x, t: float = 0.0):
    """``(u, v)`` at points ``x`` (coordinate first) and time t (:func:`_modes`)."""
    xp = array_module(x)
    u = v = 0.0 * x[0]
    for k1, k2, phi, a_u, a_v in _modes(equation.c, t):
        wave = xp.cos(k1 * x[0] + k2 * x[1] + phi)
        u, v = u + a_u * wave, v + a_v * wave
    return u, v


def standing_waves_energy_form(equation: WaveEnergyForm, x, t: float = 0.0):
    """``(p, q₁, q₂) = (v, c∂₁u, c∂₂u)`` of :func:`standing_waves`."""
    xp = array_module(x)
    p = q1 = q2 = 0.0 * x[0]
    for k1, k2, phi, a_u, a_v in _modes(equation.c, t):
        arg = k1 * x[0] + k2 * x[1] + phi
        p, q1, q2 = (p + a_v * xp.cos(arg), q1 - equation.c * k1 * a_u * xp.sin(arg),
                     q2 - equation.c * k2 * a_u * xp.sin(arg))
    return p, q1, q2


#: The wave equation's initial conditions (each x ↦ (u₀, v₀)), and in its energy form (x ↦ (p₀, q₀)).
INITIAL_CONDITIONS = {"standing2d": standing_waves}
ENERGY_FORM_CONDITIONS = {"standing2d": standing_waves_energy_form}


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

    def linear_symbol(self, k2):
        """``[[0, 1], [−c²|k|², 0]]`` per wave vector (for :class:`~teng_eq.reference.ExactFourier`)."""
        return matrix_symbol([[0.0, 1.0], [-self.c**2 * np.asarray(k2), 0.0]], k2)

    def solution(self, x, t):
        return standing_waves(self, x, t)

    def invariants(self, u):
        grad = u["u"].grad
        return {"energy": u["v"].value ** 2 + self.c**2 * (grad[0] ** 2 + grad[1] ** 2)}


class WaveEnergyForm(Wave):
    """The same waves as the symmetric first-order system of ``p = ∂ₜu`` and ``q = c∇u``:
    ``∂ₜp = c ∇·q``, ``∂ₜq = c ∇p``, whose L² norm ∫ p² + |q|² is the energy — the norm
    the fits minimise is then the one the equation conserves (where :class:`Wave`'s L² fits
    of (u, v) are not: the Systems guide). Reference: :func:`standing_waves_energy_form`."""

    components = ("p", "q1", "q2")
    initial_conditions = ENERGY_FORM_CONDITIONS

    def operator(self, u, t):
        return self.c * (u["q1"].d(0) + u["q2"].d(1)), self.c * u["p"].d(0), self.c * u["p"].d(1)

    def linear_symbol(self, k2):
        raise NotImplementedError("the energy form's symbol depends on the wave vector, not on |k|² alone")

    def solution(self, x, t):
        return standing_waves_energy_form(self, x, t)

    def invariants(self, u):
        return {"energy": u["p"].value ** 2 + u["q1"].value ** 2 + u["q2"].value ** 2}
