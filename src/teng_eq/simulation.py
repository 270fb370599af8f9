"""A whole run of any method, the library's entry point for the pipeline: from a
validated :class:`~teng_eq.config.RunConfig`, the method (θ₀ is its business), the
reference and the compiled step, the run loop (:mod:`teng_eq.driver`), the result.
``runtime_s`` and ``wall_time_s`` count the compiled steps alone (each waited for)."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq import driver
from teng_eq.checkpoint import CheckpointStore
from teng_eq.config import RunConfig
from teng_eq.initial_fit import FitReport
from teng_eq.methods.base import Method
from teng_eq.metrics import frobenius_relative_l2, global_relative_l2
from teng_eq.results import EVENTS, Row, StepRecord, run_error


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


def build_method(cfg: RunConfig, *, cache_dir=None, log: Callable[[str], None] | None = None) -> Method:
    """The method of ``cfg`` on its problem (θ₀ fitted or loaded where it needs one)."""
    return cfg.method.cls.build(cfg.method.options, cfg.problem, cache_dir=cache_dir, log=log)


def load_network(cfg: RunConfig, path) -> eqx.Module:
    """The network a run of ``cfg`` saved (``params/theta.eqx``, :func:`teng_eq.checkpoint.save_network`)."""
    return eqx.tree_deserialise_leaves(path, cfg.method.cls.network_template(cfg.method.options, cfg.problem))


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


def run_simulation(cfg: RunConfig, *, on_step: Callable[[StepRecord], None] | None = None,
        callbacks: Sequence[driver.Callback] = (), log: Callable[[str], None] | None = None, cache_dir=None,
        snapshot_steps: Sequence[int] = (), snapshot_times: Sequence[float] = (),
        checkpoints: CheckpointStore | None = None, checkpoint_every: int | None = None,
        divergence_factor: float = math.inf, divergence_error: float = math.inf) -> RunResult:
    """Run ``cfg.method`` to ``t_final``, reporting each step as a
    :class:`~teng_eq.results.StepRecord` to ``on_step`` and to the ``callbacks``
    (:data:`~teng_eq.driver.Callback`: they see the run's state too, and may stop it). At
    ``snapshot_steps`` (``dt: auto``: ``snapshot_times``, which the steps land on) both
    fields are kept for density plots. With ``checkpoints``, the run is saved every
    ``checkpoint_every`` steps and at the end, and starts from the store's checkpoint if
    it holds one: the steps up to it are reported again, the later ones draw the keys of
    an uninterrupted run, and the result is the same. A divergence raises
    :class:`~teng_eq.errors.Diverged` (:func:`teng_eq.driver.advance`).
    """
    method = build_method(cfg, cache_dir=cache_dir, log=log)  # θ₀ is the method's business
    reference, reference_s = load_reference(cfg, cache_dir)
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)
    evaluation = cfg.equation.evaluation(cfg.eval_grid)
    program = driver.Program.build(method, cfg, key, evaluation.points)
    meter = driver.Meter(cfg, program, reference, evaluation.weights, frozenset(snapshot_steps),
                  frozenset(float(t) for t in snapshot_times))
    order = method.error_order(cfg.method.options)
    schedule = (driver.Adaptive(cfg.controller, cfg.controller.stops(cfg.t_final), order,
                                method.error_constant(cfg.method.options),
                                method.stability_limit(cfg.method.options)) if cfg.adaptive
                else driver.FixedSteps(cfg.dt, method.n_steps))
    loop = driver.Loop(program, schedule, meter, key, method.sequential, order, method.n_steps,
                keep_states=method.sequential and checkpoints is not None,
                divergence_factor=divergence_factor, divergence_error=divergence_error, name=cfg.method.name)
    saved = checkpoints.load(method.init()) if checkpoints is not None else None
    if saved is not None:
        state = driver.resume(saved, loop, cfg.adaptive)
        if log is not None:
            log(f"resuming from the checkpoint after step {state.n}"
                + (f" (t={state.t:.6g})" if cfg.adaptive else f" of {method.n_steps}"))
    else:
        state = driver.start(loop, method.init())
    saving = None if checkpoints is None else driver.Checkpoints(checkpoints, checkpoint_every, method.n_steps,
                                                          saved.step if saved is not None else -1)
    reported = [*callbacks, *([reporting(on_step)] if on_step is not None else []),
                *([saving] if saving is not None else [])]
    state = driver.run(loop, state, reported, saving)
    curve, seconds = (state.rows, 0.0) if method.sequential else measure_curve(loop, state, cfg)
    return result(state, curve, seconds, method, program, reference is not None, reference_s,
                  resumed_from=saved.step if saved is not None else 0,
                  checkpoint_s=checkpoints.seconds if checkpoints is not None else 0.0, config=cfg)


def reporting(on_step: Callable[[StepRecord], None]) -> driver.Callback:
    """``on_step(record)`` as a callback (what it returns does not stop the run)."""
    def callback(record: StepRecord, state: driver.RunState) -> None:
        on_step(record)
    return callback


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


def result(state: driver.RunState, curve: Sequence[Row], curve_s: float, method: Method, program: driver.Program,
           measured: bool, reference_s: float, *, resumed_from: int, checkpoint_s: float,
           config: RunConfig) -> RunResult:
    """The :class:`RunResult` of a run that reached its end; ``curve``: its rows at the
    step times (a sequential run's own; ``curve_s`` the seconds of measuring them apart);
    ``measured``: against a reference."""
    steps = [r for r in state.rows if r.n > 0]
    names = dict.fromkeys(k for r in steps for k in r.metrics)
    per_step = {k: np.array([r.metrics.get(k, np.nan) for r in steps], np.float64) for k in names}
    times, err_sq, ref_sq, u_sq, est = (np.array([getattr(r, key) for r in curve], np.float64)
                                        for key in ("t", "err_sq", "ref_sq", "u_sq", "est"))
    scalars = {"iterations_total": state.iterations}
    for name, values in per_step.items():  # a system's: each component's last error, each invariant's worst drift
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
        scalars["steps_accepted"], scalars["steps_rejected"] = state.controller.accepted, state.controller.rejected
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
        checkpoint_s=checkpoint_s, est_rel_l2=est / np.sqrt(u_sq), scalars=scalars,
        estimate=program.estimate.kind if program.estimate is not None else "none", config=config,
    )
