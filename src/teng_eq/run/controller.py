"""The step-size controller of ``dt: auto``: a standard PI controller on the host,
between compiled steps (the ``controller`` config group).

A step of size h from t is tried; the method reports its embedded local error
estimate (:class:`~teng_eq.stepping.explicit.TENGStep`: ``local_error``, of order
k = ``error_order`` in h), its fit's residual and ``‖û‖`` (``u_l2``); ``err_est`` is the
estimate plus the residual under ``error: whole`` (:meth:`Controller.local`). With the scaled error

    r = err_est / (atol + rtol ‖û‖),

the step is accepted when r ≤ 1, else redone from the same θ with a smaller h (nothing
of a rejected try is logged as a step): :meth:`Controller.decide`, which the run loop
applies (:func:`teng_eq.run.loop.advance`). The next h (Gustafsson's PI controller, in the
form and with the gains of Hairer & Wanner, *Solving ODEs II*, §IV.2):

    accepted:  h_new = h · clip(safety · r_n^(−0.7/k) · r_{n−1}^(0.4/k), factor_min, factor_max)
    rejected:  h_new = h · clip(safety · r_n^(−1/k), factor_min, 1)

no growth right after a rejection, and h within [``dt_min``, ``dt_max``]. Steps land
exactly on the horizon and on the requested output times (:meth:`Controller.plan`).

Why not ``diffrax.PIDController``: it is written for diffrax's own solve loop (its
state, its jump handling, a pointwise RMS norm of y against y₀ and y₁), whereas here
the error is one L² number per step, computed inside a compiled TENG step, and the
controller's state must be a handful of floats that a checkpoint holds and a resumed
run continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import ClassVar

from teng_eq.errors import bad


@dataclasses.dataclass(frozen=True)
class ControllerState:
    """What the controller carries from step to step (checkpointed as floats): the
    next step size it proposes (before any landing clip), the previous accepted
    step's scaled error, whether the last try was rejected, and the counts."""

    dt: float
    ratio: float = 1.0
    after_reject: bool = False
    accepted: int = 0
    rejected: int = 0

    def as_info(self) -> dict[str, float]:
        return {"ctrl_dt": self.dt, "ctrl_ratio": self.ratio, "ctrl_after_reject": float(self.after_reject),
                "ctrl_accepted": float(self.accepted), "ctrl_rejected": float(self.rejected)}

    @classmethod
    def from_info(cls, info) -> ControllerState:
        return cls(dt=info["ctrl_dt"], ratio=info["ctrl_ratio"], after_reject=bool(info["ctrl_after_reject"]),
                   accepted=int(info["ctrl_accepted"]), rejected=int(info["ctrl_rejected"]))


@dataclasses.dataclass(frozen=True)
class Controller:
    """The ``controller`` config group (module docstring): tolerances ``rtol`` and
    ``atol`` (relative to ‖û‖ and absolute, L² norms), the first try ``dt_initial`` (a
    number, or ``auto``: :meth:`first_step`), bounds ``dt_min``, ``dt_max``, the ``safety``
    factor, ``outputs``: the horizon is split into this many equal intervals whose
    ends every run lands on, ``stability_cap``: whether a try is kept below the stable
    step of the fit's fastest mode (:meth:`teng_eq.run.schedule.Adaptive.stable_step`), and
    ``error``: what a try is judged on (:meth:`local`)."""

    rtol: float
    atol: float
    dt_initial: float | str
    dt_min: float
    dt_max: float
    safety: float
    outputs: int
    stability_cap: bool = True
    error: str = "whole"

    #: What a try is judged on (:meth:`local`): ``time``, the embedded pair's difference
    #: alone; ``whole``, that and the step's fit (projection) error.
    ERRORS: ClassVar[tuple[str, ...]] = ("time", "whole")

    #: Bounds of the step-size ratio per step (Hairer & Wanner's usual values).
    factor_min: ClassVar[float] = 0.2
    factor_max: ClassVar[float] = 5.0

    def validate(self, prefix: str) -> None:
        if not (self.rtol >= 0 and self.atol >= 0 and self.rtol + self.atol > 0):
            raise bad(f"{prefix}.rtol", self.rtol,
                      f"rtol and atol must be >= 0, not both 0 (atol={self.atol})")
        if self.dt_initial != "auto" and not (isinstance(self.dt_initial, float)
                                              and 0 < self.dt_min <= self.dt_initial <= self.dt_max):
            raise bad(f"{prefix}.dt_initial", self.dt_initial,
                f"must be auto or satisfy 0 < dt_min={self.dt_min} <= dt_initial <= dt_max={self.dt_max}")
        if not 0 < self.dt_min <= self.dt_max:
            raise bad(f"{prefix}.dt_min", self.dt_min, f"must satisfy 0 < dt_min <= dt_max={self.dt_max}")
        if not 0 < self.safety <= 1:
            raise bad(f"{prefix}.safety", self.safety, "must be in (0, 1]")
        if self.outputs < 1:
            raise bad(f"{prefix}.outputs", self.outputs, "must be an integer >= 1")
        if self.error not in self.ERRORS:
            raise bad(f"{prefix}.error", self.error, f"must be one of {', '.join(self.ERRORS)}")

    def local(self, metrics) -> float:
        """A try's local error from its step record's ``metrics``: ``local_error`` (the
        embedded pair's ‖Δt Σⱼ b_errorⱼ kⱼ‖, the time error alone), under ``error: whole``
        plus the final fit's residual ‖û_{t+Δt} − target‖, which the embedded pair cannot
        see: ``√holdout_loss`` where held-out points measure it between the nodes, else
        ``√step_loss``. Both errors enter û_{t+Δt} together, so their sum bounds its error
        (the stage fits' own residuals enter through the slopes, times Δt)."""
        error = float(metrics["local_error"])
        if self.error == "whole":
            fit = float(metrics.get("holdout_loss", math.nan))
            error += math.sqrt(max(fit if math.isfinite(fit) else float(metrics["step_loss"]), 0.0))
        return error

    def first_step(self, norm: float, derivative: float | None, constant: float, order: int,
                   t_final: float) -> float:
        """The first try's size: ``dt_initial``, or under ``auto`` the size whose embedded
        estimate ``|C| Δt^q ‖∂ₜ^q u‖`` (``constant`` C, ``order`` q, ``derivative`` ‖∂ₜ^q u‖ at
        t = 0) is ``safety`` times the tolerance ``atol + rtol ‖û₀‖`` (``norm``), within
        [``dt_min``, ``dt_max``]; without a derivative (off a periodic box, another estimate)
        ``t_final``/200."""
        if self.dt_initial != "auto":
            return self.dt_initial
        if derivative is None or constant == 0.0:
            h = t_final / 200
        elif derivative * abs(constant) <= 0.0:
            h = self.dt_max
        else:
            h = (self.safety * (self.atol + self.rtol * norm) / (abs(constant) * derivative)) ** (1.0 / order)
        return min(max(h, self.dt_min), self.dt_max, t_final)

    def stops(self, t_final: float, extra: Sequence[float] = ()) -> list[float]:
        """The times every run lands on: ``t_final·k/outputs`` (k = 1 … outputs) and the
        ``extra`` ones inside (0, t_final], in order, the last exactly ``t_final``."""
        grid = {t_final * k / self.outputs for k in range(1, self.outputs)}
        grid |= {float(t) for t in extra if 0 < t < t_final}
        return sorted(grid) + [t_final]

    def plan(self, t: float, dt: float, stops: Sequence[float]) -> tuple[float, float]:
        """The next try from t with proposed size ``dt``: ``(h, t + h)``, where a step that
        reaches the next stop lands on it exactly (``t + h`` is then the stop itself),
        and one that would leave less than a step before it is cut into two equal
        ones, so that no sliver of a step is ever taken."""
        stop = next(s for s in stops if s > t)
        h, left = min(dt, self.dt_max), stop - t
        if h >= left * (1 - 1e-12):
            return left, stop
        if 2 * h > left:
            h = left / 2
        return h, t + h

    def decide(self, state: ControllerState, h: float, error: float, norm: float,
               order: int) -> tuple[bool, ControllerState, float]:
        """A try of size ``h`` with estimate ``error`` (of ``order``), ``‖û‖ = norm``, judged:
        ``(keep, the state after it, r)``, kept (:meth:`accept`) when r ≤ 1, else rejected."""
        r = self.ratio(error, norm)
        if r <= 1.0:
            return True, self.accept(state, h, r, order, clipped=h < state.dt), r
        return False, self.reject(state, h, r, order), r

    def ratio(self, error: float, norm: float) -> float:
        """The scaled error ``r``; a non-finite estimate counts as too large."""
        r = error / (self.atol + self.rtol * norm)
        return r if math.isfinite(r) else math.inf

    def accept(self, state: ControllerState, h: float, r: float, order: int,
               clipped: bool) -> ControllerState:
        """The state after accepting a step of size ``h`` with scaled error ``r`` (an
        estimate of order ``order``); ``clipped``: ``h`` was shortened to land on a stop,
        so the proposal it was cut from stays the floor of the next one."""
        r_safe = max(r, 1e-10)
        factor = self.safety * r_safe ** (-0.7 / order) * max(state.ratio, 1e-10) ** (0.4 / order)
        factor = min(max(factor, self.factor_min), 1.0 if state.after_reject else self.factor_max)
        dt = h * factor
        if clipped:
            dt = max(dt, state.dt)
        return ControllerState(dt=min(max(dt, self.dt_min), self.dt_max), ratio=r_safe, after_reject=False,
                               accepted=state.accepted + 1, rejected=state.rejected)

    def reject(self, state: ControllerState, h: float, r: float, order: int) -> ControllerState:
        """The state after rejecting a try of size ``h`` with scaled error ``r``: a
        smaller proposal (which may fall below ``dt_min``: :meth:`too_small`)."""
        factor = self.factor_min if not math.isfinite(r) else self.safety * r ** (-1.0 / order)
        dt = h * min(max(factor, self.factor_min), 1.0)
        return dataclasses.replace(state, dt=dt, after_reject=True, rejected=state.rejected + 1)

    def too_small(self, state: ControllerState) -> bool:
        return state.dt < self.dt_min * (1 - 1e-12)
