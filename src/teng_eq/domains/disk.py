"""The unit disk ``{x₁² + x₂² ≤ 1}`` with u = g on its circle: Gauss–Legendre in r ×
trapezoid in θ inside, and points on the circle whose rows carry the boundary condition."""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from teng_eq.domains.base import BoundaryPart, Domain
from teng_eq.domains.quadrature import FluxRows, Quadrature


def disk_quadrature(n_r: int, n_theta: int, shift: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Points (n_r·n_θ, 2) and weights of a product rule on the unit disk.

    In polar coordinates ``∫_disk f dA = ∫₀¹ ∫₀^{2π} f(r, θ) r dθ dr``: Gauss–Legendre
    with ``n_r`` nodes r_i (weights w_i) on [0, 1] times the trapezoid rule with
    ``n_θ`` angles θ_j = 2π (j + shift)/n_θ, so ``∫_disk f ≈ Σ_ij w_i r_i (2π/n_θ) f``.
    Exact for ``r^a · T(θ)`` with a + 1 ≤ 2n_r − 1 and T a trigonometric polynomial of
    degree < n_θ, hence for every polynomial in (x₁, x₂) of degree ≤ min(2n_r − 2,
    n_θ − 1); spectrally accurate for smooth f (every node is interior: r_i ∈ (0, 1)).
    Points run over θ fastest.
    """
    nodes, weights = np.polynomial.legendre.leggauss(n_r)
    r, w_r = 0.5 * (nodes + 1.0), 0.5 * weights
    theta = 2 * math.pi * (np.arange(n_theta) + shift) / n_theta
    rr, tt = np.meshgrid(r, theta, indexing="ij")
    points = np.stack([(rr * np.cos(tt)).ravel(), (rr * np.sin(tt)).ravel()], axis=1)
    return points, np.repeat(w_r * r * (2 * math.pi / n_theta), n_theta)


def circle_points(n: int, shift: float = 0.0) -> np.ndarray:
    """The ``n`` points (cos θ_j, sin θ_j), θ_j = 2π (j + shift)/n, of the unit circle."""
    theta = 2 * math.pi * (np.arange(n) + shift) / n
    return np.stack([np.cos(theta), np.sin(theta)], axis=1)


class UnitDisk(Domain):
    """The unit disk, u = 0 on the circle (the paper's disk). The network takes plain
    Cartesian input (the paper removes the periodic embedding here).

    Quadratures (``n`` = the config's ``grid``): the interior by :func:`disk_quadrature`
    with n Gauss–Legendre radii × n angles, and, for the fits, n points on the circle of
    weight ``boundary_weight`` · 2π/n each (marked in ``Quadrature.boundary``: their
    target is the boundary value). The error norms are on the disk only (m × m interior
    points)."""

    boundary_weight: float = eqx.field(static=True)

    @property
    def dim(self) -> int:
        return 2

    @property
    def periods(self) -> None:
        return None

    @property
    def boundary(self) -> tuple[BoundaryPart, ...]:
        return (BoundaryPart("circle", "dirichlet", 0.0),)

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

    def boundary_points(self, m: int) -> Quadrature:
        """``m`` points on the circle, between the fit's boundary nodes (θ_j = 2π(j+½)/m),
        each its own outward normal, the condition's (α, β) = (1, 0)."""
        points = jnp.asarray(circle_points(m, 0.5))
        return Quadrature(points, 2 * math.pi / m, flux=FluxRows(points, jnp.ones(m), jnp.zeros(m)))

    def edges(self, m: int = 200) -> tuple[tuple[str, np.ndarray], ...]:
        """The circle, closed."""
        return (("dirichlet", circle_points(m)[np.r_[0:m, 0]]),)

    def describe(self) -> dict:
        return {"domain": "unit_disk",
                "quadrature": "gauss-legendre r (n) x trapezoid theta (n) + n on the circle"}
