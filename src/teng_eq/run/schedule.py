"""A run's schedule of steps: what the run loop (:mod:`teng_eq.run.loop`) asks of it, one
protocol for both — the first try, each try's size, whether a try is kept, whether the run
is done, and whether tries are capped by the stable step — :class:`FixedSteps` (every try
kept) and :class:`Adaptive` (``dt: auto``: a rejected try is redone from the same state
with the same key and a smaller Δt).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

from teng_eq.run.controller import Controller, ControllerState


@dataclasses.dataclass(frozen=True)
class FixedSteps:
    """``n_steps`` steps of ``dt`` (or blocks), step n ending at ``n·dt``; every try kept."""

    dt: float
    n_steps: int
    logs_time = False  # t and Δt are known in advance: not logged per step
    capped = False  # Δt is given: no stable step caps it
    dt_min = 0.0

    def first(self, norm: float, derivative: float | None, cap: float = math.inf,
              oscillatory: bool = False) -> None:
        return None

    def resumed(self, info) -> None:
        return None

    def stable_step(self, radius: float | None) -> float:
        return math.inf

    def done(self, state) -> bool:
        return state.n >= self.n_steps

    def propose(self, state, controller, cap: float = math.inf) -> tuple[float, float]:
        return self.dt, (state.n + 1) * self.dt

    def judge(self, controller, h: float, metrics) -> tuple[bool, None, None]:
        return True, None, None


@dataclasses.dataclass(frozen=True)
class Adaptive:
    """``dt: auto``: the ``controller`` proposes each step's size, landing on ``stops``, and
    judges each try by its embedded estimate of ``order``: ``(keep, its state after it, why
    the run cannot go on or None)``. A try is at most ``cap`` (:meth:`stable_step`)."""

    controller: Controller
    stops: Sequence[float]
    order: int
    constant: float  # of the embedded estimate's leading term (Method.error_constant)
    stability: float | None = None  # x of the step's stability interval [−x, 0] (Method.stability_limit)
    logs_time = True
    capped = True

    #: The share of the stable step (``cap``) a first try of ``dt_initial: auto`` may take where
    #: the cap is a real decay's: θ₀'s fit residual between the nodes is no part of the error
    #: model, and a first step at the stable step left Kuramoto–Sivashinsky's to grow until the
    #: run failed. Where the cap is that of rates off the real axis (KdV's dispersion, a wave),
    #: the first try may take all of it: KdV's from its first step at the cap keeps the fixed
    #: Δt's error, and a quarter of it costs a step the fixed Δt does not take.
    FIRST_OF_CAP: ClassVar[float] = 0.25

    def first(self, norm: float, derivative: float | None, cap: float = math.inf,
              oscillatory: bool = False) -> ControllerState:
        """The controller's state before the first try (:meth:`Controller.first_step`), at
        most ``cap`` (a number ``dt_initial``, or ``oscillatory``: the cap is that of rates off
        the real axis, :func:`~teng_eq.estimate.transport.oscillatory`) or :attr:`FIRST_OF_CAP`
        of it (``auto`` on a real decay)."""
        h = self.controller.first_step(norm, derivative, self.constant, self.order, self.stops[-1])
        whole = self.controller.dt_initial != "auto" or oscillatory
        return ControllerState(min(h, cap * (1.0 if whole else self.FIRST_OF_CAP)))

    @property
    def dt_min(self) -> float:
        return self.controller.dt_min

    def resumed(self, info) -> ControllerState:
        """The controller's state a checkpoint's ``info`` kept."""
        return ControllerState.from_info(info)

    def stable_step(self, radius: float | None) -> float:
        """``safety · x / ρ``: the largest step stable on every mode the fit resolves, which
        L′[û] damps at rates up to ``radius`` ρ (:meth:`~teng_eq.estimate.transport.Transport.radius`).
        An explicit step beyond it amplifies the fastest of them by more than 1 per step,
        unseen by the embedded estimate until it dominates (biharmonic κ = 0.01 on 32²
        diverged so at t = 0.036 without the cap). ∞: no cap (no radius, no stability limit,
        ``controller.stability_cap: false``)."""
        if self.stability is None or not radius or not self.controller.stability_cap:
            return math.inf
        return self.controller.safety * self.stability / radius

    def done(self, state) -> bool:
        return state.t >= self.stops[-1]

    def propose(self, state, controller: ControllerState, cap: float = math.inf) -> tuple[float, float]:
        return self.controller.plan(state.t, min(controller.dt, cap), self.stops)

    def judge(
        self, controller: ControllerState, h: float, metrics
    ) -> tuple[bool, ControllerState, str | None]:
        keep, after, r = self.controller.decide(controller, h, self.controller.local(metrics),
                                                float(metrics["u_l2"]), self.order)
        if keep or not self.controller.too_small(after):
            return keep, after, None
        why = (f"the step-size controller needs a step below controller.dt_min={self.controller.dt_min:g} "
               f"(its estimate: {r:.3g} times the tolerance at Δt={h:.3g})")
        fit = r * (1.0 - float(metrics["local_error"]) / max(self.controller.local(metrics), 1e-300))
        if fit > 0.5:  # the fit's residual, which a smaller step does not remove, holds it
            why += (f"; the fit's residual alone is {fit:.3g} times it: a looser controller.rtol, more "
                    "iterations, or controller.error=time (the embedded estimate alone)")
        return keep, after, why


def below_dt_min(name: str, t: float, cap: float, dt_min: float) -> str:
    """Why a run under ``dt: auto`` cannot go on at time t: its stable step ``cap``
    (:meth:`Adaptive.stable_step`) is below ``controller.dt_min``, and what can."""
    return (f"{name}: at t={t:.6g} the stable step {cap:.3g} (the fastest mode the fit resolves) is below "
            f"controller.dt_min={dt_min:g}: an explicit step cannot follow it (take an implicit method, "
            "or on imaginary rates method=teng_rk4 or teng_bs3, whose regions hold part of the imaginary "
            "axis)")
