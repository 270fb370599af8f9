"""A whole TENG run: θ₀, reference, time stepping, metrics.

This is the library's entry point for the pipeline: it takes a validated
:class:`~teng_eq.config.RunConfig` and reports each time step to a callback, so
that progress bars and experiment tracking stay outside the numerics.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.config import RunConfig
from teng_eq.equations import INITIAL_CONDITIONS, Equation, make_equation
from teng_eq.grid import cell_volume, grid_points, holdout_points
from teng_eq.initial_fit import cached_initial_parameters, resolve_init
from teng_eq.integrators import INTEGRATORS, TENGStep
from teng_eq.metrics import global_relative_l2, squared_norms
from teng_eq.model import ParamSpace, TENGNet
from teng_eq.reference import reference_solution
from teng_eq.stepper import Stepper


@dataclasses.dataclass
class StepRecord:
    """What one time step reports: ``step`` n is at ``t = n·dt``.

    ``losses`` has one row per (stage, k) for k = 0 … iterations the stage ran:
    the loss after k iterations; ``lsq`` is the least-squares residual of
    iteration k (NaN on the stage's last row). ``step_loss`` is the final fit's
    loss on the nodes, ``holdout_loss`` on the held-out points; ``iterations``,
    ``fallbacks`` (Cholesky → QR) and ``zero_steps`` (non-finite updates skipped)
    are summed over the step's stages.
    """

    step: int
    t: float
    rel_l2: float
    step_loss: float
    wall_time_s: float
    losses: np.ndarray  # (rows, 4): stage, iteration, loss, lsq
    holdout_loss: float = float("nan")
    holdout_ratio: float = float("nan")
    iterations: int = 0
    fallbacks: int = 0
    zero_steps: int = 0


@dataclasses.dataclass
class RunResult:
    times: np.ndarray
    rel_l2: np.ndarray  # (n_steps + 1,), index 0 is θ₀'s fit error
    step_loss: np.ndarray  # (n_steps,)
    wall_time_s: np.ndarray  # (n_steps,)
    global_rel_l2: float
    runtime_s: float
    compile_s: float
    fit_info: dict
    reference_s: float
    theta: np.ndarray
    network: TENGNet
    losses: list[np.ndarray]  # one (rows, 4) table per step
    holdout_loss: np.ndarray  # (n_steps,)
    holdout_ratio: np.ndarray  # (n_steps,) holdout_loss / step loss (StepLog.holdout_ratio)
    holdout_flag: str  # "ok", "warn" (some step's ratio > holdout_warn) or "fail" (> holdout_fail)
    iterations: np.ndarray  # (n_steps,) per step, all stages
    fallbacks: np.ndarray  # (n_steps,)
    zero_steps: np.ndarray  # (n_steps,)
    snapshots: dict[int, tuple[np.ndarray, np.ndarray]]  # step -> (TENG, reference) on the eval grid

    def loss_table(self) -> np.ndarray:
        """Every iteration of the run, rows ``(step, t, stage, iteration, loss, lsq)``."""
        return np.concatenate([
            np.column_stack([np.full(len(tab), n), np.full(len(tab), self.times[n]), tab])
            for n, tab in enumerate(self.losses, start=1)
        ])


def holdout_flag(ratios, warn: float, fail: float) -> str:
    """``"fail"`` if some step's held-out/training loss ratio exceeds ``fail``,
    ``"warn"`` if one exceeds ``warn``, else ``"ok"`` (NaN ratios count as
    exceeding: a step whose losses are not finite is not a healthy one)."""
    worst = np.nanmax(np.where(np.isnan(ratios), np.inf, ratios)) if len(ratios) else 0.0
    return "fail" if worst > fail else "warn" if worst > warn else "ok"


def _stage_rows(logs) -> np.ndarray:
    rows = []
    for s, log in enumerate(logs.stages):
        loss, lsq = np.asarray(log.loss), np.asarray(log.lsq)
        k = int(log.iterations)
        for i in range(k + 1):
            rows.append((s, i, loss[i], lsq[i] if i < k else np.nan))
    return np.asarray(rows, np.float64)


@dataclasses.dataclass
class Problem:
    """What a run starts from: the equation, the network as a function of θ, the
    quadrature grid and its weight, and θ₀ (fitted or from the cache)."""

    equation: Equation
    space: ParamSpace
    points: jax.Array
    weight: float
    theta0: jax.Array
    fit_info: dict


def build_network(cfg: RunConfig) -> TENGNet:
    """The untrained network of ``cfg`` (its architecture, initialised from ``seed``;
    ``network.init: auto`` resolved by :func:`~teng_eq.initial_fit.resolve_init`)."""
    equation = make_equation(cfg.equation, cfg.nu, cfg.lengths)
    key_net, _ = jax.random.split(jax.random.PRNGKey(cfg.seed))
    init = resolve_init(cfg.network.init, INITIAL_CONDITIONS[cfg.initial_condition], equation, cfg.grid)
    return TENGNet(
        dim=equation.dim, features=cfg.network.features, width=cfg.network.width,
        depth=cfg.network.depth, lengths=equation.lengths,
        embedding_activation=cfg.network.embedding_activation, init=init, key=key_net,
    )


def save_network(path: Path, network: TENGNet) -> Path:
    """θ as ``eqx.tree_serialise_leaves`` bytes (no pickle); read back by :func:`load_network`."""
    eqx.tree_serialise_leaves(path, network)
    return Path(path)


def load_network(cfg: RunConfig, path: Path) -> TENGNet:
    """The network saved by :func:`save_network` from a run of ``cfg``."""
    return eqx.tree_deserialise_leaves(path, build_network(cfg))


def prepare(cfg: RunConfig, *, cache_dir=None, log: Callable[[str], None] | None = None) -> Problem:
    """Build the equation and network of ``cfg`` and fit (or load) θ₀."""
    cfg.validate()
    equation = make_equation(cfg.equation, cfg.nu, cfg.lengths)
    _, key_fit = jax.random.split(jax.random.PRNGKey(cfg.seed))
    net = build_network(cfg)
    space = ParamSpace(net)
    points, weight = grid_points(cfg.grid, equation.lengths), cell_volume(cfg.grid, equation.lengths)
    description = dict(
        initial_condition=cfg.initial_condition, lengths=list(equation.lengths),
        network={**dataclasses.asdict(cfg.network), "init": net.init}, grid=cfg.grid, seed=cfg.seed,
        fit=dataclasses.asdict(cfg.fit),
    )
    theta, fit_info = cached_initial_parameters(
        net, INITIAL_CONDITIONS[cfg.initial_condition], points, weight, key=key_fit,
        fit=cfg.fit, description=description, directory=cache_dir, log=log,
    )
    return Problem(equation, space, points, weight, theta, fit_info)


def make_step(cfg: RunConfig, space: ParamSpace, equation: Equation) -> TENGStep:
    """The compiled-step-to-be of ``cfg``: its integrator, its stepper on the
    ``grid`` nodes, its stopping policy and its held-out points."""
    points, weight = grid_points(cfg.grid, equation.lengths), cell_volume(cfg.grid, equation.lengths)
    stepper = Stepper(
        space, points, weight, cfg.solver, cfg.damping, cfg.stopping, cfg.min_iters, cfg.stop_rtol,
        cfg.stop_patience, cfg.stop_floor,
    )
    return TENGStep(
        integrator=INTEGRATORS[cfg.integrator], stepper=stepper, equation=equation, dt=cfg.dt,
        iters=cfg.iters, iters_later=cfg.iters_later, subsample_first=cfg.subsample_first,
        subsample=cfg.subsample, holdout=holdout_points(cfg.grid, cfg.holdout_grid, equation.lengths),
        holdout_weight=cell_volume(cfg.holdout_grid, equation.lengths),
    )


def run_simulation(
    cfg: RunConfig,
    *,
    on_step: Callable[[StepRecord], None] | None = None,
    log: Callable[[str], None] | None = None,
    cache_dir=None,
    snapshot_steps: Sequence[int] = (),
) -> RunResult:
    """Run TENG from θ₀ to ``t_final`` and measure the error at every step.

    At each of ``snapshot_steps`` the TENG and reference fields on the
    evaluation grid are kept (``RunResult.snapshots``), for density plots.
    """
    problem = prepare(cfg, cache_dir=cache_dir, log=log)
    equation, space = problem.equation, problem.space
    theta, fit_info = problem.theta0, problem.fit_info
    key_run = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 1)

    times = np.arange(cfg.n_steps + 1) * cfg.dt
    t0 = time.perf_counter()
    reference = reference_solution(
        equation, times, cache_dir=cache_dir, initial_condition=cfg.initial_condition
    )
    reference_s = time.perf_counter() - t0

    step = make_step(cfg, space, equation)
    eval_points = grid_points(cfg.eval_grid, equation.lengths)
    evaluate = jax.jit(lambda th: space.apply(th, eval_points))

    t0 = time.perf_counter()
    step_fn = jax.jit(step.__call__).lower(theta, key_run).compile()
    compile_s = time.perf_counter() - t0

    M = cfg.eval_grid
    shape = (M,) * equation.dim
    snapshots = {}
    wanted = set(snapshot_steps)

    def measure(n, theta):
        u, ref = evaluate(theta), reference.at(n, M)
        if n in wanted:
            snapshots[n] = (np.asarray(u).reshape(shape), np.asarray(ref).reshape(shape))
        return squared_norms(u, ref)

    err_sq, ref_sq = np.zeros(cfg.n_steps + 1), np.zeros(cfg.n_steps + 1)
    err_sq[0], ref_sq[0] = measure(0, theta)
    step_loss, wall = np.zeros(cfg.n_steps), np.zeros(cfg.n_steps)
    holdout_loss, holdout_ratio = np.zeros(cfg.n_steps), np.zeros(cfg.n_steps)
    events = np.zeros((3, cfg.n_steps), np.int64)  # iterations, fallbacks, zero steps
    tables = []
    start = time.perf_counter()
    for n in range(1, cfg.n_steps + 1):
        theta, logs = step_fn(theta, jax.random.fold_in(key_run, n))
        err_sq[n], ref_sq[n] = measure(n, theta)
        table = _stage_rows(logs)
        tables.append(table)
        step_loss[n - 1] = float(logs.loss)
        holdout_loss[n - 1], holdout_ratio[n - 1] = float(logs.holdout_loss), float(logs.holdout_ratio)
        events[:, n - 1] = int(logs.iterations), int(logs.fallbacks), int(logs.zero_steps)
        if not np.isfinite(step_loss[n - 1] + err_sq[n]):
            raise FloatingPointError(f"TENG diverged at step {n} (t={times[n]:.6g}): non-finite loss or error")
        wall[n - 1] = time.perf_counter() - start
        if on_step is not None:
            on_step(StepRecord(
                step=n, t=float(times[n]), rel_l2=float(np.sqrt(err_sq[n] / ref_sq[n])),
                step_loss=float(step_loss[n - 1]), wall_time_s=float(wall[n - 1]), losses=table,
                holdout_loss=float(holdout_loss[n - 1]), holdout_ratio=float(holdout_ratio[n - 1]),
                iterations=int(events[0, n - 1]),
                fallbacks=int(events[1, n - 1]), zero_steps=int(events[2, n - 1]),
            ))
    runtime_s = time.perf_counter() - start

    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq), step_loss=step_loss, wall_time_s=wall,
        global_rel_l2=global_relative_l2(err_sq, ref_sq, times), runtime_s=runtime_s,
        compile_s=compile_s, fit_info=fit_info, reference_s=reference_s,
        theta=np.asarray(theta), network=space.network(jnp.asarray(theta)), losses=tables,
        holdout_loss=holdout_loss, holdout_ratio=holdout_ratio,
        holdout_flag=holdout_flag(holdout_ratio, cfg.holdout_warn, cfg.holdout_fail),
        iterations=events[0], fallbacks=events[1], zero_steps=events[2],
        snapshots=snapshots,
    )
