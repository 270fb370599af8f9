"""What TENG's explicit and implicit steps share (:class:`Step`): their tableau, iteration
caps and drawn parameters, where each fit starts (the warm start), and the held-out check
(:class:`Holdout`) of the step's final fit.

**Held-out check.** A fit can match its target on the quadrature nodes and go wild
between them (a network with more parameters than nodes can interpolate), and the
training loss cannot see it. So each step also measures the loss of its final fit on
``holdout`` points that no fit uses, against the step's own target there (the explicit
step's ``û_t + Δt Σⱼ bⱼ kⱼ`` with its slopes evaluated there too; the implicit step's value
on the nodes, interpolated). On a resolved, well-behaved fit both losses estimate the same
``‖r‖²_{L²}`` and agree; ``holdout_loss ≫ loss`` says the fit overfits the nodes. Their
ratio is taken against ``max(loss, ε·‖target‖²)`` (ε the float64 machine epsilon: a loss
below it is round-off), so that two losses both at round-off level never read as a large
ratio.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.domains.quadrature import Quadrature, norm2
from teng_eq.errors import bad
from teng_eq.fit.results import StepRecord, stack_rows
from teng_eq.stepping.tableau import Tableau


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


class Step(eqx.Module):
    """One time step ``θ_t ↦ θ_{t+Δt}`` of a TENG integrator, the parts every kind shares:
    the ``tableau``, ``dt`` (None: every call passes its own, as the step-size controller
    does), the iteration caps of a step's first fit (``iters``) and of the later ones
    (``iters_later``), the parameters drawn on a fit's first iteration (the step's first
    fit: ``subsample_first``) and on the others (``subsample``), the ``holdout`` quadrature
    of the held-out check (module docstring; None: none), and where a fit starts
    (``warm_start``, ``warm_rate``: :func:`warm_start_point`).

    A step is called as ``step(θ, key, dt, expected, rate, t)`` and returns θ_{t+Δt} and its
    :class:`~teng_eq.fit.results.StepRecord`; ``rate``: the previous step's
    ``(θ_t − θ_{t−Δt'})/Δt'`` under ``warm_start: extrapolate`` (None: zero); ``t``: the
    step's start, where the operator depends on it; ``expected``: the step's expected local
    error (the explicit step's ``local_error`` stopping policy)."""

    tableau: Tableau
    dt: float | None = eqx.field(static=True)
    iters: int = eqx.field(static=True)
    iters_later: int = eqx.field(static=True)
    subsample_first: int = eqx.field(static=True)
    subsample: int = eqx.field(static=True)
    holdout: Quadrature | None = eqx.field(default=None, kw_only=True)
    warm_start: str = eqx.field(static=True, default="previous", kw_only=True)
    warm_rate: float = eqx.field(static=True, default=0.9, kw_only=True)

    def caps(self, first: bool) -> tuple[int, int]:
        """A fit's ``(iteration cap, parameters its first iteration draws)``: the step's first
        fit's, or a later one's."""
        return (self.iters, self.subsample_first) if first else (self.iters_later, self.subsample)

    def start(self, theta_t, previous, c: float, c_prev: float, dt, rate):
        """Where a fit at node ``c`` starts (:func:`warm_start_point`; the fit before it at ``c_prev``)."""
        return warm_start_point(self.warm_start, self.warm_rate, theta_t, previous, c, c_prev, dt, rate)

    def report(self, space, theta, logs, holdout_target, **metrics) -> StepRecord:
        """The step's record: its fits' logs, the held-out check of θ against
        ``holdout_target`` on the held-out points (:func:`held_out`), its own ``metrics``."""
        loss = logs[-1].final_loss
        return step_record(logs, loss, *held_out(space, theta, self.holdout, holdout_target, loss), **metrics)


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


def held_out(
    space, theta, holdout: Quadrature | None, target, loss
) -> tuple[Float[Array, ""], Float[Array, ""]]:
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
    """A step's record from its fits' :class:`~teng_eq.fit.stage.StageLog` s (one row each), its
    final ``loss``, the held-out check and the step's own ``metrics``."""
    width = max(log.loss.shape[0] for log in logs)
    events = jax.tree_util.tree_map(lambda *counts: sum(counts), *(log.events for log in logs))
    return StepRecord(
        losses=stack_rows([log.loss for log in logs], width),
        inner=stack_rows([jnp.concatenate([log.lsq, jnp.full(1, jnp.nan)]) for log in logs], width),
        metrics={"step_loss": loss, "holdout_loss": holdout_loss, "holdout_ratio": ratio,
                 "iterations": sum(log.iterations for log in logs), **events, **metrics},
    )
