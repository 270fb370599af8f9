"""Heat ``∂ₜu = ν Δu`` on a box with a condition on each side (:class:`HeatBox`), and initial
conditions that meet zero Dirichlet or zero Neumann data on every bounded side."""

from __future__ import annotations

import math

from teng_eq.equations.base import Equation, array_module
from teng_eq.equations.bounded import BoundedBox
from teng_eq.equations.heat import LinearHeat
from teng_eq.reference import ClosedForm
from teng_eq.reference.series import EigenSeries


def _scaled(equation, x):
    """The coordinates scaled to [0, 1] along each axis: s_d = (x_d − a_d)/L_d."""
    return [(x[d] - a) / length for d, (a, length) in enumerate(zip(equation.origin, equation.lengths))]


def dirichlet_bumps(equation, x):
    """``u₀ = Π_d sinh(sin πs_d) + ½ Π_d sin(2πs_d)`` (s_d ∈ [0, 1] the scaled coordinates): zero
    on every side, and odd and 2-periodic in each s_d, so its sine series converges
    exponentially (its reflections across the sides are analytic)."""
    xp, s = array_module(x), _scaled(equation, x)
    return (math.prod(xp.sinh(xp.sin(math.pi * sd)) for sd in s)
            + 0.5 * math.prod(xp.sin(2 * math.pi * sd) for sd in s))


def neumann_bumps(equation, x):
    """``u₀ = sinh(2 cos πs₁) Π_{d>1} exp(cos πs_d)``: ∂ₙu₀ = 0 on every side (a function of
    cos πs_d is even about s_d = 0 and 1), mean zero, its cosine series exponentially
    convergent."""
    xp, s = array_module(x), _scaled(equation, x)
    return xp.sinh(2 * xp.cos(math.pi * s[0])) * math.prod(xp.exp(xp.cos(math.pi * sd)) for sd in s[1:])


def plane_waves(equation, x, t=0.0):
    """An exact solution of heat in any box: ``u = h(x) + e^{−dνt} sin(Σ_d x_d + 0.3) +
    ½ e^{−ν|k|²t} cos(k·x)``, k = (1, −2, 1)[:d], h harmonic (x₁/2 in 1-D, x₁x₂ above); its
    data on every side move in time."""
    xp, d, nu = array_module(x), len(x), equation.nu
    k = (1.0, -2.0, 1.0)[:d]
    harmonic = 0.5 * x[0] if d == 1 else x[0] * x[1]
    return (harmonic + xp.exp(-d * nu * t) * xp.sin(sum(x) + 0.3)
            + 0.5 * xp.exp(-nu * sum(c * c for c in k) * t) * xp.cos(sum(c * xi for c, xi in zip(k, x))))


class HeatBox(BoundedBox, LinearHeat):
    """Heat on a box (:class:`~teng_eq.equations.bounded.BoundedBox`). Reference: the exact
    eigenfunction series (:class:`~teng_eq.reference.series.EigenSeries`) where every
    bounded side holds zero Dirichlet or Neumann data; the class's ``solution(x, t)`` where it
    declares one (a subclass with data of its own); none otherwise."""

    initial_conditions = {"dirichlet_bumps": dirichlet_bumps, "neumann_bumps": neumann_bumps}

    def reference_scheme(self):
        if type(self).solution is not Equation.solution:
            return ClosedForm()
        return EigenSeries() if self.homogeneous() else None


class HeatWaves(HeatBox):
    """Heat on a box from the exact :func:`plane_waves`, its reference (a manufactured case
    without forcing): its sides take their data from it (``value: solution``), Dirichlet,
    Neumann or Robin alike."""

    initial_conditions = {"plane_waves": plane_waves}

    def solution(self, x, t):
        return plane_waves(self, x, t)
