"""The periodic box ``[0, L₁) × … × [0, L_d)`` in one to three dimensions, on uniform
grids (the periodic trapezoid rule, spectrally accurate for smooth periodic integrands)."""

from __future__ import annotations

import equinox as eqx

from teng_eq.domains.base import Domain
from teng_eq.domains.quadrature import Quadrature, cell_volume, grid_points, holdout_points


class Box(Domain):
    """The periodic box of side ``lengths``: the network takes the periodic embedding with
    these periods, and the quadratures are uniform grids from the origin."""

    lengths: tuple[float, ...] = eqx.field(static=True)

    @property
    def dim(self) -> int:
        return len(self.lengths)

    @property
    def periods(self) -> tuple[float, ...]:
        return self.lengths

    def quadrature(self, n: int) -> Quadrature:
        """The ``n^d`` periodic grid and its (uniform) trapezoid weight."""
        return Quadrature(grid_points(n, self.lengths), cell_volume(n, self.lengths),
                          grid_shape=(n,) * self.dim)

    def holdout(self, n: int, m: int) -> Quadrature:
        """An ``m^d`` grid (m dividing n) at cell centres of the n-grid, half a cell
        from its nodes along every axis, with its own weight."""
        return Quadrature(holdout_points(n, m, self.lengths), cell_volume(m, self.lengths),
                          grid_shape=(m,) * self.dim)

    def evaluation(self, m: int) -> Quadrature:
        """The ``m^d`` grid (points in 'ij' order, the layout of the reference's values)."""
        return self.quadrature(m)
