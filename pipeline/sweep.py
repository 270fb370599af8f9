"""Run TENG jobs from the Hydra configs in conf/, one MLflow run per job.

    python pipeline/sweep.py                                   # one run, defaults
    python pipeline/sweep.py -m dt=0.0016,0.005,0.02           # a sweep
    python pipeline/sweep.py +experiment=paper_heat2d          # the paper's setting
"""

from __future__ import annotations

import os

# One OpenBLAS thread (jax's CPU LAPACK): measured on 2 cores, a default-config
# TENG-Heun step takes 0.89 s with 1 thread and 1.36 s with 2, which fight
# XLA's own threads. Must be set before numpy/jax load; an explicit value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import importlib
import logging
import sys
import tempfile
import threading
import time
from pathlib import Path

import hydra
import jax
import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from teng_eq.cache import digest
from teng_eq.checkpoint import CheckpointStore
from teng_eq.config import BOOKKEEPING, ConfigError, RunConfig, check_group_choices, validate_job
from teng_eq.simulation import Overfit, RunFailed, run_simulation, save_network
from teng_eq.tracking import (
    PARENT_RUN_ENV,
    RunInProgress,
    artifact_root_for,
    device_description,
    flatten,
    git_state,
    tracked_run,
)

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
log = logging.getLogger(__name__)


def spread(n: int, parts: int, first: int = 1) -> list[int]:
    """Up to ``parts`` steps spread evenly over ``first..n``."""
    return sorted({max(first, round(n * i / parts)) for i in range(first, parts + 1)})


def config_hash(resolved: dict) -> str:
    """The numerics of a job's resolved config (bookkeeping keys aside), hashed:
    what a resumed or skipped job is matched on."""
    return digest({k: v for k, v in resolved.items() if k not in BOOKKEEPING})[:16]


def job_tags(cfg: DictConfig, resolved: dict) -> dict[str, str]:
    hc = HydraConfig.get()
    commit, dirty = git_state(ROOT)
    tags = {
        "run_kind": "job", "method": cfg.method.name, "equation": cfg.equation.name,
        "hydra_overrides": " ".join(hc.overrides.task), "config_hash": config_hash(resolved),
        "git_commit": commit, "git_dirty": str(dirty),
        "device": device_description(), "jax_version": jax.__version__,
    }
    if hc.mode == RunMode.MULTIRUN:
        tags["job_num"] = str(hc.job.num)
    return tags


def log_artifacts(run, cfg: DictConfig, run_cfg: RunConfig, result, name: str) -> None:
    """Config (resolved, and Hydra's .hydra/), plots, the per-iteration loss table, θ."""
    from teng_eq import plots

    with tempfile.TemporaryDirectory() as tmp, run.timed():
        tmp = Path(tmp)
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        run.artifact(tmp / "config.yaml", "config")
        hydra_dir = Path(HydraConfig.get().runtime.output_dir) / ".hydra"
        if hydra_dir.is_dir():
            run.artifact(hydra_dir, "config/.hydra")
        table = result.loss_table()
        np.savetxt(tmp / "losses.csv", table, delimiter=",", header="step,t,stage,iteration,loss,lsq",
                   comments="", fmt=["%d", "%.10g", "%d", "%d", "%.17g", "%.17g"])
        run.artifact(tmp / "losses.csv", "tables")
        run.artifact(save_network(tmp / "theta.eqx", result.network), "params")
        step_times = result.times[1:] if result.sequential else np.arange(1, len(result.step_loss) + 1)
        plots.error_curve(tmp / "error.png", result.times, result.rel_l2, result.step_loss, title=name,
                          step_times=step_times)
        plots.loss_iterations(tmp / "loss_iterations.png", table, spread(len(result.step_loss), 5),
                              result.step_loss, step_times, title=name)
        for png in ("error.png", "loss_iterations.png"):
            run.artifact(tmp / png, "plots")
        if result.snapshots:
            plots.density(tmp / "density.png", result.snapshots, result.times,
                          run_cfg.equation.evaluation(run_cfg.eval_grid), title=name)
            run.artifact(tmp / "density.png", "plots")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    job_start = time.perf_counter()
    # matplotlib (~1 s to import) loads beside θ₀ and compilation, not after the run.
    threading.Thread(target=importlib.import_module, args=("teng_eq.plots",), daemon=True).start()
    resolved = OmegaConf.to_container(cfg, resolve=True)
    try:
        job = validate_job(resolved, root=ROOT)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        return run_job(cfg, resolved, job, multirun, job_start)
    except RunFailed as err:
        if not multirun:
            sys.exit(f"error: {err}")
        # The job's run is FAILED with the reason; the other jobs go on, and the
        # sweep's parent run (and exit status) report it at the end.
        log.error("job %s FAILED: %s", HydraConfig.get().job.num, err)
        return float("nan")
    except RunInProgress as err:
        if not multirun:
            sys.exit(f"error: {err}")
        raise


def run_job(cfg: DictConfig, resolved: dict, job, multirun: bool, job_start: float) -> float:
    """One job in its MLflow run (a new one, or its configuration's unfinished
    run resumed from its checkpoint); a finished configuration is skipped."""
    run_cfg, opts = job.run, job.options
    name = f"{cfg.method.name}-{cfg.equation.name}-dt{cfg.dt}"
    chash = config_hash(resolved)
    with tracked_run(job.tracking_uri, opts.experiment_name, run_name=name, tags=job_tags(cfg, resolved),
                     artifact_root=artifact_root_for(job.tracking_uri, ROOT),
                     parent_run_id=os.environ.get(PARENT_RUN_ENV) if multirun else None,
                     config_hash=chash, resume=opts.resume) as run:
        if run.outcome == "skipped":
            done = run.previous
            log.info("skipped: config_hash=%s is FINISHED as run %s (resume=false runs it again)",
                     chash, done.info.run_id)
            return float(done.data.metrics.get("global_rel_l2", float("nan")))
        checkpoints = CheckpointStore.for_run(chash, run.run_id, directory=opts.cache_dir)
        run.params({**flatten(resolved), "method": cfg.method.name, "equation": cfg.equation.name})
        bar = tqdm(total=run_cfg.n_steps, disable=not opts.progress, desc=name, file=sys.stderr)

        def on_step(rec):
            if rec.step == 1:
                bar.reset(total=rec.of)  # the θ₀ fit before the first step must not count in the rate
            with run.timed():
                for key, value in rec.metrics.items():
                    run.metric(key, value, rec.step)
                if rec.step == 1 or rec.step % 100 == 0 or rec.step % opts.checkpoint_every == 0:
                    run.flush()  # the run shows up in `mlflow ui` from the first step
            if rec.step > 0:
                shown = {k: rec.metrics[k] for k in ("rel_l2", "step_loss") if k in rec.metrics}
                bar.set_postfix_str(" ".join(f"{k}={v:.2e}" for k, v in shown.items()))
                bar.update()

        result = run_simulation(run_cfg, on_step=on_step, cache_dir=opts.cache_dir,
                                snapshot_steps=spread(run_cfg.n_steps, 3, first=0),
                                log=lambda msg: bar.write(msg) if opts.progress else None,
                                checkpoints=checkpoints, checkpoint_every=opts.checkpoint_every,
                                divergence_factor=opts.divergence_factor)
        bar.close()
        if not result.sequential:  # a global-in-time method's error curve exists only now
            run.curve("rel_l2", range(len(result.rel_l2)), result.rel_l2)
        for key in ("global_rel_l2", "runtime_s", "eval_s", "compile_s", "reference_s", "checkpoint_s"):
            run.metric(key, getattr(result, key))
        run.metric("final_rel_l2", result.rel_l2[-1])
        for key, count in result.events.items():
            run.metric(f"{key}_total", count)
        if result.resumed_from:
            run.tags({"resumed_from_step": result.resumed_from})
        if result.fit_info is not None:
            cached = result.fit_info["cached"]
            # Time this run spent fitting θ₀: 0 when another run had cached it.
            run.metric("fit_s", 0.0 if cached else result.fit_info["stage1_s"] + result.fit_info["stage2_s"])
            run.tags({"theta0_cached": cached, "theta0_loss": f"{result.fit_info['stage2_loss']:.3e}",
                      "theta0_converged": result.fit_info.get("converged", True)})
        ratios = result.scalars.get("holdout_ratio")
        if ratios is not None:
            run.metric("holdout_ratio_max", float(np.nanmax(ratios)))
            run.tags({"holdout_flag": result.holdout_flag})
        if "iterations" in result.scalars:
            run.metric("iterations_mean", float(np.mean(result.scalars["iterations"])))
        # A run where solver events happened, the held-out check flagged or θ₀ did
        # not converge says so at the end.
        warn = []
        if any(result.events.values()):
            warn.append("solver events: " + ", ".join(f"{k}={v}" for k, v in result.events.items()))
        if result.holdout_flag != "ok":
            warn.append(f"held-out check: {result.holdout_flag} (max held-out/training loss ratio "
                        f"{np.nanmax(ratios):.3g}; holdout.warn={run_cfg.holdout.warn:g}, "
                        f"holdout.fail={run_cfg.holdout.fail:g}): the fits may overfit the quadrature nodes")
        if result.fit_info is not None and not result.fit_info.get("converged", True):
            warn.append(f"θ₀ fit ended above fit.stage2_tol (relative loss {result.fit_info['stage2_rel_loss']:.2e})")
        for msg in warn:
            print(f"warning: {name}: {msg}", file=sys.stderr)
        log_artifacts(run, cfg, run_cfg, result, name)
        run.flush()
        # Tracking overhead: every MLflow call and plot of this job, against its wall time.
        job_s = time.perf_counter() - job_start
        run.metric("tracking_s", run.seconds)
        run.metric("job_s", job_s)
        run.metric("tracking_fraction", run.seconds / job_s)
        if result.holdout_flag == "fail":
            # Everything is logged; raising ends the run FAILED (tracked_run).
            raise Overfit(f"{name}: held-out loss exceeds the training loss more than "
                          f"holdout.fail={run_cfg.holdout.fail:g} times: the fits overfit the quadrature nodes")
    checkpoints.clear()  # the run is FINISHED: nothing left to resume
    return result.global_rel_l2


def _one_line(err: Exception) -> str:
    """Hydra's composition errors span several lines (and a chained cause): the
    first line of each, joined."""
    parts = []
    while err is not None and len(parts) < 3:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        if first and first not in parts:
            parts.append(first)
        err = err.__cause__
    return " ".join(parts)


def preflight(argv: list[str]) -> int:
    """Compose and validate every job of the command line ``argv`` (with ``-m``:
    each job of the sweep) before Hydra starts, so that a bad one stops the
    command with one line naming the key, before any compute and before any
    MLflow run. Returns the number of jobs checked (0 when ``argv`` asks Hydra
    for something other than running, e.g. ``--help`` or ``--cfg``)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra._internal.utils import get_args_parser
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf.errors import OmegaConfBaseException

    check_group_choices(argv, CONF)
    args = get_args_parser().parse_args(argv)
    if any(getattr(args, flag, None) for flag in ("help", "hydra_help", "version", "cfg", "info",
                                                  "shell_completion", "config_path", "config_name",
                                                  "config_dir", "experimental_rerun")):
        return 0
    if args.multirun and any(o.lstrip("+~").startswith("hydra/sweeper") for o in args.overrides):
        return 0  # another sweeper expands the jobs its own way: each job checks itself
    checked = set()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        try:
            # A preset may sweep through its own hydra.sweeper.params (and set
            # hydra.mode: MULTIRUN): Hydra's basic sweeper puts them before the
            # command line's overrides; a glob over a group needs the config loader.
            parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
            fixed = [o.input_line for o in parser.parse_overrides(args.overrides) if not o.is_sweep_override()]
            base = compose(config_name="config", overrides=fixed, return_hydra_config=True)
            multirun = args.multirun or base.hydra.mode == RunMode.MULTIRUN
            swept = [f"{k}={v}" for k, v in (base.hydra.sweeper.get("params") or {}).items()] if multirun else []
            overrides = parser.parse_overrides([*swept, *args.overrides])
            jobs = ([job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
                    if multirun else [list(args.overrides)])
        except (HydraException, OmegaConfBaseException) as err:
            raise ConfigError(f"invalid config: {_one_line(err)}") from None
        for job in jobs:
            try:
                cfg = compose(config_name="config", overrides=job)
                resolved = OmegaConf.to_container(cfg, resolve=True)
            except (HydraException, OmegaConfBaseException) as err:
                raise ConfigError(f"invalid config: {_one_line(err)}") from None
            key = digest(resolved)
            if key not in checked:
                checked.add(key)
                validate_job(resolved, root=ROOT)
    return len(jobs)


if __name__ == "__main__":
    try:
        preflight(sys.argv[1:])
    except ConfigError as err:
        sys.exit(f"error: {err}")
    main()
