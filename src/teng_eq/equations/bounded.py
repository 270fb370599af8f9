"""Equations on a box ``[a₁, b₁] × … × [a_d, b_d]`` (d = 1, 2, 3) with a condition on each
side (:class:`BoundedBox`; the domain is :class:`~teng_eq.domains.bounded.BoxDomain`)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.domains.bounded import Boundary, BoxDomain, sides_of
from teng_eq.equations.base import Equation
from teng_eq.errors import bad

#: How the Dirichlet sides are enforced (:class:`BoundedBox`).
ENFORCE = ("rows", "exact")

#: How far a Dirichlet side's data at t = 0 may be from u₀ there, relative to max(1, max |u₀|).
CONSISTENCY = 1e-8


def _from_solution(solution, normal, alpha: float, beta: float):
    """The data ``αu + β∂ₙu`` of the closed form ``solution(x, t)`` (x coordinate first) on a
    side of outward ``normal``: a side whose ``value`` is ``solution`` (a manufactured case)."""
    def value(x, t):
        x = jnp.asarray(x)
        if beta == 0.0:
            return alpha * solution(x, t)
        u, du = jax.jvp(lambda y: solution(y, t), (x,), (jnp.broadcast_to(normal[:, None], x.shape),))
        return alpha * u + beta * du

    value.__name__ = "solution"
    return value


class BoundedBox(Equation):
    """An equation on the box of ``origin`` (a₁, …, a_d) and ``lengths`` (L₁, …, L_d) with
    the ``boundary`` block's condition on each side (:class:`~teng_eq.domains.bounded.Side`:
    periodic, dirichlet, neumann or robin; data a number, the name of a method
    ``value(self, x, t)`` of the class, or ``solution``: αu + β∂ₙu of the class's own
    ``solution(x, t)``, for a manufactured case), whose rows weigh ``boundary_weight`` × surface
    weight in every fit. Its dimension is that of ``lengths``. ``enforce``: ``rows`` (the Dirichlet
    sides by their rows alone) or ``exact`` (also by the ansatz u = c + φN,
    :class:`~teng_eq.network.imposed.Imposed`: constant data, one value on every Dirichlet side)."""

    origin: tuple[float, ...] = eqx.field(static=True)
    lengths: tuple[float, ...] = eqx.field(static=True)
    boundary: Boundary = eqx.field(static=True)
    boundary_weight: float = eqx.field(static=True)
    enforce: str = eqx.field(static=True, default="rows", kw_only=True)

    @property
    def dim(self) -> int:
        return len(self.lengths)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not 1 <= len(self.lengths) <= 3 or not all(v > 0 for v in self.lengths):
            raise bad(f"{prefix}.lengths", list(self.lengths), "must be 1 to 3 numbers > 0")
        if len(self.origin) != len(self.lengths):
            raise bad(f"{prefix}.origin", list(self.origin), f"must be {len(self.lengths)} numbers")
        if not self.boundary_weight > 0:
            raise bad(f"{prefix}.boundary_weight", self.boundary_weight, "must be a number > 0")
        parts = self._parts(f"{prefix}.boundary")
        if all(p is None for p in parts):
            raise bad(f"{prefix}.boundary", "periodic", "every side is periodic: use a periodic box")
        if self.enforce not in ENFORCE:
            raise bad(f"{prefix}.enforce", self.enforce, f"must be one of {', '.join(ENFORCE)}")
        if self.enforce == "exact":
            values = [p.value for p in parts if p is not None and p.kind == "dirichlet"]
            if not values or any(callable(v) for v in values) or len(set(values)) > 1:
                raise bad(f"{prefix}.enforce", "exact", "needs Dirichlet sides whose data are one constant "
                          f"(here {[getattr(v, '__name__', v) for v in values] or 'no Dirichlet side'}): "
                          "use enforce: rows")

    def _parts(self, prefix: str = "equation.boundary") -> tuple:
        def data(name: str, key: str, normal, coefficients):
            if name == "solution":
                if type(self).solution is Equation.solution:
                    raise bad(key, name, f"{type(self).__qualname__} has no solution(x, t)")
                return _from_solution(self.solution, jnp.asarray(normal), *coefficients)
            fn = getattr(self, name, None)
            if not callable(fn):
                raise bad(key, name, f"{type(self).__qualname__} has no method {name}(self, x, t)")
            return fn

        return sides_of(self.boundary, len(self.lengths), prefix, data)

    def homogeneous(self) -> bool:
        """Whether every bounded side holds zero Dirichlet or zero Neumann data (the sides the
        series references take)."""
        return all(p.kind in ("dirichlet", "neumann") and not callable(p.value) and p.value == 0.0
                   for p in self.domain.boundary)

    @property
    def domain(self) -> BoxDomain:
        return BoxDomain(self.origin, self.lengths, self._parts(), self.boundary_weight,
                         exact=self.enforce == "exact")

    def check_functions(self, prefix: str, impl: str | None = None) -> None:
        """:meth:`Equation.check_functions`, then each side's data function traced by
        ``jax.jit`` on the side's points at t = 0 (one number per point), and each Dirichlet
        side's data against u₀ there (within :data:`CONSISTENCY`)."""
        super().check_functions(prefix, impl)
        domain = self.domain
        rows = domain.boundary_points(4)
        points = rows.points
        u0 = np.asarray(self.u0(np.asarray(points).T), np.float64)
        scale = max(1.0, float(np.max(np.abs(u0))))
        for axis, end, part in domain.sides():
            on = np.asarray(domain.on_side(points, axis, end))
            key = f"{prefix}.boundary.{part.tag}.value"
            if callable(part.value):
                try:
                    traced = jax.jit(lambda p, t, fn=part.value: jnp.broadcast_to(fn(p.T, t), p.shape[:1]))
                    got = traced(points[on], 0.0) * 1.0
                except Exception as err:  # a user's function: any failure is one line
                    raise bad(key, part.value.__name__, f"does not run traced on points of the side "
                              f"(x coordinate first, JAX): {type(err).__name__}: {str(err).splitlines()[0]}")
                if not bool(jnp.all(jnp.isfinite(got))):
                    raise bad(key, part.value.__name__, "is not finite on the side at t = 0")
            if part.kind == "dirichlet":
                g = np.asarray(domain.boundary_data(points, 0.0))[on]
                gap = float(np.max(np.abs(g - u0[on])))
                if gap > CONSISTENCY * scale:
                    raise bad(key, part.value if not callable(part.value) else part.value.__name__,
                              f"differs from u₀ on side {part.tag} at t = 0 by up to {gap:.3g} "
                              f"(allowed {CONSISTENCY:g} × max(1, max|u₀|))")
