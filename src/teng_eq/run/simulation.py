"""A whole run of any method, the library's entry point for the pipeline: from a
validated :class:`~teng_eq.run.config.RunConfig`, the method (θ₀ is its business), the
reference and the compiled step, the run loop (:mod:`teng_eq.run.loop`), the result.
``runtime_s`` and ``wall_time_s`` count the compiled steps alone (each waited for)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import numpy as np

from teng_eq.fit.results import EVENTS, StepRecord
from teng_eq.methods.base import Method
from teng_eq.run import loop as driver
from teng_eq.run.callbacks import Callback, OnStep, ordered
from teng_eq.run.checkpoint import Checkpoints, CheckpointStore
from teng_eq.run.config import RunConfig
from teng_eq.run.loop import Meter, Program
from teng_eq.run.metrics import frobenius_relative_l2, global_relative_l2
from teng_eq.run.result import Row, RunResult
from teng_eq.run.schedule import Adaptive, FixedSteps


def build_method(cfg: RunConfig, *, cache_dir=None, log: Callable[[str], None] | None = None) -> Method:
    """The method of ``cfg`` on its problem (θ₀ fitted or loaded where it needs one)."""
    return cfg.method.cls.build(cfg.method.options, cfg.problem, cache_dir=cache_dir, log=log)


def load_network(cfg: RunConfig, path) -> eqx.Module:
    """The network a run of ``cfg`` saved (``params/theta.eqx``,
    :func:`teng_eq.run.checkpoint.save_network`)."""
    return eqx.tree_deserialise_leaves(path, cfg.method.cls.network_template(cfg.method.options, cfg.problem))


def run_simulation(cfg: RunConfig, *, callbacks: Sequence[Callback | Callable] = (),
                   on_step: Callable[[StepRecord], None] | None = None, cache_dir=None,
                   snapshot_steps: Sequence[int] = (), snapshot_times: Sequence[float] = (),
                   checkpoints: CheckpointStore | None = None, checkpoint_every: int | None = None,
                   divergence_factor: float = math.inf, divergence_error: float = math.inf) -> RunResult:
    """Run ``cfg.method`` to ``t_final`` with ``callbacks`` (:mod:`teng_eq.run.callbacks`: θ₀'s
    fit and a resume are noted to them, every step is reported to them as a
    :class:`~teng_eq.fit.results.StepRecord` with the state after it, and they may stop
    the run) and ``on_step(record)`` (one more). At ``snapshot_steps`` (``dt: auto``:
    ``snapshot_times``, which the steps land on) both fields are kept for density plots.
    With ``checkpoints``, the run is saved every ``checkpoint_every`` steps and at the end
    (:class:`~teng_eq.run.checkpoint.Checkpoints`), and starts from the store's checkpoint if
    it holds one: the steps up to it are reported again, the later ones draw the keys of an
    uninterrupted run, and the result is the same. A divergence raises
    :class:`~teng_eq.errors.Diverged` (:func:`teng_eq.run.loop.advance`).
    """
    hooks = ordered([*callbacks, *([OnStep(on_step, record_only=True)] if on_step is not None else [])])
    try:
        loop, state, saved, method, reference_s = _set_up(cfg, hooks, cache_dir, snapshot_steps,
                                                          snapshot_times, checkpoints, divergence_factor,
                                                          divergence_error)
    except BaseException as error:  # before the loop: the callbacks end with it
        for cb in hooks:
            with contextlib.suppress(Exception):
                cb.abort(None, error)
        raise
    since = saved.step if saved is not None else -1
    saving = ([] if checkpoints is None
              else [Checkpoints(checkpoints, checkpoint_every, method.n_steps, since)])
    state = driver.run(loop, state, [*hooks, *saving])
    curve, seconds = (state.rows, 0.0) if method.sequential else measure_curve(loop, state, cfg)
    return result(state, curve, seconds, method, loop.program, loop.meter.reference is not None, reference_s,
                  resumed_from=max(since, 0), config=cfg)


def _set_up(cfg: RunConfig, hooks, cache_dir, snapshot_steps, snapshot_times, checkpoints, divergence_factor,
            divergence_error):
    """The method (θ₀ fitted or loaded, its progress noted to the callbacks ``hooks``), the
    reference, the compiled program and the loop; the run's start or its checkpoint."""
    def note(item) -> None:
        for cb in hooks:
            cb.note(item)

    method = build_method(cfg, cache_dir=cache_dir, log=note)  # θ₀ is the method's business
    reference, reference_s = load_reference(cfg, cache_dir)
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)
    evaluation = cfg.equation.evaluation(cfg.eval_grid)
    program = Program.build(method, cfg, key, evaluation.points)
    meter = Meter(cfg, program, reference, evaluation.weights, frozenset(snapshot_steps),
                  frozenset(float(t) for t in snapshot_times))
    order = method.error_order(cfg.method.options)
    schedule = (Adaptive(cfg.controller, cfg.controller.stops(cfg.t_final), order,
                         method.error_constant(cfg.method.options),
                         method.stability_limit(cfg.method.options))
                if cfg.adaptive else FixedSteps(cfg.dt, method.n_steps))
    loop = driver.Loop(program, schedule, meter, key, method.sequential, order, method.n_steps,
                       keep_states=method.sequential and checkpoints is not None,
                       divergence_factor=divergence_factor, divergence_error=divergence_error,
                       name=cfg.method.name)
    saved = checkpoints.load(method.init()) if checkpoints is not None else None
    if saved is None:
        return loop, driver.start(loop, method.init()), None, method, reference_s
    state = driver.resume(saved, loop)
    note(f"resuming from the checkpoint after step {state.n}"
         + (f" (t={state.t:.6g})" if cfg.adaptive else f" of {method.n_steps}"))
    return loop, state, saved, method, reference_s


def load_reference(cfg: RunConfig, cache_dir) -> tuple[object | None, float]:
    """The run's reference (None: none, the run's error is its estimate) and the seconds it
    took: at any t under ``dt: auto``, else at the steps' times."""
    if not cfg.has_reference:
        return None, 0.0
    start = time.perf_counter()
    if cfg.adaptive:
        reference = cfg.equation.reference_anytime(cfg.t_final, cache_dir=cache_dir)
    else:
        reference = cfg.equation.reference(np.arange(cfg.n_steps + 1) * cfg.dt, cache_dir=cache_dir)
    return reference, time.perf_counter() - start


def measure_curve(loop: driver.Loop, state: driver.RunState, cfg: RunConfig) -> tuple[list[Row], float]:
    """A global-in-time method's field at every step time ``n·dt``, measured once it is
    trained, and the seconds it took."""
    rows, seconds = [], 0.0
    for n in range(cfg.n_steps + 1):
        fields, elapsed = loop.meter.measure(n, n * cfg.dt, state.method, keep_state=False)
        rows.append(Row(n, n * cfg.dt, **fields))
        seconds += elapsed
    return rows, seconds


def result(state: driver.RunState, curve: Sequence[Row], curve_s: float, method: Method, program: Program,
           measured: bool, reference_s: float, *, resumed_from: int, config: RunConfig) -> RunResult:
    """The :class:`RunResult` of a run that reached its end; ``curve``: its rows at the
    step times (a sequential run's own; ``curve_s`` the seconds of measuring them apart);
    ``measured``: against a reference."""
    steps = [r for r in state.rows if r.n > 0]
    names = dict.fromkeys(k for r in steps for k in r.metrics)
    per_step = {k: np.array([r.metrics.get(k, np.nan) for r in steps], np.float64) for k in names}
    times, err_sq, ref_sq, u_sq, est = (np.array([getattr(r, key) for r in curve], np.float64)
                                        for key in ("t", "err_sq", "ref_sq", "u_sq", "est"))
    scalars = {"iterations_total": state.iterations}
    # a system's: each component's last error, each invariant's worst drift
    for name, values in per_step.items():
        if name.startswith("rel_l2/"):
            scalars[f"final_{name}"] = float(values[-1])
        elif name.startswith("drift/"):
            scalars[f"max_{name}"] = float(np.nanmax(values))
    if measured:
        scalars["frobenius_rel_l2"] = frobenius_relative_l2(err_sq, ref_sq)
    if state.estimate is not None:
        scalars["est_global_rel_l2"] = global_relative_l2(est**2, u_sq, times)
        scalars["estimate_s"] = state.clock.estimate_s
    if state.controller is not None:
        scalars["steps_accepted"], scalars["steps_rejected"] = (state.controller.accepted,
                                                                state.controller.rejected)
    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq) if measured else None, metrics=per_step,
        wall_time_s=np.array([r.wall for r in steps], np.float64),
        global_rel_l2=global_relative_l2(err_sq, ref_sq, times) if measured else None,
        runtime_s=state.clock.stepping, eval_s=state.clock.eval_s + curve_s, compile_s=program.seconds,
        fit_report=method.fit_report(), reference_s=reference_s,
        events={k: int(np.nansum(per_step[k])) for k in EVENTS if k in per_step},
        network=method.network(state.method), losses=[r.table for r in steps],
        snapshots={r.n: r.snapshot for r in curve if r.snapshot is not None}, sequential=method.sequential,
        inner_measure=method.inner_measure, holdout=method.holdout_limits(), resumed_from=resumed_from,
        checkpoint_s=state.clock.checkpoint_s, est_rel_l2=est / np.sqrt(u_sq), scalars=scalars,
        estimate=program.estimate.kind if program.estimate is not None else "none", config=config,
    )
