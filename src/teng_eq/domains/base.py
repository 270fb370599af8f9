"""What every domain is: where an equation's points are and what holds on its edge.

A :class:`Domain` is a value that an equation has (``Equation.domain``, built from its
config keys), not a class it is: the fits', held-out and evaluation quadratures, the
network's input (the periods of its periodic embedding, or plain Cartesian input), how
sampled points move between steps, and the parts of its boundary with their condition
(:class:`BoundaryPart`). Nothing here knows an equation; the equations, the steps, the
estimate and the run loop ask the domain.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from teng_eq.domains.quadrature import Quadrature

#: (α, β) of αu + β∂ₙu = value for the kinds that fix them (Robin gives its own).
COEFFICIENTS = {"dirichlet": (1.0, 0.0), "neumann": (0.0, 1.0)}


class BoundaryPart(eqx.Module):
    """A part of a domain's boundary, ``tag`` by name, where ``kind`` holds: ``dirichlet``,
    u = g; ``neumann``, ∂ₙu = h (n the outward unit normal); ``robin``, αu + β∂ₙu = r —
    with ``value`` (g, h or r) a number or a function ``value(x, t)`` of the points
    (coordinate first) and the time. :attr:`coefficients` is (α, β) for each kind:
    (1, 0) for Dirichlet, (0, 1) for Neumann."""

    tag: str = eqx.field(static=True)
    kind: str = eqx.field(static=True)
    value: float | Callable = eqx.field(static=True)
    alpha: float = eqx.field(static=True, default=1.0)
    beta: float = eqx.field(static=True, default=0.0)

    @property
    def coefficients(self) -> tuple[float, float]:
        """(α, β) of the condition αu + β∂ₙu = value."""
        return COEFFICIENTS.get(self.kind, (self.alpha, self.beta))

    def at(self, x: Float[Array, "dim n"], t) -> float | Float[Array, " n"]:
        """The data at the points ``x`` (coordinate first) and time t; a constant as it is."""
        return self.value(x, t) if callable(self.value) else self.value


class Domain(eqx.Module):
    """A domain of ``dim`` dimensions (subclasses say how its points are made).

    ``n`` below is the config's ``grid`` (points per dimension on a grid, points on a
    sampled domain), ``m`` the held-out or evaluation size."""

    #: Whether its quadratures are sampled points (``grid`` and ``eval_grid`` then count
    #: points, and the error's Monte Carlo standard error is logged).
    sampled: ClassVar[bool] = False

    @property
    def dim(self) -> int:
        raise NotImplementedError

    @property
    def periods(self) -> tuple[float, ...] | None:
        """Periods of the network's periodic embedding, one per dimension; None for a
        network on plain Cartesian input (a domain with a boundary)."""
        raise NotImplementedError

    @property
    def embedding_periods(self) -> tuple[float, ...] | None:
        """The periods the network's embedding takes, one per dimension (None: plain
        Cartesian input): :attr:`periods` on a periodic domain; a box with sides may embed
        a bounded axis in a period longer than the axis."""
        return self.periods

    @property
    def fresh(self) -> bool:
        """Whether the fits' points are moved afresh each step (:meth:`move`)."""
        return False

    @property
    def boundary(self) -> tuple[BoundaryPart, ...]:
        """The parts of the boundary and what holds on them (none: a periodic domain)."""
        return ()

    def quadrature(self, n: int) -> Quadrature:
        """The quadrature of the fits (θ₀ and every TENG stage); its ``boundary`` marks the
        rows on the boundary, whose target is the part's data, not the PDE's (its ``flux``
        the rows among them that are normal derivatives)."""
        raise NotImplementedError

    def holdout(self, n: int, m: int) -> Quadrature:
        """``m`` points (per dimension) that no fit on :meth:`quadrature` (n) uses."""
        raise NotImplementedError

    def evaluation(self, m: int) -> Quadrature:
        """Points and weights of the error norms, ``m`` per dimension (``eval_grid``)."""
        raise NotImplementedError

    def point_count(self, n: int) -> int:
        """How many points :meth:`quadrature` (n) and :meth:`evaluation` (n) hold: nᵈ
        on a grid (a sampled domain: n)."""
        return n**self.dim

    def holdout_size(self, n: int, holdout) -> int:
        """The ``m`` of :meth:`holdout` for the fits' ``n`` and the ``holdout`` config group
        (:class:`~teng_eq.stepping.base.Holdout`: per dimension, dividing n)."""
        return holdout.points(n, self.dim)

    def move(self, points: Float[Array, "n dim"], key: PRNGKeyArray) -> Float[Array, "n dim"]:
        """The fits' ``points`` moved for the next step (:attr:`fresh`); here they stay."""
        return points

    def boundary_points(self, m: int) -> Quadrature | None:
        """``m`` points (per side) on the boundary, none of them the fits' nodes, where a run
        reports ``boundary_error`` = max |αû + β∂ₙû − data| (:meth:`boundary_data`); their
        ``flux`` holds every row's normal and (α, β). None without a boundary."""
        return None

    def boundary_data(self, points: Float[Array, "n dim"], t) -> float | Float[Array, " n"]:
        """The data (g, h or r) at ``points`` on the boundary at time t (read only on the
        boundary rows); here the one part's."""
        if not self.boundary:
            return 0.0
        if len(self.boundary) > 1:
            raise NotImplementedError("a domain with several parts says which point is on which")
        return self.boundary[0].at(points.T, t)

    def imposition(self) -> tuple[tuple[tuple[float, float, bool, bool], ...], float] | None:
        """Where Dirichlet data are imposed exactly (:class:`~teng_eq.network.imposed.Imposed`): per
        axis ``(a, L, lower end Dirichlet, upper end Dirichlet)`` and the data's constant; None
        where the boundary rows alone enforce them (here)."""
        return None

    def edges(self, m: int = 200) -> tuple[tuple[str, np.ndarray], ...]:
        """Where the boundary lies in the (x₁, x₂) plane, for figures: each part's ``kind``
        and ``(k, 2)`` points along it in order (``m`` on a curve); none here."""
        return ()

    def describe(self) -> dict:
        """What θ₀'s cache key needs of the domain beyond the equation's fields (e.g. its
        quadrature rule); nothing by default."""
        return {}
