"""The local terms of one accepted step of the estimate (:class:`Defect`): the defect ∫δ of
the cubic Hermite interpolant between its ends, by Simpson's rule (or the trapezoid rule),
on the held-out points, with the growth rate μ (declared, measured:
:func:`measured_growth_rate`, or the transport's); what the kinds of :data:`KINDS` are is
the package's docstring (:mod:`teng_eq.estimate`)."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.domains.bounded import BoxDomain
from teng_eq.domains.quadrature import Quadrature, norm2
from teng_eq.equations import Equation, Field, derivatives, operator
from teng_eq.estimate.box import BoxTransport
from teng_eq.estimate.transport import SystemTransport, Transport
from teng_eq.network.space import ParamSpace

#: The kinds of estimate (module docstring); ``none`` computes none.
KINDS = ("transport", "hermite", "hermite_triangle", "trapezoid", "embedded", "none")


class Fields(eqx.Module):
    """What the estimate needs of û_θ at its points at one time (:meth:`Defect.fields`):
    u, ∇u (first axis the dimension), f = L[û_θ]; Δu, ∇f and Δf where the Hermite term
    of the short form reads them (else None); μ where it is measured (else None)."""

    u: Float[Array, " n"]
    grad: Float[Array, "dim n"] | None  # None for a system (its transport reads the coefficients)
    lap: Float[Array, " n"] | None
    f: Float[Array, " n"]
    grad_f: Float[Array, "dim n"] | None
    lap_f: Float[Array, " n"] | None
    mu: Float[Array, ""] | None
    coefficients: Float[Array, "alphas n"] | None = None  # a_α of L′[û] (transport)
    remainder: Float[Array, " n"] | None = None  # L[û] − L′[û]û (a carried transport's flow defect)


def transport_for(equation: Equation, quadrature: Quadrature, weights, kind: str,
                  resolved: tuple[int, ...] | None = None, region: Callable | None = None,
                  carried: bool = False) -> Transport | BoxTransport | None:
    """The error's transport of an estimate of ``kind`` on ``quadrature`` (``weights``: its
    rows', the boundary's 0): a periodic grid's (:class:`Transport`, a system's
    :class:`SystemTransport` for every kind), a box with sides' own modes
    (:class:`BoxTransport`), or None — also where a scalar's transport cannot carry its
    variable coefficients (:func:`transport_rule`). ``resolved``: the grid whose wave numbers a step must be
    stable on; ``region``: the integrator's stability region for complex rates; ``carried``:
    the step's defect added as the linearised flow's (an implicit step's)."""
    periodic = equation.periods is not None and quadrature.grid_shape is not None
    system = bool(equation.components)
    if kind == "transport" and not system and boxed(equation):  # the box's own modes
        return BoxTransport(equation.domain, quadrature.points, weights, equation.order, resolved, region)
    if not (periodic and (kind == "transport" or system)):
        return None
    if system:
        return SystemTransport(equation.periods, quadrature.grid_shape, equation.order,
                               len(equation.components), resolved, region)
    transport = Transport(equation.periods, quadrature.grid_shape, equation.order, resolved, region,
                          carried=carried)
    rule = transport_rule(equation, transport, jnp.asarray(quadrature.points))
    if rule == "substepped":
        return Transport(equation.periods, quadrature.grid_shape, equation.order, resolved, region,
                         carried=carried, substepped=True)
    return transport if rule == "frozen" else None  # None: the contractive bound instead


class Defect(eqx.Module):
    """The local terms of one accepted step ``θ₀ → θ₁`` of size ``dt`` from time t
    (module docstring), on the interior points of a held-out ``quadrature``, for the
    estimate of ``kind``.

    **Returns** ``(vectors, scalars)``: the local defect ``∫δ`` on the points (``defect``,
    Hermite–Simpson where it can, else the trapezoid one), and ``defect_l2`` (its norm;
    Hermite only), ``trapezoid_l2``, ``growth_rate`` (μ, the larger of its values at both
    ends; under ``transport`` the largest Re Λ(k)) and ``u_l2`` (‖û₁‖ on the points).

    An equation of the short form ``ν Δu + N(u, ∇u)`` (``short``) gets L[p(½)] from the
    fields ∇f, Δf of both ends; any other from L applied to p(½) as a function, which
    needs both ends' θ. Where the equation declares no growth rate, each end's fields
    carry μ measured there (``modes``: :func:`measured_growth_rate`'s basis); under
    ``transport`` (a periodic grid, or a box with sides: :func:`boxed`) the coefficients of L′[û] instead
    (:class:`Transport`, :class:`~teng_eq.estimate.box.BoxTransport`),
    ``resolved`` the shape of the fit's grid (the wave numbers a step must be stable on).
    A system always carries its :class:`SystemTransport` (its μ, under the other kinds, is the
    largest logarithmic norm of Λ: a measured μ reads a scalar field); ``region``: the
    integrator's stability region for the complex rates (a scalar's and a system's).
    """

    space: ParamSpace
    equation: Equation
    points: Float[Array, "n dim"]
    weights: Float[Array, " n"]
    modes: Float[Array, "modes dim+1"] | None
    transport: Transport | BoxTransport | None
    hermite: bool = eqx.field(static=True)
    short: bool = eqx.field(static=True)

    def __init__(self, space: ParamSpace, equation: Equation, quadrature: Quadrature, kind: str,
                 resolved: tuple[int, ...] | None = None, region: Callable | None = None,
                 implicit: bool = False):
        self.space, self.equation = space, equation
        # the short form's fields need no θ; a carried transport's flow defect reads both ends' θ
        self.short = equation.autonomous and type(equation).operator is Equation.operator and not (
            implicit and kind == "transport")
        self.hermite = (kind in ("transport", "hermite", "hermite_triangle")
                        and (self.short or equation.order <= 2))
        weights = jnp.broadcast_to(jnp.asarray(quadrature.weights, jnp.float64), quadrature.points.shape[:1])
        if quadrature.boundary is not None:  # the PDE holds inside; the boundary rows carry its condition
            weights = jnp.where(quadrature.boundary, 0.0, weights)
        self.points, self.weights = jnp.asarray(quadrature.points), weights
        self.transport = transport_for(equation, quadrature, weights, kind, resolved, region,
                                       carried=implicit)
        declared = type(equation).growth_rate is not Equation.growth_rate
        self.modes = None if declared or self.transport else fourier_modes(equation.periods, len(self.points))

    @property
    def kind(self) -> str:
        """The estimate it feeds: ``transport``, else its local term, ``hermite`` or ``trapezoid``."""
        return "transport" if self.transport is not None else "hermite" if self.hermite else "trapezoid"

    def norm(self, r: Float[Array, " n"]) -> Float[Array, ""]:
        """The L² norm of values on the points (their quadrature)."""
        return jnp.sqrt(norm2(r, self.weights))

    def initial(self, theta) -> tuple[Float[Array, " n"], Float[Array, ""]]:
        """``(û₀ − u₀, ‖û₀‖)`` on the points: θ₀'s error, exact since u₀ is known."""
        u = self.space.apply(theta, self.points)
        return u - self.equation.u0(self.points.T), self.norm(u)

    def _u(self, theta) -> Callable:
        return lambda p: self.space.apply(theta, p)

    def fields(self, theta, t=0.0) -> Fields:
        """The :class:`Fields` of û_θ on the points at time t."""
        u_fn = self._u(theta)
        if self.equation.components:
            def vector(p):
                return self.space.vector(theta, p)

            a = self.transport.coefficients(self.equation, vector, self.points, t)
            f = operator(self.equation, u_fn, self.points, t, vector)
            return Fields(u_fn(self.points), None, None, f, None, None, None, a)
        mu = None if self.modes is None else measured_growth_rate(
            self.equation, u_fn, self.points, self.weights, t, self.modes)
        a = None if self.transport is None else self.transport.coefficients(
            self.equation, u_fn, self.points, t)
        if getattr(self.transport, "carried", False):
            field = Field(u_fn, self.points)
            f, remainder = self.remainder(u_fn, t, with_operator=True)
            return Fields(field.value, field.grad, None, f, None, None, mu, a, remainder)
        if not self.short:
            field = Field(u_fn, self.points)
            return Fields(field.value, field.grad, None, self.equation.operator(field, t), None, None, mu, a)
        u, grad, lap = derivatives(u_fn, self.points)
        f = self.equation.rhs(u, grad, lap)
        if not self.hermite:
            return Fields(u, grad, lap, f, None, None, mu, a)
        _, grad_f, lap_f = derivatives(lambda p: operator(self.equation, u_fn, p), self.points)
        return Fields(u, grad, lap, f, grad_f, lap_f, mu, a)

    def remainder(self, u_fn: Callable, t, with_operator: bool = False):
        """L[u] − L′[u]u at the points (a carried transport's flow defect): L and L′[u]u by one
        forward derivative along u itself; with ``with_operator``, (L[u], that)."""
        one = jnp.ones((), self.points.dtype)
        f, lin = jax.jvp(lambda s: operator(self.equation, lambda p: (1 + s) * u_fn(p), self.points, t),
                         (0 * one,), (one,))
        return (f, f - lin) if with_operator else f - lin

    def __call__(
        self, theta0, theta1, dt, t=0.0
    ) -> tuple[dict[str, Float[Array, " n"]], dict[str, Float[Array, ""]]]:
        """The local terms of the step ``θ₀ → θ₁`` from t (:meth:`fields` of both ends, :meth:`combine`)."""
        return self.combine(self.fields(theta0, t), self.fields(theta1, t + dt), dt, (theta0, theta1), t)

    def combine(self, start: Fields, end: Fields, dt, thetas=None, t=0.0):
        """The step's local terms from the :class:`Fields` at both of its ends (a step's
        end is the next one's start: one evaluation per step); ``thetas`` (both ends' θ)
        and the start t for an operator of another form than the short one."""
        trapezoid = (end.u - start.u) - dt / 2 * (start.f + end.f)
        mu0, mu1 = start.mu, end.mu
        if self.transport is not None:  # the fastest rate of the diagonal part Λ over the step
            mu0 = mu1 = self.transport.growth((start.coefficients + end.coefficients) / 2)
        elif mu0 is None:
            mu0, mu1 = (self.equation.growth_rate(start.u, start.grad),
                        self.equation.growth_rate(end.u, end.grad))
        scalars = {"trapezoid_l2": self.norm(trapezoid), "u_l2": self.norm(end.u),
                   "growth_rate": jnp.maximum(jnp.asarray(mu0, jnp.float64), jnp.asarray(mu1, jnp.float64))}
        if getattr(self.transport, "carried", False):  # under implicit steps: the flow's defect
            curvature = None  # of N's explicit t-dependence, on the mean of the two networks
            if not self.equation.autonomous:
                a, b = (self._u(th) for th in thetas)
                at = [self.remainder(lambda p: (a(p) + b(p)) / 2, t + c * dt) for c in (0.0, 0.5, 1.0)]
                curvature = at[1] - (at[0] + at[2]) / 2
            defect = self.transport.flow_defect((start.u, end.u), (start.remainder, end.remainder),
                                                (start.coefficients, end.coefficients), dt, curvature)
            extra = {"defect_l2": self.norm(defect)} if self.hermite else {}  # the keys of the kind's metrics
            return {"defect": defect}, {**scalars, **extra}
        if not self.hermite:
            return {"defect": trapezoid}, scalars
        if self.short:  # p(½) of the cubic Hermite interpolant, with its gradient and Laplacian
            p = (start.u + end.u) / 2 + dt / 8 * (start.f - end.f)
            gp = (start.grad + end.grad) / 2 + dt / 8 * (start.grad_f - end.grad_f)
            lp = (start.lap + end.lap) / 2 + dt / 8 * (start.lap_f - end.lap_f)
            lp_half = self.equation.rhs(p, gp, lp)
        else:  # L of the function p(½), at t + Δt/2
            a, b = (self._u(th) for th in thetas)

            def p_half(q):
                la, lb = (operator(self.equation, fn, q, s) for fn, s in ((a, t), (b, t + dt)))
                return (a(q) + b(q)) / 2 + dt / 8 * (la - lb)

            lp_half = operator(self.equation, p_half, self.points, t + dt / 2)
        defect = (end.u - start.u) - dt / 6 * (start.f + 4 * lp_half + end.f)
        return {"defect": defect}, {**scalars, "defect_l2": self.norm(defect)}


def transport_rule(equation: Equation, transport: Transport, points) -> str | None:
    """How the transport carries the rest R = L′ − Λ on the equation, decided once, before the
    run, on L′ at the constant state ⟨u₀⟩ (the mean of u₀ on the ``points``) at t = 0, where its
    coefficients vary in x only by the equation's own dependence on x (Burgers' advection
    by û, Allen–Cahn's reaction, Kuramoto–Sivashinsky's: constant there): ``frozen`` where
    the frozen-coefficient model holds (:meth:`~teng_eq.estimate.transport.Transport.frozen`;
    also where the coefficients are not finite there, which decides nothing), ``substepped``
    where it does not but only a velocity or a reaction varies
    (:meth:`~teng_eq.estimate.transport.Transport.transports`: Lawson's RK4), else None."""
    level = jnp.mean(equation.u0(points.T))
    a = transport.coefficients(equation, lambda p: jnp.full(p.shape[0], level, p.dtype), points, 0.0)
    a = np.asarray(a)
    if not np.all(np.isfinite(a)) or transport.frozen(a):
        return "frozen"
    return "substepped" if transport.transports(a) else None


def transport_refused(equation: Equation) -> str:
    """Why ``estimate=transport`` computed another kind on the equation (one phrase)."""
    if equation.periods is not None and not equation.components:
        return ("finds L′'s second- or higher-order coefficients varying in x more than its "
                "derivatives damp (the frozen-coefficient transport does not hold)")
    return "needs a periodic box"


def boxed(equation: Equation) -> bool:
    """Whether the equation lives on a box with sides on fixed tensor-grid points, where the
    transport runs in the box's own modes (:class:`~teng_eq.estimate.box.BoxTransport`)."""
    domain = equation.domain
    return isinstance(domain, BoxDomain) and not domain.fresh and bool(domain.boundary)


def fourier_modes(periods, n_points: int) -> Float[Array, "modes dim+1"] | None:
    """The basis of :func:`measured_growth_rate` on the periodic box of ``periods``: rows
    ``(k₁, …, k_d, φ)`` for ``cos(k·x − φ)`` with integer wave numbers ``|mᵢ| ≤ K``
    (``kᵢ = 2π mᵢ/Lᵢ``; K = 6, 3, 2 in 1-, 2-, 3-D), each ±m once, φ = 0 (cos) and π/2
    (sin, m ≠ 0); fewer than the ``n_points`` it is sampled on. Above 3-D, where the
    (2K + 1)ᵈ wave vectors outnumber any sample, m along one axis only (K = 2: 4d + 1
    rows). None off a periodic box."""
    if periods is None:
        return None
    dim = len(periods)
    top = {1: 6, 2: 3}.get(dim, 2)
    if dim > 3:
        ms = np.concatenate([np.zeros((1, dim), int)] + [j * np.eye(dim, dtype=int) for j in (-2, -1, 1, 2)])
    else:
        ms = np.array(np.meshgrid(*[np.arange(-top, top + 1)] * dim, indexing="ij")).reshape(dim, -1).T
    half = [m for m in ms if tuple(m) > tuple(-m) or not m.any()]  # one of ±m
    rows = [(*(2 * np.pi * m / np.asarray(periods)), phase) for m in half
            for phase in ((0.0,) if not m.any() else (0.0, np.pi / 2))]
    if len(rows) >= n_points:
        raise ValueError(f"{len(rows)} Fourier modes need more than the {n_points} held-out points")
    return jnp.asarray(rows, jnp.float64)


def measured_growth_rate(equation: Equation, u_fn: Callable, points, weights, t, modes) -> Float[Array, ""]:
    """μ measured at û (``u_fn``): the largest eigenvalue of the symmetric part of the
    linearised operator L'[û] on the span of the Fourier ``modes`` (:func:`fourier_modes`),
    orthonormal in the points' quadrature — the logarithmic norm of L'[û] there, i.e.
    the rate at which two solutions near û separate in L², to first order, along the
    modes the run resolves. An equation that knows a bound declares it instead
    (:meth:`~teng_eq.equations.Equation.growth_rate`): higher modes, where an operator
    with diffusion damps, are left out."""
    root_w = jnp.sqrt(weights)[:, None]

    def basis(row):
        return lambda p: jnp.cos(p @ row[:-1] - row[-1])

    def linearised(row):  # L'[û] b at the points: d/de L[û + e b]
        b = basis(row)
        return jax.jvp(lambda e: equation.operator(Field(lambda p: u_fn(p) + e * b(p), points), t),
                       (0.0,), (1.0,))[1]

    q, r = jnp.linalg.qr(root_w * jax.vmap(lambda row: basis(row)(points), out_axes=1)(modes))
    g = q.T @ (root_w * jax.vmap(linearised, out_axes=1)(modes))
    g = jax.scipy.linalg.solve_triangular(r, g.T, trans=1, lower=False).T  # G R⁻¹
    return jnp.max(jnp.linalg.eigvalsh((g + g.T) / 2))
