"""What every equation is: ``∂ₜu = L[u]`` on a domain, from an initial condition, with
a way to compute its reference solution, or none.

An equation is one class (one module under :mod:`teng_eq.equations`) named by
the ``impl`` key of its ``conf/equation/*.yaml``; the other keys of that yaml are
the class's fields (:meth:`Equation.from_config`). The class declares everything
the rest of the code asks of it, so that nothing elsewhere dispatches on its name:

* the PDE: :meth:`Equation.operator`, L[u] at time t from a :class:`Field` that gives u,
  the points x and any derivative of u there by autodiff — any order, mixed ones,
  variable coefficients, forcing. The short way for ``L[u] = ν Δu + N(u, ∇u)``:
  :meth:`Equation.nonlinear` (N), with ``ν Δu`` in :meth:`Equation.rhs`; the same N
  serves the network and the pseudo-spectral reference (derivatives by FFT), so the
  two cannot disagree about the PDE;
* its domain (:attr:`Equation.domain`, a :class:`~teng_eq.domains.base.Domain` built from
  its config keys): the network input (:attr:`Equation.periods`: the periods of the
  periodic embedding, or None for plain Cartesian input), the boundary and its
  condition, and the quadratures of the fits (:meth:`Equation.quadrature`), held out
  of them (:meth:`Equation.holdout`) and for the error norms (:meth:`Equation.evaluation`),
  each point once per component for a system;
* its initial conditions (:attr:`Equation.initial_conditions`, chosen by the
  ``initial_condition`` key);
* how its reference is computed (:meth:`Equation.reference_scheme`, an object of
  :mod:`teng_eq.reference`: exact Fourier decay, pseudo-spectral ETDRK4 with its
  nonlinearity degree and resolution table, a Bessel series, the equation's own
  closed-form :meth:`Equation.solution`), or None: the run then measures its error by
  its own estimate alone (:mod:`teng_eq.estimate.defect`);
* the error estimate's growth rate μ (:meth:`Equation.growth_rate`), declared, or
  measured on the run's own fields where it is not (periodic domains).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.cache.files import content_description
from teng_eq.config.options import import_impl, one_of, options_from
from teng_eq.domains.base import Domain
from teng_eq.domains.quadrature import Quadrature, for_components
from teng_eq.errors import bad
from teng_eq.reference import ClosedForm, reference_anytime, reference_solution


def array_module(x):
    """NumPy or jax.numpy, as ``x`` is: u₀ and ``solution`` take either (a traced call
    JAX arrays, the reference and the error's points NumPy ones)."""
    return jnp if isinstance(x, jax.Array) else np


#: The equations whose functions passed :meth:`Equation.check_functions` in this process:
#: the check compiles each function, and a sweep, a search or the test suite builds the
#: same equation again and again.
_CHECKED: set[tuple[str | None, Equation]] = set()


class Equation(eqx.Module):
    """``∂ₜu = L[u]`` on its :attr:`domain`, from the initial condition
    ``initial_conditions[initial_condition]``; by default ``L[u] = ν Δu + N(u, ∇u)``.

    Subclasses set the class variables and say what their domain is (the bases of
    :mod:`teng_eq.equations.periodic` and :mod:`teng_eq.equations.cube` make it from their
    keys); their fields are their config keys (no defaults: ``conf/`` is the one source;
    ``nu`` aside, 0 where an equation's operator has no ν Δu of its own).
    """

    name: str = eqx.field(static=True)
    initial_condition: str = eqx.field(static=True)
    nu: float = eqx.field(static=True, default=0.0, kw_only=True)

    #: Spatial dimension.
    dim: ClassVar[int]
    #: Whether ``L`` is linear in u (N ≡ 0): what methods restricted to linear PDEs ask.
    linear: ClassVar[bool] = False
    #: The highest order of the x-derivatives in ``L`` (the Hermite estimate needs twice it).
    order: ClassVar[int] = 2
    #: Whether ``L`` depends on t only through u (no forcing or coefficient in t): a step
    #: of a time-dependent equation is told its time.
    autonomous: ClassVar[bool] = True
    #: The initial conditions this equation can start from, by config name: each a
    #: function of points (coordinate first; NumPy or JAX) to u₀ there, ``f(x)``, or
    #: ``f(equation, x)`` to read the equation's fields (:meth:`u0`).
    initial_conditions: ClassVar[Mapping[str, Callable]]
    #: A system's components by name (empty: one scalar field u); see
    #: :class:`teng_eq.equations.system.PeriodicSystem`.
    components: ClassVar[tuple[str, ...]] = ()
    #: Each component's weight in the fits' norm Σ_c w_c ‖u_c‖² (None: all 1), for a system's
    #: components of different scales.
    fit_weights: ClassVar[tuple[float, ...] | None] = None

    @property
    def outputs(self) -> int:
        """The network's outputs: one per component (1: a scalar equation)."""
        return max(1, len(self.components))

    @classmethod
    def from_config(cls, group: Mapping, impl: str | None = None) -> Equation:
        """The equation of the ``equation`` config group (without its ``impl``, the
        ``module:Class`` its messages name); a bad key or value, or a function of the
        class that does not run as a run runs it (:meth:`check_functions`), raises a
        one-line :class:`~teng_eq.errors.ConfigError`."""
        equation = options_from(cls, _extents(cls, group), "equation")
        key = (impl, equation)  # its class and fields decide what the check finds
        try:
            seen = key in _CHECKED
        except TypeError:  # a field that does not hash (an array): checked every time
            seen, key = False, None
        if not seen:
            equation.check_functions("equation", impl)
            if key is not None:
                _CHECKED.add(key)
        return equation

    def check_functions(self, prefix: str, impl: str | None = None) -> None:
        """Run the class's functions as a run will, on a few points of the domain, before
        θ₀ is fitted: u₀ (on NumPy arrays, and traced by ``jax.jit``), ``nonlinear`` on u₀'s
        fields and the operator on u₀ at t = 0 (traced, as every step runs them),
        ``growth_rate`` on u₀'s fields (traced, as the estimate runs it) and ``solution`` at
        t = 0 (on NumPy arrays, as the reference runs it; it must equal u₀ there). A
        function that is missing, raises (NumPy inside traced code, an axis out of range, …),
        returns the wrong shape, a non-float or a NaN is a one-line
        :class:`~teng_eq.errors.ConfigError` naming ``module:Class.method`` and the first
        line of the cause; ``impl``: the ``module:Class`` the config named (default: the
        class's own)."""
        impl = impl or f"{type(self).__module__}:{type(self).__qualname__}"
        points = jnp.asarray(self.evaluation(4).points)
        n, x = points.shape[0], np.asarray(points).T
        ic = self.initial_conditions.get(self.initial_condition)
        ic_name = f"{getattr(ic, '__module__', '?')}:{getattr(ic, '__qualname__', self.initial_condition)}"
        ic_key = (f"{prefix}.initial_condition", self.initial_condition)
        u0 = _checked(ic_key, ic_name, "u₀(x) with x coordinate first", n, self.u0, (x,), traced=False)
        _checked(ic_key, ic_name, "u₀(x) with x coordinate first, NumPy or JAX", n, lambda p: self.u0(p.T),
                 (points,))
        u, grad, _ = derivatives(lambda p: self.u0(p.T), points)
        key, cls = (f"{prefix}.impl", impl), type(self)
        if cls.nonlinear is not Equation.nonlinear:
            _checked(key, f"{impl}.nonlinear", "the short form's nonlinear(u, grad_u), or operator(u, t)", n,
                     lambda v, g: self.nonlinear(v, g), (u, grad))
        _checked(key, f"{impl}.operator", "operator(u, t) on u₀ at t = 0", n,
                 lambda p, t: operator(self, lambda q: self.u0(q.T), p, t), (points, 0.0))
        if cls.growth_rate is not Equation.growth_rate:
            _checked(key, f"{impl}.growth_rate", "growth_rate(u, grad_u) on u₀, a number", n,
                     lambda v, g: self.growth_rate(v, g), (u, grad), scalar=True)
        if cls.solution is not Equation.solution:
            exact = _checked(key, f"{impl}.solution", "solution(x, t) with x coordinate first", n,
                             self.solution, (x, 0.0), traced=False)
            gap = float(np.max(np.abs(np.asarray(exact) - np.asarray(u0))))
            if gap > 1e-10 * max(1.0, float(np.max(np.abs(u0)))):
                raise bad(*key, f"{impl}.solution(x, 0) differs from u₀ by up to {gap:.3g} on {n} points")

    def validate(self, prefix: str) -> None:
        """Value checks of :meth:`from_config` (extended by subclasses)."""
        if not self.components and not self.nu >= 0:  # a system's: one per component (PeriodicSystem)
            raise bad(f"{prefix}.nu", self.nu, "must be a number >= 0")
        one_of(f"{prefix}.initial_condition", self.initial_condition, sorted(self.initial_conditions))

    # --- domain: a value the equation has (teng_eq.domains) ---------------------------

    @property
    def domain(self) -> Domain:
        """Where the equation lives (:class:`~teng_eq.domains.base.Domain`), from its config
        keys: the periodic box of ``lengths`` (:class:`~teng_eq.equations.periodic.PeriodicBox`),
        the sampled cube, the disk."""
        raise NotImplementedError

    @property
    def timed(self) -> bool:
        """Whether a step is told its time: ``L`` depends on t (not :attr:`autonomous`), or
        the domain's boundary data are functions (of x and t)."""
        return not self.autonomous or any(callable(p.value) for p in self.domain.boundary)

    @property
    def periods(self) -> tuple[float, ...] | None:
        """Periods of the network's periodic embedding (the domain's); None for plain
        Cartesian input."""
        return self.domain.periods

    def rows(self, quadrature: Quadrature, scales=None) -> Quadrature:
        """``quadrature``'s points as the rows the fits and norms see: a scalar equation's as
        they are, a system's once per component, ``(x, c)``
        (:func:`~teng_eq.domains.quadrature.for_components`; ``scales``: each component's weight)."""
        return for_components(quadrature, self.components, scales) if self.components else quadrature

    def spatial(self, n: int) -> Quadrature:
        """The domain's fit quadrature (``n``), each point once (a system's without its components)."""
        return self.domain.quadrature(n)

    def quadrature(self, n: int) -> Quadrature:
        """The quadrature of the fits (θ₀ and every TENG stage), ``n`` the config's ``grid``;
        a system's components weighed by its ``fit_weights``."""
        return self.rows(self.domain.quadrature(n), self.fit_weights)

    def holdout(self, n: int, m: int) -> Quadrature:
        """Points that no fit on :meth:`quadrature` (n) uses, ``m`` per dimension."""
        return self.rows(self.domain.holdout(n, m), self.fit_weights)

    def evaluation(self, m: int) -> Quadrature:
        """Points and weights of the error norms, ``m`` per dimension (``eval_grid``); a
        system's components weigh alike there (``rel_l2`` is the state's)."""
        return self.rows(self.domain.evaluation(m))

    def point_count(self, n: int) -> int:
        """The rows of :meth:`quadrature` (n): the domain's points, once per component."""
        return self.domain.point_count(n) * self.outputs

    def holdout_size(self, n: int, holdout) -> int:
        """The ``m`` of :meth:`holdout` for the fits' ``n`` (the domain's rule)."""
        return self.domain.holdout_size(n, holdout)

    def fit_description(self) -> dict:
        """What of the equation, besides u₀'s values and gradients on the fit points (which
        :func:`~teng_eq.fit.theta0.cached_initial_parameters` adds with the network), θ₀
        depends on (its cache key): the domain — its class and every field
        (:func:`~teng_eq.cache.files.content_description`: lengths, periods, origin, sides,
        sampler) and its quadrature rule (:meth:`~teng_eq.domains.base.Domain.describe`).
        Not the equation's own fields: θ₀ fits u₀ alone, so that a coefficient that leaves
        u₀ as it is (ν, an advection velocity) shares its θ₀; one that changes u₀ changes
        its values, and so the key."""
        return {"domain_fields": content_description(self.domain), **self.domain.describe()}

    # --- initial condition, reference -----------------------------------------------

    def u0(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """The initial condition at points ``x`` (coordinate first: one point ``(dim,)``, or
        ``(dim, n)``; NumPy or JAX): the chosen entry of :attr:`initial_conditions`, a
        function of ``x``, or of ``(equation, x)`` (a method of the class), so that u₀ may
        read the equation's fields."""
        ic = self.initial_conditions[self.initial_condition]
        return ic(self, x) if _takes_equation(ic) else ic(x)

    def reference_scheme(self):
        """How the reference solution is computed: an object of :mod:`teng_eq.reference`
        with ``solution(equation, times, cache_dir=, n=, dt=)`` and ``anytime(…)``; by
        default the equation's own :meth:`solution` where it has one, else None (no
        reference: the run's error is its estimate's)."""
        return ClosedForm() if type(self).solution is not Equation.solution else None

    def solution(self, x: Float[Array, "dim n"], t: float) -> Float[Array, " n"]:
        """The exact solution at points ``x`` (coordinate first) and time t, for an
        equation that has one (a manufactured solution, say): its reference."""
        raise NotImplementedError

    def exact(self, x, t):
        """:meth:`solution` at the quadratures' rows (a system's: ``(x, c)``)."""
        return self.solution(x, t)

    def reference(self, times, *, cache_dir=None, n: int | None = None, dt: float | None = None):
        """Reference solution at ``times``; its ``values(k, m)`` are u(·, times[k]) at the
        points of :meth:`evaluation` (m). ``n``, ``dt``: the scheme's resolution where
        it has one (None: its default), see :func:`teng_eq.reference.reference_solution`."""
        return reference_solution(self, times, cache_dir=cache_dir, n=n, dt=dt)

    def reference_anytime(self, t_final: float, *, cache_dir=None):
        """Reference whose ``values_at(t, m)`` hold at any t in [0, ``t_final``], for a
        run whose times are not known in advance (``dt: auto``)."""
        return reference_anytime(self, t_final, cache_dir=cache_dir)

    # --- the PDE --------------------------------------------------------------------

    def operator(self, u: Field, t) -> Float[Array, " n"]:
        """``L[u]`` at ``u``'s points at time t (a scalar): by default the short form
        :meth:`rhs`. An equation of another form overrides it, with the derivatives it
        needs from ``u`` (``u.value``, ``u.grad``, ``u.lap``, ``u.d(0, 0, 1)``, …),
        coefficients of ``u.x`` and, if it sets ``autonomous = False``, of t."""
        return self.rhs(u.value, u.grad, u.lap)

    def stiff(self, u: Field, t) -> Float[Array, " n"]:
        """S[u], the part of L that IMEX steppers take implicitly (:mod:`teng_eq.stepping.implicit`;
        the rest L − S explicitly): by default the short form's linear ``ν Δu``. An
        equation of another form declares its own (e.g. ``−a Δu − b Δ²u``) or has none."""
        if type(self).operator is not Equation.operator:
            raise NotImplementedError(f"{type(self).__name__} writes its own operator and declares no "
                                      "stiff(u, t) part for the IMEX steppers")
        return self.nu * u.lap

    def linear_symbol(self, k2):
        """The Fourier symbol of the linear part the pseudo-spectral reference integrates
        exactly, on |k|² = ``k2`` (NumPy): the short form's −ν|k|² by default; an equation
        with another constant-coefficient linear part (e.g. −u_xx − u_xxxx: |k|² − |k|⁴) and
        its ``nonlinear`` rest says so here."""
        return -self.nu * k2

    def nonlinear(self, u, grad_u):
        """N(u, ∇u); ``grad_u`` has the spatial dimension as its *first* axis.

        Written with arithmetic only so that it takes NumPy and JAX arrays alike.
        """
        raise NotImplementedError

    def rhs(self, u, grad_u, lap_u):
        """L[u] = ν Δu + N(u, ∇u)."""
        return self.nu * lap_u + self.nonlinear(u, grad_u)

    def growth_rate(self, u, grad_u):
        """The stability bound of the error estimate (:mod:`teng_eq.estimate.defect`): a μ with
        ``⟨L[v] − L[w], v − w⟩_{L²} ≤ μ ‖v − w‖²`` for v near the solution whose values
        (and gradient, first axis the dimension) on a grid are ``u``, ``grad_u`` — the
        rate at which two nearby solutions may separate in L². Declared next to the
        operator; None (the default): not declared, and the estimate measures it
        (:func:`teng_eq.estimate.defect.measured_growth_rate`, periodic domains)."""
        return None


#: Keys of an ``equation`` group that are not the equation's fields: its class, and
#: the sizes it runs at by default on a CPU (``conf/config.yaml`` reads them).
GROUP_KEYS = ("impl", "cpu")


def _extents(cls: type, group: Mapping) -> Mapping:
    """``group`` with ``lengths: [[a₁, b₁], …]`` (one interval ``[a, b)`` per axis) spelled
    as ``origin: [a₁, …]`` and ``lengths: [b₁ − a₁, …]``, for a class with an origin; other
    groups as they are."""
    lengths = group.get("lengths") if isinstance(group, Mapping) else None
    if (isinstance(lengths, str) or not isinstance(lengths, Sequence)
            or not any(isinstance(v, Sequence) and not isinstance(v, str) for v in lengths)):
        return group
    shown = [list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v for v in lengths]
    if "origin" not in {f.name for f in dataclasses.fields(cls)}:
        raise bad("equation.lengths", shown, "this equation's domain takes numbers, not intervals")
    if "origin" in group:
        raise bad("equation.lengths", shown, "intervals give the origin: leave equation.origin out")
    pairs = []
    for v in shown:
        if not (isinstance(v, list) and len(v) == 2
                and all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in v) and v[1] > v[0]):
            raise bad("equation.lengths", shown, "must be one [a, b] per axis, numbers with a < b")
        pairs.append((float(v[0]), float(v[1])))
    return {**group, "origin": [a for a, _ in pairs], "lengths": [b - a for a, b in pairs]}


def build_equation(group: Mapping, key: str = "equation") -> Equation:
    """The equation of a composed ``equation`` group: its ``impl`` class built from
    the other keys (:data:`GROUP_KEYS` aside)."""
    if not isinstance(group, Mapping):
        raise bad(key, group, "must be a config group (a mapping)")
    fields = {k: v for k, v in group.items() if k not in GROUP_KEYS}
    return import_impl(group.get("impl"), f"{key}.impl").from_config(fields, group.get("impl"))


def _takes_equation(fn: Callable) -> bool:
    """Whether the initial condition ``fn`` takes ``(equation, x)`` rather than ``x``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: a function of x
        return False
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in kinds and p.default is inspect.Parameter.empty for p in params) >= 2


def _checked(key: tuple[str, object], where: str, what: str, points: int, call: Callable, args: tuple, *,
             scalar: bool = False, traced: bool = True):
    """``call(*args)`` (traced by ``jax.jit``, its arguments tracers, unless not ``traced``)
    as a check of :meth:`Equation.check_functions` on ``points`` points: its value, of
    shape ``(points,)`` (``()`` if ``scalar``; None allowed there), real, finite; else a
    one-line :class:`~teng_eq.errors.ConfigError` about ``key`` naming ``where``."""
    out = called(key, where, what, points, call, args, traced)
    if out is None and scalar:
        return None
    return checked_values(key, where, what, points, out, scalar)


def called(key: tuple[str, object], where: str, what: str, points: int, call: Callable, args: tuple,
           traced: bool = True):
    """``call(*args)`` (under ``jax.jit`` if ``traced``), whatever it raises said in one line
    (:func:`_checked`)."""
    try:
        return jax.jit(call)(*args) if traced else call(*args)
    except NotImplementedError:
        raise bad(*key, f"{where} is not defined: {what}") from None
    except Exception as err:  # a user's code: whatever it raises, said in one line
        cause = (str(err).strip().splitlines() or [""])[0]
        how = "under jax.jit " if traced else ""
        raise bad(*key, f"{where} fails {how}on {points} points: {type(err).__name__}: {cause}") from None


def checked_values(key: tuple[str, object], where: str, what: str, points: int, out, scalar: bool = False):
    """``out`` if it has shape ``(points,)`` (``()`` if ``scalar``) and is real and finite;
    else a one-line :class:`~teng_eq.errors.ConfigError` (:func:`_checked`)."""
    shape, expected = jnp.shape(out), () if scalar else (points,)
    if shape != expected:
        raise bad(*key, f"{where} returns shape {shape} on {points} points, expected {expected}: {what}")
    if not jnp.issubdtype(jnp.result_type(out), jnp.floating):
        raise bad(*key, f"{where} returns {jnp.result_type(out)} values, expected real floats: {what}")
    if not bool(jnp.all(jnp.isfinite(out))):
        raise bad(*key, f"{where} returns a non-finite value on {points} points: {what}")
    return out


class Field:
    """A function u of x (``fn``: ``(n, dim)`` points to ``(n,)`` values, each row on its
    own, as a network applied row by row) at ``points``: its values and derivatives
    there, by forward-mode autodiff, each computed once (what :meth:`Equation.operator`
    reads).

    ``value``, ``grad`` (first axis the dimension) and ``lap`` come from one pass of
    :func:`derivatives`; ``d(i, j, …)`` is ``∂ᵢ∂ⱼ… u`` of any order (nested JVPs, the
    axes in any order: a network is smooth, its partial derivatives commute); ``x`` the
    points, coordinate first (for coefficients and forcing)."""

    def __init__(self, fn: Callable[[Array], Array], points: Float[Array, "n dim"]):
        self.fn, self.points = fn, points
        self._cache: dict = {}

    @property
    def x(self) -> Float[Array, "dim n"]:
        return self.points.T

    def _first(self):
        if "first" not in self._cache:
            self._cache["first"] = derivatives(self.fn, self.points)
        return self._cache["first"]

    @property
    def value(self) -> Float[Array, " n"]:
        return self._first()[0]

    @property
    def grad(self) -> Float[Array, "dim n"]:
        return self._first()[1]

    @property
    def lap(self) -> Float[Array, " n"]:
        return self._first()[2]

    def d(self, *axes: int) -> Float[Array, " n"]:
        """``∂^k u / ∂x_{axes[0]} … ∂x_{axes[k-1]}`` at the points (``d()``: u itself); an
        axis that is not one of the field's (0 … dim − 1) raises ``IndexError``."""
        dim = self.points.shape[1]
        for a in axes:
            if not isinstance(a, (int, np.integer)) or isinstance(a, bool) or not 0 <= a < dim:
                raise IndexError(f"u.d{tuple(axes)}: axis {a!r} is not one of a {dim}-D field's "
                                 f"(0 to {dim - 1})")
        axes = tuple(sorted(int(a) for a in axes))
        if not axes:
            return self.value
        if axes not in self._cache:
            fn = self.fn
            for a in axes:
                fn = _partial(fn, jnp.zeros_like(self.points).at[:, a].set(1.0))
            self._cache[axes] = fn(self.points)
        return self._cache[axes]


def _partial(fn: Callable[[Array], Array], e: Array) -> Callable[[Array], Array]:
    """The derivative of a row-wise ``fn`` along ``e`` (a tangent per row), as a function."""
    return lambda p: jax.jvp(fn, (p,), (e,))[1]


def derivatives(
    fn: Callable[[Array], Array], points: Float[Array, "n dim"]
) -> tuple[Float[Array, " n"], Float[Array, "dim n"], Float[Array, " n"]]:
    """``(u, ∇u, Δu)`` of a pointwise function at every row of ``points``, by autodiff.

    ``fn`` maps ``(n, dim)`` points to ``(n,)`` values, each row on its own (a
    network applied row by row). Along each axis d one forward-over-forward JVP
    with tangent e_d on every row gives ``∂_d u`` and ``∂²_d u`` together
    (cheaper than the trace of a per-point forward-over-reverse Hessian).
    """
    grads, lap = [], 0.0
    u = None
    for d in range(points.shape[1]):
        e = jnp.zeros_like(points).at[:, d].set(1.0)

        def along(p, e=e):
            return jax.jvp(fn, (p,), (e,))

        (u, du), (_, d2u) = jax.jvp(along, (points,), (e,))
        grads.append(du)
        lap = lap + d2u
    return u, jnp.stack(grads), lap


def operator(
    equation: Equation, fn: Callable[[Array], Array], points: Float[Array, "n dim"], t=0.0, vector=None
) -> Float[Array, " n"]:
    """``L[fn]`` at every row of ``points`` at time t (autodiff in x: :class:`Field`); a
    system's at its rows ``(x, c)``, component c of L there (``vector``: fn's every
    component at spatial points at once, where known:
    :meth:`~teng_eq.equations.system.PeriodicSystem.operator_rows`)."""
    if equation.components:
        return equation.operator_rows(fn, points, t, vector)
    return equation.operator(Field(fn, points), t)


def network_operator(equation: Equation, space, theta: Float[Array, " params"],
                     points: Float[Array, "n dim"], t=0.0) -> Float[Array, " n"]:
    """``L[û_θ]`` at ``points`` and time t, û_θ the network of ``space`` (a
    :class:`~teng_eq.network.space.ParamSpace`) at the flat parameters θ."""
    vector = (lambda p: space.vector(theta, p)) if equation.components else None
    return operator(equation, lambda p: space.apply(theta, p), points, t, vector)
