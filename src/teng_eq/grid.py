"""Quadratures: ``∫ f ≈ Σₙ wₙ f(xₙ)`` (:class:`Quadrature`, the weighted norm
:func:`norm2`), on uniform periodic grids (the periodic trapezoid rule) and the
unit disk (Gauss–Legendre in r × trapezoid in θ)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray


class Quadrature(NamedTuple):
    """``∫ f ≈ Σₙ wₙ f(xₙ)``: ``points`` (n, dim) and ``weights``, one number when
    every point has the same weight (a uniform periodic grid), else (n,).

    ``boundary`` (n,) marks the points on a Dirichlet boundary (None: there are
    none): there a fit's target is the boundary value, not the PDE's.
    ``grid_shape`` is the tensor-grid layout of ``points`` in 'ij' order (first
    axis slowest), None for scattered points; plots use it.

    ``components``: a system's names (empty: one scalar field). Its quadrature holds the
    spatial one's points once per component, component by component, each row ``(x, c)``
    with c the component's index (:func:`for_components`); ``grid_shape`` stays the
    spatial one's.
    """

    points: Float[Array, "n dim"]
    weights: float | Float[Array, " n"]
    boundary: Bool[Array, " n"] | None = None
    grid_shape: tuple[int, ...] | None = None
    components: tuple[str, ...] = ()


def for_components(quadrature: Quadrature, components: tuple[str, ...], scales=None) -> Quadrature:
    """The quadrature of a system of ``components`` on the spatial ``quadrature``: its
    points ``(x, c)`` for c = 0 … m−1 in turn, its weights and boundary repeated, so that
    ``Σₙ wₙ rₙ²`` over them is ``Σ_c ‖r_c‖²``, the norm of the whole state; ``scales``
    (one per component, None: all 1) weigh component c's rows by ``scales[c]``, the norm
    then ``Σ_c scales[c] ‖r_c‖²``."""
    m, points = len(components), jnp.asarray(quadrature.points)
    index = jnp.repeat(jnp.arange(m, dtype=points.dtype), points.shape[0])
    stacked = jnp.concatenate([jnp.tile(points, (m, 1)), index[:, None]], axis=1)
    weights = quadrature.weights if jnp.ndim(quadrature.weights) == 0 else jnp.tile(quadrature.weights, m)
    if scales is not None:
        weights = jnp.asarray(scales, points.dtype)[index.astype(int)] * weights
    boundary = None if quadrature.boundary is None else jnp.tile(quadrature.boundary, m)
    return Quadrature(stacked, weights, boundary, quadrature.grid_shape, tuple(components))


def norm2(r: Float[Array, " n"], weights: float | Float[Array, " n"]) -> Float[Array, ""]:
    """``‖r‖² ≈ Σₙ wₙ rₙ²``: the quadrature of ``r²`` (``weights`` one number, or one
    per point). Every loss of the library is this norm of a residual."""
    if jnp.ndim(weights) == 0:
        return weights * jnp.sum(r * r)
    return jnp.sum(weights * r * r)


def rotated(points: Float[Array, "n dim"], key: PRNGKeyArray, periods) -> Float[Array, "n dim"]:
    """``points`` shifted by one uniform random vector U modulo the ``periods``,
    x ↦ (x + U) mod L (a Cranley–Patterson rotation): a randomised quasi-Monte Carlo set
    when the points are a Sobol set, i.i.d. uniform ones when they are."""
    periods = jnp.asarray(periods, points.dtype)
    return jnp.mod(points + periods * jax.random.uniform(key, periods.shape, points.dtype), periods)


def grid_axes(n: int, lengths, shift: float = 0.0) -> list[np.ndarray]:
    """``x_i = L (i + shift) / n``, ``i = 0 … n−1`` along each axis."""
    return [(np.arange(n) + shift) * (float(length) / n) for length in lengths]


def grid_points(n: int, lengths, shift: float = 0.0) -> Float[Array, "n**dim dim"]:
    """All points of the ``n^d`` grid (offset by ``shift`` cells), flattened in 'ij'
    order (first axis slowest)."""
    mesh = np.meshgrid(*grid_axes(n, lengths, shift), indexing="ij")
    return jnp.asarray(np.stack([m.ravel() for m in mesh], axis=1))


def holdout_points(grid: int, m: int, lengths) -> Float[Array, "m**dim dim"]:
    """An ``m^d`` grid whose points sit half a cell of the ``grid^d`` quadrature
    grid away from its nodes in every dimension (at the cell centres when m
    divides ``grid``): points no fit on that grid uses."""
    return grid_points(m, lengths, shift=m / (2 * grid))


def cell_volume(n: int, lengths) -> float:
    """Quadrature weight of each point: ``∫f ≈ w Σ f(x_i)``, ``w = Π L_d / n^d``."""
    return math.prod(float(length) for length in lengths) / n ** len(lengths)


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
