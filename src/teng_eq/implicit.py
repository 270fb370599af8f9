"""Implicit and IMEX TENG steps: diagonally implicit Runge–Kutta schemes
(:class:`DIRKTableau`) whose implicit stages are solved in function space and fitted by
TENG's own stage solver (:class:`ImplicitStage`).

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

from teng_eq.equations import Equation, network_operator, operator
from teng_eq.estimate import Transport
from teng_eq.grid import Quadrature
from teng_eq.integrators import (
    _CONDITIONS,
    _order_conditions,
    combine,
    held_out,
    step_record,
    warm_start_point,
)
from teng_eq.stage import StageSolver


class DIRKTableau(eqx.Module):
    """A diagonally implicit Runge–Kutta tableau, stiffly accurate: ``a[j]`` the
    coefficients of stage j+1 (j+1 of them, the diagonal last), ``b`` = the last row.
    With ``explicit`` (strictly lower, s × s: row j the coefficients of stages < j) it is
    an IMEX pair, stiffly accurate in both parts (the step is u⁽ˢ⁾, the last rows are
    the weights b and b̂), as the pairs of Ascher, Ruuth & Spiteri (1997).

    It checks itself: rows of their lengths, diagonal ≥ 0 (the stage equations have
    their solutions for small Δt), Butcher's order conditions to
    ``order`` for the implicit tableau and, for a pair, for the explicit one and the
    coupling conditions of order 2 (bᵀĉ = b̂ᵀc = ½); A-stability of the
    implicit part on the imaginary axis (``R(iy)`` for y up to 10⁴, R its stability
    function ``1 + z bᵀ(I − zA)⁻¹𝟙``), and ``stiff_decay = |R(−∞)|`` is recorded
    (0: L-stable).

    **Embedded error estimate** (optional, as :class:`~teng_eq.integrators.ButcherTableau`'s):
    ``err = Δt Σⱼ b_errorⱼ kⱼ``, the step minus an embedded solution of weights
    ``b − b_error``, of order ``error_order`` in Δt (checked: the embedded solution
    satisfies the conditions of order ``error_order − 1`` and fails one of
    ``error_order``). The slopes are the stages' own, so a stiff mode's estimate is damped
    as the stages damp it.
    """

    name: str = eqx.field(static=True)
    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)
    explicit: tuple[tuple[float, ...], ...] | None = eqx.field(static=True, default=None)
    b_error: tuple[float, ...] | None = eqx.field(static=True, default=None)
    error_order: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        s = len(self.a)
        if any(len(row) != j + 1 for j, row in enumerate(self.a)):
            raise ValueError(f"tableau {self.name!r}: row j of a must hold j+1 coefficients")
        A = self.matrix
        if np.any(np.diag(A) < 0):
            raise ValueError(f"tableau {self.name!r}: a negative diagonal entry")
        for label, M in (("implicit", A), *((("explicit", self.explicit_matrix),) if self.explicit else ())):
            # Stiffly accurate: the weights are the last row.
            for k, (value, exact) in enumerate(_order_conditions(M, M[-1])[: _CONDITIONS[self.order]]):
                if abs(value - exact) > 1e-12:
                    raise ValueError(f"tableau {self.name!r} ({label}) is not of order {self.order}: order "
                                     f"condition {k + 1} gives {value:.6g}, not {exact:.6g}")
        if self.explicit is not None:
            E = self.explicit_matrix
            if E.shape != (s, s) or np.any(np.triu(E) != 0):
                raise ValueError(f"tableau {self.name!r}: the explicit rows must be strictly lower, {s} stages")
            coupling = (A[-1] @ E.sum(axis=1), E[-1] @ A.sum(axis=1))
            if self.order >= 2 and max(abs(v - 0.5) for v in coupling) > 1e-12:
                raise ValueError(f"tableau {self.name!r}: the pair's coupling conditions of order 2 fail")
        z = 1j * np.geomspace(1e-3, 1e4, 400)
        if np.max(np.abs(self.stability(z))) > 1 + 1e-12:
            raise ValueError(f"tableau {self.name!r}: not A-stable (|R(iy)| > 1)")
        if self.b_error is not None:
            if len(self.b_error) != s or not 2 <= self.error_order <= self.order + 1:
                raise ValueError(f"tableau {self.name!r}: b_error needs {s} weights and "
                                 f"2 <= error_order <= {self.order + 1}")
            held = [abs(v - e) <= 1e-12 for v, e in _order_conditions(A, A[-1] - np.asarray(self.b_error))]
            low, high = _CONDITIONS[self.error_order - 1], _CONDITIONS[self.error_order]
            if not all(held[:low]) or all(held[low:high]):
                raise ValueError(f"tableau {self.name!r}: its embedded solution is not of order "
                                 f"{self.error_order - 1} exactly")

    @property
    def error_constant(self) -> float:
        """C with ``err = C (ΔtL)^q y + O(Δt^{q+1})`` on y′ = Ly (q = ``error_order``): with
        stage values ``yⱼ = Rⱼ(z) y``, ``Rⱼ = (1 + z Σ_{i<j} a_ji Rᵢ)/(1 − z a_jj)`` as power
        series in z = ΔtL, C is the z^q coefficient of ``Σⱼ b_errorⱼ z Rⱼ(z)``."""
        if self.b_error is None:
            return 0.0
        q, A, series = self.error_order, self.matrix, []
        for j in range(len(self.a)):
            top = np.zeros(q + 1)
            top[0] = 1.0
            for i in range(j):
                top[1:] += A[j, i] * series[i][:-1]
            geometric = A[j, j] ** np.arange(q + 1)  # 1/(1 − z a_jj)
            series.append(np.convolve(top, geometric)[: q + 1])
        return float(sum(w * r[q - 1] for w, r in zip(self.b_error, series)))

    @property
    def matrix(self) -> np.ndarray:
        s = len(self.a)
        A = np.zeros((s, s))
        for j, row in enumerate(self.a):
            A[j, : j + 1] = row
        return A

    @property
    def explicit_matrix(self) -> np.ndarray:
        return np.asarray(self.explicit, float)

    @property
    def stages(self) -> int:
        return len(self.a)

    @property
    def nodes(self) -> list[float]:
        return [float(sum(row)) for row in self.a]

    def stability(self, z) -> np.ndarray:
        """R(z) = 1 + z bᵀ(I − zA)⁻¹𝟙 of the implicit tableau, for an array of z."""
        A, s = self.matrix, len(self.a)
        b = A[-1]
        return np.array([1 + zi * b @ np.linalg.solve(np.eye(s) - zi * A, np.ones(s)) for zi in np.ravel(z)])

    @property
    def stiff_decay(self) -> float:
        """|R(−∞)| (0: L-stable; 1: only A-stable, as Crank–Nicolson)."""
        return float(abs(self.stability(np.array([-1e8]))[0]))


_G2 = float(1 - 1 / np.sqrt(2))  # Alexander's SDIRK2; also ARS(2,2,2)'s γ
#: γ of Alexander's L-stable three-stage SDIRK of order 3: the root of 6γ³ − 18γ² + 9γ − 1 in (1/6, 1/2).
_G3 = 0.43586652150845899941601945
#: Backward Euler: u⁽¹⁾ = u_t + Δt F[u⁽¹⁾]; order 1, L-stable.
BEULER = DIRKTableau("beuler", a=((1.0,),), order=1)
#: Crank–Nicolson (the trapezoidal rule) with its explicit first stage k₁ = F[u_t]: order 2,
#: A-stable, not L-stable (stiff modes flip sign each step instead of decaying). Embedded:
#: backward Euler's weights on the same slopes, err = Δt (k₁ − k₂)/2.
CN = DIRKTableau("cn", a=((0.0,), (0.5, 0.5)), order=2, b_error=(0.5, -0.5), error_order=2)
#: Alexander's two-stage SDIRK, γ = 1 − 1/√2: order 2, L-stable. Embedded: the first stage
#: alone (weights (1, 0)), err = γ Δt (k₂ − k₁).
SDIRK2 = DIRKTableau("sdirk2", a=((_G2,), (1 - _G2, _G2)), order=2, b_error=(-_G2, _G2), error_order=2)
#: Alexander's three-stage SDIRK: order 3, L-stable. Embedded: the second-order solution on
#: the first two stages, weights (1 − β, β, 0) with β = (1 − 2γ)/(1 − γ).
_B3 = ((1 - _G3) / 2, _G3)
_A3 = (-(6 * _G3**2 - 16 * _G3 + 1) / 4, (6 * _G3**2 - 20 * _G3 + 5) / 4, _G3)
_E3 = (1 - 2 * _G3) / (1 - _G3)
SDIRK3 = DIRKTableau("sdirk3", order=3, a=((_G3,), _B3, _A3),
                     b_error=(_A3[0] - (1 - _E3), _A3[1] - _E3, _G3), error_order=3)
#: Hairer & Wanner's five-stage SDIRK (Solving ODEs II, §IV.6, γ = 1/4): order 4, L-stable.
#: Embedded: their third-order solution on the same slopes, weights (59/48, −17/96, 225/32, −85/12, 0).
_A4 = ((1 / 4,), (1 / 2, 1 / 4), (17 / 50, -1 / 25, 1 / 4), (371 / 1360, -137 / 2720, 15 / 544, 1 / 4),
       (25 / 24, -49 / 48, 125 / 16, -85 / 12, 1 / 4))
SDIRK4 = DIRKTableau("sdirk4", order=4, a=_A4, b_error=(-9 / 48, -81 / 96, 25 / 32, 0.0, 1 / 4),
                     error_order=4)
#: IMEX Euler: u⁽¹⁾ = u_t + Δt N[u_t] + Δt S[u⁽¹⁾]; order 1 (a zero first stage carries u_t).
IMEX_EULER = DIRKTableau("imex_euler", a=((0.0,), (0.0, 1.0)), order=1, explicit=((0.0, 0.0), (1.0, 0.0)))
#: ARS(2,2,2) (Ascher, Ruuth & Spiteri 1997): L-stable implicit part, order 2.
_D = float(1 - 1 / (2 * _G2))
ARS222 = DIRKTableau("ars222", order=2, a=((0.0,), (0.0, _G2), (0.0, 1 - _G2, _G2)),
                     explicit=((0.0, 0.0, 0.0), (_G2, 0.0, 0.0), (_D, 1 - _D, 0.0)))
DIRK_TABLEAUS: dict[str, DIRKTableau] = {
    t.name: t for t in (BEULER, CN, SDIRK2, SDIRK3, SDIRK4, IMEX_EULER, ARS222)}


class ImplicitStage(eqx.Module):
    """Solves an implicit stage ``u − h F[u] = r`` on the periodic quadrature grid and fits
    the network to its solution u⁺ by TENG's own stage solver (plain L², drawn parameter
    subsets: :meth:`teng_eq.stage.StageSolver.stage`), so that a stiff F never weights the
    fit towards modes the nodes cannot see.

    * F linear with constant coefficients (``symbol`` given: every IMEX stiff part, and L
      of such an equation): ``u⁺ = (I − hΛ)⁻¹ r``, a Fourier multiplier, Λ(k) = Σ_α a_α
      (ik)^α the symbol of F from its coefficients by autodiff of the operator
      (:class:`teng_eq.estimate.Transport`); one fit. F of a network is then never
      evaluated pointwise: its fourth derivatives at the nodes would also see the
      network's content above the grid's band, and a stiff F multiplies that by κ|k|⁴
      (measured: SDIRK2 on the biharmonic at 16² nodes blew up from 9e-4 to 3e3 in two
      steps when the stage's residual was taken on the network).
    * otherwise ``newton`` passes of a chord Newton iteration in function space,
      ``u⁺ = u_θ − (I − hF′)⁻¹(u_θ − hF[u_θ] − r)`` with the exact residual (the operator
      on the network at the nodes), each followed by a fit. F′ = Σ_α a_α(x) ∂^α is the
      linearised operator at the stage's start (its coefficients by autodiff,
      :meth:`teng_eq.estimate.Transport.coefficients`; spectral derivatives on the grid),
      and the correction is solved by lineax's GMRES, preconditioned by (I − hΛ̄)⁻¹ with
      Λ̄ the symbol of F′'s mean coefficients. The whole F′, not Λ̄ alone: where F′ has a
      variable part of zero mean (Kuramoto–Sivashinsky's advection by ∇u) Λ̄ drops it,
      and the passes then contract slowly (measured in 2-D: SDIRK3 at Δt = 0.25 ended at
      1.8e-2 after two passes a stage, SDIRK4 at 0.5 diverged in its second step after
      eight; with the whole F′, 9.3e-4 after two and 4.2e-4 after three).

    The stage's value on the nodes is the last u⁺ (what the fit aimed at), from which its
    slope ``k = (u⁺ − r)/h`` is taken: the fit's own error never enters a later stage
    divided by h.
    """

    solver: StageSolver
    equation: Equation
    transport: Transport
    newton: int = eqx.field(static=True)
    imex: bool = eqx.field(static=True, default=False)
    symbol: Array | None = None  # Λ(k) on the grid's wave numbers, where F is linear with constant coefficients

    @property
    def part(self):
        """The operator the stages take implicitly: S (IMEX) or L."""
        return implicit_operator(self.equation, self.imex)

    def implicit_part(self, theta, t):
        """F[u_θ] on the nodes: the equation's stiff part S under IMEX, else L (spectrally on
        the grid values where F is linear with constant coefficients: class docstring)."""
        if self.symbol is not None:
            return self.multiply(self.symbol, self.solver.values(theta))
        return operator(self.part, lambda p: self.solver.space.apply(theta, p), self.solver.points, t)

    def explicit_part(self, theta, t):
        """N[u_θ] = L[u_θ] − S[u_θ] on the nodes (IMEX; S on the network here, as N's own part)."""
        points = self.solver.points
        return network_operator(self.equation, self.solver.space, theta, points, t) - operator(
            self.part, lambda p: self.solver.space.apply(theta, p), points, t)

    def multiply(self, factor, values):
        """The Fourier multiplier ``factor`` (on the grid's wave numbers) applied to grid ``values``."""
        shape = self.transport.shape
        return jnp.fft.ifftn(jnp.fft.fftn(values.reshape(shape)) * factor.reshape(shape)).real.ravel()

    def chord(self, a: Float[Array, "alphas n"], h, structure) -> Callable:
        """r ↦ (I − hF′)⁻¹ r for F′ = Σ_α a_α ∂^α on the grid (``structure``: r's shape and
        dtype) by GMRES, preconditioned by the Fourier multiplier (I − hΛ̄)⁻¹."""
        inverse = 1.0 / (1.0 - h * self.transport.symbol(a)[0])
        matrix = lx.FunctionLinearOperator(lambda v: v - h * self.transport.apply(a, v), structure)
        preconditioner = lx.FunctionLinearOperator(lambda v: self.multiply(inverse, v), structure)
        gmres = lx.GMRES(rtol=1e-10, atol=1e-14, max_steps=200)

        def solve(r):
            options = {"preconditioner": preconditioner}
            return lx.linear_solve(matrix, r, gmres, options=options, throw=False).value

        return solve

    def __call__(self, theta, rhs, h, t, key: PRNGKeyArray, iters: tuple[int, int], n_first: int, n_rest: int):
        """``(θ, u⁺, logs, residual)``: the fitted θ, the stage's values on the nodes, one
        :class:`~teng_eq.stage.StageLog` per fit and the relative residual ‖u_θ − hF[u_θ] − r‖²/‖r‖²
        before the last fit (0 where F is a multiplier: u⁺ solves the stage exactly)."""
        if self.symbol is not None:
            target = self.multiply(1.0 / (1.0 - h * self.symbol), rhs)
            theta, log = self.solver.stage(theta, target, key, iters[0], n_first, n_rest)
            return theta, target, [log], jnp.zeros((), rhs.dtype)
        space, points = self.solver.space, self.solver.points
        a = self.transport.coefficients(self.part, lambda p: space.apply(theta, p), points, t)
        correction = self.chord(a, h, jax.ShapeDtypeStruct(rhs.shape, rhs.dtype))
        logs, keys = [], jax.random.split(key, self.newton)
        for m in range(self.newton):
            u = space.apply(theta, points)
            r = u - h * self.implicit_part(theta, t) - rhs
            target = u - correction(r)
            theta, log = self.solver.stage(theta, target, keys[m], iters[m > 0], n_first if m == 0 else n_rest,
                                           n_rest)
            logs.append(log)
        return theta, target, logs, self.solver.norm2(r) / self.solver.norm2(rhs)


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
    a = np.asarray(transport.coefficients(implicit_operator(equation, imex),
                                          lambda p: jnp.zeros(p.shape[0], p.dtype), jnp.asarray(points), 0.0))
    mean = a.mean(axis=1, keepdims=True)
    if np.max(np.abs(a - mean)) > 1e-12 * max(1.0, np.max(np.abs(mean))):
        return None
    return jnp.asarray(transport.symbol(a)[0])


def interpolate(values: Float[Array, " n"], shape: tuple[int, ...], periods, points: Float[Array, "m dim"]):
    """The trigonometric interpolant of grid ``values`` (a periodic grid of ``shape`` from the
    origin, flattened 'ij') at ``points``, one axis at a time (m·n work, no m × n matrix)."""
    coeffs = jnp.fft.fftn(values.reshape(shape)) / values.size
    out = None
    for i, (n, period) in enumerate(zip(shape, periods)):
        k = 2 * jnp.pi / period * jnp.fft.fftfreq(n, 1.0 / n)
        phase = jnp.exp(1j * points[:, i : i + 1] * k[None, :])  # (m, n_i)
        out = jnp.einsum("a...,ma->m...", coeffs, phase) if out is None else jnp.einsum("ma...,ma->m...", out, phase)
    return out.real


class _StiffPart:
    """An equation's ``stiff`` part S as an operator (for :func:`~teng_eq.equations.base.operator`)."""

    components = ()  # a scalar equation's: the IMEX steps take no system

    def __init__(self, equation):
        self.equation = equation

    def operator(self, u, t):
        return self.equation.stiff(u, t)


class ImplicitTENGStep(eqx.Module):
    """One time step ``θ_t ↦ θ_{t+Δt}`` of an implicit or IMEX TENG integrator (module
    docstring): ``tableau`` (a :class:`DIRKTableau`), the implicit stages' solver
    ``stage`` (:class:`ImplicitStage`), ``dt`` (None: each call passes its own), the caps
    of a stage's first fit (``iters``; the step's first implicit stage) and of the others
    (``iters_later``), the parameters drawn on a fit's first iteration
    (``subsample_first``, the step's first fit) and on the others (``subsample``), the
    ``holdout`` quadrature.

    **Warm start**: an implicit stage at node cⱼ starts from ``θ_t + cⱼ Δt θ̇``, θ̇ the
    latest rate known: from the step's previous implicit stage ``(θᵢ − θ_t)/(cᵢΔt)``, or
    β times the previous step's (``rate``; β = ``warm_rate``) — as explicit TENG's
    ``extrapolate``; under ``previous`` from the stage before (θ_t for the first).

    With an embedded estimate in the tableau the step reports ``local_error`` (its
    ``Δt Σ b_errorⱼ kⱼ`` on the nodes) and ``u_l2`` (‖u⁽ˢ⁾‖), what ``dt=auto``'s controller reads.

    **Held-out check**: the final network on the held-out points against the step's value
    u⁽ˢ⁾ on the nodes carried there by trigonometric interpolation (:func:`interpolate`).
    """

    tableau: DIRKTableau
    stage: ImplicitStage
    dt: float | None = eqx.field(static=True)
    iters: int = eqx.field(static=True)
    iters_later: int = eqx.field(static=True)
    subsample_first: int = eqx.field(static=True)
    subsample: int = eqx.field(static=True)
    holdout: Quadrature | None = None
    warm_start: str = eqx.field(static=True, default="previous")
    warm_rate: float = eqx.field(static=True, default=0.9)

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
        A, E, c = tab.matrix, (tab.explicit_matrix if tab.explicit else None), tab.nodes
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
                first = not logs
                start = warm_start_point(self.warm_start, self.warm_rate, theta_t, current, c[j], c_prev, dt, rate)
                sub = self.subsample_first if first else self.subsample
                current, value, passes, residual = stage(start, rhs, h, t + c[j] * dt, keys[j],
                                                         (self.iters if first else self.iters_later, self.iters_later),
                                                         sub, self.subsample)
                logs.extend(passes)
                residuals.append(residual)
                slopes.append((value - rhs) / h)
                c_prev = c[j]
            else:
                slopes.append(stage.implicit_part(current, t + c[j] * dt))
            if E is not None and j < tab.stages - 1:  # the last stage's N is not used
                rest.append(stage.explicit_part(current, t + c[j] * dt))
        loss = logs[-1].final_loss
        embedded = {}
        if tab.b_error is not None:  # the step's local error and scale, as the explicit steps report them
            embedded = {"local_error": jnp.sqrt(self.solver.norm2(combine(0.0, dt, tab.b_error, slopes))),
                        "u_l2": jnp.sqrt(self.solver.norm2(value))}
        held = None if self.holdout is None else interpolate(value, stage.transport.shape, self.equation.periods,
                                                             self.holdout.points)
        return current, step_record(logs, loss, *held_out(space, current, self.holdout, held, loss),
                                    newton_residual=jnp.sqrt(residuals[-1]), **embedded)
