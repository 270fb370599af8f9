"""The nonlinear Schrödinger equation ``iψₜ = −½Δψ + g|ψ|²ψ`` on the periodic square
``[0, 2π)²``, a complex field carried as its real and imaginary parts."""

from __future__ import annotations

import math

import equinox as eqx
import numpy as np

from teng_eq.equations.base import array_module
from teng_eq.equations.system import PeriodicSystem, matrix_symbol
from teng_eq.reference import ClosedForm
from teng_eq.reference.etdrk4 import Pseudospectral

#: ψ₀ = Σ A e^{i(k·x + φ)}: ``(k₁, k₂, φ, A)`` per plane wave.
PLANE_WAVES = ((1, 0, 0.0, 0.8), (0, -1, 0.3, 0.5), (1, 2, 1.0, 0.3))


def plane_waves(equation: Schrodinger, x, t: float = 0.0):
    """``(Re ψ, Im ψ)`` of :data:`PLANE_WAVES` at points ``x`` (coordinate first), each wave
    turned by its linear frequency ½|k|² at time t: the exact solution where g = 0."""
    xp = array_module(x)
    re = im = 0.0 * x[0]
    for k1, k2, phi, a in PLANE_WAVES:
        arg = k1 * x[0] + k2 * x[1] + phi - 0.5 * (k1 * k1 + k2 * k2) * t
        re, im = re + a * xp.cos(arg), im + a * xp.sin(arg)
    return re, im


#: The equation's initial conditions (each x ↦ (Re ψ₀, Im ψ₀)).
INITIAL_CONDITIONS = {"plane_waves2d": plane_waves}


class Schrodinger(PeriodicSystem):
    """``iψₜ = −½Δψ + g|ψ|²ψ`` (g > 0 defocusing), as ψ = re + i im::

        ∂ₜre = −½Δim + g|ψ|² im,   ∂ₜim = ½Δre − g|ψ|² re.

    Invariants: the mass ∫|ψ|² and the energy ∫ ½|∇ψ|² + ½g|ψ|⁴. Reference: for g = 0 the
    exact plane waves (:func:`plane_waves`); else pseudo-spectral ETDRK4 with the linear
    part ±½|k|² coupling re and im exactly (:func:`~teng_eq.reference.etdrk4.coupled_coefficients`)
    and the cubic rest :meth:`nonlinear`. Resolution measured for g = 1 and
    ``plane_waves2d`` by self-convergence (the (n, dt) run against (2n, dt) and
    (n, dt/2) at T): T = 1, n = 48, dt = 2.5e-3: 3.7e-12 and 6.2e-11 (32 modes: 2.9e-8;
    Δt 5e-3: 9.9e-10).
    """

    g: float = eqx.field(static=True)

    dim = 2
    components = ("re", "im")
    initial_conditions = INITIAL_CONDITIONS

    def operator(self, u, t):
        n_re, n_im = self.nonlinear([u["re"].value, u["im"].value], None)
        return -0.5 * u["im"].lap + n_re, 0.5 * u["re"].lap + n_im

    def nonlinear(self, u, grad_u):
        re, im = u
        rho = re * re + im * im
        return self.g * rho * im, -self.g * rho * re

    def linear_symbol(self, k2):
        """``[[0, ½|k|²], [−½|k|², 0]]`` per wave vector: −½Δ im and ½Δ re in Fourier space."""
        half = 0.5 * np.asarray(k2)
        return matrix_symbol([[0.0, half], [-half, 0.0]], k2)

    def invariants(self, u):
        re, im = u["re"], u["im"]
        rho = re.value**2 + im.value**2
        gradient = sum(re.grad[i] ** 2 + im.grad[i] ** 2 for i in range(self.dim))
        return {"mass": rho, "energy": 0.5 * gradient + 0.5 * self.g * rho**2}

    def solution(self, x, t):
        """The exact solution where g = 0 (:func:`plane_waves`); none otherwise."""
        if self.g != 0:
            raise NotImplementedError("the nonlinear Schrödinger equation (g ≠ 0) has ETDRK4 "
                                      "for its reference")
        return plane_waves(self, x, t)

    def reference_scheme(self):
        if self.g == 0:
            return ClosedForm()
        return Pseudospectral(degree=3, resolution=((1.0, 48, 2.5e-3), (math.inf, 64, 2.5e-3)))
