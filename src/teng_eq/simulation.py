"""A whole run of any method: reference, stepping, error at every step, checkpoints.

The library's entry point for the pipeline: from a validated
:class:`~teng_eq.config.RunConfig` it builds the method (θ₀ is the method's
business) and reports each step to a callback as a :class:`~teng_eq.results.StepRecord`,
so that progress bars and experiment tracking stay outside the numerics. Timing:
``runtime_s`` and ``wall_time_s`` count the compiled steps alone (each waited for);
the error evaluation is ``eval_s``, compilation ``compile_s``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import numpy as np

from teng_eq.checkpoint import CheckpointStore, History
from teng_eq.config import RunConfig
from teng_eq.controller import ControllerState
from teng_eq.driver import Clock, Compiled, ErrorMeter, Recorder, RunState, Step, accepted_steps
from teng_eq.errors import Diverged
from teng_eq.initial_fit import FitReport
from teng_eq.methods.base import Method
from teng_eq.metrics import global_relative_l2
from teng_eq.results import EVENTS, StepRecord


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
    events: dict[str, int]  # solver events (teng_eq.results.EVENTS) summed over the run
    network: eqx.Module
    losses: list[np.ndarray]  # one (rows, 4) table per method step
    snapshots: dict[int, tuple[np.ndarray, np.ndarray]]  # time index -> (û, reference) on the eval points
    sequential: bool
    inner_measure: str  # what the loss tables' last column holds (Method.inner_measure)
    holdout: object = None  # the method's held-out limits (teng_eq.integrators.Holdout), if it has some
    resumed_from: int = 0  # the step of the checkpoint the run started from (0: from the start)
    checkpoint_s: float = 0.0  # time spent writing checkpoints (this attempt)
    est_rel_l2: np.ndarray | None = None  # (n_steps + 1,) the a-posteriori estimate; NaN without one
    # End-of-run numbers beyond the fields above (est_global_rel_l2, steps_accepted,
    # steps_rejected, iterations_total: stage iterations of every try, estimate_s).
    scalars: dict[str, float] = dataclasses.field(default_factory=dict)
    estimate: str = "none"  # the estimate it computed (teng_eq.estimate.KINDS; trapezoid where hermite cannot)

    @property
    def error(self) -> float:
        """The run's global error: against the reference, else its own estimate (NaN: neither)."""
        if self.global_rel_l2 is not None:
            return self.global_rel_l2
        return self.scalars.get("est_global_rel_l2", float("nan"))

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


def build_method(cfg: RunConfig, *, cache_dir=None, log: Callable[[str], None] | None = None) -> Method:
    """The method of ``cfg`` on its problem (θ₀ fitted or loaded where it needs one)."""
    return cfg.method.cls.build(cfg.method.options, cfg.problem, cache_dir=cache_dir, log=log)


def load_network(cfg: RunConfig, path) -> eqx.Module:
    """The network a run of ``cfg`` saved (``params/theta.eqx``, :func:`teng_eq.checkpoint.save_network`)."""
    return eqx.tree_deserialise_leaves(path, cfg.method.cls.network_template(cfg.method.options, cfg.problem))


def run_simulation(cfg: RunConfig, *, on_step: Callable[[StepRecord], None] | None = None,
        log: Callable[[str], None] | None = None, cache_dir=None, snapshot_steps: Sequence[int] = (),
        snapshot_times: Sequence[float] = (), checkpoints: CheckpointStore | None = None,
        checkpoint_every: int | None = None, divergence_factor: float = math.inf) -> RunResult:
    """Run ``cfg.method`` to ``t_final``, measuring the error at every time step and
    reporting each step to ``on_step`` as a :class:`~teng_eq.results.StepRecord`.

    With a fixed Δt, step n is at ``t = n·dt``; with ``dt: auto`` the controller
    (:mod:`teng_eq.controller`) chooses every Δt, and only accepted steps are steps
    (:func:`~teng_eq.driver.accepted_steps`); per step ``t`` and ``dt`` are logged and the
    reference is evaluated at whatever t a step reaches. A method with an estimator
    (``cfg.estimate``) also reports ``est_rel_l2``, its a-posteriori error estimate
    (:mod:`teng_eq.estimate`), which uses no reference. At ``snapshot_steps`` (with
    ``dt: auto``: at ``snapshot_times``, which the steps land on) both fields are kept
    for density plots.

    With ``checkpoints``, the run is saved every ``checkpoint_every`` steps and at the
    end, and starts from the store's checkpoint if it holds one: the steps up to it are
    replayed to ``on_step``, the later ones draw the keys of an uninterrupted run, and
    the result is the same. A non-finite metric, or a ``step_loss`` above
    ``divergence_factor`` times the median of the steps before it, raises
    :class:`~teng_eq.errors.Diverged`, as does a controller that needs a step below
    ``controller.dt_min``; whatever ends a run early (those, or an exception from
    ``on_step``: a stop a signal asked for), its last good step is saved first.
    """
    # --- Set-up: the method (θ₀ is its business), the reference, compiled functions --
    method = build_method(cfg, cache_dir=cache_dir, log=log)
    t0 = time.perf_counter()
    reference, reference_s = None, 0.0  # none: the run's error is its estimate
    if cfg.has_reference and cfg.adaptive:
        reference = cfg.equation.reference_anytime(cfg.t_final, cache_dir=cache_dir)
    elif cfg.has_reference:
        reference = cfg.equation.reference(np.arange(cfg.n_steps + 1) * cfg.dt, cache_dir=cache_dir)
    if reference is not None:
        reference_s = time.perf_counter() - t0
    key_run = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)  # step n draws fold_in(key_run, n)
    evaluation = cfg.equation.evaluation(cfg.eval_grid)
    compiled = Compiled.build(method, cfg, key_run, evaluation.points)
    meter = ErrorMeter(cfg, compiled, reference, evaluation.weights, steps=snapshot_steps, times=snapshot_times,
                       keep_states=method.sequential and checkpoints is not None)

    # --- The run's state: from its checkpoint, or from the start -------------------
    saved = checkpoints.load(method.init()) if checkpoints is not None else None
    if saved is not None:
        run = RunState.resumed(saved, compiled, cfg.adaptive)
        meter.restore(run)
        if log is not None:
            log(f"resuming from the checkpoint after step {run.n}"
                + (f" (t={run.t:.6g})" if cfg.adaptive else f" of {method.n_steps}"))
    else:
        run = start(method, cfg, compiled, meter)
    if on_step is not None:  # the start, and on a resume the steps already done
        for n in range(0 if method.sequential else 1, run.n + 1):
            on_step(run.history.record(n, method.n_steps, float(run.history.times[n]) if method.sequential else None))

    # --- The loop: accepted steps, each measured, kept, reported, checkpointed -------
    recorder = Recorder(checkpoints, checkpoint_every, method.n_steps, saved.step if saved is not None else -1)
    order = method.error_order(cfg.method.options)
    stops = cfg.controller.stops(cfg.t_final, snapshot_times) if cfg.adaptive else []
    with recorder.keeping(run):
        for step in accepted_steps(run, compiled, cfg, key_run, n_steps=method.n_steps, order=order, stops=stops):
            record = accept(run, step, method, cfg, meter, divergence_factor)
            if on_step is not None:
                on_step(record)
            recorder.after_step(run)
        recorder.save(run)
    if not method.sequential:  # a global-in-time method's field exists at every time only now
        for n in range(cfg.n_steps + 1):
            meter(n, run.state, run)
    return result(run, method, compiled, meter, reference_s, resumed_from=saved.step if saved is not None else 0,
                  checkpoint_s=checkpoints.seconds if checkpoints is not None else 0.0)


def start(method: Method, cfg: RunConfig, compiled: Compiled, meter: ErrorMeter) -> RunState:
    """A run at t = 0: its history sized for the steps it will take (grown under ``dt:
    auto``), θ₀'s error measured, and the estimate started from it (exact: u₀ is known)."""
    n_times = cfg.n_steps + 1 if not cfg.adaptive else 1
    history = History.empty(method.n_steps or 0, n_times)
    if not cfg.adaptive:
        history.times[:] = np.arange(n_times) * cfg.dt
    run = RunState(method.init(), 0, history, Clock(),
                   controller=ControllerState(dt=cfg.controller.dt_initial) if cfg.adaptive else None)
    if method.sequential:
        meter(0, run.state, run)
        if compiled.estimate is not None:
            run.estimate, history.u_sq[0] = compiled.estimate.start(run.state)
            history.est[0] = run.estimate.error
    return run


def accept(run: RunState, step: Step, method: Method, cfg: RunConfig, meter: ErrorMeter,
           divergence_factor: float) -> StepRecord:
    """Step n in: its error measured, the estimate advanced, checked for divergence (which
    raises, the run still at step n − 1), kept in the history, the run advanced to it;
    the record to report."""
    n, history = step.n, run.history
    method_metrics = {k: float(v) for k, v in step.record.metrics.items()}
    if step.dt is not None:  # dt: auto
        history.reserve(n)
        history.times[n] = step.t
        method_metrics.update(t=step.t, dt=step.dt)
    estimate, step_dt = meter.compiled.estimate, step.dt if step.dt is not None else cfg.dt
    if estimate is not None:
        clock = time.perf_counter()
        vectors, scalars = estimate.local(n, run.state, step.state, step_dt, run.t)
        history.u_sq[n] = scalars.pop("u_l2") ** 2
        method_metrics.update(scalars)
        run.clock.estimate_s += time.perf_counter() - clock
    metrics = dict(method_metrics)
    if method.sequential:
        if (rel_l2 := meter(n, step.state, run)) is not None:
            metrics["rel_l2"] = rel_l2
        if meter.compiled.boundary is not None:
            metrics["boundary_max_abs"] = float(history.boundary[n])
    why = divergence_reason(metrics, history.metrics.get("step_loss"), n, divergence_factor,
                            scale=float(history.ref_sq[n]) if method.sequential else 0.0)
    if why is None and estimate is not None:
        history.est[n] = run.estimate.advance(step_dt, method_metrics, vectors["defect"])
        metrics["est_rel_l2"] = float(history.est[n] / np.sqrt(history.u_sq[n]))
        if not np.isfinite(metrics["est_rel_l2"]):
            why = "non-finite est_rel_l2"
    if why is not None:
        where = f"step {n} (t={history.times[n]:.6g})" if method.sequential else f"block {n}"
        raise Diverged(f"{cfg.method.name} diverged at {where}: {why}", n, n - 1)
    run.clock.stepping += step.seconds
    history.wall[n - 1] = run.clock.stepping
    for k, v in method_metrics.items():
        history.metrics.setdefault(k, np.full(len(history.wall), np.nan))[n - 1] = v
    metrics["wall_time_s"] = run.clock.stepping
    record = step.record.at(metrics=metrics, step=n, of=method.n_steps,
                            t=float(history.times[n]) if method.sequential else None)
    history.tables.append(record.table())
    run.state, run.n = step.state, n
    return record


def result(run: RunState, method: Method, compiled: Compiled, meter: ErrorMeter, reference_s: float, *,
           resumed_from: int, checkpoint_s: float) -> RunResult:
    """The :class:`RunResult` of a run that reached its end."""
    history, n = run.history, run.n
    n_times = n + 1 if run.controller is not None else len(history.times)
    err_sq, ref_sq, times = history.err_sq[:n_times], history.ref_sq[:n_times], history.times[:n_times]
    per_step = {k: v[:n] for k, v in history.metrics.items()}
    scalars = {"iterations_total": run.iterations}
    if run.estimate is not None:
        scalars["est_global_rel_l2"] = global_relative_l2(history.est[:n_times] ** 2, history.u_sq[:n_times], times)
        scalars["estimate_s"] = run.clock.estimate_s
    if run.controller is not None:
        scalars["steps_accepted"], scalars["steps_rejected"] = run.controller.accepted, run.controller.rejected
    measured = meter.reference is not None
    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq) if measured else None, metrics=per_step,
        wall_time_s=history.wall[:n], global_rel_l2=global_relative_l2(err_sq, ref_sq, times) if measured else None,
        runtime_s=run.clock.stepping,
        eval_s=run.clock.eval_s, compile_s=compiled.seconds, fit_report=method.fit_report(),
        reference_s=reference_s, events={k: int(np.nansum(per_step[k])) for k in EVENTS if k in per_step},
        network=method.network(run.state), losses=history.tables, snapshots=meter.snapshots,
        sequential=method.sequential, inner_measure=method.inner_measure, holdout=method.holdout_limits(),
        resumed_from=resumed_from, checkpoint_s=checkpoint_s,
        est_rel_l2=history.est[:n_times] / np.sqrt(history.u_sq[:n_times]), scalars=scalars,
        estimate=compiled.estimate.kind if compiled.estimate is not None else "none",
    )


def divergence_reason(metrics: Mapping[str, float], losses: np.ndarray | None, n: int, factor: float,
                      scale: float = 0.0) -> str | None:
    """Why step ``n`` with ``metrics`` counts as diverged (``losses``: the step losses
    so far, by step), or None. The median they are compared with is floored at
    ``ε·scale`` (``scale`` = ‖u_ref‖² at the step, ε the float64 machine epsilon):
    losses at round-off level may jump by orders of magnitude without diverging."""
    bad = sorted(k for k, v in metrics.items() if not np.isfinite(v))
    if bad:
        return f"non-finite {', '.join(bad)}"
    loss = metrics.get("step_loss")
    if loss is None or losses is None or n < 2:
        return None
    median = max(float(np.median(losses[: n - 1])), float(np.finfo(np.float64).eps) * scale)
    if median > 0 and loss > factor * median:
        return (f"step_loss {loss:.3e} is {loss / median:.3g} times the median of the steps before it "
                f"(divergence_factor={factor:g})")
    return None
