"""Heat on the unit disk with u = 0 on the boundary (paper, App. "Additional Initial
Conditions and Benchmarks"): ``∂ₜu = ν Δu`` on ``{x₁² + x₂² ≤ 1}``, ν = 1/10.

The network takes plain Cartesian input (the paper removes the periodic embedding
here), and the boundary is enforced by TENG's loss: the fit quadrature of the domain
(:class:`~teng_eq.domains.disk.UnitDisk`) holds, beside the interior points, points on the
circle whose rows join every least-squares problem with weight ``boundary_weight`` × arc
length and the boundary value as their target.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float

from teng_eq.domains.disk import UnitDisk
from teng_eq.equations.base import array_module
from teng_eq.equations.heat import LinearHeat
from teng_eq.errors import bad
from teng_eq.reference.bessel import BesselSeries, bessel_zero

#: Trapezoid nodes of :func:`disk_harmonic`: exact to round-off while λr ≤ 14 (the
#: error is of the order of J_{N−m}(λr), J₆₀(14) ≈ 10⁻³⁵).
_PLANE_WAVES = 64


def disk_harmonic(m: int, n: int, x) -> Float[Array, " *shape"]:
    """``Z_mn = J_m(λ_nm r) cos(mθ)`` at Cartesian ``x`` (coordinate first; NumPy or JAX).

    Written as an average of plane waves (the Jacobi–Anger expansion integrated
    against e^{imφ})::

        J_m(λr) cos(mθ) = (1/2π) ∫₀^{2π} cos(λ (x₁ cos φ + x₂ sin φ) + m(φ − π/2)) dφ,

    by the trapezoid rule in φ (exponentially convergent for this periodic entire
    integrand). Arithmetic only, smooth at r = 0, so autodiff gives exact derivatives
    of every order — no polar coordinates, no Bessel routine.
    """
    xp = array_module(x)
    lam = bessel_zero(m, n)
    phi = 2 * math.pi * np.arange(_PLANE_WAVES) / _PLANE_WAVES
    shape = (-1,) + (1,) * (np.ndim(x) - 1)
    arg = lam * (x[0] * np.cos(phi).reshape(shape) + x[1] * np.sin(phi).reshape(shape))
    return xp.mean(xp.cos(arg + (m * (phi - math.pi / 2)).reshape(shape)), axis=0)


class DiskHarmonics(eqx.Module):
    """``u₀ = Σ c Z_mn`` for ``modes`` ``(m, n, c)``: an initial condition that the exact
    Bessel series (:class:`~teng_eq.reference.bessel.BesselSeries`) evolves."""

    modes: tuple[tuple[int, int, float], ...] = eqx.field(static=True)

    def __call__(self, x):
        return sum(c * disk_harmonic(m, n, x) for m, n, c in self.modes)


#: The paper's u₀ = ¼ (Z₀₁ − Z₀₂/4 + Z₀₃/16 − Z₀₄/64 + Z₁₁ − Z₁₂/2 + Z₁₃/4 − Z₁₄/8 + Z₂₁ + Z₃₁ + Z₄₁).
PAPER_DISK = DiskHarmonics(tuple(
    (m, n, c / 4)
    for m, n, c in [(0, 1, 1.0), (0, 2, -1 / 4), (0, 3, 1 / 16), (0, 4, -1 / 64),
                    (1, 1, 1.0), (1, 2, -1 / 2), (1, 3, 1 / 4), (1, 4, -1 / 8),
                    (2, 1, 1.0), (3, 1, 1.0), (4, 1, 1.0)]
))


class HeatDisk(LinearHeat):
    """Heat ``∂ₜu = ν Δu`` on the unit disk, u = 0 on the circle: its domain is the
    :class:`~teng_eq.domains.disk.UnitDisk` whose boundary rows weigh ``boundary_weight``
    × arc length in every fit.

    Reference: the exact Bessel series of the initial condition's modes.
    """

    boundary_weight: float = eqx.field(static=True)

    dim = 2
    initial_conditions: ClassVar[dict] = {"paper_disk": PAPER_DISK}

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not self.boundary_weight > 0:
            raise bad(f"{prefix}.boundary_weight", self.boundary_weight, "must be a number > 0")

    @property
    def domain(self) -> UnitDisk:
        return UnitDisk(self.boundary_weight)

    def reference_scheme(self) -> BesselSeries:
        return BesselSeries(self.initial_conditions[self.initial_condition].modes)
