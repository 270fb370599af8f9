"""Heat on the unit disk with u = 0 on the boundary (paper, App. "Additional Initial
Conditions and Benchmarks"): ``∂ₜu = ν Δu`` on ``{x₁² + x₂² ≤ 1}``, ν = 1/10.

The network takes plain Cartesian input (the paper removes the periodic embedding
here), and the boundary is enforced by TENG's loss: the fit quadrature holds, beside
the interior points, points on the circle whose rows join every least-squares
problem with weight ``boundary_weight`` × arc length and target 0.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.equations.base import Equation, array_module
from teng_eq.errors import bad
from teng_eq.grid import Quadrature, circle_points, disk_quadrature
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


class HeatDisk(Equation):
    """Heat ``∂ₜu = ν Δu`` on the unit disk, u = 0 on the circle.

    Quadratures (``n`` = the config's ``grid``): the interior by
    :func:`~teng_eq.grid.disk_quadrature` with n Gauss–Legendre radii × n angles,
    and, for the fits, n points on the circle of weight ``boundary_weight`` · 2π/n
    each (marked in :attr:`Quadrature.boundary`: their target is 0). The error norms
    are on the disk only (m × m interior points).
    """

    boundary_weight: float = eqx.field(static=True)

    dim = 2
    linear = True
    initial_conditions: ClassVar[dict] = {"paper_disk": PAPER_DISK}

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not self.boundary_weight > 0:
            raise bad(f"{prefix}.boundary_weight", self.boundary_weight, "must be a number > 0")

    @property
    def periods(self) -> None:
        return None

    def _with_boundary(self, n: int, shift: float) -> Quadrature:
        inner, w_inner = disk_quadrature(n, n, shift)
        outer = circle_points(n, shift)
        w_outer = np.full(n, self.boundary_weight * 2 * math.pi / n)
        return Quadrature(
            jnp.asarray(np.concatenate([inner, outer])), jnp.asarray(np.concatenate([w_inner, w_outer])),
            boundary=jnp.asarray(np.arange(len(inner) + n) >= len(inner)),
        )

    def quadrature(self, n: int) -> Quadrature:
        """Interior (n radii × n angles) and n boundary points, angles θ_j = 2πj/n."""
        return self._with_boundary(n, 0.0)

    def holdout(self, n: int, m: int) -> Quadrature:
        """The rule of :meth:`quadrature` (m) with every angle half a step of the
        n-rule away from the fit's angles (its m radii are other Gauss nodes)."""
        return self._with_boundary(m, m / (2 * n))

    def evaluation(self, m: int) -> Quadrature:
        """The interior rule alone (m radii × m angles): the error is measured on the disk."""
        points, weights = disk_quadrature(m, m)
        return Quadrature(jnp.asarray(points), jnp.asarray(weights))

    def boundary_points(self, m: int) -> Float[Array, "m 2"]:
        """``m`` points on the circle, between the fit's boundary nodes (θ_j = 2π(j+½)/m)."""
        return jnp.asarray(circle_points(m, 0.5))

    def fit_description(self) -> dict:
        return {**super().fit_description(), "domain": "unit_disk",
                "quadrature": "gauss-legendre r (n) x trapezoid theta (n) + n on the circle"}

    def reference_scheme(self) -> BesselSeries:
        return BesselSeries(self.initial_conditions[self.initial_condition].modes)

    def nonlinear(self, u, grad_u):
        return 0.0 * u

    def growth_rate(self, u, grad_u):
        """0: ⟨νΔe, e⟩ = −ν‖∇e‖² ≤ 0 for e = 0 on the circle (contractive). The network
        meets the boundary condition only approximately (``boundary_max_abs``); that
        boundary error is not part of this bound."""
        return 0.0
