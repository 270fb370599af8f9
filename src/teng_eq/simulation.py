"""A whole run of any method: θ₀, reference, stepping, metrics.

This is the library's entry point for the pipeline: it takes a validated
:class:`~teng_eq.config.RunConfig`, builds the method its ``method.impl`` names
(:class:`teng_eq.methods.Method`) and reports each step to a callback, so that
progress bars and experiment tracking stay outside the numerics.

Timing: ``runtime_s`` and the per-step ``wall_time_s`` count the compiled
steps alone (each waited for); the error evaluation after a step is timed
apart as ``eval_s``, compilation as ``compile_s``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from teng_eq.checkpoint import CheckpointStore, state_bytes, state_from_bytes
from teng_eq.config import RunConfig
from teng_eq.equations import Equation, Quadrature
from teng_eq.initial_fit import cached_initial_parameters, resolve_init
from teng_eq.methods.base import Method, StepInfo
from teng_eq.metrics import global_relative_l2, squared_norms
from teng_eq.model import ParamSpace, TENGNet


@dataclasses.dataclass
class StepRecord:
    """What one step reports. ``step`` n of a sequential method is at ``t = n·dt``
    (step 0: the start, with the error metrics only); a global-in-time method's steps
    are blocks of its optimisation (``t`` is None, no ``rel_l2``).

    ``metrics`` are logged under their names at ``step``: ``rel_l2`` (where
    measured), ``boundary_max_abs`` (max |û| at ``equation.boundary_points``, where
    the domain has a Dirichlet boundary), ``wall_time_s`` and every per-step scalar of the method
    (``step_loss``, …). ``losses`` has rows ``(stage, iteration, loss, lsq)``.
    """

    step: int
    of: int  # the method's number of steps
    t: float | None
    metrics: dict[str, float]
    losses: np.ndarray


@dataclasses.dataclass
class RunResult:
    times: np.ndarray  # (n_steps + 1,) physical times t_n = n·dt
    rel_l2: np.ndarray  # (n_steps + 1,) error at each t_n; index 0 is the start
    scalars: dict[str, np.ndarray]  # per method step, each (steps,)
    wall_time_s: np.ndarray  # (steps,) cumulative stepping time
    global_rel_l2: float
    runtime_s: float
    eval_s: float
    compile_s: float
    fit_info: dict | None  # None when the method does not start from θ₀
    reference_s: float
    events: dict[str, int]  # solver events summed over the run
    network: eqx.Module
    losses: list[np.ndarray]  # one (rows, 4) table per method step
    snapshots: dict[int, tuple[np.ndarray, np.ndarray]]  # time index -> (û, reference) on the eval points
    sequential: bool
    holdout_flag: str = "ok"  # held-out check over the run (:func:`holdout_flag`); "ok" without one
    resumed_from: int = 0  # the step of the checkpoint the run started from (0: from the start)
    checkpoint_s: float = 0.0  # time spent writing checkpoints (this attempt)

    @property
    def step_loss(self) -> np.ndarray:
        return self.scalars["step_loss"]

    def loss_table(self) -> np.ndarray:
        """Every iteration of the run, rows ``(step, t, stage, iteration, loss, lsq)``
        (``t`` is NaN for a global-in-time method's blocks)."""
        return np.concatenate([
            np.column_stack([np.full(len(tab), n),
                             np.full(len(tab), self.times[n] if self.sequential else np.nan), tab])
            for n, tab in enumerate(self.losses, start=1)
        ])


def stage_rows(info: StepInfo) -> np.ndarray:
    """``info``'s loss table as rows ``(stage, iteration, loss, lsq)``, padding dropped."""
    losses, lsq = np.asarray(info.losses), np.asarray(info.lsq)
    stage, it = np.nonzero(~np.isnan(losses))
    return np.column_stack([stage, it, losses[stage, it], lsq[stage, it]]).astype(np.float64)


@dataclasses.dataclass
class Problem:
    """What a run starts from: the equation, the network as a function of θ, the
    fit quadrature, points held out of it, and θ₀ (fitted or from the cache;
    None for a method that does not use it)."""

    equation: Equation
    space: ParamSpace
    quadrature: Quadrature
    holdout: Quadrature
    theta0: jax.Array | None
    fit_info: dict | None

    @property
    def points(self) -> jax.Array:
        return self.quadrature.points

    @property
    def weight(self):
        return self.quadrature.weights


def build_network(cfg: RunConfig, init: str | None = None) -> TENGNet:
    """The untrained network of ``cfg`` (its architecture, initialised from ``seed``
    as ``init`` says; default ``network.init``, ``auto`` resolved by
    :func:`~teng_eq.initial_fit.resolve_init`)."""
    key_net, _ = jax.random.split(jax.random.PRNGKey(cfg.seed))
    init = resolve_init(cfg.network.init, cfg.equation, cfg.grid) if init is None else init
    periods = cfg.equation.periods
    return TENGNet(
        dim=cfg.equation.dim, features=cfg.network.features, width=cfg.network.width,
        depth=cfg.network.depth, lengths=periods, periodic=periods is not None,
        embedding_activation=cfg.network.embedding_activation, init=init, key=key_net,
    )


def parameter_count(cfg: RunConfig) -> int:
    """Trainable parameters of :func:`build_network` (by shape evaluation, no compute)."""
    shapes = eqx.filter_eval_shape(build_network, cfg, "paper")  # the shapes do not depend on the init
    return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(shapes)
               if isinstance(leaf, jax.ShapeDtypeStruct) and np.issubdtype(leaf.dtype, np.inexact))


def save_network(path: Path, network: eqx.Module) -> Path:
    """θ as ``eqx.tree_serialise_leaves`` bytes (no pickle); read back by :func:`load_network`."""
    eqx.tree_serialise_leaves(path, network)
    return Path(path)


def load_network(cfg: RunConfig, path: Path) -> eqx.Module:
    """The network saved by :func:`save_network` from a run of ``cfg``."""
    return eqx.tree_deserialise_leaves(path, cfg.method.cls.network_template(cfg))


def prepare(cfg: RunConfig, *, cache_dir=None, log: Callable[[str], None] | None = None,
            fit: bool = True) -> Problem:
    """Build the equation and network of ``cfg`` and, if ``fit``, fit (or load) θ₀."""
    cfg.validate()
    equation = cfg.equation
    _, key_fit = jax.random.split(jax.random.PRNGKey(cfg.seed))
    net = build_network(cfg)
    space = ParamSpace(net)
    quadrature = equation.quadrature(cfg.grid)
    holdout = equation.holdout(cfg.grid, cfg.holdout.points(cfg.grid))
    theta, fit_info = None, None
    if fit:
        description = dict(
            **equation.fit_description(),
            network={**dataclasses.asdict(cfg.network), "init": net.init}, grid=cfg.grid, seed=cfg.seed,
            fit=dataclasses.asdict(cfg.fit), solver=cfg.solver, damping=cfg.damping,
        )
        theta, fit_info = cached_initial_parameters(
            net, equation.u0, quadrature.points, quadrature.weights, key=key_fit,
            fit=cfg.fit, solver=cfg.solver, damping=cfg.damping, description=description,
            directory=cache_dir, log=log,
        )
    return Problem(equation, space, quadrature, holdout, theta, fit_info)


def holdout_flag(ratios, warn: float, fail: float) -> str:
    """``"fail"`` if some step's held-out/training loss ratio exceeds ``fail``,
    ``"warn"`` if one exceeds ``warn``, else ``"ok"`` (NaN ratios count as
    exceeding: a step whose losses are not finite is not a healthy one)."""
    ratios = np.asarray(ratios, np.float64)
    worst = np.max(np.where(np.isnan(ratios), np.inf, ratios)) if ratios.size else 0.0
    return "fail" if worst > fail else "warn" if worst > warn else "ok"


class RunFailed(RuntimeError):
    """A run that computed but must not count: its MLflow run ends FAILED with the
    reason and :attr:`tags`; the other jobs of a sweep go on."""

    @property
    def tags(self) -> dict[str, str]:
        return {}


class Diverged(RunFailed, FloatingPointError):
    """A run stopped at ``step`` because a value was non-finite or its loss blew up;
    ``last_good_step`` is the step before it. ``tags`` are logged on the failed run."""

    def __init__(self, message: str, step: int, last_good_step: int):
        super().__init__(message)
        self.step, self.last_good_step = step, last_good_step

    @property
    def tags(self) -> dict[str, str]:
        return {"diverged_at_step": str(self.step), "last_good_step": str(self.last_good_step)}


class Overfit(RunFailed):
    """A finished run whose fits overfit the quadrature nodes: some step's held-out
    loss exceeds its training loss more than ``holdout.fail`` times."""

    @property
    def tags(self) -> dict[str, str]:
        return {"holdout_flag": "fail"}


@dataclasses.dataclass
class _Record:
    """What the driver keeps of steps 1..n, as saved in a checkpoint."""

    err_sq: np.ndarray  # (n_steps + 1,) squared error norm at each t_n (sequential methods)
    ref_sq: np.ndarray  # (n_steps + 1,) squared reference norm
    boundary: np.ndarray  # (n_steps + 1,) max |û| on a Dirichlet boundary; NaN without one
    wall: np.ndarray  # (steps,) cumulative stepping time
    scalars: dict[str, np.ndarray]  # per step, each (steps,)
    tables: list[np.ndarray]  # one (rows, 4) loss table per step done
    snapshot_states: dict[int, np.ndarray]  # time index -> state bytes (sequential methods)

    @classmethod
    def empty(cls, steps: int, n_times: int) -> _Record:
        return cls(np.zeros(n_times), np.zeros(n_times), np.full(n_times, np.nan), np.zeros(steps), {}, [], {})

    def arrays(self) -> dict[str, np.ndarray]:
        rows = np.array([len(t) for t in self.tables], dtype=np.int64)
        out = {"err_sq": self.err_sq, "ref_sq": self.ref_sq, "boundary": self.boundary, "wall": self.wall,
               "loss_rows": rows,
               "losses": np.concatenate(self.tables) if self.tables else np.zeros((0, 4))}
        out.update({f"scalar.{k}": v for k, v in self.scalars.items()})
        out.update({f"snapshot.{n}": b for n, b in self.snapshot_states.items()})
        return out

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray]) -> _Record:
        splits = np.cumsum(a["loss_rows"])[:-1]
        tables = list(np.split(a["losses"], splits)) if len(a["loss_rows"]) else []
        return cls(
            err_sq=a["err_sq"].copy(), ref_sq=a["ref_sq"].copy(),
            boundary=a["boundary"].copy() if "boundary" in a else np.full(len(a["err_sq"]), np.nan),
            wall=a["wall"].copy(),
            scalars={k.removeprefix("scalar."): v.copy() for k, v in a.items() if k.startswith("scalar.")},
            tables=tables,
            snapshot_states={int(k.removeprefix("snapshot.")): v for k, v in a.items()
                             if k.startswith("snapshot.")},
        )

    def metrics(self, n: int, sequential: bool) -> dict[str, float]:
        """Step ``n``'s metrics as first reported (for a replay after a resume)."""
        out = {k: float(v[n - 1]) for k, v in self.scalars.items()} if n > 0 else {}
        if sequential:
            out["rel_l2"] = float(np.sqrt(self.err_sq[n] / self.ref_sq[n]))
            if np.isfinite(self.boundary[n]):
                out["boundary_max_abs"] = float(self.boundary[n])
        if n > 0:
            out["wall_time_s"] = float(self.wall[n - 1])
        return out


def run_simulation(
    cfg: RunConfig,
    *,
    on_step: Callable[[StepRecord], None] | None = None,
    log: Callable[[str], None] | None = None,
    cache_dir=None,
    snapshot_steps: Sequence[int] = (),
    checkpoints: CheckpointStore | None = None,
    checkpoint_every: int | None = None,
    divergence_factor: float = math.inf,
) -> RunResult:
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
    median of the steps before it, raises :class:`Diverged` (after saving the
    last good step, with ``checkpoints``).
    """
    cls: type[Method] = cfg.method.cls
    problem = prepare(cfg, cache_dir=cache_dir, log=log, fit=cls.uses_theta0)
    method = cls.build(cfg, problem)
    equation = problem.equation

    times = np.arange(cfg.n_steps + 1) * cfg.dt
    t0 = time.perf_counter()
    reference = equation.reference(times, cache_dir=cache_dir)
    reference_s = time.perf_counter() - t0

    # Step n draws fold_in(key_run, n): a resumed run draws the same keys.
    key_run = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)
    state = method.init(problem.theta0)
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
    record = _Record.empty(steps, cfg.n_steps + 1)
    eval_s = stepping = 0.0
    done = 0

    def measure(n: int, state) -> float:
        nonlocal eval_s
        start = time.perf_counter()
        u = np.asarray(evaluate(state, times[n]))
        ref = reference.values(n, cfg.eval_grid)
        if n in wanted:
            snapshots[n] = (u, ref)
            if sequential and checkpoints is not None:
                record.snapshot_states[n] = state_bytes(state)
        record.err_sq[n], record.ref_sq[n] = squared_norms(u, ref, evaluation.weights)
        if on_boundary is not None:
            record.boundary[n] = float(np.max(np.abs(np.asarray(on_boundary(state, times[n])))))
        eval_s += time.perf_counter() - start
        return float(np.sqrt(record.err_sq[n] / record.ref_sq[n]))

    def save(n: int, state) -> None:
        checkpoints.save(n, state, record.arrays(), {"stepping": stepping, "eval_s": eval_s})

    resumed = checkpoints.load(state) if checkpoints is not None else None
    if resumed is not None:
        state, done, record = resumed.state, resumed.step, _Record.from_arrays(resumed.record)
        stepping, eval_s = resumed.info["stepping"], resumed.info["eval_s"]
        for n, data in record.snapshot_states.items():  # the fields, from the states kept
            snapshots[n] = (np.asarray(evaluate(state_from_bytes(data, state), times[n])),
                            reference.values(n, cfg.eval_grid))
        if log is not None:
            log(f"resuming from the checkpoint after step {done} of {steps}")
    elif sequential:
        measure(0, state)
    if on_step is not None:  # the start, and on a resume the steps already done
        for n in range(0 if sequential else 1, done + 1):
            on_step(StepRecord(step=n, of=steps, t=float(times[n]) if sequential else None,
                               metrics=record.metrics(n, sequential),
                               losses=record.tables[n - 1] if n else np.zeros((0, 4))))
    saved = done if resumed is not None else -1
    for n in range(done + 1, steps + 1):
        previous = state
        start = time.perf_counter()
        state, info = step_fn(state, jax.random.fold_in(key_run, n))
        jax.block_until_ready(state)
        elapsed = time.perf_counter() - start
        info = jax.device_get(info)
        table = stage_rows(info)
        metrics = {k: float(v) for k, v in info.scalars.items()}
        where = f"step {n} (t={times[n]:.6g})" if sequential else f"block {n}"
        if sequential:
            metrics["rel_l2"] = measure(n, state)
            if on_boundary is not None:
                metrics["boundary_max_abs"] = float(record.boundary[n])
        why = _divergence(metrics, record.scalars.get("step_loss"), n, divergence_factor,
                          scale=float(record.ref_sq[n]) if sequential else 0.0)
        if why is not None:
            if checkpoints is not None and saved != n - 1:
                save(n - 1, previous)
            raise Diverged(f"{cfg.method.name} diverged at {where}: {why}", n, n - 1)
        stepping += elapsed
        record.wall[n - 1] = stepping
        record.tables.append(table)
        for k, v in info.scalars.items():
            record.scalars.setdefault(k, np.full(steps, np.nan))[n - 1] = float(v)
        metrics["wall_time_s"] = stepping
        if on_step is not None:
            on_step(StepRecord(step=n, of=steps, t=float(times[n]) if sequential else None,
                               metrics=metrics, losses=table))
        if checkpoints is not None and checkpoint_every and n % checkpoint_every == 0 and n < steps:
            save(n, state)
            saved = n
    if checkpoints is not None and saved != steps:
        save(steps, state)
    if not sequential:
        for n in range(cfg.n_steps + 1):
            measure(n, state)

    err_sq, ref_sq, scalars = record.err_sq, record.ref_sq, record.scalars
    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq), scalars=scalars, wall_time_s=record.wall,
        global_rel_l2=global_relative_l2(err_sq, ref_sq, times), runtime_s=stepping, eval_s=eval_s,
        compile_s=compile_s, fit_info=problem.fit_info, reference_s=reference_s,
        events={k: int(np.nansum(scalars[k])) for k in cls.events if k in scalars},
        network=method.network(state), losses=record.tables, snapshots=snapshots,
        sequential=sequential, resumed_from=done,
        holdout_flag=holdout_flag(scalars.get("holdout_ratio", ()), cfg.holdout.warn, cfg.holdout.fail),
        checkpoint_s=checkpoints.seconds if checkpoints is not None else 0.0,
    )


def _divergence(metrics: Mapping[str, float], losses: np.ndarray | None, n: int, factor: float,
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
