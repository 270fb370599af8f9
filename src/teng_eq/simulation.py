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
from teng_eq.errors import Diverged
from teng_eq.initial_fit import FitReport
from teng_eq.methods.base import Method
from teng_eq.metrics import global_relative_l2, squared_norms
from teng_eq.results import EVENTS, StepRecord


@dataclasses.dataclass
class RunResult:
    times: np.ndarray  # (n_steps + 1,) physical times t_n = n·dt
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
        checkpoints: CheckpointStore | None = None, checkpoint_every: int | None = None,
        divergence_factor: float = math.inf) -> RunResult:
    """Run ``cfg.method`` to ``t_final`` and measure the error at every time step.

    At each of ``snapshot_steps`` (time indices) the method's and the reference
    fields on the evaluation points are kept (``RunResult.snapshots``), for
    density plots.

    With ``checkpoints``, the run is saved every ``checkpoint_every`` steps and at
    the end (:mod:`teng_eq.checkpoint`), and starts from the store's checkpoint
    if it holds one: steps up to it are not recomputed but replayed to
    ``on_step`` (same records, same order), and the steps after it draw the
    same random keys as an uninterrupted run, so the result is the same.

    A non-finite metric, or a ``step_loss`` above ``divergence_factor`` times the
    median of the steps before it, raises :class:`~teng_eq.errors.Diverged`
    (after saving the last good step, with ``checkpoints``); an exception from
    ``on_step`` (e.g. :class:`~teng_eq.interrupts.Interrupted` at the end of a
    step) is raised after saving the step it reported.
    """
    method = build_method(cfg, cache_dir=cache_dir, log=log)
    equation = cfg.equation

    times = np.arange(cfg.n_steps + 1) * cfg.dt
    t0 = time.perf_counter()
    reference = equation.reference(times, cache_dir=cache_dir)
    reference_s = time.perf_counter() - t0

    # Step n draws fold_in(key_run, n): a resumed run draws the same keys.
    key_run = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)
    state = method.init()
    evaluation = equation.evaluation(cfg.eval_grid)
    t0 = time.perf_counter()
    # A closure, not the bound method: the method's arrays (grid, index tables)
    # become constants of the one compiled step.
    step_fn = jax.jit(lambda s, k: method.step(s, k)).lower(state, key_run).compile()
    evaluate = jax.jit(lambda s, t: method.values(s, evaluation.points, t)).lower(state, 0.0).compile()
    # Where the domain has a Dirichlet boundary (u = 0), |û| there is reported each step.
    boundary = equation.boundary_points(cfg.eval_grid)
    on_boundary = None if boundary is None else (
        jax.jit(lambda s, t: method.values(s, boundary, t)).lower(state, 0.0).compile())
    compile_s = time.perf_counter() - t0

    steps, sequential = method.steps, method.sequential
    snapshots: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    wanted = set(snapshot_steps)
    history = History.empty(steps, cfg.n_steps + 1)
    eval_s = stepping = 0.0
    done = 0

    def t_of(n: int) -> float | None:
        return float(times[n]) if sequential else None

    def measure(n: int, state) -> float:
        nonlocal eval_s
        start = time.perf_counter()
        u = np.asarray(evaluate(state, times[n]))
        ref = reference.values(n, cfg.eval_grid)
        if n in wanted:
            snapshots[n] = (u, ref)
            if sequential and checkpoints is not None:
                history.snapshot_states[n] = state_bytes(state)
        history.err_sq[n], history.ref_sq[n] = squared_norms(u, ref, evaluation.weights)
        if on_boundary is not None:
            history.boundary[n] = float(np.max(np.abs(np.asarray(on_boundary(state, times[n])))))
        eval_s += time.perf_counter() - start
        return float(np.sqrt(history.err_sq[n] / history.ref_sq[n]))

    def save(n: int, state) -> None:
        checkpoints.save(n, state, history.arrays(), {"stepping": stepping, "eval_s": eval_s})

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
        stepping, eval_s = resumed.info["stepping"], resumed.info["eval_s"]
        for n, data in history.snapshot_states.items():  # the fields, from the states kept
            snapshots[n] = (np.asarray(evaluate(state_from_bytes(data, state), times[n])),
                            reference.values(n, cfg.eval_grid))
        if log is not None:
            log(f"resuming from the checkpoint after step {done} of {steps}")
    elif sequential:
        measure(0, state)
    if on_step is not None:  # the start, and on a resume the steps already done
        for n in range(0 if sequential else 1, done + 1):
            on_step(history.record(n, steps, t_of(n)))
    saved = done if resumed is not None else -1
    for n in range(done + 1, steps + 1):
        previous = state
        start = time.perf_counter()
        state, record = step_fn(state, jax.random.fold_in(key_run, n))
        jax.block_until_ready(state)
        elapsed = time.perf_counter() - start
        record = jax.device_get(record)
        method_metrics = {k: float(v) for k, v in record.metrics.items()}
        metrics = dict(method_metrics)
        where = f"step {n} (t={times[n]:.6g})" if sequential else f"block {n}"
        if sequential:
            metrics["rel_l2"] = measure(n, state)
            if on_boundary is not None:
                metrics["boundary_max_abs"] = float(history.boundary[n])
        why = divergence_reason(metrics, history.metrics.get("step_loss"), n, divergence_factor,
                                scale=float(history.ref_sq[n]) if sequential else 0.0)
        if why is not None:
            if checkpoints is not None and saved != n - 1:
                save(n - 1, previous)
            raise Diverged(f"{cfg.method.name} diverged at {where}: {why}", n, n - 1)
        stepping += elapsed
        history.wall[n - 1] = stepping
        for k, v in method_metrics.items():
            history.metrics.setdefault(k, np.full(steps, np.nan))[n - 1] = v
        metrics["wall_time_s"] = stepping
        record = record.at(metrics=metrics, step=n, of=steps, t=t_of(n))
        history.tables.append(record.table())
        if on_step is not None:
            report(record, state)
        if checkpoints is not None and checkpoint_every and n % checkpoint_every == 0 and n < steps:
            save(n, state)
            saved = n
    if checkpoints is not None and saved != steps:
        save(steps, state)
    if not sequential:
        for n in range(cfg.n_steps + 1):
            measure(n, state)

    err_sq, ref_sq, per_step = history.err_sq, history.ref_sq, history.metrics
    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq), metrics=per_step, wall_time_s=history.wall,
        global_rel_l2=global_relative_l2(err_sq, ref_sq, times), runtime_s=stepping, eval_s=eval_s,
        compile_s=compile_s, fit_report=method.fit_report(), reference_s=reference_s,
        events={k: int(np.nansum(per_step[k])) for k in EVENTS if k in per_step},
        network=method.network(state), losses=history.tables, snapshots=snapshots,
        sequential=sequential, inner_measure=method.inner_measure, holdout=method.holdout_limits(),
        resumed_from=done, checkpoint_s=checkpoints.seconds if checkpoints is not None else 0.0,
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
