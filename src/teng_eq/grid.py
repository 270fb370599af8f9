"""Uniform periodic grids: the quadrature (periodic trapezoid rule) of every L² norm."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


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
