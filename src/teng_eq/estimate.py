"""An a-posteriori error estimate of a sequential run, from what the run knows
without a reference solution.

Let p(t) be the run's solution continued between its steps by the cubic Hermite
interpolant of û and L[û] at both ends of every step (its networks at t_n, t_{n+1}
and their slopes f = L[û]), and u the exact solution. The error e = p − u obeys

    ∂ₜe = L[p] − L[u] + δ,   δ = ∂ₜp − L[p]   (the *defect* of p),   e(0) = û₀ − u₀,

so that, wherever the equation's L is one-sided Lipschitz in L² with constant μ
(⟨L[v] − L[w], v − w⟩ ≤ μ‖v − w‖², declared by each equation as
:meth:`~teng_eq.equations.Equation.growth_rate`),

    ‖e(t_{n+1})‖ ≤ e^{μ Δt} ‖e(t_n)‖ + ∫_{t_n}^{t_{n+1}} ‖δ(s)‖ ds.

The run computes, per accepted step, the local term of three kinds (:data:`KINDS`):

* ``hermite`` (default): ‖∫δ‖ with the time integral by Simpson's rule,
  ``∫δ = (û₁ − û₀) − Δt/6 (f₀ + 4 L[p(½)] + f₁)``, ``p(½) = (û₀ + û₁)/2 + Δt (f₀ − f₁)/8``.
  L[p(½)] needs ∇ and Δ of f = L[û], i.e. derivatives of û up to fourth order (nested
  forward-mode autodiff). It estimates the local error of the scheme the run actually
  propagates (O(Δt³) for Heun), its projection errors included: û₁ − û₀ is the step the
  fits made, not the one the tableau asked for.
* ``trapezoid``: ‖(û₁ − û₀) − Δt/2 (f₀ + f₁)‖, the same with the trapezoid rule
  (no fourth derivatives). For Heun on a linear problem it is 3/2 of the local error to
  leading order; on a nonlinear one its leading term differs (Δt³ f′f′f/4 against
  Heun's Δt³ (f″(f,f)/12 − f′f′f/6)).
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

from teng_eq.equations import Equation, derivatives, operator
from teng_eq.grid import Quadrature, norm2
from teng_eq.model import ParamSpace

#: The kinds of estimate (module docstring); ``none`` computes none.
KINDS = ("hermite", "hermite_triangle", "trapezoid", "embedded", "none")


class Defect(eqx.Module):
    """The local terms of one accepted step ``θ₀ → θ₁`` of size ``dt`` (module docstring),
    on the interior points of a held-out ``quadrature``.

    **Returns** ``(vectors, scalars)``: the local defect ``∫δ`` on the points (``defect``,
    Hermite–Simpson with ``hermite``, else the trapezoid one), and ``defect_l2`` (its
    norm; ``hermite`` only), ``trapezoid_l2``, ``growth_rate`` (μ, the larger of its
    values at both ends) and ``u_l2`` (‖û₁‖ on the points).
    """

    space: ParamSpace
    equation: Equation
    points: Float[Array, "n dim"]
    weights: Float[Array, " n"]
    hermite: bool = eqx.field(static=True)

    def __init__(self, space: ParamSpace, equation: Equation, quadrature: Quadrature, hermite: bool):
        self.space, self.equation, self.hermite = space, equation, hermite
        weights = jnp.broadcast_to(jnp.asarray(quadrature.weights, jnp.float64), quadrature.points.shape[:1])
        if quadrature.boundary is not None:  # the PDE holds inside; the boundary rows carry its condition
            weights = jnp.where(quadrature.boundary, 0.0, weights)
        self.points, self.weights = jnp.asarray(quadrature.points), weights

    def norm(self, r: Float[Array, " n"]) -> Float[Array, ""]:
        """The L² norm of values on the points (their quadrature)."""
        return jnp.sqrt(norm2(r, self.weights))

    def initial(self, theta) -> tuple[Float[Array, " n"], Float[Array, ""]]:
        """``(û₀ − u₀, ‖û₀‖)`` on the points: θ₀'s error, exact since u₀ is known."""
        u = self.space.apply(theta, self.points)
        return u - self.equation.u0(self.points.T), self.norm(u)

    def fields(self, theta):
        """``(u, ∇u, Δu, f)`` of û_θ on the points, and ``(∇f, Δf)`` of f = L[û_θ] with ``hermite``."""
        def u_fn(p):
            return self.space.apply(theta, p)

        u, grad, lap = derivatives(u_fn, self.points)
        f = self.equation.rhs(u, grad, lap)
        if not self.hermite:
            return u, grad, lap, f, None, None
        _, grad_f, lap_f = derivatives(lambda p: operator(self.equation, u_fn, p), self.points)
        return u, grad, lap, f, grad_f, lap_f

    def __call__(self, theta0, theta1, dt) -> tuple[dict[str, Float[Array, " n"]], dict[str, Float[Array, ""]]]:
        return self.combine(self.fields(theta0), self.fields(theta1), dt)

    def combine(self, fields0, fields1, dt) -> tuple[dict[str, Float[Array, " n"]], dict[str, Float[Array, ""]]]:
        """The step's local terms from :meth:`fields` at both of its ends (the driver
        keeps a step's end fields as the next step's start: one evaluation per step)."""
        u0, g0, l0, f0, gf0, lf0 = fields0
        u1, g1, l1, f1, gf1, lf1 = fields1
        trapezoid = (u1 - u0) - dt / 2 * (f0 + f1)
        scalars = {"trapezoid_l2": self.norm(trapezoid), "u_l2": self.norm(u1),
                   "growth_rate": jnp.maximum(jnp.asarray(self.equation.growth_rate(u0, g0), jnp.float64),
                                              jnp.asarray(self.equation.growth_rate(u1, g1), jnp.float64))}
        if not self.hermite:
            return {"defect": trapezoid}, scalars
        # p(½) of the cubic Hermite interpolant, with its gradient and Laplacian.
        p = (u0 + u1) / 2 + dt / 8 * (f0 - f1)
        gp = (g0 + g1) / 2 + dt / 8 * (gf0 - gf1)
        lp = (l0 + l1) / 2 + dt / 8 * (lf0 - lf1)
        defect = (u1 - u0) - dt / 6 * (f0 + 4 * self.equation.rhs(p, gp, lp) + f1)
        return {"defect": defect}, {**scalars, "defect_l2": self.norm(defect)}


@dataclasses.dataclass
class ErrorEstimate:
    """``E_n`` (module docstring), advanced on the host step by step, with the state a
    checkpoint keeps: ``vector`` (the estimated error on the points, for the kinds that
    sum defects as vectors) and ``error`` (its norm, or the running triangle sum)."""

    kind: str
    weights: np.ndarray
    vector: np.ndarray
    error: float

    @classmethod
    def start(cls, kind: str, weights, e0) -> ErrorEstimate:
        """From θ₀'s error ``e0`` on the points (``weights``: their quadrature)."""
        weights, e0 = np.asarray(weights, np.float64), np.asarray(e0, np.float64)
        return cls(kind, weights, e0, float(np.sqrt(np.sum(weights * e0 * e0))))

    @property
    def vectorial(self) -> bool:
        return self.kind in ("hermite", "trapezoid")

    def advance(self, dt: float, scalars: dict[str, float], defect: np.ndarray) -> float:
        """``E_{n+1}`` from the step's ``scalars`` (the method's metrics and
        :class:`Defect`'s) and its ``defect`` vector; returns it."""
        growth = math.exp(scalars["growth_rate"] * dt)
        if self.vectorial:
            self.vector = growth * self.vector + np.asarray(defect, np.float64)
            self.error = float(np.sqrt(np.sum(self.weights * self.vector**2)))
        elif self.kind == "hermite_triangle":
            self.error = growth * self.error + scalars["defect_l2"]
        else:  # embedded: the integrator's estimate, plus the projection error on held-out points
            self.error = growth * self.error + scalars["local_error"] + math.sqrt(max(scalars["holdout_loss"], 0.0))
        return self.error


class CompiledEstimate:
    """A run's :class:`Defect`, compiled once from the method's state (``parameters``:
    its θ): the fields of a state (derivatives up to fourth order, evaluated once per
    accepted step: a step's end is the next one's start, kept here), the local terms of
    a step from the fields at both ends, and θ₀'s error against u₀."""

    def __init__(self, defect: Defect, kind: str, parameters: Callable, state: PyTree):
        def fields_of(s):
            return defect.fields(parameters(s))

        shapes = jax.eval_shape(fields_of, state)
        self.kind, self.weights = kind, np.asarray(defect.weights)
        self.fields = jax.jit(fields_of).lower(state).compile()
        self.combine = jax.jit(lambda a, b, dt: defect.combine(a, b, dt)).lower(shapes, shapes, 0.0).compile()
        self.initial = jax.jit(lambda s: defect.initial(parameters(s))).lower(state).compile()
        self._end: tuple[int, object] = (-1, None)  # (step, fields of its end state)

    def start(self, state) -> tuple[ErrorEstimate, float]:
        """The estimate at t = 0, from θ₀'s error (exact: u₀ is known), and ‖û₀‖²."""
        e0, norm0 = jax.device_get(self.initial(state))
        return ErrorEstimate.start(self.kind, self.weights, e0), float(norm0) ** 2

    def local(self, n: int, previous, state, dt: float) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Step n's local terms (:meth:`Defect.combine`), from ``previous`` to ``state``."""
        step, start = self._end
        if step != n - 1:
            start = self.fields(previous)
        self._end = (n, self.fields(state))
        vectors, scalars = jax.device_get(self.combine(start, self._end[1], dt))
        return vectors, {k: float(v) for k, v in scalars.items()}
