"""Implicit and IMEX TENG steps: diagonally implicit Runge–Kutta schemes
(:class:`~teng_eq.stepping.tableau.Tableau`) whose implicit stages are solved in function
space and fitted by TENG's own stage solver (:class:`ImplicitStage`).

A DIRK scheme with tableau ``(A, b)``, A lower triangular, advances ``u_t`` by

    u⁽ʲ⁾ = rⱼ + Δt a_jj F[u⁽ʲ⁾],   rⱼ = u_t + Δt Σ_{i<j} a_ji kᵢ,   kⱼ = F[u⁽ʲ⁾],

where F is the whole operator L (implicit TENG) or its stiff part S (IMEX: the rest
N = L − S is then explicit, with a second, strictly lower tableau Â: rⱼ gains
``Δt Σ_{i<j} â_ji nᵢ``, nᵢ = N[u⁽ⁱ⁾] on the network of stage i). A stage with a_jj = 0
is explicit: kⱼ = F[u_θ] on the network it starts from, no fit. An implicit stage's
slope is taken from its equation, ``kⱼ = (u⁽ʲ⁾ − rⱼ)/(Δt a_jj)``, with u⁽ʲ⁾ the
stage's solution on the nodes (what its fit aimed at), not by applying F to the fitted
network: on a stiff F the fit's small error, amplified by F's fastest modes, would
otherwise enter every later stage (the usual practice of stiff solvers).

Every scheme here is *stiffly accurate* (b is the last row of A, by construction), so the
step's network is the last stage's: no final fit.

**Why not a nonlinear least squares in θ** (``min_θ ‖u_θ − h F[u_θ] − r‖²`` by
optimistix's Gauss–Newton, its Jacobian ``(I − hF′)∂u_θ/∂θ_S`` by autodiff): measured
on the biharmonic example (32² nodes, 2 cores), one Gauss–Newton step on 384 drawn
parameters costs 30 s (forward-mode through fourth derivatives, one pass per parameter:
the whole explicit RK4 step costs 0.2 s), and with that Jacobian's F′ applied spectrally
instead (cheap) the steps diverged (SDIRK2 at Δt = 0.02: 6e-5, 1.4e-3, 6e-2 over three
steps): the residual weights each mode by (1 + hκ|k|⁴), so the fit chases the modes
above the nodes' resolution that the grid's Jacobian cannot see. Solving the stage in
function space and fitting in plain L² keeps TENG's stage (and its cost) as it is.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from teng_eq.equations import Equation, network_operator, on_rows, select
from teng_eq.estimate.transport import Transport
from teng_eq.fit.stage import StageSolver
from teng_eq.stepping.base import Step
from teng_eq.stepping.box import BoxSolve
from teng_eq.stepping.explicit import combine


class ImplicitStage(eqx.Module):
    """Solves an implicit stage ``u − h F[u] = r`` on the periodic quadrature grid and fits
    the network to its solution u⁺ by TENG's own stage solver (plain L², drawn parameter
    subsets: :meth:`teng_eq.fit.stage.StageSolver.stage`), so that a stiff F never weights the
    fit towards modes the nodes cannot see.

    * F linear with constant coefficients (``symbol`` given: every IMEX stiff part, and L
      of such an equation): ``u⁺ = (I − hΛ)⁻¹ r``, a Fourier multiplier, Λ(k) = Σ_α a_α
      (ik)^α the symbol of F from its coefficients by autodiff of the operator
      (:class:`teng_eq.estimate.transport.Transport`); one fit. F of a network is then never
      evaluated pointwise: its fourth derivatives at the nodes would also see the
      network's content above the grid's band, and a stiff F multiplies that by κ|k|⁴
      (measured: SDIRK2 on the biharmonic at 16² nodes blew up from 9e-4 to 3e3 in two
      steps when the stage's residual was taken on the network).
    * otherwise ``newton`` passes of a chord Newton iteration in function space,
      ``u⁺ = u_θ − (I − hF′)⁻¹(u_θ − hF[u_θ] − r)`` with the exact residual (the operator
      on the network at the nodes), each followed by a fit. F′ = Σ_α a_α(x) ∂^α is the
      linearised operator at the stage's start (its coefficients by autodiff,
      :meth:`teng_eq.estimate.transport.Transport.coefficients`; spectral derivatives on the grid),
      and the correction is solved by lineax's GMRES, preconditioned by (I − hΛ̄)⁻¹ with
      Λ̄ the symbol of F′'s mean coefficients. The whole F′, not Λ̄ alone: where F′ has a
      variable part of zero mean (Kuramoto–Sivashinsky's advection by ∇u) Λ̄ drops it,
      and the passes then contract slowly (measured in 2-D: SDIRK3 at Δt = 0.25 ended at
      1.8e-2 after two passes a stage, SDIRK4 at 0.5 diverged in its second step after
      eight; with the whole F′, 9.3e-4 after two and 4.2e-4 after three).

    The stage's value on the nodes is the last u⁺ (what the fit aimed at), from which its
    slope ``k = (u⁺ − r)/h`` is taken: the fit's own error never enters a later stage
    divided by h.

    **Systems** (m components, the rows ``(x, c)`` component after component, as explicit
    TENG's fits see them): F′ couples the components, ``(F′v)ᵢ = Σⱼ Σ_α a_{ijα}(x) ∂^α vⱼ``
    (:class:`~teng_eq.estimate.transport.SystemTransport`), so Λ(k) is an m × m matrix per wave
    vector and (I − hΛ(k))⁻¹ acts on each mode's m values (rotating diffusion:
    Λ = [[−κ|k|², −ω], [ω, −κ|k|²]]; an IMEX stiff part νᵢΔuᵢ: diagonal); the chord's GMRES
    runs on the stacked components, preconditioned by the matrix symbol of the mean
    coefficients. The stage's fit is TENG's own on every row at once.
    """

    solver: StageSolver
    equation: Equation
    transport: Transport
    newton: int = eqx.field(static=True)
    imex: bool = eqx.field(static=True, default=False)
    # Λ(k) on the grid's wave numbers, where F is linear with constant coefficients
    symbol: Array | None = None

    @property
    def part(self):
        """The operator the stages take implicitly: S (IMEX) or L."""
        return implicit_operator(self.equation, self.imex)

    @property
    def components(self) -> int:
        """m, a system's components (0 for a scalar equation)."""
        return len(self.equation.components)

    def implicit_part(self, theta, t):
        """F[u_θ] on the nodes: the equation's stiff part S under IMEX, else L (spectrally on
        the grid values where F is linear with constant coefficients: class docstring)."""
        if self.symbol is not None:
            return self.multiply(self.symbol, self.solver.values(theta))
        return network_operator(self.part, self.solver.space, theta, self.solver.points, t)

    def explicit_part(self, theta, t):
        """N[u_θ] = L[u_θ] − S[u_θ] on the nodes (IMEX; S on the network here, as N's own part)."""
        return explicit_rest(self.equation, self.part, self.solver, theta, t)

    def norm2(self, r):
        """The fits' quadrature of r² (every row a grid node)."""
        return self.solver.norm2(r)

    def interpolate(self, values, points):
        """The stage's grid ``values`` at ``points``: trigonometric (:func:`interpolate`); a
        system's component c at its rows ``(x, c)``."""
        shape, periods, m = self.transport.shape, self.equation.periods, self.components
        if not m:
            return interpolate(values, shape, periods, points)
        each = values.reshape(m, -1)
        return select([interpolate(v, shape, periods, points[:, :-1]) for v in each], points[:, -1])

    def multiply(self, factor, values):
        """The Fourier multiplier ``factor`` (on the grid's wave numbers) applied to grid
        ``values``: a number per wave vector, or a system's m × m matrix (m, m, n) acting on
        each mode's m values."""
        shape = self.transport.shape
        if factor.ndim == 1:
            return jnp.fft.ifftn(jnp.fft.fftn(values.reshape(shape)) * factor.reshape(shape)).real.ravel()
        m, axes = self.components, tuple(range(1, 1 + len(shape)))
        hat = jnp.fft.fftn(values.reshape(m, *shape), axes=axes).reshape(m, -1)
        return jnp.fft.ifftn(jnp.einsum("ijn,jn->in", factor, hat).reshape(m, *shape), axes=axes).real.ravel()

    def resolvent(self, h, symbol):
        """(I − hΛ(k))⁻¹ on the grid's wave numbers: 1/(1 − hΛ), or a system's inverse matrices."""
        if symbol.ndim == 1:
            return 1.0 / (1.0 - h * symbol)
        blocks = jnp.eye(self.components) - h * jnp.moveaxis(symbol, -1, 0)  # (n, m, m)
        return jnp.moveaxis(jnp.linalg.inv(blocks), 0, -1)

    def network(self, theta) -> Callable:
        """u_θ as the linearisation reads it: at the rows (a scalar), every component at spatial points."""
        space = self.solver.space
        return (lambda p: space.vector(theta, p)) if self.components else (lambda p: space.apply(theta, p))

    def chord(self, a: Float[Array, "alphas n"], h, structure) -> Callable:
        """r ↦ (I − hF′)⁻¹ r for F′ = Σ_α a_α ∂^α on the grid (``structure``: r's shape and
        dtype; a system's a: (m, m, alphas, n), r its rows) by GMRES, preconditioned by the
        Fourier multiplier (I − hΛ̄)⁻¹."""
        inverse = self.resolvent(h, self.transport.symbol(a)[0])
        matrix = lx.FunctionLinearOperator(lambda v: v - h * self.transport.apply(a, v), structure)
        preconditioner = lx.FunctionLinearOperator(lambda v: self.multiply(inverse, v), structure)
        gmres = lx.GMRES(rtol=1e-10, atol=1e-14, max_steps=200)

        def solve(r):
            options = {"preconditioner": preconditioner}
            return lx.linear_solve(matrix, r, gmres, options=options, throw=False).value

        return solve

    def __call__(self, theta, rhs, h, t, key: PRNGKeyArray, iters: tuple[int, int], n_first: int,
                 n_rest: int):
        """``(θ, u⁺, logs, residual)``: the fitted θ, the stage's values on the nodes, one
        :class:`~teng_eq.fit.stage.StageLog` per fit and the relative residual ‖u_θ − hF[u_θ] − r‖²/‖r‖²
        before the last fit (0 where F is a multiplier: u⁺ solves the stage exactly)."""
        if self.symbol is not None:
            target = self.multiply(self.resolvent(h, self.symbol), rhs)
            theta, log = self.solver.stage(theta, target, key, iters[0], n_first, n_rest)
            return theta, target, [log], jnp.zeros((), rhs.dtype)
        space, points = self.solver.space, self.solver.points
        a = self.transport.coefficients(self.part, self.network(theta), points, t)
        correction = self.chord(a, h, jax.ShapeDtypeStruct(rhs.shape, rhs.dtype))
        logs, keys = [], jax.random.split(key, self.newton)
        for m in range(self.newton):
            u = space.apply(theta, points)
            r = u - h * self.implicit_part(theta, t) - rhs
            target = u - correction(r)
            theta, log = self.solver.stage(theta, target, keys[m], iters[m > 0],
                                           n_first if m == 0 else n_rest, n_rest)
            logs.append(log)
        return theta, target, logs, self.solver.norm2(r) / self.solver.norm2(rhs)


def explicit_rest(equation: Equation, part, solver: StageSolver, theta, t):
    """N[u_θ] = L[u_θ] − S[u_θ] on the solver's points, S = ``part`` on the network."""
    points = solver.points
    return network_operator(equation, solver.space, theta, points, t) - network_operator(
        part, solver.space, theta, points, t)


class BoxStage(eqx.Module):
    """:class:`ImplicitStage` on a box with sides: ``u − hF[u] = r`` solved on the interior
    nodes with the sides' conditions at the stage's time by ``box``
    (:class:`~teng_eq.stepping.box.BoxSolve`: F linear with constant coefficients, the
    equation's L or, under IMEX, its stiff part S), then one fit to u⁺ inside and the sides'
    data on their rows (values on Dirichlet sides, αû + β∂ₙû on the others: the target the
    explicit steps' fits have there). Vectors run over every fit row, interior then sides; the
    side rows of r and of a slope are never read (a stage's sides take the data), and the
    norms (``local_error``, ``u_l2``) are the interior's. An explicit stage's F (a_jj = 0) is
    the same F on the network's nodal values, with the sides' data at its time: the
    operator the solve inverts, not F on the network (whose content between the nodes a
    stiff F would amplify)."""

    solver: StageSolver
    equation: Equation
    box: BoxSolve
    imex: bool = eqx.field(static=True, default=False)

    @property
    def part(self):
        return implicit_operator(self.equation, self.imex)

    def data(self, t):
        """The sides' data at t on the fit quadrature's side rows."""
        return self.equation.domain.boundary_data(self.solver.points[self.box.size:], t)

    def implicit_part(self, theta, t):
        """F[u_θ] on the interior nodes (the box's F of the nodal values; 0 on the side rows)."""
        n, points = self.box.size, self.solver.points
        f = self.box.apply(self.solver.space.apply(theta, points[:n]), self.data(t))
        return jnp.concatenate([f, jnp.zeros(points.shape[0] - n, f.dtype)])

    def explicit_part(self, theta, t):
        """N[u_θ] = L[u_θ] − S[u_θ] on the nodes (IMEX), on the network."""
        return explicit_rest(self.equation, self.part, self.solver, theta, t)

    def norm2(self, r):
        """The quadrature of r² over the interior rows."""
        n = self.box.size
        return self.solver.norm2(jnp.concatenate([r[:n], jnp.zeros(r.shape[0] - n, r.dtype)]))

    def interpolate(self, values, points):
        """The interior values at ``points`` (:meth:`~teng_eq.stepping.box.BoxSolve.interpolate`)."""
        return self.box.interpolate(values[: self.box.size], points)

    def __call__(self, theta, rhs, h, t, key: PRNGKeyArray, iters: tuple[int, int], n_first: int,
                 n_rest: int):
        """As :meth:`ImplicitStage.__call__`; the residual is 0 (u⁺ solves the stage on the nodes)."""
        data = self.data(t)
        target = jnp.concatenate([self.box.solve(h, rhs[: self.box.size], data), data])
        theta, log = self.solver.stage(theta, target, key, iters[0], n_first, n_rest)
        return theta, target, [log], jnp.zeros((), rhs.dtype)


def implicit_operator(equation: Equation, imex: bool):
    """The operator F the implicit stages take: the equation's stiff part S (IMEX) or L."""
    return _StiffPart(equation) if imex else equation


def constant_symbol(equation: Equation, imex: bool, transport: Transport, points):
    """Λ(k) of the implicit operator F (:func:`implicit_operator`) if it is linear with
    constant coefficients, else None: an IMEX stiff part is linear by its contract, L where
    the equation says so; autonomous, and its coefficients a_α(x) of F′ the same at every
    point. For a linear F they do not depend on u: taken at u = 0, once, on the host."""
    if not ((imex or equation.linear) and equation.autonomous):
        return None
    m = len(equation.components)
    def zero(p):  # u = 0: a system's every component at spatial points, a scalar's at the rows
        return jnp.zeros((p.shape[0], m) if m else p.shape[0], p.dtype)

    a = np.asarray(transport.coefficients(implicit_operator(equation, imex), zero, jnp.asarray(points), 0.0))
    mean = a.mean(axis=-1, keepdims=True)
    if np.max(np.abs(a - mean)) > 1e-12 * max(1.0, np.max(np.abs(mean))):
        return None
    return jnp.asarray(transport.symbol(a)[0])


def box_solve(equation: Equation, imex: bool, n: int) -> BoxSolve:
    """The :class:`~teng_eq.stepping.box.BoxSolve` of the implicit operator F on the equation's
    box (n nodes per axis), F's coefficients by autodiff (as :func:`constant_symbol`'s, on a
    few interior points); a ``ValueError`` saying why where F is not ``c + Σ_d (b_d ∂_d +
    a_d ∂²_d)`` with constant coefficients (nonlinear, time-dependent, varying in x, mixed
    or higher derivatives: what the box's stage solve does not cover)."""
    if not ((imex or equation.linear) and equation.autonomous):
        raise ValueError("it is not linear and autonomous (a Newton solve on a box is not built)")
    domain = equation.domain
    transport = Transport(domain.lengths, (1,) * domain.dim, equation.order)
    points = jnp.asarray(domain.evaluation(5).points)
    a = np.asarray(transport.coefficients(implicit_operator(equation, imex),
                                          lambda p: jnp.zeros(p.shape[0], p.dtype), points, 0.0))
    mean = a.mean(axis=1)
    tol = 1e-12 * max(1.0, np.max(np.abs(mean)))
    if np.max(np.abs(a - mean[:, None])) > tol:
        raise ValueError("its coefficients vary in x")
    terms = {alpha: value for alpha, value in zip(transport.alphas, mean)}
    dim, unit = domain.dim, lambda d, k: tuple(k if i == d else 0 for i in range(dim))  # noqa: E731
    first = [terms.get(unit(d, 1), 0.0) for d in range(dim)]
    second = [terms.get(unit(d, 2), 0.0) for d in range(dim)]
    known = {unit(0, 0)} | {unit(d, k) for d in range(dim) for k in (1, 2)}
    if any(abs(v) > tol for alpha, v in terms.items() if alpha not in known):
        raise ValueError("it has mixed or higher than second derivatives")
    return BoxSolve(domain, n, terms[unit(0, 0)], first, second)


def interpolate(values: Float[Array, " n"], shape: tuple[int, ...], periods, points: Float[Array, "m dim"]):
    """The trigonometric interpolant of grid ``values`` (a periodic grid of ``shape`` from the
    origin, flattened 'ij') at ``points``, one axis at a time (m·n work, no m × n matrix)."""
    coeffs = jnp.fft.fftn(values.reshape(shape)) / values.size
    out = None
    for i, (n, period) in enumerate(zip(shape, periods)):
        k = 2 * jnp.pi / period * jnp.fft.fftfreq(n, 1.0 / n)
        phase = jnp.exp(1j * points[:, i : i + 1] * k[None, :])  # (m, n_i)
        out = (jnp.einsum("a...,ma->m...", coeffs, phase) if out is None
               else jnp.einsum("ma...,ma->m...", out, phase))
    return out.real


class _StiffPart:
    """An equation's ``stiff`` part S as an operator (for :func:`~teng_eq.equations.base.operator`;
    a system's on its rows, and its fields for the linearisation)."""

    def __init__(self, equation):
        self.equation = equation
        self.components = equation.components

    def operator(self, u, t):
        return self.equation.stiff(u, t)

    def fields(self, fn, points):
        return self.equation.fields(fn, points)

    def operator_rows(self, fn, points, t, vector=None):
        return on_rows(self.equation, self.equation.stiff, fn, points, t, vector)


class ImplicitTENGStep(Step):
    """One implicit or IMEX TENG step (module docstring; :class:`~teng_eq.stepping.base.Step`'s
    fields, its ``tableau`` diagonally implicit) and the implicit stages' solver ``stage``
    (:class:`ImplicitStage`). The caps and drawn parameters of the step's first fit are its
    first implicit stage's.

    **Warm start**: an implicit stage at node cⱼ starts from ``θ_t + cⱼ Δt θ̇``, θ̇ the
    latest rate known: from the step's previous implicit stage ``(θᵢ − θ_t)/(cᵢΔt)``, or
    β times the previous step's (``rate``; β = ``warm_rate``) — as explicit TENG's
    ``extrapolate``; under ``previous`` from the stage before (θ_t for the first).

    With an embedded estimate in the tableau the step reports ``local_error`` (its
    ``Δt Σ b_errorⱼ kⱼ`` on the nodes) and ``u_l2`` (‖u⁽ˢ⁾‖), what ``dt=auto``'s controller reads.

    **Held-out check**: the final network on the held-out points against the step's value
    u⁽ˢ⁾ on the nodes carried there by the stage's interpolation: trigonometric on a periodic
    grid (:func:`interpolate`), polynomial on a box (:class:`BoxStage`).
    """

    stage: ImplicitStage | BoxStage

    @property
    def equation(self) -> Equation:
        return self.stage.equation

    @property
    def solver(self) -> StageSolver:
        return self.stage.solver

    def __call__(self, theta, key: PRNGKeyArray, dt=None, expected=None, rate=None, t=0.0):
        """θ_{t+Δt} and the step's record (``expected`` is not used: no ``local_error`` policy)."""
        space, stage, tab, theta_t = self.solver.space, self.stage, self.tableau, theta
        dt = self.dt if dt is None else dt
        A, E, c = tab.matrix, (tab.imex_matrix if tab.imex else None), tab.nodes
        u_t = space.apply(theta_t, self.solver.points)
        keys = jax.random.split(key, tab.stages)
        slopes, rest, logs, residuals, current, c_prev = [], [], [], [], theta_t, 0.0
        value = u_t
        for j in range(tab.stages):
            rhs = combine(u_t, dt, A[j, :j], slopes)
            if E is not None:
                rhs = combine(rhs, dt, E[j, :j], rest)
            h = dt * A[j, j]
            if A[j, j] != 0.0:
                iters, sub = self.caps(not logs)
                current, value, passes, residual = stage(self.start(theta_t, current, c[j], c_prev, dt, rate),
                                                         rhs, h, t + c[j] * dt, keys[j],
                                                         (iters, self.iters_later), sub, self.subsample)
                logs.extend(passes)
                residuals.append(residual)
                slopes.append((value - rhs) / h)
                c_prev = c[j]
            else:
                slopes.append(stage.implicit_part(current, t + c[j] * dt))
            if E is not None and j < tab.stages - 1:  # the last stage's N is not used
                rest.append(stage.explicit_part(current, t + c[j] * dt))
        embedded = {}
        if tab.b_error is not None:  # the step's local error and scale, as the explicit steps report them
            embedded = {"local_error": jnp.sqrt(stage.norm2(combine(0.0, dt, tab.b_error, slopes))),
                        "u_l2": jnp.sqrt(stage.norm2(value))}
        held = None if self.holdout is None else stage.interpolate(value, self.holdout.points)
        return current, self.report(space, current, logs, held, newton_residual=jnp.sqrt(residuals[-1]),
                                    **embedded)
