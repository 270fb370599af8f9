"""The periodic box ``[a₁, a₁ + L₁) × … × [a_d, a_d + L_d)`` in one to three dimensions,
on uniform grids (the periodic trapezoid rule, spectrally accurate for smooth periodic
integrands)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from teng_eq.domains.base import Domain
from teng_eq.domains.quadrature import Quadrature, cell_volume, grid_points, holdout_points


class Box(Domain):
    """The periodic box of side ``lengths`` from ``origin`` (None: from 0): the network takes
    the periodic embedding with these periods, and the quadratures are uniform grids whose
    first node is the origin."""

    lengths: tuple[float, ...] = eqx.field(static=True)
    origin: tuple[float, ...] | None = eqx.field(static=True, default=None)

    @property
    def dim(self) -> int:
        return len(self.lengths)

    @property
    def periods(self) -> tuple[float, ...]:
        return self.lengths

    def _placed(self, points):
        # From 0 the points are left exactly as they are (no added zero to round).
        return points if self.origin is None else points + jnp.asarray(self.origin, points.dtype)

    def quadrature(self, n: int) -> Quadrature:
        """The ``n^d`` periodic grid and its (uniform) trapezoid weight."""
        return Quadrature(self._placed(grid_points(n, self.lengths)), cell_volume(n, self.lengths),
                          grid_shape=(n,) * self.dim)

    def holdout(self, n: int, m: int) -> Quadrature:
        """An ``m^d`` grid (m dividing n) at cell centres of the n-grid, half a cell
        from its nodes along every axis, with its own weight."""
        return Quadrature(self._placed(holdout_points(n, m, self.lengths)), cell_volume(m, self.lengths),
                          grid_shape=(m,) * self.dim)

    def evaluation(self, m: int) -> Quadrature:
        """The ``m^d`` grid (points in 'ij' order, the layout of the reference's values)."""
        return self.quadrature(m)
