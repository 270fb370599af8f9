"""Quadratures: ``∫ f ≈ Σₙ wₙ f(xₙ)`` (:class:`Quadrature`, the weighted norm
:func:`norm2`), a system's rows (:func:`for_components`), uniform periodic grids (the
periodic trapezoid rule), Gauss–Legendre nodes on an interval (:func:`gauss_legendre`) and
random shifts of points (:func:`rotated`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray


class FluxRows(NamedTuple):
    """The last ``k`` rows of a fit quadrature where the fit's value is not û but
    ``α û + β ∂ₙû`` (a Neumann or Robin side: α = 0, β = 1 for Neumann), ``∂ₙ`` along the
    outward unit ``normals``."""

    normals: Float[Array, "k dim"]
    alpha: Float[Array, " k"]
    beta: Float[Array, " k"]


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

    ``flux``: where the last rows of a fit are normal derivatives (:class:`FluxRows`; None:
    every row is a value). Only the steps' fits read it; θ₀ fits u₀'s values on every row.
    """

    points: Float[Array, "n dim"]
    weights: float | Float[Array, " n"]
    boundary: Bool[Array, " n"] | None = None
    grid_shape: tuple[int, ...] | None = None
    components: tuple[str, ...] = ()
    flux: FluxRows | None = None


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


def gauss_legendre(n: int, lower: float, upper: float) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` Gauss–Legendre nodes of ``[lower, upper]`` and their weights: exact for
    polynomials of degree ≤ 2n − 1, spectrally accurate for smooth integrands; every node
    inside the interval."""
    nodes, weights = np.polynomial.legendre.leggauss(n)
    half = 0.5 * (upper - lower)
    return lower + half * (nodes + 1.0), half * weights


def cell_volume(n: int, lengths) -> float:
    """Quadrature weight of each point: ``∫f ≈ w Σ f(x_i)``, ``w = Π L_d / n^d``."""
    return math.prod(float(length) for length in lengths) / n ** len(lengths)
