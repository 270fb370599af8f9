"""Uniform periodic grids: the quadrature (periodic trapezoid rule) of every L² norm."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float


def grid_axes(n: int, lengths) -> list[np.ndarray]:
    """``x_i = L i / n``, ``i = 0 … n−1`` along each axis."""
    return [np.arange(n) * (float(length) / n) for length in lengths]


def grid_points(n: int, lengths) -> Float[Array, "n**dim dim"]:
    """All points of the ``n^d`` grid, flattened in 'ij' order (first axis slowest)."""
    mesh = np.meshgrid(*grid_axes(n, lengths), indexing="ij")
    return jnp.asarray(np.stack([m.ravel() for m in mesh], axis=1))


def cell_volume(n: int, lengths) -> float:
    """Quadrature weight of each point: ``∫f ≈ w Σ f(x_i)``, ``w = Π L_d / n^d``."""
    return math.prod(float(length) for length in lengths) / n ** len(lengths)
