"""TENG time integrators: explicit Runge–Kutta schemes (:class:`ButcherTableau`,
walked by :func:`explicit_rk`) whose stages are TENG fits (:class:`TENGStep`).

An explicit RK scheme with tableau ``(A, b)`` advances ``u_t`` by

    u_{t+Δt} = u_t + Δt Σⱼ bⱼ kⱼ,   kⱼ = L[u⁽ʲ⁾],   u⁽ʲ⁾ = u_t + Δt Σ_{i<j} A_{ji} kᵢ.

TENG never forms ``u⁽ʲ⁾`` as a function: it *fits* a network to each stage target
(Subroutine ``TENG_stepper``) and evaluates the next slope ``k`` on that fitted
network, so L is only ever applied to a network, never to ``L[û]`` itself.
With ``s`` stages a step makes ``s`` fits; fit j starts from the parameters of fit
j−1 (the previous stage's network is the best warm start we have):

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
these under the ``fixed`` stopping policy of :mod:`teng_eq.stepper`).

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
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from teng_eq.equations import Equation, network_operator
from teng_eq.errors import bad
from teng_eq.grid import Quadrature, norm2
from teng_eq.results import StepRecord, stack_rows
from teng_eq.stepper import StageSolver


class ButcherTableau(eqx.Module):
    """An explicit Runge–Kutta tableau: ``a[j]`` are the coefficients of stage j+2
    (row j of the strictly lower triangle of A), ``b`` those of the step; the nodes
    are ``c_{j+1} = Σᵢ a[j][i]``. It checks itself: every row has its length, and
    the order conditions up to ``order`` hold (Butcher's conditions, to round-off)."""

    name: str = eqx.field(static=True)
    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    b: tuple[float, ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)

    def __check_init__(self):
        s = len(self.b)
        if len(self.a) != s - 1 or any(len(row) != j + 1 for j, row in enumerate(self.a)):
            raise ValueError(f"tableau {self.name!r}: row j of a must hold j+1 coefficients, for {s} stages")
        if not 1 <= self.order <= 4:
            raise ValueError(f"tableau {self.name!r}: order {self.order} is not checked (1 to 4)")
        A = np.zeros((s, s))
        for j, row in enumerate(self.a):
            A[j + 1, : j + 1] = row
        b, c = np.asarray(self.b), A.sum(axis=1)
        conditions = [(b.sum(), 1.0), (b @ c, 1 / 2), (b @ c**2, 1 / 3), (b @ A @ c, 1 / 6),
                      (b @ c**3, 1 / 4), (b @ (c * (A @ c)), 1 / 8), (b @ A @ c**2, 1 / 12),
                      (b @ A @ A @ c, 1 / 24)]
        needed = {1: 1, 2: 2, 3: 4, 4: 8}[self.order]
        for k, (value, exact) in enumerate(conditions[:needed]):
            if abs(value - exact) > 1e-12:
                raise ValueError(f"tableau {self.name!r} is not of order {self.order}: "
                                 f"order condition {k + 1} gives {value:.6g}, not {exact:.6g}")

    @property
    def stages(self) -> int:
        return len(self.b)


EULER = ButcherTableau("euler", a=(), b=(1.0,), order=1)
HEUN = ButcherTableau("heun", a=((1.0,),), b=(0.5, 0.5), order=2)
RK4 = ButcherTableau("rk4", a=((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), b=(1 / 6, 1 / 3, 1 / 3, 1 / 6), order=4)
TABLEAUS: dict[str, ButcherTableau] = {t.name: t for t in (EULER, HEUN, RK4)}


def combine(y0, dt: float, coeffs, slopes):
    """``y₀ + Δt Σᵢ cᵢ kᵢ`` (zero coefficients skipped)."""
    return y0 + dt * sum(c * k for c, k in zip(coeffs, slopes) if c != 0.0)


def explicit_rk(tableau: ButcherTableau, dt: float, y0, k1, slope: Callable[[int, object], object]):
    """Walk an explicit tableau from ``y₀`` with first slope ``k₁``:
    ``k_{j+1} = slope(j, y₀ + Δt Σ_{i≤j} a_{j+1,i} kᵢ)`` for j = 1 … s−1, then
    return ``y₀ + Δt Σⱼ bⱼ kⱼ``. TENG walks it on function values (``slope`` fits
    a network to the stage value first); TDVP on θ itself."""
    slopes = [k1]
    for j, row in enumerate(tableau.a, start=1):
        slopes.append(slope(j, combine(y0, dt, row, slopes)))
    return combine(y0, dt, tableau.b, slopes)


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
    #: feature of the solution, at a cost small beside the fit's grid.
    AUTO_MAX: ClassVar[int] = 32

    def points(self, quadrature_grid: int) -> int:
        """Held-out points per dimension for a quadrature grid of ``quadrature_grid``."""
        if self.grid is not None:
            return self.grid
        return max(d for d in range(1, min(self.AUTO_MAX, quadrature_grid) + 1) if quadrature_grid % d == 0)

    def flag(self, ratios) -> str:
        """``"fail"`` if some step's held-out/training loss ratio exceeds ``fail``,
        ``"warn"`` if one exceeds ``warn``, else ``"ok"`` (NaN counts as exceeding:
        a step whose losses are not finite is not a healthy one)."""
        ratios = np.asarray(ratios, np.float64)
        worst = np.max(np.where(np.isnan(ratios), np.inf, ratios)) if ratios.size else 0.0
        return "fail" if worst > self.fail else "warn" if worst > self.warn else "ok"

    def validate(self, prefix: str) -> None:
        if self.grid is not None and self.grid < 2:
            bad(f"{prefix}.grid", self.grid, "must be an integer >= 2 (or null: automatic)")
        if not 1 < self.warn <= self.fail:
            bad(f"{prefix}.warn", self.warn, f"must be > 1 and <= {prefix}.fail={self.fail}")


class TENGStep(eqx.Module):
    """One time step ``θ_t ↦ θ_{t+Δt}`` of a TENG integrator.

    **Arguments:** the ``tableau``, the stage ``solver`` (network, quadrature
    nodes, least squares, stopping policy), the ``equation``, ``dt``; the caps
    ``iters`` (first stage) and ``iters_later``; the parameters drawn on a step's
    first iteration (``subsample_first``) and on the others (``subsample``); the
    rows of the nodes on a Dirichlet boundary (``boundary``, or None); the
    ``holdout`` quadrature of the held-out check (module docstring), or None.
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

    def __call__(
        self, theta: Float[Array, " params"], key: PRNGKeyArray
    ) -> tuple[Float[Array, " params"], StepRecord]:
        space, n = self.solver.space, self.solver.points.shape[0]
        # Targets on the nodes and the held-out points at once: one pass each.
        points, on_boundary = self.solver.points, self.boundary
        if self.holdout is not None:
            points = jnp.concatenate([points, self.holdout.points])
            if on_boundary is not None:
                on_boundary = jnp.concatenate([on_boundary, self.holdout.boundary])
        keys = jax.random.split(key, self.tableau.stages)
        logs = []

        def fit(j: int, target):
            """Fit stage j (from 0) to ``target`` (the boundary value 0 on its rows)."""
            nonlocal theta
            if on_boundary is not None:
                target = jnp.where(on_boundary, 0.0, target)
            iters, first = (self.iters, self.subsample_first) if j == 0 else (self.iters_later, self.subsample)
            theta, log = self.solver.stage(theta, target[:n], keys[j], iters, first, self.subsample)
            logs.append(log)
            return target

        def slope(j: int, target):
            fit(j - 1, target)
            return network_operator(self.equation, space, theta, points)

        u_t = space.apply(theta, points)
        k1 = network_operator(self.equation, space, theta, points)
        target = fit(self.tableau.stages - 1, explicit_rk(self.tableau, self.dt, u_t, k1, slope))
        loss = logs[-1].final_loss
        if self.holdout is None:
            holdout_loss = ratio = jnp.full((), jnp.nan, theta.dtype)
        else:
            w = self.holdout.weights
            holdout_loss = norm2(space.apply(theta, self.holdout.points) - target[n:], w)
            scale = norm2(target[n:], w)
            ratio = holdout_loss / jnp.maximum(loss, jnp.finfo(scale.dtype).eps * scale)
        width = max(log.loss.shape[0] for log in logs)
        events = jax.tree_util.tree_map(lambda *counts: sum(counts), *(log.events for log in logs))
        return theta, StepRecord(
            losses=stack_rows([log.loss for log in logs], width),
            lsq=stack_rows([jnp.concatenate([log.lsq, jnp.full(1, jnp.nan)]) for log in logs], width),
            metrics={"step_loss": loss, "holdout_loss": holdout_loss, "holdout_ratio": ratio,
                     "iterations": sum(log.iterations for log in logs), **events},
        )
