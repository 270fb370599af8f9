"""A whole run of any method: reference, stepping, error at every step, checkpoints.

The library's entry point for the pipeline: from a validated
:class:`~teng_eq.config.RunConfig` it builds the method (θ₀ is the method's
business) and reports each step to a callback as a :class:`~teng_eq.results.StepRecord`,
so that progress bars and experiment tracking stay outside the numerics. Timing:
``runtime_s`` and ``wall_time_s`` count the compiled steps alone (each waited for);
the error evaluation is ``eval_s``, compilation ``compile_s``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence

import equinox as eqx
import jax
import numpy as np

from teng_eq.checkpoint import CheckpointStore, History, state_bytes, state_from_bytes
from teng_eq.config import RunConfig
from teng_eq.controller import ControllerState
from teng_eq.errors import Diverged
from teng_eq.estimate import ErrorEstimate
from teng_eq.initial_fit import FitReport
from teng_eq.methods.base import Method
from teng_eq.metrics import global_relative_l2, squared_norms
from teng_eq.results import EVENTS, StepRecord


@dataclasses.dataclass
class RunResult:
    times: np.ndarray  # (n_steps + 1,) physical times t_n (n·dt, or the controller's)
    rel_l2: np.ndarray  # (n_steps + 1,) error at each t_n; index 0 is the start
    metrics: dict[str, np.ndarray]  # the method's, per method step, each (steps,)
    wall_time_s: np.ndarray  # (steps,) cumulative stepping time
    global_rel_l2: float
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


def lower_step(method: Method, state, key, *, takes_dt: bool, expects: bool) -> jax.stages.Lowered:
    """``method.step`` traced for compilation: ``(state, key[, dt][, expected])``.

    A closure, not the bound method: the method's arrays (grid, index tables) become
    constants of the one compiled step. Δt is an argument wherever the step takes one
    (``takes_dt``: a method that can run under the controller), at a fixed Δt too: runs
    that differ only in Δt (a Δt sweep) then lower to the same program, which jax's
    persistent compilation cache (:func:`teng_eq.cache.compilation_folder`) compiles once
    for all of them."""
    if expects:
        return jax.jit(lambda s, k, dt, e: method.step(s, k, dt, e)).lower(state, key, 0.0, 0.0)
    if takes_dt:
        return jax.jit(lambda s, k, dt: method.step(s, k, dt)).lower(state, key, 0.0)
    return jax.jit(lambda s, k: method.step(s, k)).lower(state, key)


def run_simulation(cfg: RunConfig, *, on_step: Callable[[StepRecord], None] | None = None,
        log: Callable[[str], None] | None = None, cache_dir=None, snapshot_steps: Sequence[int] = (),
        snapshot_times: Sequence[float] = (), checkpoints: CheckpointStore | None = None,
        checkpoint_every: int | None = None, divergence_factor: float = math.inf) -> RunResult:
    """Run ``cfg.method`` to ``t_final`` and measure the error at every time step.

    With a fixed Δt, step n is at ``t = n·dt``; with ``dt: auto`` the step-size
    controller (:mod:`teng_eq.controller`) chooses every Δt from the method's embedded
    error estimate, redoes a rejected try from the same state with a smaller Δt (only
    accepted steps are steps: recorded, measured, counted in ``steps_accepted``; the
    tries in ``steps_rejected``), and lands exactly on its output times and on
    ``t_final``; per step ``t`` and ``dt`` are logged, and the reference is evaluated
    at whatever t a step reaches (:meth:`~teng_eq.equations.Equation.reference_anytime`).

    Every step of a method with an estimator (``cfg.estimate``, :mod:`teng_eq.estimate`)
    also reports ``est_rel_l2``, the a-posteriori error estimate, which uses no reference;
    its components (``defect_l2``, ``trapezoid_l2``, ``growth_rate``) are logged beside it.

    At each of ``snapshot_steps`` (time indices; with ``dt: auto``, at each of
    ``snapshot_times``, which the steps land on) the method's and the reference
    fields on the evaluation points are kept (``RunResult.snapshots``), for
    density plots.

    With ``checkpoints``, the run is saved every ``checkpoint_every`` steps and at
    the end (:mod:`teng_eq.checkpoint`; with the controller's and the estimate's
    state), and starts from the store's checkpoint if it holds one: steps up to it
    are not recomputed but replayed to ``on_step`` (same records, same order), and
    the steps after it draw the same random keys as an uninterrupted run, so the
    result is the same.

    A non-finite metric, or a ``step_loss`` above ``divergence_factor`` times the
    median of the steps before it, raises :class:`~teng_eq.errors.Diverged`
    (after saving the last good step, with ``checkpoints``); so does a controller
    that needs a step below ``controller.dt_min``. An exception from ``on_step``
    (e.g. :class:`~teng_eq.interrupts.Interrupted` at the end of a step) is raised
    after saving the step it reported.
    """
    method = build_method(cfg, cache_dir=cache_dir, log=log)
    equation, adaptive, control = cfg.equation, cfg.adaptive, cfg.controller
    order = method.error_order(cfg.method.options)  # of the step's embedded estimate

    t0 = time.perf_counter()
    if adaptive:
        reference = equation.reference_anytime(cfg.t_final, cache_dir=cache_dir)
        stops = control.stops(cfg.t_final, snapshot_times)
    else:
        fixed_times = np.arange(cfg.n_steps + 1) * cfg.dt
        reference = equation.reference(fixed_times, cache_dir=cache_dir)
    reference_s = time.perf_counter() - t0

    # Step n draws fold_in(key_run, n): a resumed run draws the same keys.
    key_run = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)
    state = method.init()
    evaluation = equation.evaluation(cfg.eval_grid)
    t0 = time.perf_counter()
    expects = method.expects_error  # the stages' floor follows the expected local error
    takes_dt = adaptive or order > 0
    step_fn = lower_step(method, state, key_run, takes_dt=takes_dt, expects=expects).compile()
    evaluate = jax.jit(lambda s, t: method.values(s, evaluation.points, t)).lower(state, 0.0).compile()
    # Where the domain has a Dirichlet boundary (u = 0), |û| there is reported each step.
    boundary = equation.boundary_points(cfg.eval_grid)
    on_boundary = None if boundary is None else (
        jax.jit(lambda s, t: method.values(s, boundary, t)).lower(state, 0.0).compile())
    defect = None if cfg.estimate == "none" else method.defect(cfg.estimate.startswith("hermite"))
    if defect is not None:
        # The fields (derivatives up to fourth order) are compiled once and evaluated once
        # per accepted step: a step's end is the next one's start.
        def fields_of(s):
            return defect.fields(method.parameters(s))

        fields_fn = jax.jit(fields_of).lower(state).compile()
        shapes = jax.eval_shape(fields_of, state)
        combine_fn = jax.jit(lambda a, b, dt: defect.combine(a, b, dt)).lower(shapes, shapes, 0.0).compile()
        end_fields: list = [None, None]  # (step, fields of its end state)
        initial_fn = jax.jit(lambda s: defect.initial(method.parameters(s))).lower(state).compile()
    compile_s = time.perf_counter() - t0

    steps, sequential = method.steps, method.sequential
    snapshots: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    wanted_steps, wanted_times = set(snapshot_steps), {float(t) for t in snapshot_times}
    # Times: one per step for TENG and TDVP, every Δt of the horizon for block methods.
    n_times = steps + 1 if adaptive else cfg.n_steps + 1
    history = History.empty(steps, n_times)
    if not adaptive:
        history.times[:] = fixed_times
    estimate = None
    clock = {"stepping": 0.0, "eval_s": 0.0, "estimate_s": 0.0, "iterations_total": 0.0}
    controller = ControllerState(dt=control.dt_initial) if adaptive else None
    done = 0

    def expected_error(n: int, h: float) -> float:
        """The local error step n of size h may expect: the last step's embedded estimate,
        scaled by (h / its Δt)^order (0 before the first step: the stages run to their caps)."""
        if n < 2:
            return 0.0
        h_last = float(history.times[n - 1] - history.times[n - 2])
        return float(history.metrics["local_error"][n - 2]) * (h / h_last) ** order

    def t_of(n: int) -> float | None:
        return float(history.times[n]) if sequential else None

    def reference_at(n: int) -> np.ndarray:
        if adaptive:
            return reference.values_at(float(history.times[n]), cfg.eval_grid)
        return reference.values(n, cfg.eval_grid)

    def measure(n: int, state) -> float:
        start = time.perf_counter()
        u = np.asarray(evaluate(state, history.times[n]))
        ref = reference_at(n)
        wanted = n in wanted_steps if not adaptive else float(history.times[n]) in wanted_times
        if wanted:
            snapshots[n] = (u, ref)
            if sequential and checkpoints is not None:
                history.snapshot_states[n] = state_bytes(state)
        history.err_sq[n], history.ref_sq[n] = squared_norms(u, ref, evaluation.weights)
        if on_boundary is not None:
            history.boundary[n] = float(np.max(np.abs(np.asarray(on_boundary(state, history.times[n])))))
        clock["eval_s"] += time.perf_counter() - start
        return float(np.sqrt(history.err_sq[n] / history.ref_sq[n]))

    def save(n: int, state) -> None:
        info = dict(clock, est_error=estimate.error if estimate is not None else math.nan)
        if controller is not None:
            info.update(controller.as_info())
        if estimate is not None:
            history.est_vector = estimate.vector
        checkpoints.save(n, state, history.arrays(), info)

    def report(record: StepRecord, state) -> None:
        """``on_step(record)``. When the callback raises (a stop a signal asked for,
        a store that gave up), the step it was told of is finished: it is saved
        first, so that running again resumes after it."""
        nonlocal saved
        try:
            on_step(record)
        except BaseException:
            if checkpoints is not None and saved < record.step:
                with contextlib.suppress(Exception):  # else the previous checkpoint stands
                    save(record.step, state)
                    saved = record.step
            raise

    resumed = checkpoints.load(state) if checkpoints is not None else None
    if resumed is not None:
        state, done, history = resumed.state, resumed.step, History.from_arrays(resumed.record)
        clock.update({k: resumed.info[k] for k in clock})
        if defect is not None:
            estimate = ErrorEstimate(cfg.estimate, np.asarray(defect.weights), history.est_vector,
                                     resumed.info["est_error"])
        if controller is not None:
            controller = ControllerState.from_info(resumed.info)
        for n, data in history.snapshot_states.items():  # the fields, from the states kept
            snapshots[n] = (np.asarray(evaluate(state_from_bytes(data, state), history.times[n])),
                            reference_at(n))
        if log is not None:
            log(f"resuming from the checkpoint after step {done}"
                + (f" (t={history.times[done]:.6g})" if adaptive else f" of {steps}"))
    elif sequential:
        measure(0, state)
        if defect is not None:  # θ₀'s error against u₀, which is known: exact
            e0, norm0 = jax.device_get(initial_fn(state))
            estimate = ErrorEstimate.start(cfg.estimate, defect.weights, e0)
            history.est[0], history.u_sq[0] = estimate.error, float(norm0) ** 2
    if on_step is not None:  # the start, and on a resume the steps already done
        for n in range(0 if sequential else 1, done + 1):
            on_step(history.record(n, steps, t_of(n)))
    saved = done if resumed is not None else -1

    def accept(n: int, state, previous, record, elapsed: float, dt: float | None) -> None:
        """Step n, its state and record in: measure, check, keep, report, checkpoint."""
        nonlocal saved
        method_metrics = {k: float(v) for k, v in record.metrics.items()}
        if adaptive:
            method_metrics.update(t=float(history.times[n]), dt=dt)
        if estimate is not None:
            start = time.perf_counter()
            step_dt = dt if adaptive else cfg.dt
            start_fields = end_fields[1] if end_fields[0] == n - 1 else fields_fn(previous)
            end_fields[:] = n, fields_fn(state)
            vectors, scalars = jax.device_get(combine_fn(start_fields, end_fields[1], step_dt))
            history.u_sq[n] = float(scalars.pop("u_l2")) ** 2
            method_metrics.update({k: float(v) for k, v in scalars.items()})
            clock["estimate_s"] += time.perf_counter() - start
        metrics = dict(method_metrics)
        where = f"step {n} (t={history.times[n]:.6g})" if sequential else f"block {n}"
        if sequential:
            metrics["rel_l2"] = measure(n, state)
            if on_boundary is not None:
                metrics["boundary_max_abs"] = float(history.boundary[n])
        why = divergence_reason(metrics, history.metrics.get("step_loss"), n, divergence_factor,
                                scale=float(history.ref_sq[n]) if sequential else 0.0)
        if why is None and estimate is not None:
            history.est[n] = estimate.advance(step_dt, method_metrics, vectors["defect"])
            metrics["est_rel_l2"] = float(history.est[n] / np.sqrt(history.u_sq[n]))
            if not np.isfinite(metrics["est_rel_l2"]):
                why = "non-finite est_rel_l2"
        if why is not None:
            if checkpoints is not None and saved != n - 1:
                save(n - 1, previous)
            raise Diverged(f"{cfg.method.name} diverged at {where}: {why}", n, n - 1)
        clock["stepping"] += elapsed
        history.wall[n - 1] = clock["stepping"]
        for k, v in method_metrics.items():
            history.metrics.setdefault(k, np.full(len(history.wall), np.nan))[n - 1] = v
        metrics["wall_time_s"] = clock["stepping"]
        record = record.at(metrics=metrics, step=n, of=steps, t=t_of(n))
        history.tables.append(record.table())
        if on_step is not None:
            report(record, state)
        if checkpoints is not None and checkpoint_every and n % checkpoint_every == 0 and (adaptive or n < steps):
            save(n, state)
            saved = n

    def attempt(state, n: int, key, h: float | None):
        """One try of step n from ``state`` (``h``: its size under ``dt: auto``, None at
        fixed Δt): ``(new state, record, seconds)``; its iterations are counted."""
        if h is None and takes_dt:
            h = cfg.dt  # an argument of the compiled step (lower_step)
        args = (state, key) if h is None else (state, key, h)
        if expects:
            args += (expected_error(n, h),)
        start = time.perf_counter()
        new, record = step_fn(*args)
        jax.block_until_ready(new)
        elapsed = time.perf_counter() - start
        record = jax.device_get(record)
        clock["iterations_total"] += float(record.metrics.get("iterations", 0.0))
        return new, record, elapsed

    if not adaptive:
        for n in range(done + 1, steps + 1):
            new, record, elapsed = attempt(state, n, jax.random.fold_in(key_run, n), None)
            accept(n, new, state, record, elapsed, None)
            state = new
    else:
        n, t = done, float(history.times[done])
        while t < cfg.t_final:
            n += 1
            history.reserve(n)
            key, elapsed = jax.random.fold_in(key_run, n), 0.0
            while True:  # tries of step n, each from the same state
                h, t_new = control.plan(t, controller.dt, stops)
                new, record, seconds = attempt(state, n, key, h)
                elapsed += seconds
                r = control.ratio(float(record.metrics["local_error"]), float(record.metrics["u_l2"]))
                if r <= 1.0:
                    controller = control.accept(controller, h, r, order, clipped=h < controller.dt)
                    break
                controller = control.reject(controller, h, r, order)
                if control.too_small(controller):
                    clock["stepping"] += elapsed
                    if checkpoints is not None and saved != n - 1:
                        save(n - 1, state)
                    raise Diverged(f"{cfg.method.name}: at t={t:.6g} the step-size controller needs a "
                                   f"step below controller.dt_min={control.dt_min:g} (its estimate: "
                                   f"{r:.3g} times the tolerance at Δt={h:.3g})", n, n - 1)
            history.times[n] = t_new
            accept(n, new, state, record, elapsed, h)
            state, t, done = new, t_new, n
        steps = done
    if checkpoints is not None and saved != steps:
        save(steps, state)
    if not sequential:
        for n in range(cfg.n_steps + 1):
            measure(n, state)

    if adaptive:
        n_times = steps + 1
    err_sq, ref_sq, times = history.err_sq[:n_times], history.ref_sq[:n_times], history.times[:n_times]
    per_step = {k: v[:steps] for k, v in history.metrics.items()}
    scalars = {"iterations_total": clock["iterations_total"]}
    if estimate is not None:
        scalars["est_global_rel_l2"] = global_relative_l2(history.est[:n_times] ** 2, history.u_sq[:n_times], times)
        scalars["estimate_s"] = clock["estimate_s"]
    if adaptive:
        scalars["steps_accepted"], scalars["steps_rejected"] = controller.accepted, controller.rejected
    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq), metrics=per_step, wall_time_s=history.wall[:steps],
        global_rel_l2=global_relative_l2(err_sq, ref_sq, times), runtime_s=clock["stepping"],
        eval_s=clock["eval_s"], compile_s=compile_s, fit_report=method.fit_report(), reference_s=reference_s,
        events={k: int(np.nansum(per_step[k])) for k in EVENTS if k in per_step},
        network=method.network(state), losses=history.tables, snapshots=snapshots,
        sequential=sequential, inner_measure=method.inner_measure, holdout=method.holdout_limits(),
        resumed_from=0 if resumed is None else resumed.step,
        checkpoint_s=checkpoints.seconds if checkpoints is not None else 0.0,
        est_rel_l2=history.est[:n_times] / np.sqrt(history.u_sq[:n_times]), scalars=scalars,
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
