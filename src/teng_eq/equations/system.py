"""Systems: ``∂ₜuᵢ = Lᵢ[u₁, …, u_m]``, m real fields on a periodic box.

A system declares its :attr:`~teng_eq.equations.Equation.components` by name, e.g.
``("u", "v")``; its initial conditions and its ``solution`` return one array per
component, and its :meth:`operator` receives every component (a :class:`SystemField`:
``u["v"].lap``, ``u[0].d(0, 1)``, …) and returns one array per component.

The rest of the library sees a system as one scalar field of the point and the component
index: its quadratures hold the points once per component, rows ``(x, c)``
(:func:`~teng_eq.domains.quadrature.for_components`), and the network gives component c at ``(x, c)``
(:class:`~teng_eq.network.paper.TENGNet` with one output per component). So a fit's residual,
loss and least squares run over every component's rows at once (one Gram, one solve; the
components weigh alike: the norm of the state is Σᵢ ‖uᵢ‖²), and the error ``rel_l2``
is that of the whole state; the run also logs one per component (``rel_l2/u``, …).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.equations.base import Field, array_module, called, checked_values
from teng_eq.equations.periodic import PeriodicBox
from teng_eq.errors import bad
from teng_eq.reference import ClosedForm


class Component:
    """Component ``index`` of a :class:`SystemField`: what a :class:`Field` gives of a
    scalar u (``value``, ``grad``, ``lap``, ``d(…)``, ``x``), read from the system's
    derivatives, which are computed once for every component."""

    def __init__(self, field: Field, index: int):
        self._field, self.index = field, index

    @property
    def x(self) -> Float[Array, "dim n"]:
        return self._field.x

    @property
    def value(self) -> Float[Array, " n"]:
        return self._field.value[:, self.index]

    @property
    def grad(self) -> Float[Array, "dim n"]:
        return self._field.grad[..., self.index]

    @property
    def lap(self) -> Float[Array, " n"]:
        return self._field.lap[:, self.index]

    def d(self, *axes: int) -> Float[Array, " n"]:
        """``∂^k uᵢ / ∂x_{axes[0]} … ∂x_{axes[k-1]}`` (:meth:`Field.d`)."""
        return self._field.d(*axes)[:, self.index]


class SystemField(Mapping):
    """Every component of a system at ``points`` (n, dim): ``u["v"]`` or ``u[1]`` is a
    :class:`Component`; ``fn`` maps points to every component's values, (n, m)."""

    def __init__(self, fn: Callable[[Array], Array], points: Float[Array, "n dim"], names: tuple[str, ...]):
        self._field, self.names = Field(fn, points), tuple(names)

    @property
    def x(self) -> Float[Array, "dim n"]:
        return self._field.x

    def __getitem__(self, key) -> Component:
        if isinstance(key, str):
            if key not in self.names:
                raise KeyError(f"u[{key!r}]: not a component of this system {self.names}")
            key = self.names.index(key)
        if not isinstance(key, (int, np.integer)) or not -len(self.names) <= key < len(self.names):
            raise IndexError(f"u[{key!r}]: this system's components are {self.names} "
                             f"(0 to {len(self.names) - 1})")
        return Component(self._field, int(key) % len(self.names))

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def select(values, index):
    """Component ``index`` (a float per point, or one) of ``values`` (one array per
    component), point by point; NumPy or JAX as ``index``."""
    xp = array_module(index)
    stacked = xp.stack([xp.broadcast_to(xp.asarray(v), xp.shape(index)) for v in values])
    choose = xp.arange(len(values)).reshape((-1,) + (1,) * xp.ndim(index)) == index
    return xp.sum(xp.where(choose, stacked, 0.0), axis=0)


def matrix_symbol(rows, k2) -> np.ndarray:
    """A linear part's symbol, one (m, m) matrix per wave vector, (m, m, …) on |k|² = ``k2``,
    from its entries by rows (numbers, or arrays of k2's shape)."""
    shape = np.shape(k2)
    return np.stack([np.stack([np.broadcast_to(np.asarray(e, dtype=np.float64), shape) for e in row])
                     for row in rows])


def on_rows(system, operator: Callable, fn, points: Float[Array, "n dim+1"], t,
            vector=None) -> Float[Array, " n"]:
    """Component c of ``operator`` (the system's L, or its stiff part S: a callable of a
    :class:`SystemField` and t returning one array per component) at each row ``(x, c)``:
    as :meth:`PeriodicSystem.operator_rows`."""
    x, index = points[:, :-1], points[:, -1]
    if vector is None:
        def vector(p):
            column = jnp.ones((p.shape[0], 1), p.dtype)
            return jnp.stack([fn(jnp.concatenate([p, c * column], axis=1))
                              for c in range(system.outputs)], 1)
    return select(operator(system.fields(vector, x), t), index)


class PeriodicSystem(PeriodicBox):
    """A system on the periodic box: ``components`` names, ``operator(u, t)`` on a
    :class:`SystemField` returning one array per component, initial conditions (and the
    optional ``solution(x, t)``) returning one array per component. ``invariants(u)``
    (optional): the densities of quantities the equation conserves, by name, whose
    integrals a run follows (each step logs ``drift/<name>``, the relative change since t = 0).

    The short form, per component: ``Lᵢ[u] = νᵢ Δuᵢ + Nᵢ(u, ∇u)``, with ``nu`` one
    diffusivity per component and :meth:`nonlinear` taking and returning one array per
    component; the pseudo-spectral ETDRK4 reference
    (:class:`~teng_eq.reference.etdrk4.Pseudospectral`) integrates the same N.
    """

    #: One diffusivity νᵢ per component, for the short form (empty where ``operator`` is written out).
    nu: tuple[float, ...] = eqx.field(static=True, default=(), kw_only=True)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        names = self.components
        if self.short_form and (len(self.nu) != len(names) or not all(v >= 0 for v in self.nu)):
            raise bad(f"{prefix}.nu", list(self.nu),
                      f"must be {len(names)} numbers >= 0, one per component {names}")

    def operator(self, u: SystemField, t):
        """``(L₁[u], …, L_m[u])`` at ``u``'s points: by default the short form
        ``νᵢ Δuᵢ + Nᵢ(u, ∇u)``; a system of another form writes its own."""
        components = [u[i] for i in range(len(self.components))]
        rest = self.nonlinear([c.value for c in components], [c.grad for c in components])
        return tuple(nu * c.lap + n for nu, c, n in zip(self.nu, components, rest))

    def nonlinear(self, u, grad_u):
        """``(N₁, …, N_m)`` of the short form from ``u`` (one array per component) and
        ``grad_u`` (one per component, the spatial dimension first); arithmetic only, so
        that it takes NumPy and JAX arrays alike."""
        raise NotImplementedError

    def linear_symbol(self, k2):
        """``−νᵢ|k|²`` per component, (m, …): the linear part the reference integrates exactly."""
        return np.stack([-nu * np.asarray(k2) for nu in self.nu])

    @property
    def short_form(self) -> bool:
        """Whether the system is in the short form (its ``nonlinear`` written, ``operator`` not)."""
        return (type(self).nonlinear is not PeriodicSystem.nonlinear
                and type(self).operator is PeriodicSystem.operator)

    def invariants(self, u: SystemField) -> dict[str, Float[Array, " n"]]:
        """Densities of the conserved quantities ``{name: q(x)}`` (∫q dx conserved); none by default."""
        return {}

    @property
    def conserves(self) -> bool:
        """Whether the system declares invariants."""
        return type(self).invariants is not PeriodicSystem.invariants

    def integrals(self, vector: Callable[[Array], Array], m: int) -> dict[str, Float[Array, ""]]:
        """``{name: ∫q dx}`` of :meth:`invariants` for the state whose every component at a
        spatial point ``vector`` gives, by the ``m^d`` grid's trapezoid rule (spectrally
        accurate for a smooth periodic density)."""
        grid = self.spatial(m)
        densities = self.invariants(self.fields(jax.vmap(vector), grid.points))
        return {name: grid.weights * jnp.sum(q) for name, q in densities.items()}

    def stiff(self, u: SystemField, t):
        """``(S₁[u], …, S_m[u])``, the part of L that IMEX steppers take implicitly
        (:mod:`teng_eq.stepping.implicit`): by default the short form's ``νᵢ Δuᵢ`` per
        component; a system in the operator form declares its own (linear, constant
        coefficients: the stages solve it per wave vector) or has none."""
        if not self.short_form:
            raise NotImplementedError(f"{type(self).__name__} writes its own operator and declares no "
                                      "stiff(u, t) part for the IMEX steppers")
        return tuple(nu * u[i].lap for i, nu in enumerate(self.nu))

    @property
    def has_stiff(self) -> bool:
        """Whether the system has a stiff part S: its own ``stiff``, or the short form's."""
        return type(self).stiff is not PeriodicSystem.stiff or self.short_form

    # --- the rows (x, c) -------------------------------------------------------------

    def initial_state(self, x):
        """Every component of u₀ at the spatial points ``x`` (coordinate first)."""
        return super().u0(x)

    def u0(self, x):
        """u₀ at rows ``(x, c)`` (coordinate first; the component index last)."""
        return select(self.initial_state(x[:-1]), x[-1])

    def exact(self, x, t):
        return select(self.solution(x[:-1], t), x[-1])

    def reference_scheme(self):
        """The system's own :meth:`solution` where it has one, else None (or a scheme it names)."""
        return ClosedForm() if type(self).solution is not PeriodicSystem.solution else None

    def solution(self, x, t):
        """Every component of the exact solution at spatial points ``x`` (coordinate
        first) and time t, for a system that has one."""
        raise NotImplementedError

    def fields(self, fn: Callable[[Array], Array], points: Float[Array, "n dim"]) -> SystemField:
        """The :class:`SystemField` of ``fn``, every component at spatial points, (n, m)."""
        return SystemField(fn, points, self.components)

    def operator_rows(self, fn, points: Float[Array, "n dim+1"], t, vector=None) -> Float[Array, " n"]:
        """Component c of L at each row ``(x, c)`` of ``points``: the operator on every
        component at the rows' x (``vector``: every component of fn at spatial points, or
        built from ``fn`` on the rows ``(x, c)``, one pass per component)."""
        return on_rows(self, self.operator, fn, points, t, vector)

    def check_functions(self, prefix: str, impl: str | None = None) -> None:
        """The checks of :meth:`~teng_eq.equations.Equation.check_functions` for a system: u₀, ``solution``,
        ``operator`` and ``invariants`` return one real, finite array of the points' shape
        per component (``invariants``: per name), traced as a run runs them."""
        impl = impl or f"{type(self).__module__}:{type(self).__qualname__}"
        points = jnp.asarray(self.spatial(4).points)
        n, x, names = points.shape[0], np.asarray(points).T, self.components
        if (len(set(names)) != len(names) or len(names) < 2
                or not all(isinstance(v, str) and v for v in names)):
            raise bad(f"{prefix}.impl", impl, f"components must be two or more distinct names, not {names}")
        weights = self.fit_weights
        if weights is not None and (len(weights) != len(names) or not all(w > 0 for w in weights)):
            raise bad(f"{prefix}.impl", impl, f"fit_weights must be {len(names)} numbers > 0, not {weights}")
        ic = self.initial_conditions.get(self.initial_condition)
        ic_name = f"{getattr(ic, '__module__', '?')}:{getattr(ic, '__qualname__', self.initial_condition)}"
        ic_key = (f"{prefix}.initial_condition", self.initial_condition)
        what = f"one array per component {names}"
        u0 = self._per_component(ic_key, ic_name, what, n, self.initial_state, (x,), traced=False)
        self._per_component(ic_key, ic_name, what, n, lambda p: self.initial_state(p.T), (points,))
        key = (f"{prefix}.impl", impl)

        def state(p):
            return jnp.stack(self.initial_state(p.T), axis=1)

        if self.short_form:  # as the reference runs it (NumPy arrays), before the operator built on it
            zeros = [np.zeros((self.dim, n))] * len(names)
            self._per_component(key, f"{impl}.nonlinear", f"nonlinear(u, grad_u) on NumPy arrays, {what}", n,
                                self.nonlinear, ([np.asarray(v) for v in u0], zeros), traced=False)
        self._per_component(key, f"{impl}.operator", f"operator(u, t) on u₀ at t = 0, {what}", n,
                            lambda p, t: self.operator(self.fields(state, p), t), (points, 0.0))
        if self.conserves:
            out = called(key, f"{impl}.invariants", "invariants(u): {name: density}", n,
                         lambda p: self.invariants(self.fields(state, p)), (points,))
            if not isinstance(out, Mapping) or not all(isinstance(k, str) for k in out):
                raise bad(*key, f"{impl}.invariants returns {type(out).__name__}, "
                                "expected a dict of name: density")
            for name, density in out.items():
                checked_values(key, f"{impl}.invariants[{name!r}]", "a density per point", n, density)
        if isinstance(self.reference_scheme(), ClosedForm):
            exact = self._per_component(key, f"{impl}.solution", f"solution(x, t), {what}", n, self.solution,
                                        (x, 0.0), traced=False)
            gap = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(exact, u0))
            if gap > 1e-10 * max(1.0, max(float(np.max(np.abs(np.asarray(b)))) for b in u0)):
                raise bad(*key, f"{impl}.solution(x, 0) differs from u₀ by up to {gap:.3g} on {n} points")

    def _per_component(self, key, where: str, what: str, n: int, call, args, traced: bool = True):
        out = called(key, where, what, n, call, args, traced)
        names = self.components
        count = len(out) if isinstance(out, (tuple, list)) else None
        if count != len(names):
            got = f"{count} arrays" if count is not None else f"one {type(out).__name__}"
            raise bad(*key, f"{where} returns {got}, expected {len(names)}: {what}")
        return [checked_values(key, f"{where}[{name!r}]", what, n, v) for name, v in zip(names, out)]


__all__ = ["Component", "PeriodicSystem", "SystemField", "matrix_symbol", "on_rows", "select"]
