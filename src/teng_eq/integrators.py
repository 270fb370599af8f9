"""TENG time integrators: explicit Runge–Kutta schemes (:class:`ButcherTableau`,
walked by :func:`rk_slopes`) whose stages are TENG fits (:class:`TENGStep`).

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

Every target is built from ``û_t`` on the quadrature grid, except on the rows of
a Dirichlet boundary (``boundary``), where it is the boundary value 0; the first
fit of a step runs at most ``iters`` iterations (its first drawing
``subsample_first`` parameters), the later fits at most ``iters_later`` (exactly
these under the ``fixed`` stopping policy of :mod:`teng_eq.stage`).

**Held-out check** (:class:`Holdout`). A fit can match its target on the quadrature
nodes and go wild between them (a network with more parameters than nodes can interpolate),
and the training loss cannot see it. So each step also measures the loss of its
final fit on ``holdout`` points that no fit uses: the same target function
``û_t + Δt Σⱼ bⱼ kⱼ`` (its slopes ``kⱼ = L[û_{θⱼ}]`` evaluated there too) against
``û_{θ_{t+Δt}}``. On a resolved, well-behaved fit both losses estimate the same
``‖r‖²_{L²}`` and agree; ``holdout_loss ≫ loss`` says the fit overfits the nodes.
Their ratio is taken against ``max(loss, ε·‖target‖²)`` (ε the float64 machine
epsilon: a loss below it is round-off), so that two losses both at round-off
level never read as a large ratio.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from teng_eq.equations import Equation, network_operator
from teng_eq.errors import bad
from teng_eq.grid import Quadrature, norm2, rotated
from teng_eq.results import StepRecord, stack_rows
from teng_eq.stage import StageSolver


def _order_conditions(A: np.ndarray, b: np.ndarray) -> list[tuple[float, float]]:
    """Butcher's order conditions up to order 4, ``(value, exact)`` in order (1 for
    order 1, 1 more for order 2, 2 more for order 3, 4 more for order 4)."""
    c = A.sum(axis=1)
    return [(b.sum(), 1.0), (b @ c, 1 / 2), (b @ c**2, 1 / 3), (b @ A @ c, 1 / 6),
            (b @ c**3, 1 / 4), (b @ (c * (A @ c)), 1 / 8), (b @ A @ c**2, 1 / 12), (b @ A @ A @ c, 1 / 24)]


#: How many of :func:`_order_conditions` a method of each order satisfies.
_CONDITIONS = {0: 0, 1: 1, 2: 2, 3: 4, 4: 8}


def _extents(poly: np.polynomial.Polynomial, directions) -> np.ndarray:
    """The stability region's extent along the ray of each unit ``direction``: the last r
    on a grid of step 10⁻³ in [0, 8] before |R(r d)| exceeds 1 (8 where it never does)."""
    r = np.linspace(0.0, 8.0, 8001)
    outside = np.abs(poly(np.asarray(directions)[:, None] * r)) > 1.0 + 1e-12
    first = np.argmax(outside, axis=1)
    return np.where(outside.any(axis=1), r[np.maximum(first - 1, 0)], 8.0)


@functools.lru_cache(maxsize=16)
def _extent_table(coefficients: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Angles from π/2 to π every 0.1° and the extents along them (:func:`_extents`), once
    per stability polynomial (its ``coefficients``)."""
    angles = np.linspace(np.pi / 2, np.pi, 901)
    return angles, _extents(np.polynomial.Polynomial(coefficients), np.exp(1j * angles))


class ButcherTableau(eqx.Module):
    """An explicit Runge–Kutta tableau: ``a[j]`` are the coefficients of stage j+2
    (row j of the strictly lower triangle of A), ``b`` those of the step; the nodes
    are ``c_{j+1} = Σᵢ a[j][i]``. It checks itself: every row has its length, and
    the order conditions up to ``order`` hold (Butcher's conditions, to round-off).

    **Embedded error estimate** (optional): ``b_error`` are the weights of

        err = Δt Σⱼ b_errorⱼ kⱼ = y_{t+Δt} − ŷ_{t+Δt},

    the difference between the step and an embedded solution ŷ of lower order with
    weights ``b − b_error`` (diffrax's convention). ``b_error`` may hold one weight
    more than there are stages: the slope ``k_{s+1} = L[y_{t+Δt}]`` at the step's end
    ("first same as last", FSAL; in TENG an operator evaluation on the final network,
    no fit). ``err`` is of order ``error_order`` in Δt: the check is that ŷ satisfies
    the order conditions up to ``error_order − 1`` and fails one of order
    ``error_order``, so that ``err`` is neither of higher order than claimed nor zero.
    """

    name: str = eqx.field(static=True)
    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    b: tuple[float, ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)
    b_error: tuple[float, ...] | None = eqx.field(static=True, default=None)
    error_order: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        s = len(self.b)
        if len(self.a) != s - 1 or any(len(row) != j + 1 for j, row in enumerate(self.a)):
            raise ValueError(f"tableau {self.name!r}: row j of a must hold j+1 coefficients, for {s} stages")
        if not 1 <= self.order <= 4:
            raise ValueError(f"tableau {self.name!r}: order {self.order} is not checked (1 to 4)")
        A = np.zeros((s, s))
        for j, row in enumerate(self.a):
            A[j + 1, : j + 1] = row
        b = np.asarray(self.b)
        for k, (value, exact) in enumerate(_order_conditions(A, b)[: _CONDITIONS[self.order]]):
            if abs(value - exact) > 1e-12:
                raise ValueError(f"tableau {self.name!r} is not of order {self.order}: "
                                 f"order condition {k + 1} gives {value:.6g}, not {exact:.6g}")
        if self.b_error is None:
            return
        if len(self.b_error) not in (s, s + 1) or not 2 <= self.error_order <= self.order + 1:
            raise ValueError(f"tableau {self.name!r}: b_error needs {s} or {s + 1} weights and "
                             f"2 <= error_order <= {self.order + 1}")
        if self.fsal:  # the slope at the step's end: a stage whose row is b
            A = np.block([[A, np.zeros((s, 1))], [b[None, :], np.zeros((1, 1))]])
            b = np.append(b, 0.0)
        conditions = _order_conditions(A, b - np.asarray(self.b_error))
        held = [abs(value - exact) <= 1e-12 for value, exact in conditions]
        low, high = _CONDITIONS[self.error_order - 1], _CONDITIONS[self.error_order]
        if not all(held[:low]) or all(held[low:high]):
            raise ValueError(f"tableau {self.name!r}: its embedded solution is not of order "
                             f"{self.error_order - 1} exactly, so b_error is not an estimate of order "
                             f"{self.error_order}")

    @property
    def stages(self) -> int:
        return len(self.b)

    @property
    def error_constant(self) -> float:
        """C with ``err = C (ΔtL)^q y + O(Δt^{q+1})`` on a linear problem y′ = Ly, q =
        ``error_order``: the embedded estimate's leading term, from the stages' powers of
        ΔtL (stage j's slope is ``L y + Σ_m κ_{j,m} Δt^m L^{m+1} y``, κ_{j,m} = Σᵢ a_{ji} κ_{i,m−1};
        the FSAL slope's row is b). What a first step of ``dt_initial: auto`` is sized by."""
        rows = [*self.a, self.b] if self.fsal else list(self.a)
        kappa = [[1.0]]  # stage 1
        for row in rows:
            kappa.append([1.0] + [sum(a * k[m - 1] for a, k in zip(row, kappa) if len(k) >= m)
                                  for m in range(1, len(kappa) + 1)])
        m = self.error_order - 1
        return float(sum(w * (k[m] if len(k) > m else 0.0) for w, k in zip(self.b_error or (), kappa)))

    @property
    def stability_polynomial(self) -> np.polynomial.Polynomial:
        """R(z) = 1 + Σ_{m≥1} z^m bᵀA^{m−1}𝟙: a step multiplies a mode of y′ = λy by R(Δtλ)."""
        s = len(self.b)
        A = np.zeros((s, s))
        for j, row in enumerate(self.a):
            A[j + 1, : j + 1] = row
        powers, v = [], np.ones(s)
        for _ in range(s):
            powers.append(float(np.asarray(self.b) @ v))
            v = A @ v
        return np.polynomial.Polynomial([1.0, *powers])

    @property
    def stability_limit(self) -> float:
        """x of the stability interval [−x, 0] on the negative real axis: |R(z)| ≤ 1 there
        (:attr:`stability_polynomial`; Euler and Heun 2, Bogacki–Shampine 2.51, RK4 2.79).
        A step of Δt is stable on a mode that decays at rate ρ where Δt ρ ≤ x: what
        ``dt: auto`` caps a step by on a stiff operator."""
        return float(_extents(self.stability_polynomial, np.array([-1.0]))[0])

    def equivalent_radius(self, rates) -> float:
        """ρ with ``Δt ρ ≤ x`` (:attr:`stability_limit`) exactly where every Δtλ, λ in
        ``rates`` (complex), lies in the stability region |R| ≤ 1 along its ray from 0:
        the largest |λ| x / r(arg λ), r(φ) the region's extent along the ray of angle φ
        (tabulated every 0.1° of the left half-plane; between two angles the smaller).
        On real negative rates, ρ = max |λ|, the scalar transport's radius. A rate in the
        right half-plane (Re λ > 10⁻⁹|λ|) is the equation's own growth, no constraint;
        one on the imaginary axis (waves, Schrödinger) is: there RK4 reaches 2.83,
        Bogacki–Shampine 1.73, Heun 10⁻³ (|R(iy)|² = 1 + y⁴/4: it amplifies every
        oscillation)."""
        rates = np.ravel(np.asarray(rates, np.complex128))
        size = np.abs(rates)
        keep = (size > 0) & (rates.real <= 1e-9 * size)
        if not keep.any():
            return 0.0
        angles, table = _extent_table(tuple(float(c) for c in self.stability_polynomial.coef))
        phi = np.clip(np.abs(np.angle(rates[keep])), angles[0], angles[-1])  # |R(z̄)| = |R(z)|
        j = np.clip(np.searchsorted(angles, phi), 1, len(angles) - 1)
        extent = np.minimum(table[j - 1], table[j])
        return float(np.max(np.where(extent > 0, size[keep] * self.stability_limit / np.maximum(extent, 1e-300),
                                     np.inf)))

    @property
    def fsal(self) -> bool:
        """Whether the error estimate uses the slope at the step's end (one operator
        evaluation on the final network)."""
        return self.b_error is not None and len(self.b_error) == len(self.b) + 1

    @classmethod
    def from_diffrax(cls, name: str, tableau, order: int, error_order: int) -> ButcherTableau:
        """One of diffrax's explicit tableaux (``diffrax.<Solver>.tableau``), its FSAL stage
        (a last row equal to the weights, weight 0) kept only in ``b_error``."""
        a = [tuple(float(v) for v in row) for row in tableau.a_lower]
        b = [float(v) for v in tableau.b_sol]
        if tableau.fsal:
            if b[-1] != 0.0 or a[-1] != tuple(b[:-1]):
                raise ValueError(f"diffrax tableau {name!r}: its last stage is not first-same-as-last")
            a, b = a[:-1], b[:-1]
        return cls(name, a=tuple(a), b=tuple(b), order=order,
                   b_error=tuple(float(v) for v in tableau.b_error), error_order=error_order)


EULER = ButcherTableau("euler", a=(), b=(1.0,), order=1)
#: Heun's method with Euler embedded (diffrax's ``Heun``): err = Δt (k₁ − k₂)/2, the
#: difference between TENG-Heun's result and its Euler predictor, of order 2 (it
#: estimates the *Euler* step's local error, not Heun's own, which is O(Δt³)).
HEUN = ButcherTableau.from_diffrax("heun", diffrax.Heun.tableau, order=2, error_order=2)
#: Heun's method with an estimate of its *own* local error: with the slope at the step's
#: end k₃ = L[y_{t+Δt}] (FSAL), err = Δt (k₂ − k₃)/3, of order 3 — to leading order exactly
#: Heun's local error on a linear problem (there k₂ − k₃ = −Δt² L³y/2 and Heun's error is
#: −Δt³ L³y/6), the f″(f, f) term of a nonlinear one aside. One operator evaluation more.
HEUN_FSAL = ButcherTableau("heun_fsal", a=((1.0,),), b=(0.5, 0.5), order=2, b_error=(0.0, 1 / 3, -1 / 3),
                           error_order=3)
#: Classical RK4 with the third-order FSAL solution ŷ = y + Δt(k₁ + 2k₂ + 2k₃ + k₅)/6
#: embedded, k₅ = L[y_{t+Δt}] (diffrax has no classical RK4 pair): err = Δt(k₄ − k₅)/6.
RK4 = ButcherTableau("rk4", a=((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), b=(1 / 6, 1 / 3, 1 / 3, 1 / 6), order=4,
                     b_error=(0.0, 0.0, 0.0, 1 / 6, -1 / 6), error_order=4)
#: Bogacki–Shampine 3(2) (diffrax's ``Bosh3``): three fits, the second-order solution
#: embedded through the FSAL slope at the step's end.
BS3 = ButcherTableau.from_diffrax("bs3", diffrax.Bosh3.tableau, order=3, error_order=3)
TABLEAUS: dict[str, ButcherTableau] = {t.name: t for t in (EULER, HEUN, HEUN_FSAL, RK4, BS3)}


def combine(y0, dt: float, coeffs, slopes):
    """``y₀ + Δt Σᵢ cᵢ kᵢ`` (zero coefficients skipped)."""
    return y0 + dt * sum(c * k for c, k in zip(coeffs, slopes) if c != 0.0)


def rk_slopes(tableau: ButcherTableau, dt: float, y0, k1, slope: Callable, carry):
    """The slopes of an explicit tableau walked from ``y₀`` with first slope ``k₁``:
    ``k_{j+1}, carry = slope(j, y₀ + Δt Σ_{i≤j} a_{j+1,i} kᵢ, carry)`` for j = 1 … s−1,
    ``carry`` what each stage hands the next (TENG: the fit's θ and the stages' logs);
    returns ``(slopes, carry)``. The step is then ``combine(y₀, Δt, b, slopes)``: TENG
    walks the tableau on function values (``slope`` fits a network to the stage value
    first), TDVP on θ itself."""
    slopes = [k1]
    for j, row in enumerate(tableau.a, start=1):
        k, carry = slope(j, combine(y0, dt, row, slopes), carry)
        slopes.append(k)
    return slopes, carry


@dataclasses.dataclass(frozen=True)
class Holdout:
    """The held-out check of every step (module docstring; the ``holdout`` config
    group): ``grid`` points per dimension at cell centres of the quadrature grid
    (dividing it; None: :attr:`AUTO_MAX` or the largest divisor of the quadrature
    grid below it, see :meth:`points`); a run whose held-out loss exceeds its
    training loss more than ``warn`` times is flagged, more than ``fail`` times
    it fails."""

    grid: int | None
    warn: float
    fail: float

    #: Held-out points per dimension at most, when ``grid`` is None: a few per
    #: feature of the solution, at a cost small beside the fit's grid (on a line its
    #: square: a 1-D front needs the points a 2-D one gets from both axes).
    AUTO_MAX: ClassVar[int] = 32

    def points(self, quadrature_grid: int, dim: int = 2) -> int:
        """Held-out points per dimension for a quadrature grid of ``quadrature_grid``
        points per dimension in ``dim`` dimensions."""
        if self.grid is not None:
            return self.grid
        most = self.AUTO_MAX**2 if dim == 1 else self.AUTO_MAX
        return max(d for d in range(1, min(most, quadrature_grid) + 1) if quadrature_grid % d == 0)

    def flag(self, ratios) -> str:
        """``"fail"`` if some step's held-out/training loss ratio exceeds ``fail``,
        ``"warn"`` if one exceeds ``warn``, else ``"ok"`` (NaN counts as exceeding:
        a step whose losses are not finite is not a healthy one)."""
        ratios = np.asarray(ratios, np.float64)
        worst = np.max(np.where(np.isnan(ratios), np.inf, ratios)) if ratios.size else 0.0
        return "fail" if worst > self.fail else "warn" if worst > self.warn else "ok"

    def validate(self, prefix: str) -> None:
        if self.grid is not None and self.grid < 2:
            raise bad(f"{prefix}.grid", self.grid, "must be an integer >= 2 (or null: automatic)")
        if not 1 < self.warn <= self.fail:
            raise bad(f"{prefix}.warn", self.warn, f"must be > 1 and <= {prefix}.fail={self.fail}")


class TENGStep(eqx.Module):
    """One time step ``θ_t ↦ θ_{t+Δt}`` of a TENG integrator.

    **Arguments:** the ``tableau``, the stage ``solver`` (network, quadrature
    nodes, least squares, stopping policy), the ``equation``, ``dt`` (None: every
    call passes its own, as the step-size controller does); the caps
    ``iters`` (first stage) and ``iters_later``; the parameters drawn on a step's
    first iteration (``subsample_first``) and on the others (``subsample``); the
    rows of the nodes on a Dirichlet boundary (``boundary``, or None); the
    ``holdout`` quadrature of the held-out check (module docstring), or None.

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
    controller (:mod:`teng_eq.controller`) reads. Dirichlet boundary rows are left
    out of both (their target is the boundary value, not the PDE's). ``expected``:
    the step's expected local error, the stages' floor under the ``local_error``
    stopping policy (:mod:`teng_eq.stage`).

    ``conserve`` (a system that declares invariants, ``method.conserve``): the step's θ is
    then projected back onto the invariants of the step's start (:func:`project`), their
    integrals by the trapezoid rule of the box's ``conserve``^d grid; it reports
    ``invariant_gap``, the largest relative change the fits made before the projection.
    """

    tableau: ButcherTableau
    solver: StageSolver
    equation: Equation
    dt: float = eqx.field(static=True)
    iters: int = eqx.field(static=True)
    iters_later: int = eqx.field(static=True)
    subsample_first: int = eqx.field(static=True)
    subsample: int = eqx.field(static=True)
    boundary: Bool[Array, " n"] | None = None
    holdout: Quadrature | None = None
    warm_start: str = eqx.field(static=True, default="previous")
    warm_rate: float = eqx.field(static=True, default=0.9)
    moving: bool = eqx.field(static=True, default=False)
    conserve: int | None = eqx.field(static=True, default=None)

    def moved(self, key: PRNGKeyArray) -> TENGStep:
        """This step on its points moved by one random shift modulo the periods
        (:func:`~teng_eq.grid.rotated`; the held-out points by another): fresh points each
        step (``moving``), so that no error hides between fixed nodes."""
        periods = self.equation.periods
        fits, held = jax.random.split(key)
        out = eqx.tree_at(lambda s: s.solver.points, self, rotated(self.solver.points, fits, periods))
        if self.holdout is None:
            return out
        return eqx.tree_at(lambda s: s.holdout.points, out, rotated(self.holdout.points, held, periods))

    def fit_start(self, j: int, theta_t, previous, nodes, dt, rate):
        """Where fit j starts (class docstring, warm start; :func:`warm_start_point` at the
        fit's node, the fit before it at ``nodes[j - 1]``)."""
        return warm_start_point(self.warm_start, self.warm_rate, theta_t, previous, nodes[j],
                                nodes[j - 1] if j > 0 else 0.0, dt, rate)

    def embedded(self, theta, slopes: list, target, dt, t) -> dict[str, Float[Array, ""]]:
        """``local_error`` and ``u_l2`` (class docstring) of the step that ended at θ with
        ``slopes`` towards ``target`` (both on the nodes and the held-out points)."""
        n = self.solver.points.shape[0]
        if self.tableau.fsal:
            slopes = [*slopes, network_operator(self.equation, self.solver.space, theta, self.solver.points, t + dt)]
        interior = 1.0 if self.boundary is None else jnp.where(self.boundary, 0.0, 1.0)
        err = combine(0.0, dt, self.tableau.b_error, [k[:n] for k in slopes])
        return {"local_error": jnp.sqrt(self.solver.norm2(interior * err)),
                "u_l2": jnp.sqrt(self.solver.norm2(interior * target[:n]))}

    def __call__(
        self, theta: Float[Array, " params"], key: PRNGKeyArray, dt: Float[Array, ""] | float | None = None,
        expected: Float[Array, ""] | None = None, rate: Float[Array, " params"] | None = None,
        t: Float[Array, ""] | float = 0.0,
    ) -> tuple[Float[Array, " params"], StepRecord]:
        """θ_{t+Δt} and the step's record from θ_t; ``rate``: the previous step's
        ``(θ_t − θ_{t−Δt'})/Δt'`` under ``warm_start: extrapolate`` (None: zero); ``t``:
        the step's start, where L depends on it (slope j at ``t + cⱼΔt``); ``moving``: on
        points of its own (:meth:`moved`)."""
        if self.moving:
            key, move = jax.random.split(key)
            return self.moved(move).on_points(theta, key, dt, expected, rate, t)
        return self.on_points(theta, key, dt, expected, rate, t)

    def on_points(self, theta, key, dt, expected, rate, t) -> tuple[Float[Array, " params"], StepRecord]:
        """The step of ``__call__`` on this step's points as they are."""
        space, n, theta_t = self.solver.space, self.solver.points.shape[0], theta
        dt = self.dt if dt is None else dt
        nodes = [sum(row) for row in self.tableau.a] + [1.0]  # cⱼ of fit j; the final fit's is 1
        # Targets on the nodes and the held-out points at once: one pass each.
        points, on_boundary = self.solver.points, self.boundary
        if self.holdout is not None:
            points = jnp.concatenate([points, self.holdout.points])
            if on_boundary is not None:
                on_boundary = jnp.concatenate([on_boundary, self.holdout.boundary])
        keys = jax.random.split(key, self.tableau.stages)

        def fit(j: int, target, fitted):
            """Stage j (from 0) fitted to ``target`` (the boundary value 0 on its rows), from
            ``fitted = (θ of the fit before, logs so far)``: ``(target, (θ, logs))``."""
            previous, logs = fitted
            if on_boundary is not None:
                target = jnp.where(on_boundary, 0.0, target)
            start = self.fit_start(j, theta_t, previous, nodes, dt, rate)
            iters, first = (self.iters, self.subsample_first) if j == 0 else (self.iters_later, self.subsample)
            fitted, log = self.solver.stage(start, target[:n], keys[j], iters, first, self.subsample, expected)
            return target, (fitted, (*logs, log))

        def slope(j: int, target, fitted):
            _, fitted = fit(j - 1, target, fitted)
            return network_operator(self.equation, space, fitted[0], points, t + nodes[j - 1] * dt), fitted

        u_t = space.apply(theta_t, points)
        k1 = network_operator(self.equation, space, theta_t, points, t)
        slopes, fitted = rk_slopes(self.tableau, dt, u_t, k1, slope, (theta_t, ()))
        target, (theta, logs) = fit(self.tableau.stages - 1, combine(u_t, dt, self.tableau.b, slopes), fitted)
        loss, conserved = logs[-1].final_loss, {}
        if self.conserve is not None:
            def integrals(th):
                values = self.equation.integrals(space.network(th).vector, self.conserve)
                return jnp.stack([values[name] for name in sorted(values)])

            start = integrals(theta_t)
            conserved = {"invariant_gap": jnp.max(jnp.abs(integrals(theta) / start - 1.0))}
            theta = project(integrals, theta, start)
        embedded = {} if self.tableau.b_error is None else self.embedded(theta, slopes, target, dt, t)
        return theta, step_record(logs, loss, *held_out(space, theta, self.holdout, target[n:], loss),
                                  **embedded, **conserved)


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


def warm_start_point(warm_start: str, warm_rate: float, theta_t, previous, c, c_prev, dt, rate):
    """Where a fit at node ``c`` (the step's time θ_t + cΔt) starts: the θ of the fit before
    it (``previous``; θ_t for the first), or under ``extrapolate`` θ_t moved along the latest
    rate to c — the fit before's, ``(previous − θ_t)/(c_prev Δt)``, where it sat at a node
    ``c_prev`` ≠ 0, else β times the previous step's ``rate`` (β = ``warm_rate``; None: none
    known, ``previous``)."""
    if warm_start != "extrapolate":
        return previous
    if c_prev:
        return theta_t + (c / c_prev) * (previous - theta_t)
    if rate is not None:
        return theta_t + warm_rate * c * dt * rate
    return previous


def held_out(space, theta, holdout: Quadrature | None, target, loss) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The held-out check (module docstring) of a step's final fit θ against its ``target`` on
    the ``holdout`` points: ``(holdout_loss, holdout_ratio)``, both NaN without them."""
    if holdout is None:
        nan = jnp.full((), jnp.nan, theta.dtype)
        return nan, nan
    w = holdout.weights
    holdout_loss = norm2(space.apply(theta, holdout.points) - target, w)
    scale = norm2(target, w)
    return holdout_loss, holdout_loss / jnp.maximum(loss, jnp.finfo(scale.dtype).eps * scale)


def step_record(logs, loss, holdout_loss, ratio, **metrics) -> StepRecord:
    """A step's record from its fits' :class:`~teng_eq.stage.StageLog` s (one row each), its
    final ``loss``, the held-out check and the step's own ``metrics``."""
    width = max(log.loss.shape[0] for log in logs)
    events = jax.tree_util.tree_map(lambda *counts: sum(counts), *(log.events for log in logs))
    return StepRecord(
        losses=stack_rows([log.loss for log in logs], width),
        inner=stack_rows([jnp.concatenate([log.lsq, jnp.full(1, jnp.nan)]) for log in logs], width),
        metrics={"step_loss": loss, "holdout_loss": holdout_loss, "holdout_ratio": ratio,
                 "iterations": sum(log.iterations for log in logs), **events, **metrics},
    )
