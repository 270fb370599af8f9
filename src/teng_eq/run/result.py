"""What a run keeps and returns: :class:`Row`, what the run loop keeps of an accepted step
(from which the record handed to the callbacks, and replayed after a resume, is made), the
:class:`History` of a run's rows, the :class:`RunResult` of a whole run and its
:class:`FinalField`."""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Mapping

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.fit.results import StepRecord
from teng_eq.fit.theta0 import FitReport
from teng_eq.run.config import RunConfig


def run_error(metrics: Mapping[str, float | None]) -> float:
    """A run's global error from its end-of-run metrics: ``global_rel_l2`` (against the
    reference), else ``est_global_rel_l2`` (its own estimate); NaN where it has neither."""
    for key in ("global_rel_l2", "est_global_rel_l2"):
        if metrics.get(key) is not None:
            return float(metrics[key])
    return math.nan


@dataclasses.dataclass(frozen=True)
class Row:
    """What the run loop (:mod:`teng_eq.run.loop`) keeps of time index ``n`` of a sequential
    run (``t`` its time; n = 0 the start), or of block ``n`` of a global-in-time one (``t``
    None): the step's ``metrics`` (the method's, the estimate's, ``t`` and ``dt`` under
    ``dt: auto``), its loss ``table``, the stepping seconds up to it (``wall``); at its
    time ``err_sq`` and ``ref_sq`` (‖û − u_ref‖², ‖u_ref‖²; without a reference NaN and
    ‖û‖²), ``u_sq`` and ``est`` (‖û‖² and ``E_n`` on the estimate's points), ``boundary``:
    max |αû + β∂ₙû − data| on the domain's boundary points, the Monte Carlo standard error of
    ``rel_l2`` on sampled points
    (``rel_se``); at a snapshot, (û, u_ref) for the density plot and (with
    checkpoints) the method's ``state`` as bytes, from which a resumed run makes it again."""

    n: int
    t: float | None
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    table: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 4)))  # the start ran none
    wall: float = math.nan
    err_sq: float = math.nan
    ref_sq: float = 0.0
    u_sq: float = 0.0
    est: float = math.nan
    boundary: float = math.nan
    rel_se: float = math.nan
    snapshot: tuple[np.ndarray, np.ndarray | None] | None = None
    state: np.ndarray | None = None

    def record(self, of: int | None) -> StepRecord:
        """The step as reported to the pipeline (``of``: the run's steps, None when not
        known yet): its metrics with ``rel_l2``, ``boundary_error``, ``est_rel_l2``
        where measured and ``wall_time_s``."""
        metrics = dict(self.metrics)
        if self.t is not None:
            if np.isfinite(self.err_sq):
                metrics["rel_l2"] = float(np.sqrt(np.float64(self.err_sq) / self.ref_sq))
            if np.isfinite(self.boundary):
                metrics["boundary_error"] = float(self.boundary)
            if np.isfinite(self.rel_se):
                metrics["rel_l2_se"] = float(self.rel_se)
            if np.isfinite(self.est):
                metrics["est_rel_l2"] = float(self.est / np.sqrt(self.u_sq))
        if self.n > 0:
            metrics["wall_time_s"] = float(self.wall)
        return StepRecord.from_table(self.table, metrics, step=self.n, of=of, t=self.t)


class History:
    """A run's rows, appended one at a time at no cost that grows with their number: the
    versions of one append-only log. Each version is a value — its ``len`` rows and the
    median of their step losses (``median``, what divergence is judged by) — sharing
    the log with the versions after it, so that :meth:`appended` copies nothing; only the
    newest version may append (the run loop's, which keeps one line of states)."""

    __slots__ = ("_log", "_length", "median")

    def __init__(self, rows=(), *, _log=None, _length=None, median=None):
        if _log is None:
            _log = _Log()
            for row in rows:
                _log.add(row)
            _length, median = len(_log.rows), _log.median()
        self._log, self._length, self.median = _log, _length, median

    def appended(self, row: Row) -> History:
        """This history and ``row`` after it."""
        if self._length != len(self._log.rows):
            raise RuntimeError("a run's history grows from its newest version only")
        self._log.add(row)
        return History(_log=self._log, _length=self._length + 1, median=self._log.median())

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> Row:
        if not -self._length <= i < self._length:
            raise IndexError(i)
        return self._log.rows[i % self._length]

    def __iter__(self):
        return iter(self._log.rows[: self._length])


class _Log:
    """History's shared rows and the running median of their ``step_loss`` (two heaps)."""

    def __init__(self):
        self.rows: list[Row] = []
        self.low: list[float] = []  # the smaller half, negated (a max-heap)
        self.high: list[float] = []  # the larger half

    def add(self, row: Row) -> None:
        self.rows.append(row)
        if row.n == 0 or "step_loss" not in row.metrics:
            return
        heapq.heappush(self.low, -float(row.metrics["step_loss"]))
        heapq.heappush(self.high, -heapq.heappop(self.low))
        if len(self.high) > len(self.low):
            heapq.heappush(self.low, -heapq.heappop(self.high))

    def median(self) -> float | None:
        if not self.low:
            return None
        if len(self.low) > len(self.high):
            return -self.low[0]
        return (-self.low[0] + self.high[0]) / 2


@dataclasses.dataclass
class RunResult:
    times: np.ndarray  # (n_steps + 1,) physical times t_n (n·dt, or the controller's)
    rel_l2: np.ndarray | None  # (n_steps + 1,) error at each t_n, index 0 the start; None: no reference
    metrics: dict[str, np.ndarray]  # the method's, per method step, each (steps,)
    wall_time_s: np.ndarray  # (steps,) cumulative stepping time
    global_rel_l2: float | None  # None: no reference
    runtime_s: float
    eval_s: float
    compile_s: float
    fit_report: FitReport | None  # None when the method does not start from θ₀
    reference_s: float
    events: dict[str, int]  # solver events (teng_eq.fit.results.EVENTS) summed over the run
    network: eqx.Module
    losses: list[np.ndarray]  # one (rows, 4) table per method step
    snapshots: dict[int, tuple[np.ndarray, np.ndarray]]  # time index -> (û, reference) on the eval points
    sequential: bool
    inner_measure: str  # what the loss tables' last column holds (Method.inner_measure)
    holdout: object = None  # the method's held-out limits (teng_eq.stepping.base.Holdout), if it has some
    resumed_from: int = 0  # the step of the checkpoint the run started from (0: from the start)
    checkpoint_s: float = 0.0  # time spent writing checkpoints (this attempt)
    est_rel_l2: np.ndarray | None = None  # (n_steps + 1,) the a-posteriori estimate; NaN without one
    # End-of-run numbers beyond the fields above (est_global_rel_l2, steps_accepted,
    # steps_rejected, iterations_total: stage iterations of every try, estimate_s).
    scalars: dict[str, float] = dataclasses.field(default_factory=dict)
    # the estimate it computed (teng_eq.estimate.defect.KINDS; trapezoid where hermite cannot)
    estimate: str = "none"
    config: RunConfig | None = None  # the run's

    @property
    def field(self) -> FinalField:
        """û at the run's end, to evaluate on any points or on a grid (:class:`FinalField`)."""
        return FinalField(self.config, self.network)

    @property
    def error(self) -> float:
        """The run's global error: against the reference, else its own estimate (NaN: neither)."""
        return run_error({**self.scalars, "global_rel_l2": self.global_rel_l2})

    @property
    def step_loss(self) -> np.ndarray:
        return self.metrics["step_loss"]

    @property
    def holdout_flag(self) -> str:
        """The held-out check over the run (``ok``, ``warn``, ``fail``); ``ok`` without one."""
        if self.holdout is None or "holdout_ratio" not in self.metrics:
            return "ok"
        return self.holdout.flag(self.metrics["holdout_ratio"])

    def loss_table(self) -> np.ndarray:
        """Every iteration of the run, rows ``(step, t, stage, iteration, loss, <inner_measure>)``
        (``t`` is NaN for a global-in-time method's blocks)."""
        return np.concatenate([
            np.column_stack([np.full(len(tab), n),
                             np.full(len(tab), self.times[n] if self.sequential else np.nan), tab])
            for n, tab in enumerate(self.losses, start=1)
        ])


@dataclasses.dataclass(frozen=True)
class FinalField:
    """A run's solution at its end, to evaluate anywhere: ``field(points)`` is û at
    ``points`` (n, dim) → (n,) (a global-in-time method's network at any ``t``, by default
    the horizon); ``field.on_grid(m)`` the points of the equation's evaluation grid (m per
    dimension; default the run's ``eval_grid``) and û there. A system's: every component,
    (n, m) at spatial points (its grid's points once). ``RunResult.field``, or a saved
    run's (:func:`teng_eq.api.load_run`)."""

    config: RunConfig
    network: eqx.Module

    def __call__(self, points: Float[Array, "n dim"], t: float | None = None) -> np.ndarray:
        points = jnp.asarray(points, jnp.float64)
        if points.ndim != 2 or points.shape[1] != self.config.equation.dim:
            raise ValueError(f"points must be (n, {self.config.equation.dim}), not {points.shape}")
        if not self.config.method.cls.sequential:  # a space-time network
            t = self.config.t_final if t is None else t
            points = jnp.concatenate([points, jnp.full((points.shape[0], 1), t)], axis=1)
        if self.config.equation.components:
            return np.asarray(eqx.filter_jit(lambda net, p: jax.vmap(net.vector)(p))(self.network, points))
        return np.asarray(eqx.filter_jit(lambda net, p: net(p))(self.network, points))

    def on_grid(self, m: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        equation, m = self.config.equation, m or self.config.eval_grid
        # A system's grid: its points once (its quadratures' rows repeat them per component).
        points = np.asarray((equation.spatial(m) if equation.components else equation.evaluation(m)).points)
        return points, self(points)
