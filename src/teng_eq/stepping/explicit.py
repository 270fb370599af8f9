"""TENG's explicit steps: a Runge–Kutta tableau with a zero diagonal
(:class:`~teng_eq.stepping.tableau.Tableau`, walked by :func:`rk_slopes`) whose stages are
TENG fits (:class:`TENGStep`).

An explicit RK scheme with tableau ``(A, b)`` advances ``u_t`` by

    u_{t+Δt} = u_t + Δt Σⱼ bⱼ kⱼ,   kⱼ = L[u⁽ʲ⁾],   u⁽ʲ⁾ = u_t + Δt Σ_{i<j} A_{ji} kᵢ.

TENG never forms ``u⁽ʲ⁾`` as a function: it *fits* a network to each stage target
(Subroutine ``TENG_stepper``) and evaluates the next slope ``k`` on that fitted
network, so L is only ever applied to a network, never to ``L[û]`` itself.
With ``s`` stages a step makes ``s`` fits; fit j starts from the parameters of fit
j−1 (``warm_start: previous``, the paper's), or from their extrapolation in time
(``extrapolate``, :class:`TENGStep`):

* **TENG-Euler** (``A = []``, ``b = [1]``): one fit to ``û_t + Δt L[û_t]``.
* **TENG-Heun** (``A = [[1]]``, ``b = [½, ½]``): Algorithm ``TENG_Heun``:
  θ_temp fits ``û_t + Δt k₁``; θ_{t+Δt} fits ``û_t + Δt (k₁ + k₂)/2`` starting
  from θ_temp, with ``k₂ = L[û_{θ_temp}]``.
* **TENG-RK4** (classical RK4): four fits, to ``û_t + Δt/2 k₁``, ``û_t + Δt/2 k₂``,
  ``û_t + Δt k₃`` and ``û_t + Δt (k₁ + 2k₂ + 2k₃ + k₄)/6``, each ``kⱼ = L[û_{θⱼ₋₁}]``.

Every target is built from ``û_t`` on the quadrature grid, except on the rows on the
domain's boundary (``boundary``), where it is the part's data at the stage's time
(:meth:`~teng_eq.domains.base.Domain.boundary_data`: g on a Dirichlet part, whose rows are
values; h or r on a Neumann or Robin part, whose rows are αû + β∂ₙû, :mod:`teng_eq.fit.stage`);
the first fit of a step runs at most ``iters`` iterations (its first drawing ``subsample_first``
parameters), the later fits at most ``iters_later`` (exactly these under the ``fixed`` stopping policy of
:mod:`teng_eq.fit.stage`). The step's final fit is checked on held-out points
(:mod:`teng_eq.stepping.base`) against the same target function ``û_t + Δt Σⱼ bⱼ kⱼ``, its
slopes evaluated there too.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from teng_eq.equations import Equation, network_operator
from teng_eq.fit.results import StepRecord
from teng_eq.fit.stage import StageSolver
from teng_eq.stepping.base import Step
from teng_eq.stepping.tableau import Tableau


def combine(y0, dt: float, coeffs, slopes):
    """``y₀ + Δt Σᵢ cᵢ kᵢ`` (zero coefficients skipped)."""
    return y0 + dt * sum(c * k for c, k in zip(coeffs, slopes) if c != 0.0)


def rk_slopes(tableau: Tableau, dt: float, y0, k1, slope: Callable, carry):
    """The slopes of an explicit tableau walked from ``y₀`` with first slope ``k₁``:
    ``k_{j+1}, carry = slope(j, y₀ + Δt Σ_{i≤j} a_{j+1,i} kᵢ, carry)`` for j = 1 … s−1,
    ``carry`` what each stage hands the next (TENG: the fit's θ and the stages' logs);
    returns ``(slopes, carry)``. The step is then ``combine(y₀, Δt, b, slopes)``: TENG
    walks the tableau on function values (``slope`` fits a network to the stage value
    first), TDVP on θ itself."""
    slopes = [k1]
    for j, row in enumerate(tableau.lower, start=1):
        k, carry = slope(j, combine(y0, dt, row, slopes), carry)
        slopes.append(k)
    return slopes, carry


class TENGStep(Step):
    """One explicit TENG step (:class:`~teng_eq.stepping.base.Step`'s fields, and): the
    stage ``solver`` (network, quadrature nodes, least squares, stopping policy), the
    ``equation``, the rows of the nodes on its boundary (``boundary``, or None), whether its
    points move each step (``moving``: the domain's ``fresh``) and ``conserve`` (below).

    **Warm start** (``warm_start``). Fit j's target approximates ``u(t + cⱼΔt)``, with
    the node ``cⱼ = Σᵢ A_{ji}`` (1 for the final fit). Under ``previous`` it starts from
    the parameters of the fit before it (θ_t for the first), a start whose residual is
    O(Δt). Under ``extrapolate`` it starts from

        θ_t + cⱼ Δt θ̇,

    with the latest rate known: for the first fit β times the previous step's
    ``θ̇ = (θ_t − θ_{t−Δt'})/Δt'`` (``rate``, zero on the first step; β = ``warm_rate``),
    for the others ``θ̇ = (θ⁽ʲ⁻¹⁾ − θ_t)/(c_{j−1}Δt)`` from the fit before. Since
    ``û_{θ+δ} = û_θ + J δ + O(|δ|²)``, the start's residual is O(Δt²) (for β = 1; else
    (1 − β)·O(Δt)), at no cost (no operator or Jacobian is evaluated for it), so the
    same iterations end at a smaller loss. β < 1 because the fits never correct the
    components of θ̇ that do not move û on the nodes (most of θ: more parameters than
    nodes): carried on at β = 1 they add up step after step (Burgers at Δt = 0.001 blew
    up between t = 0.2 and 0.5), at β < 1 they decay geometrically. Where a fit's node
    equals the one before (Heun's final fit after its predictor), both starts coincide.

    With an embedded error estimate in the tableau (``b_error``), the step also
    reports ``local_error`` = ‖Δt Σⱼ b_errorⱼ kⱼ‖_{L²} on the quadrature nodes (the
    slopes the step computed anyway; with FSAL one more, ``L[û_{θ_{t+Δt}}]``) and
    ``u_l2`` = ‖target‖_{L²}, the scale of a relative tolerance: what the step-size
    controller (:mod:`teng_eq.run.controller`) reads. Boundary rows are left
    out of both (their target is the boundary data, not the PDE's). ``expected``:
    the step's expected local error, the stages' floor under the ``local_error``
    stopping policy (:mod:`teng_eq.fit.stage`).

    ``conserve`` (a system that declares invariants, ``method.conserve``): the step's θ is
    then projected back onto the invariants of the step's start (:func:`project`), their
    integrals by the trapezoid rule of the box's ``conserve``^d grid; it reports
    ``invariant_gap``, the largest relative change the fits made before the projection.
    """

    solver: StageSolver
    equation: Equation
    boundary: Bool[Array, " n"] | None = eqx.field(default=None, kw_only=True)
    moving: bool = eqx.field(static=True, default=False, kw_only=True)
    conserve: int | None = eqx.field(static=True, default=None, kw_only=True)

    def moved(self, key: PRNGKeyArray) -> TENGStep:
        """This step on its points moved as the domain moves them (a sampled cube: one random
        shift modulo the periods, :meth:`~teng_eq.domains.sampled.SampledCube.move`; the
        held-out points by another): fresh points each step (``moving``), so that no error
        hides between fixed nodes."""
        move = self.equation.domain.move
        fits, held = jax.random.split(key)
        out = eqx.tree_at(lambda s: s.solver.points, self, move(self.solver.points, fits))
        if self.holdout is None:
            return out
        return eqx.tree_at(lambda s: s.holdout.points, out, move(self.holdout.points, held))

    def embedded(self, theta, slopes: list, target, dt, t) -> dict[str, Float[Array, ""]]:
        """``local_error`` and ``u_l2`` (class docstring) of the step that ended at θ with
        ``slopes`` towards ``target`` (both on the nodes and the held-out points)."""
        n = self.solver.points.shape[0]
        if self.tableau.fsal:
            slopes = [*slopes, network_operator(self.equation, self.solver.space, theta, self.solver.points,
                                                t + dt)]
        interior = 1.0 if self.boundary is None else jnp.where(self.boundary, 0.0, 1.0)
        err = combine(0.0, dt, self.tableau.b_error, [k[:n] for k in slopes])
        return {"local_error": jnp.sqrt(self.solver.norm2(interior * err)),
                "u_l2": jnp.sqrt(self.solver.norm2(interior * target[:n]))}

    def __call__(
        self, theta: Float[Array, " params"], key: PRNGKeyArray, dt: Float[Array, ""] | float | None = None,
        expected: Float[Array, ""] | None = None, rate: Float[Array, " params"] | None = None,
        t: Float[Array, ""] | float = 0.0,
    ) -> tuple[Float[Array, " params"], StepRecord]:
        """θ_{t+Δt} and the step's record from θ_t (:class:`~teng_eq.stepping.base.Step`;
        slope j at ``t + cⱼΔt``); ``moving``: on points of its own (:meth:`moved`)."""
        if self.moving:
            key, move = jax.random.split(key)
            return self.moved(move).on_points(theta, key, dt, expected, rate, t)
        return self.on_points(theta, key, dt, expected, rate, t)

    def on_points(self, theta, key, dt, expected, rate, t) -> tuple[Float[Array, " params"], StepRecord]:
        """The step of ``__call__`` on this step's points as they are."""
        space, n, theta_t = self.solver.space, self.solver.points.shape[0], theta
        dt = self.dt if dt is None else dt
        nodes = [sum(row) for row in self.tableau.lower] + [1.0]  # cⱼ of fit j; the final fit's is 1
        # Targets on the nodes and the held-out points at once: one pass each.
        points, on_boundary = self.solver.points, self.boundary
        if self.holdout is not None:
            points = jnp.concatenate([points, self.holdout.points])
            if on_boundary is not None:
                on_boundary = jnp.concatenate([on_boundary, self.holdout.boundary])
        keys = jax.random.split(key, self.tableau.stages)

        def fit(j: int, target, fitted):
            """Stage j (from 0) fitted to ``target`` (the boundary data on its rows), from
            ``fitted = (θ of the fit before, logs so far)``: ``(target, (θ, logs))``."""
            previous, logs = fitted
            if on_boundary is not None:
                target = jnp.where(on_boundary, self.equation.domain.boundary_data(points, t + nodes[j] * dt),
                                   target)
            start = self.start(theta_t, previous, nodes[j], nodes[j - 1] if j > 0 else 0.0, dt, rate)
            iters, first = self.caps(j == 0)
            fitted, log = self.solver.stage(start, target[:n], keys[j], iters, first, self.subsample,
                                            expected)
            return target, (fitted, (*logs, log))

        def slope(j: int, target, fitted):
            _, fitted = fit(j - 1, target, fitted)
            return network_operator(self.equation, space, fitted[0], points, t + nodes[j - 1] * dt), fitted

        u_t = space.apply(theta_t, points)
        k1 = network_operator(self.equation, space, theta_t, points, t)
        slopes, fitted = rk_slopes(self.tableau, dt, u_t, k1, slope, (theta_t, ()))
        target, (theta, logs) = fit(self.tableau.stages - 1, combine(u_t, dt, self.tableau.b, slopes), fitted)
        conserved = {}
        if self.conserve is not None:
            def integrals(th):
                values = self.equation.integrals(space.network(th).vector, self.conserve)
                return jnp.stack([values[name] for name in sorted(values)])

            start = integrals(theta_t)
            conserved = {"invariant_gap": jnp.max(jnp.abs(integrals(theta) / start - 1.0))}
            theta = project(integrals, theta, start)
        embedded = {} if self.tableau.b_error is None else self.embedded(theta, slopes, target, dt, t)
        return theta, self.report(space, theta, logs, target[n:], **embedded, **conserved)


def project(integrals: Callable, theta: Float[Array, " params"], values: Float[Array, " k"],
            iterations: int = 2) -> Float[Array, " params"]:
    """θ moved the least (in the Euclidean norm of the parameters) to where the invariants
    ``integrals(θ)`` (k of them) take ``values``: the standard projection of geometric
    integration (Hairer, Lubich & Wanner, *Geometric Numerical Integration*, IV.4), by
    Newton's iteration on the Lagrange conditions linearised at the current θ,

        θ ← θ − Jᵀ (J Jᵀ)⁻¹ (I(θ) − I₀),   J = ∂I/∂θ (k × params, reverse mode),

    each iteration squaring the gap (two take 1e-7 to round-off). The change to û is
    J_û Jᵀλ, the invariants' gradients smoothed by the network's tangent kernel."""
    for _ in range(iterations):
        jac = jax.jacrev(integrals)(theta)
        theta = theta - jac.T @ jnp.linalg.solve(jac @ jac.T, integrals(theta) - values)
    return theta
