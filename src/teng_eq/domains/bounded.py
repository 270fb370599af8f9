"""A box ``[a₁, b₁] × … × [a_d, b_d]`` (d = 1, 2, 3) whose sides each say what holds on
them: periodic, Dirichlet ``u = g``, Neumann ``∂ₙu = h`` or Robin ``αu + β∂ₙu = r``
(:class:`Side`; one per side in the yaml's ``boundary:`` block, :class:`Boundary`).

**Quadratures.** Along a periodic axis the uniform grid of the periodic box (the periodic
trapezoid rule); along a bounded axis ``n`` Gauss–Legendre nodes with their weights, exact
for polynomials of degree ≤ 2n − 1 and spectrally accurate for smooth integrands. The fits'
quadrature is the tensor grid of these (every node inside the box) followed by the sides'
own points: on each bounded side the tensor grid of the other axes' rules at the side's
coordinate, each point of weight ``boundary_weight`` × its surface weight (the other axes'
weights: ∫_side f dS ≈ Σ w_S f; a 1-D side is one point of weight ``boundary_weight``), so
that a fit's loss is

    ‖û − u*‖²_{L²(box)} + boundary_weight · Σ_sides ‖B û − data‖²_{L²(side)},

B the side's condition (û on a Dirichlet side, αû + β∂ₙû on the others). Dirichlet sides'
points come first, the Neumann and Robin ones last (the ``flux`` rows,
:class:`~teng_eq.domains.quadrature.FluxRows`). No side point is a corner, so no point is
on two sides.

**The network's input.** A periodic axis keeps the periodic embedding with its period L;
a bounded axis of length L is embedded with the period 2L: ``cos(π (x − a)/L + φ)`` runs
over half a circle as x crosses the axis, so the features (cos and sin of that angle over
the random phases φ) are an injective, smooth map of the axis that imposes no periodicity —
the input scaled to [−1, 1] (x̃ = 2(x − a)/L − 1: the angle is π(x̃ + 1)/2) in the features
the paper's network already has, so the factored Jacobian is unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float

from teng_eq.config.options import one_of
from teng_eq.domains.base import COEFFICIENTS, BoundaryPart, Domain
from teng_eq.domains.quadrature import FluxRows, Quadrature, gauss_legendre
from teng_eq.errors import bad

#: What may hold on a side.
KINDS = ("periodic", "dirichlet", "neumann", "robin")
#: The sides of a box, two per axis (lower end, upper end), in the order of the axes.
SIDES = ("xmin", "xmax", "ymin", "ymax", "zmin", "zmax")


@dataclasses.dataclass(frozen=True)
class Side:
    """What holds on one side (a block of the yaml's ``boundary:``): ``kind`` one of
    :data:`KINDS`; ``value`` the data (g, h or r: a number, or the name of a method
    ``name(self, x, t)`` of the equation's class, x coordinate first); ``alpha`` and ``beta``
    the Robin condition's αu + β∂ₙu = r (Robin only; ∂ₙ along the outward normal)."""

    kind: str
    value: float | str = 0.0
    alpha: float | None = None
    beta: float | None = None

    def validate(self, prefix: str) -> None:
        one_of(f"{prefix}.kind", self.kind, KINDS)
        if self.kind == "robin":
            for key in ("alpha", "beta"):
                if getattr(self, key) is None:
                    raise bad(f"{prefix}.{key}", None, "missing: robin is alpha u + beta du/dn = value")
            if self.beta == 0.0:
                raise bad(f"{prefix}.beta", self.beta, "must not be 0 (that is a dirichlet side)")
        elif self.alpha is not None or self.beta is not None:
            raise bad(f"{prefix}.alpha", self.alpha, f"only robin takes alpha and beta, not {self.kind}")
        if self.kind == "periodic" and self.value != 0.0:
            raise bad(f"{prefix}.value", self.value, "a periodic side takes no data")


@dataclasses.dataclass(frozen=True)
class Boundary:
    """The ``boundary:`` block: one :class:`Side` per side of the box (``xmin`` … ``zmax``,
    those of its dimensions; a periodic axis says so on both of its sides)."""

    xmin: Side | None = None
    xmax: Side | None = None
    ymin: Side | None = None
    ymax: Side | None = None
    zmin: Side | None = None
    zmax: Side | None = None

    def sides(self, dim: int, prefix: str) -> tuple[Side, ...]:
        """The sides of a ``dim``-dimensional box, checked: each present, none beyond ``dim``,
        an axis periodic on both of its sides or on neither."""
        names = SIDES[: 2 * dim]
        for name in SIDES[2 * dim:]:
            if getattr(self, name) is not None:
                raise bad(f"{prefix}.{name}", "…", f"the box's {dim}-D sides are {list(names)}")
        for name in names:
            if getattr(self, name) is None:
                raise bad(f"{prefix}.{name}", None, f"missing: the sides are {list(names)}, a block each")
        sides = tuple(getattr(self, name) for name in names)
        for axis in range(dim):
            lo, hi = sides[2 * axis], sides[2 * axis + 1]
            if (lo.kind == "periodic") != (hi.kind == "periodic"):
                raise bad(f"{prefix}.{names[2 * axis + (lo.kind == 'periodic')]}.kind",
                          (hi if lo.kind == "periodic" else lo).kind,
                          "an axis is periodic on both of its sides or on neither")
        return sides


def _axis_rule(n: int, lower: float, length: float, periodic: bool, shift: float = 0.0):
    """The 1-D rule of an axis: the uniform grid (offset by ``shift`` cells) of a periodic
    axis, or ``n`` Gauss–Legendre nodes on ``[lower, lower + length]``."""
    if periodic:
        return lower + (np.arange(n) + shift) * (length / n), np.full(n, length / n)
    return gauss_legendre(n, lower, lower + length)


def _tensor(rules) -> tuple[np.ndarray, np.ndarray]:
    """Points ('ij' order, first axis slowest) and weights of the tensor product of 1-D rules."""
    points = np.stack([m.ravel() for m in np.meshgrid(*[r[0] for r in rules], indexing="ij")], axis=1)
    weights = np.ones(len(points))
    for w in np.meshgrid(*[r[1] for r in rules], indexing="ij"):
        weights = weights * w.ravel()
    return points, weights


class BoxDomain(Domain):
    """The box of ``origin`` and ``lengths`` with its ``parts``: one
    :class:`~teng_eq.domains.base.BoundaryPart` per side in :data:`SIDES` order, None on a
    periodic one; ``boundary_weight`` weighs the sides' rows in every fit (module docstring)."""

    origin: tuple[float, ...] = eqx.field(static=True)
    lengths: tuple[float, ...] = eqx.field(static=True)
    parts: tuple[BoundaryPart | None, ...] = eqx.field(static=True)
    boundary_weight: float = eqx.field(static=True)
    exact: bool = eqx.field(static=True, default=False)  # Dirichlet data imposed by the ansatz too

    @property
    def dim(self) -> int:
        return len(self.lengths)

    def periodic(self, axis: int) -> bool:
        return self.parts[2 * axis] is None

    @property
    def periods(self) -> None:
        """None: the box has a boundary (the steps that need a periodic grid refuse it)."""
        return None

    @property
    def embedding_periods(self) -> tuple[float, ...]:
        """L on a periodic axis, 2L on a bounded one (module docstring)."""
        return tuple(length if self.periodic(d) else 2 * length for d, length in enumerate(self.lengths))

    @property
    def boundary(self) -> tuple[BoundaryPart, ...]:
        return tuple(p for p in self.parts if p is not None)

    def coordinate(self, axis: int, end: int) -> float:
        """Where a side is: x_axis = a (``end`` 0) or b (1)."""
        return float(self.origin[axis]) + end * float(self.lengths[axis])

    def on_side(self, points: Float[Array, "n dim"], axis: int, end: int) -> Bool[Array, " n"]:
        """Which ``points`` are on the side (their coordinate the side's exactly, as this
        domain's points are made: no side point is on another side)."""
        return jnp.asarray(points)[:, axis] == self.coordinate(axis, end)

    def sides(self) -> list[tuple[int, int, BoundaryPart]]:
        """``(axis, end, part)`` of every bounded side (end 0: x = a, 1: x = b), Dirichlet
        sides first, then the Neumann and Robin ones (the fits' flux rows come last)."""
        sides = [(i // 2, i % 2, p) for i, p in enumerate(self.parts) if p is not None]
        return sorted(sides, key=lambda s: s[2].kind != "dirichlet")

    def _rules(self, n: int, shift: float = 0.0, bounded: int | None = None):
        lower = [float(a) for a in self.origin]
        return [_axis_rule(n if bounded is None or self.periodic(d) else bounded, lower[d], float(length),
                           self.periodic(d), shift)
                for d, length in enumerate(self.lengths)]

    def _faces(self, rules, sides) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Points, surface weights, outward normals, α and β of the sides' points: on each
        side the tensor grid of the other axes' ``rules`` at the side's coordinate."""
        out = [[] for _ in range(5)]
        for axis, end, part in sides:
            others = [r for d, r in enumerate(rules) if d != axis]
            points, weights = _tensor(others) if others else (np.zeros((1, 0)), np.ones(1))
            points = np.insert(points, axis, self.coordinate(axis, end), axis=1)
            normal = np.zeros(self.dim)
            normal[axis] = 1.0 if end else -1.0
            alpha, beta = part.coefficients
            for bucket, value in zip(out, (points, weights, np.tile(normal, (len(points), 1)),
                                           np.full(len(points), alpha), np.full(len(points), beta))):
                bucket.append(value)
        return tuple(np.concatenate(b) if b else np.zeros((0, self.dim) if i in (0, 2) else 0)
                     for i, b in enumerate(out))

    def quadrature(self, n: int) -> Quadrature:
        """The n-node tensor grid inside, then the sides' points (module docstring)."""
        rules = self._rules(n)
        inner, w_inner = _tensor(rules)
        sides = self.sides()
        points, weights, normals, alpha, beta = self._faces(rules, sides)
        flux = np.asarray([p.kind != "dirichlet" for _, _, p in sides for _ in range(n ** (self.dim - 1))])
        k = int(flux.sum())
        return Quadrature(
            jnp.asarray(np.concatenate([inner, points])),
            jnp.asarray(np.concatenate([w_inner, self.boundary_weight * weights])),
            boundary=jnp.asarray(np.arange(len(inner) + len(points)) >= len(inner)),
            grid_shape=(n,) * self.dim,
            flux=None if k == 0 else FluxRows(jnp.asarray(normals[-k:]), jnp.asarray(alpha[-k:]),
                                              jnp.asarray(beta[-k:])),
        )

    def point_count(self, n: int) -> int:
        """nᵈ inside and n^{d−1} on each bounded side."""
        return n**self.dim + len(self.sides()) * n ** (self.dim - 1)

    def holdout(self, n: int, m: int) -> Quadrature:
        """An interior tensor grid that no fit node is on: along a periodic axis the m-grid at
        the n-grid's cell centres, along a bounded one Gauss–Legendre nodes of another order
        (:func:`other_order`: Legendre polynomials' zeros interlace, and two orders share at
        most x = 0, which the order avoids)."""
        points, weights = _tensor(self._rules(m, m / (2 * n), other_order(n, m)))
        return Quadrature(jnp.asarray(points), jnp.asarray(weights),
                          boundary=jnp.zeros(len(points), bool))

    def evaluation(self, m: int) -> Quadrature:
        """The m-node tensor grid with its weights (points in 'ij' order)."""
        points, weights = _tensor(self._rules(m))
        return Quadrature(jnp.asarray(points), jnp.asarray(weights), grid_shape=(m,) * self.dim)

    def boundary_points(self, m: int) -> Quadrature | None:
        """On each bounded side the tensor grid of the other axes' rules of another order
        than the fits' (:meth:`holdout`'s), each row with its normal and (α, β)."""
        sides = self.sides()
        if not sides:
            return None
        points, weights, normals, alpha, beta = self._faces(self._rules(m, 0.5, other_order(m, m)), sides)
        return Quadrature(jnp.asarray(points), jnp.asarray(weights),
                          flux=FluxRows(jnp.asarray(normals), jnp.asarray(alpha), jnp.asarray(beta)))

    def boundary_data(self, points: Float[Array, "n dim"], t) -> Float[Array, " n"]:
        """Each side's data at the points on it (:meth:`on_side`); 0 elsewhere."""
        points = jnp.asarray(points)
        data = jnp.zeros(points.shape[0], points.dtype)
        for axis, end, part in self.sides():
            data = jnp.where(self.on_side(points, axis, end), part.at(points.T, t), data)
        return data

    def imposition(self) -> tuple[tuple[tuple[float, float, bool, bool], ...], float] | None:
        """With ``exact``: each axis' ends that are Dirichlet sides and their one constant value
        (the rows of those sides stay, their residual then zero by construction)."""
        if not self.exact:
            return None
        dirichlet = [p is not None and p.kind == "dirichlet" for p in self.parts]
        values = {p.value for p in self.parts if p is not None and p.kind == "dirichlet"}
        axes = tuple((float(a), float(length), dirichlet[2 * d], dirichlet[2 * d + 1])
                     for d, (a, length) in enumerate(zip(self.origin, self.lengths)))
        return axes, float(values.pop())

    def edges(self, m: int = 200) -> tuple[tuple[str, np.ndarray], ...]:
        """The bounded sides of the first two axes (the plane a figure shows; on a line none),
        each a segment from corner to corner."""
        if self.dim < 2:
            return ()
        edges = []
        for axis, end, part in self.sides():
            if axis > 1:
                continue
            other = 1 - axis
            segment = np.zeros((2, 2))
            segment[:, axis] = self.coordinate(axis, end)
            segment[:, other] = self.coordinate(other, 0), self.coordinate(other, 1)
            edges.append((part.kind, segment))
        return tuple(edges)

    def describe(self) -> dict:
        rule = "gauss-legendre (n) on bounded axes, uniform (n) on periodic ones, + n^(d-1) on each side"
        return {"domain": "box", "quadrature": rule}


def other_order(n: int, m: int) -> int:
    """m + 1 Gauss–Legendre nodes, or m + 2 where m + 1 and n are both odd (both rules
    would then hold x = 0): an order whose nodes are none of the n-rule's."""
    order = m + 1
    return order + 1 if order % 2 and n % 2 else order


def sides_of(boundary: Boundary, dim: int, prefix: str, data: Callable) -> tuple:
    """The :class:`~teng_eq.domains.base.BoundaryPart` of each side of ``boundary`` (None on
    a periodic one), its data a number or ``data(name, key, normal, (α, β))``: the function
    named by a side's ``value`` (``key``: the config key that named it; ``normal``: the side's
    outward unit normal; (α, β) its condition's)."""
    parts = []
    for i, (name, side) in enumerate(zip(SIDES, boundary.sides(dim, prefix))):
        if side.kind == "periodic":
            parts.append(None)
            continue
        coefficients = COEFFICIENTS.get(side.kind, (side.alpha, side.beta))
        value = side.value
        if isinstance(value, str):
            normal = np.zeros(dim)
            normal[i // 2] = 1.0 if i % 2 else -1.0
            value = data(value, f"{prefix}.{name}.value", normal, coefficients)
        parts.append(BoundaryPart(name, side.kind, value, *coefficients))
    return tuple(parts)
