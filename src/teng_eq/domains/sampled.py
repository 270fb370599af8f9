"""The periodic cube ``[0, L)^d`` of any dimension d, discretised by sampled points instead
of grids (a grid of 64 points per axis holds 10¹⁸ points in 10-D): the fits' N points are a
scrambled Sobol set (or uniform ones), moved afresh each step where ``fresh``; the error is
measured on an independent uniform sample, with its Monte Carlo standard error."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray
from scipy.stats import qmc

from teng_eq.domains.base import Domain
from teng_eq.domains.quadrature import Quadrature, rotated

#: How the fits' points are drawn.
SAMPLERS = ("sobol", "uniform")


#: Seeds of the three point sets, so that none shares a point with another.
_FIT_SEED, _HOLDOUT_SEED, _EVALUATION_SEED = 0, 1, 2


def sample_points(n: int, dim: int, length: float, sampler: str, seed: int) -> np.ndarray:
    """``n`` points in ``[0, length)^dim``: a scrambled Sobol sequence (Owen scrambling;
    its first n points, balanced when n is a power of 2) or i.i.d. uniform ones."""
    if sampler == "sobol":
        unit = qmc.Sobol(dim, scramble=True, seed=seed).random(n)
    else:
        unit = np.random.default_rng(seed).random((n, dim))
    return length * unit


class SampledCube(Domain):
    """The periodic cube ``[0, length)^dim`` with sampled quadratures (module docstring):
    ``sampler`` (``sobol`` or ``uniform``) and ``fresh`` (the fits' points moved by a random
    shift modulo the periods each step, or kept)."""

    sampled = True
    dims: int = eqx.field(static=True)
    length: float = eqx.field(static=True)
    sampler: str = eqx.field(static=True)
    moving: bool = eqx.field(static=True)

    @property
    def dim(self) -> int:
        return self.dims

    @property
    def periods(self) -> tuple[float, ...]:
        return (float(self.length),) * self.dims

    @property
    def fresh(self) -> bool:
        return self.moving

    @property
    def volume(self) -> float:
        return float(self.length) ** self.dims

    def point_count(self, n: int) -> int:
        return n

    def _sample(self, n: int, sampler: str, seed: int) -> Quadrature:
        points = sample_points(n, self.dims, self.length, sampler, seed)
        return Quadrature(jnp.asarray(points), self.volume / n)

    def quadrature(self, n: int) -> Quadrature:
        """``n`` points (:func:`sample_points`), each of weight Lᵈ/n: a Monte Carlo
        (uniform) or quasi-Monte Carlo (Sobol) rule."""
        return self._sample(n, self.sampler, _FIT_SEED)

    def holdout(self, n: int, m: int) -> Quadrature:
        """``m`` points of another scrambled set."""
        return self._sample(m, self.sampler, _HOLDOUT_SEED)

    def holdout_size(self, n: int, holdout) -> int:
        """``holdout.grid`` points, else a quarter of the fits' (the held-out check's
        cost, a quarter of a fit's)."""
        return holdout.grid if holdout.grid is not None else max(1, n // 4)

    def evaluation(self, m: int) -> Quadrature:
        """``m`` i.i.d. uniform points, independent of the fits': the error's Monte Carlo
        estimate, whose standard error the run logs (``rel_l2_se``)."""
        return self._sample(m, "uniform", _EVALUATION_SEED)

    def move(self, points: Float[Array, "n dim"], key: PRNGKeyArray) -> Float[Array, "n dim"]:
        """One random shift of every point modulo the periods (:func:`~teng_eq.domains.quadrature.rotated`):
        a new randomised quasi-Monte Carlo set."""
        return rotated(points, key, self.periods) if self.moving else points
