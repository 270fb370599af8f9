"""An a-posteriori error estimate of a sequential run, from what the run knows
without a reference solution.

Let p(t) be the run's solution continued between its steps by the cubic Hermite
interpolant of û and L[û] at both ends of every step (its networks at t_n, t_{n+1}
and their slopes f = L[û]), and u the exact solution. The error e = p − u obeys

    ∂ₜe = L[p] − L[u] + δ,   δ = ∂ₜp − L[p]   (the *defect* of p),   e(0) = û₀ − u₀,

so that, wherever the equation's L is one-sided Lipschitz in L² with constant μ
(⟨L[v] − L[w], v − w⟩ ≤ μ‖v − w‖², declared by the equation as
:meth:`~teng_eq.equations.Equation.growth_rate`, or measured: :func:`measured_growth_rate`),

    ‖e(t_{n+1})‖ ≤ e^{μ Δt} ‖e(t_n)‖ + ∫_{t_n}^{t_{n+1}} ‖δ(s)‖ ds.

The run computes, per accepted step, the local term of one of four kinds (:data:`KINDS`):

* ``hermite`` (default): ‖∫δ‖ with the time integral by Simpson's rule,
  ``∫δ = (û₁ − û₀) − Δt/6 (f₀ + 4 L[p(½)] + f₁)``, ``p(½) = (û₀ + û₁)/2 + Δt (f₀ − f₁)/8``.
  L[p(½)] needs ∇ and Δ of f = L[û], i.e. derivatives of û up to fourth order (nested
  forward-mode autodiff; for an operator of another form, L applied to the function p(½)
  itself: derivatives up to twice the operator's order, so for an operator above second
  order the run uses ``trapezoid`` instead, and says so). It estimates the local error of the scheme the run actually
  propagates (O(Δt³) for Heun), its projection errors included: û₁ − û₀ is the step the
  fits made, not the one the tableau asked for.
* ``trapezoid``: ‖(û₁ − û₀) − Δt/2 (f₀ + f₁)‖, the same with the trapezoid rule
  (no fourth derivatives). For Heun on a linear problem it is 3/2 of the local error to
  leading order; on a nonlinear one its leading term differs (Δt³ f′f′f/4 against
  Heun's Δt³ (f″(f,f)/12 − f′f′f/6)).
* ``hermite_triangle``: the ``hermite`` term's norm, the norms added (the triangle
  inequality: never below the vector sum, and blind to cancellations between steps);
* ``embedded``: the integrator's embedded estimate (``local_error`` of
  :class:`~teng_eq.integrators.TENGStep`, e.g. Heun − Euler, which measures the *Euler*
  step's error, orders of magnitude above Heun's own) plus the step's projection error
  ‖û₁ − target‖ on held-out points (``√holdout_loss``), summed.

Norms are quadratures on the held-out points of the fits (points no fit uses, so that
the residual between the quadrature nodes is seen), interior points only. ‖e(0)‖ is
exact: u₀ is known. The estimate is ``est_rel_l2 = E_n / ‖û_n‖``.

What it is not: a proof. The one-sided bound is rigorous on the periodic box (see the
equations), but ‖∫δ‖ ≤ ∫‖δ‖ and both quadratures (Simpson in time, held-out points in
space) are approximations, and μ is sampled at the step ends.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

from teng_eq.equations import Equation, Field, derivatives, operator
from teng_eq.grid import Quadrature, norm2
from teng_eq.model import ParamSpace

#: The kinds of estimate (module docstring); ``none`` computes none.
KINDS = ("hermite", "hermite_triangle", "trapezoid", "embedded", "none")


class Fields(eqx.Module):
    """What the estimate needs of û_θ at its points at one time (:meth:`Defect.fields`):
    u, ∇u (first axis the dimension), f = L[û_θ]; Δu, ∇f and Δf where the Hermite term
    of the short form reads them (else None); μ where it is measured (else None)."""

    u: Float[Array, " n"]
    grad: Float[Array, "dim n"]
    lap: Float[Array, " n"] | None
    f: Float[Array, " n"]
    grad_f: Float[Array, "dim n"] | None
    lap_f: Float[Array, " n"] | None
    mu: Float[Array, ""] | None


class Defect(eqx.Module):
    """The local terms of one accepted step ``θ₀ → θ₁`` of size ``dt`` from time t
    (module docstring), on the interior points of a held-out ``quadrature``.

    **Returns** ``(vectors, scalars)``: the local defect ``∫δ`` on the points (``defect``,
    Hermite–Simpson with ``hermite``, else the trapezoid one), and ``defect_l2`` (its
    norm; ``hermite`` only), ``trapezoid_l2``, ``growth_rate`` (μ, the larger of its
    values at both ends) and ``u_l2`` (‖û₁‖ on the points).

    An equation of the short form ``ν Δu + N(u, ∇u)`` (``short``) gets L[p(½)] from the
    fields ∇f, Δf of both ends; any other from L applied to p(½) as a function, which
    needs both ends' θ. Where the equation declares no growth rate, each end's fields
    carry μ measured there (``modes``: :func:`measured_growth_rate`'s basis).
    """

    space: ParamSpace
    equation: Equation
    points: Float[Array, "n dim"]
    weights: Float[Array, " n"]
    modes: Float[Array, "modes dim+1"] | None
    hermite: bool = eqx.field(static=True)
    short: bool = eqx.field(static=True)

    def __init__(self, space: ParamSpace, equation: Equation, quadrature: Quadrature, hermite: bool):
        self.space, self.equation = space, equation
        self.short = equation.autonomous and type(equation).operator is Equation.operator
        self.hermite = hermite and (self.short or equation.order <= 2)
        weights = jnp.broadcast_to(jnp.asarray(quadrature.weights, jnp.float64), quadrature.points.shape[:1])
        if quadrature.boundary is not None:  # the PDE holds inside; the boundary rows carry its condition
            weights = jnp.where(quadrature.boundary, 0.0, weights)
        self.points, self.weights = jnp.asarray(quadrature.points), weights
        declared = type(equation).growth_rate is not Equation.growth_rate
        self.modes = None if declared else fourier_modes(equation.periods, len(self.points))

    @property
    def kind(self) -> str:
        """The local term it computes: ``hermite`` or ``trapezoid``."""
        return "hermite" if self.hermite else "trapezoid"

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
        mu = None if self.modes is None else measured_growth_rate(
            self.equation, u_fn, self.points, self.weights, t, self.modes)
        if not self.short:
            field = Field(u_fn, self.points)
            return Fields(field.value, field.grad, None, self.equation.operator(field, t), None, None, mu)
        u, grad, lap = derivatives(u_fn, self.points)
        f = self.equation.rhs(u, grad, lap)
        if not self.hermite:
            return Fields(u, grad, lap, f, None, None, mu)
        _, grad_f, lap_f = derivatives(lambda p: operator(self.equation, u_fn, p), self.points)
        return Fields(u, grad, lap, f, grad_f, lap_f, mu)

    def __call__(self, theta0, theta1, dt, t=0.0) -> tuple[dict[str, Float[Array, " n"]], dict[str, Float[Array, ""]]]:
        """The local terms of the step ``θ₀ → θ₁`` from t (:meth:`fields` of both ends, :meth:`combine`)."""
        return self.combine(self.fields(theta0, t), self.fields(theta1, t + dt), dt, (theta0, theta1), t)

    def combine(self, start: Fields, end: Fields, dt, thetas=None, t=0.0):
        """The step's local terms from the :class:`Fields` at both of its ends (a step's
        end is the next one's start: one evaluation per step); ``thetas`` (both ends' θ)
        and the start t for an operator of another form than the short one."""
        trapezoid = (end.u - start.u) - dt / 2 * (start.f + end.f)
        mu0, mu1 = start.mu, end.mu
        if mu0 is None:
            mu0, mu1 = self.equation.growth_rate(start.u, start.grad), self.equation.growth_rate(end.u, end.grad)
        scalars = {"trapezoid_l2": self.norm(trapezoid), "u_l2": self.norm(end.u),
                   "growth_rate": jnp.maximum(jnp.asarray(mu0, jnp.float64), jnp.asarray(mu1, jnp.float64))}
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
                la, lb = (self.equation.operator(Field(fn, q), s) for fn, s in ((a, t), (b, t + dt)))
                return (a(q) + b(q)) / 2 + dt / 8 * (la - lb)

            lp_half = self.equation.operator(Field(p_half, self.points), t + dt / 2)
        defect = (end.u - start.u) - dt / 6 * (start.f + 4 * lp_half + end.f)
        return {"defect": defect}, {**scalars, "defect_l2": self.norm(defect)}


def fourier_modes(periods, n_points: int) -> Float[Array, "modes dim+1"] | None:
    """The basis of :func:`measured_growth_rate` on the periodic box of ``periods``: rows
    ``(k₁, …, k_d, φ)`` for ``cos(k·x − φ)`` with integer wave numbers ``|mᵢ| ≤ K``
    (``kᵢ = 2π mᵢ/Lᵢ``; K = 6, 3, 2 in 1-, 2-, 3-D), each ±m once, φ = 0 (cos) and π/2
    (sin, m ≠ 0); fewer than the ``n_points`` it is sampled on. None off a periodic box."""
    if periods is None:
        return None
    dim = len(periods)
    top = {1: 6, 2: 3}.get(dim, 2)
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


@dataclasses.dataclass(frozen=True)
class ErrorEstimate:
    """``E_n`` (module docstring), advanced on the host step by step: ``vector`` (the
    estimated error on the points, for the kinds that sum defects as vectors) and
    ``error`` (its norm, or the running triangle sum), what a checkpoint keeps; and
    ``fields``, the :class:`Fields` of step n's end, the next step's start (None after a
    resume: computed again)."""

    kind: str
    weights: np.ndarray
    vector: np.ndarray
    error: float
    fields: Fields | None = None

    @classmethod
    def start(cls, kind: str, weights, e0) -> ErrorEstimate:
        """From θ₀'s error ``e0`` on the points (``weights``: their quadrature)."""
        weights, e0 = np.asarray(weights, np.float64), np.asarray(e0, np.float64)
        return cls(kind, weights, e0, float(np.sqrt(np.sum(weights * e0 * e0))))

    @property
    def vectorial(self) -> bool:
        return self.kind in ("hermite", "trapezoid")

    def advance(self, dt: float, scalars: dict[str, float], defect: np.ndarray, fields: Fields) -> ErrorEstimate:
        """``E_{n+1}`` from the step's ``scalars`` (the method's metrics and
        :class:`Defect`'s), its ``defect`` vector and the ``fields`` of its end."""
        growth = math.exp(scalars["growth_rate"] * dt)
        vector, error = self.vector, self.error
        if self.vectorial:
            vector = growth * self.vector + np.asarray(defect, np.float64)
            error = float(np.sqrt(np.sum(self.weights * vector**2)))
        elif self.kind == "hermite_triangle":
            error = growth * self.error + scalars["defect_l2"]
        else:  # embedded: the integrator's estimate, plus the projection error on held-out points
            error = growth * self.error + scalars["local_error"] + math.sqrt(max(scalars["holdout_loss"], 0.0))
        return dataclasses.replace(self, vector=vector, error=error, fields=fields)


class CompiledEstimate:
    """A run's :class:`Defect`, compiled once from the method's state (``parameters``:
    its θ): the :class:`Fields` of a state (derivatives up to fourth order), the local
    terms of a step from the fields at both ends, and θ₀'s error against u₀. ``kind``:
    the estimate the run computes (``hermite`` asked of an operator above second order
    of another form than the short one computes ``trapezoid``)."""

    def __init__(self, defect: Defect, kind: str, parameters: Callable, state: PyTree):
        self.kind = "trapezoid" if kind.startswith("hermite") and not defect.hermite else kind
        self.weights = np.asarray(defect.weights)
        self.initial = jax.jit(lambda s: defect.initial(parameters(s))).lower(state).compile()
        if defect.short:  # autonomous, the fields hold all L[p(½)] needs: no t, no θ
            fields = jax.jit(lambda s: defect.fields(parameters(s))).lower(state).compile()
            shapes = jax.eval_shape(lambda s: defect.fields(parameters(s)), state)
            combine = jax.jit(lambda a, b, dt: defect.combine(a, b, dt)).lower(shapes, shapes, 0.0).compile()
            self.fields = lambda s, t: fields(s)
            self.combine = lambda a, b, s0, s1, dt, t: combine(a, b, dt)
            return
        shapes = jax.eval_shape(lambda s: defect.fields(parameters(s), 0.0), state)
        self.fields = jax.jit(lambda s, t: defect.fields(parameters(s), t)).lower(state, 0.0).compile()
        self.combine = jax.jit(lambda a, b, s0, s1, dt, t: defect.combine(
            a, b, dt, (parameters(s0), parameters(s1)), t)).lower(shapes, shapes, state, state, 0.0, 0.0).compile()

    def start(self, state) -> tuple[ErrorEstimate, float]:
        """The estimate at t = 0, from θ₀'s error (exact: u₀ is known), and ‖û₀‖²."""
        e0, norm0 = jax.device_get(self.initial(state))
        return ErrorEstimate.start(self.kind, self.weights, e0), float(norm0) ** 2

    def local(self, start: Fields | None, previous, state, dt: float,
              t: float) -> tuple[dict[str, np.ndarray], dict[str, float], Fields]:
        """The local terms of the step from ``previous`` at t to ``state``
        (:meth:`Defect.combine`), from the ``start`` fields (None: computed from
        ``previous``), and the fields of its end."""
        start = self.fields(previous, t) if start is None else start
        end = self.fields(state, t + dt)
        vectors, scalars = jax.device_get(self.combine(start, end, previous, state, dt, t))
        return vectors, {k: float(v) for k, v in scalars.items()}, end
