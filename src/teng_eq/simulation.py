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
from collections.abc import Callable, Sequence
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from teng_eq.config import RunConfig
from teng_eq.equations import Equation, Quadrature
from teng_eq.initial_fit import cached_initial_parameters
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


def build_network(cfg: RunConfig) -> TENGNet:
    """The untrained network of ``cfg`` (its architecture, initialised from ``seed``)."""
    key_net, _ = jax.random.split(jax.random.PRNGKey(cfg.seed))
    periods = cfg.equation.periods
    return TENGNet(
        dim=cfg.equation.dim, features=cfg.network.features, width=cfg.network.width,
        depth=cfg.network.depth, lengths=periods, periodic=periods is not None, key=key_net,
    )


def parameter_count(cfg: RunConfig) -> int:
    """Trainable parameters of :func:`build_network` (by shape evaluation, no compute)."""
    shapes = eqx.filter_eval_shape(build_network, cfg)
    return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(shapes)
               if isinstance(leaf, jax.ShapeDtypeStruct) and np.issubdtype(leaf.dtype, np.inexact))


def save_network(path: Path, network: eqx.Module) -> Path:
    """θ as ``eqx.tree_serialise_leaves`` bytes (no pickle); read back by :func:`load_network`."""
    eqx.tree_serialise_leaves(path, network)
    return Path(path)


def load_network(cfg: RunConfig, path: Path) -> eqx.Module:
    """The network saved by :func:`save_network` from a run of ``cfg``."""
    return eqx.tree_deserialise_leaves(path, build_network(cfg))


def prepare(cfg: RunConfig, *, cache_dir=None, log: Callable[[str], None] | None = None,
            fit: bool = True) -> Problem:
    """Build the equation and network of ``cfg`` and, if ``fit``, fit (or load) θ₀."""
    cfg.validate()
    equation = cfg.equation
    _, key_fit = jax.random.split(jax.random.PRNGKey(cfg.seed))
    net = build_network(cfg)
    space = ParamSpace(net)
    quadrature, holdout = equation.quadrature(cfg.grid), equation.holdout(cfg.grid)
    theta, fit_info = None, None
    if fit:
        description = dict(
            **equation.fit_description(),
            network=dataclasses.asdict(cfg.network), grid=cfg.grid, seed=cfg.seed,
            fit=dataclasses.asdict(cfg.fit),
        )
        theta, fit_info = cached_initial_parameters(
            net, equation.u0, quadrature.points, quadrature.weights, key=key_fit,
            fit=cfg.fit, description=description, directory=cache_dir, log=log,
        )
    return Problem(equation, space, quadrature, holdout, theta, fit_info)


def run_simulation(
    cfg: RunConfig,
    *,
    on_step: Callable[[StepRecord], None] | None = None,
    log: Callable[[str], None] | None = None,
    cache_dir=None,
    snapshot_steps: Sequence[int] = (),
) -> RunResult:
    """Run ``cfg.method`` to ``t_final`` and measure the error at every time step.

    At each of ``snapshot_steps`` (time indices) the method's and the reference
    fields on the evaluation points are kept (``RunResult.snapshots``), for
    density plots.
    """
    cls: type[Method] = cfg.method.cls
    problem = prepare(cfg, cache_dir=cache_dir, log=log, fit=cls.uses_theta0)
    method = cls.build(cfg, problem)
    equation = problem.equation

    times = np.arange(cfg.n_steps + 1) * cfg.dt
    t0 = time.perf_counter()
    reference = equation.reference(times, cache_dir=cache_dir)
    reference_s = time.perf_counter() - t0

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

    snapshots: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    wanted = set(snapshot_steps)
    err_sq, ref_sq = np.zeros(cfg.n_steps + 1), np.zeros(cfg.n_steps + 1)
    eval_s = 0.0

    def measure(n: int, state) -> dict[str, float]:
        nonlocal eval_s
        start = time.perf_counter()
        u = np.asarray(evaluate(state, times[n]))
        ref = reference.values(n, cfg.eval_grid)
        if n in wanted:
            snapshots[n] = (u, ref)
        err_sq[n], ref_sq[n] = squared_norms(u, ref, evaluation.weights)
        out = {"rel_l2": float(np.sqrt(err_sq[n] / ref_sq[n]))}
        if on_boundary is not None:
            out["boundary_max_abs"] = float(np.max(np.abs(np.asarray(on_boundary(state, times[n])))))
        eval_s += time.perf_counter() - start
        return out

    steps = method.steps
    scalars: dict[str, np.ndarray] = {}
    wall, tables = np.zeros(steps), []
    if method.sequential:
        first = measure(0, state)
        if on_step is not None:
            on_step(StepRecord(step=0, of=steps, t=0.0, metrics=first, losses=np.zeros((0, 4))))
    stepping = 0.0
    for n in range(1, steps + 1):
        start = time.perf_counter()
        state, info = step_fn(state, jax.random.fold_in(key_run, n))
        jax.block_until_ready(state)
        stepping += time.perf_counter() - start
        wall[n - 1] = stepping
        info = jax.device_get(info)
        table = stage_rows(info)
        tables.append(table)
        metrics = {k: float(v) for k, v in info.scalars.items()}
        for k, v in metrics.items():
            scalars.setdefault(k, np.full(steps, np.nan))[n - 1] = v
        where = f"step {n} (t={times[n]:.6g})" if method.sequential else f"block {n}"
        if method.sequential:
            metrics.update(measure(n, state))
        if not all(np.isfinite(v) for v in metrics.values()):
            bad = sorted(k for k, v in metrics.items() if not np.isfinite(v))
            raise FloatingPointError(f"{cfg.method.name} diverged at {where}: non-finite {', '.join(bad)}")
        metrics["wall_time_s"] = float(wall[n - 1])
        if on_step is not None:
            on_step(StepRecord(step=n, of=steps, t=float(times[n]) if method.sequential else None,
                               metrics=metrics, losses=table))
    if not method.sequential:
        for n in range(cfg.n_steps + 1):
            measure(n, state)

    return RunResult(
        times=times, rel_l2=np.sqrt(err_sq / ref_sq), scalars=scalars, wall_time_s=wall,
        global_rel_l2=global_relative_l2(err_sq, ref_sq, times), runtime_s=stepping, eval_s=eval_s,
        compile_s=compile_s, fit_info=problem.fit_info, reference_s=reference_s,
        events={k: int(np.nansum(scalars[k])) for k in cls.events if k in scalars},
        network=method.network(state), losses=tables, snapshots=snapshots,
        sequential=method.sequential,
    )
