"""One job of ``pipeline/sweep.py`` in its MLflow run: the composed config checked
(:func:`teng_eq.preflight.validate_job`), the run opened (new, or its configuration's
unfinished run resumed from its checkpoint; a finished configuration is skipped),
:func:`teng_eq.simulation.run_simulation` with a progress display and a callback that
logs every step, then the end-of-run metrics, tags and artifacts. Hydra stays in
the entry script, which hands over the composed config and a :class:`JobContext`.

What the environment does to a job (docs/guides/long-runs.md): a signal (SIGTERM,
SIGINT, submitit's preemption) ends it at the end of the current step with that
step checkpointed, its run KILLED, and the exit status 128 + the signal's number
(:mod:`teng_eq.interrupts`); a checkpoint or artifact that cannot be written
ends it FAILED (:class:`~teng_eq.errors.WriteFailed`); a store that goes away is
the tracking writer's business (:mod:`teng_eq.tracking.writer`, :mod:`teng_eq.tracking.logger`)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from teng_eq import interrupts, tracking
from teng_eq.cache import cache_dir, compilation_folder, digest
from teng_eq.checkpoint import CheckpointStore, save_network
from teng_eq.driver import Callback
from teng_eq.errors import ConfigError, Overfit, RunFailed, WriteFailed
from teng_eq.initial_fit import FitProgress
from teng_eq.options import BOOKKEEPING
from teng_eq.preflight import Job, validate_job
from teng_eq.results import StepRecord, run_error
from teng_eq.simulation import RunResult, reporting, run_simulation
from teng_eq.tracking.trials import search_tags

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class JobContext:
    """Where Hydra runs the job: the repo ``root`` (``conf/``'s parent: the default
    store), its command-line ``overrides``, its number in a multirun (None for a
    single run) and its output folder (with Hydra's ``.hydra/``)."""

    root: Path
    overrides: tuple[str, ...]
    job_num: int | None
    output_dir: Path

    @property
    def multirun(self) -> bool:
        return self.job_num is not None


def device_description() -> str:
    """The accelerator jax computes on, e.g. ``gpu: NVIDIA H100 80GB HBM3`` or ``cpu: x86_64 (2 cores)``."""
    dev = jax.devices()[0]
    if dev.platform != "cpu":
        return f"{dev.platform}: {dev.device_kind}"
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    return f"cpu: {model} ({os.cpu_count()} cores)"


def spread(n: int, parts: int, first: int = 1) -> list[int]:
    """Up to ``parts`` steps spread evenly over ``first..n``."""
    return sorted({max(first, round(n * i / parts)) for i in range(first, parts + 1)})


def step_position(rec: StepRecord) -> str:
    """``step 6 of 20`` at a fixed Δt; ``step 6 (t=0.0247)`` where the controller
    chooses the steps and their number is not known until the run ends."""
    return f"step {rec.step} of {rec.of}" if rec.of is not None else f"step {rec.step} (t={rec.t:.6g})"


def config_hash(resolved: dict) -> str:
    """The numerics of a job's resolved config (bookkeeping keys aside), hashed:
    what a resumed or skipped job is matched on."""
    return digest({k: v for k, v in resolved.items() if k not in BOOKKEEPING})[:16]


class Progress:
    """What a person sees while a job runs, on stderr: a bar for each θ₀ fit stage
    (iterations, loss, the target it is judged by), then one for the time steps
    (step, ``rel_l2``, ``step_loss``); other lines (the library's, the log's) are
    written above the bars instead of through them. ``enabled=False``: nothing."""

    def __init__(self, enabled: bool, name: str):
        self.enabled, self.name = enabled, name
        self._fit: tqdm | None = None
        self._fit_stage: str | None = None
        self.steps: tqdm | None = None
        self.last: StepRecord | None = None  # the last step reported

    def log(self, message) -> None:
        """The library's ``log`` callback."""
        if not self.enabled:
            return
        if isinstance(message, FitProgress):
            self._fit_update(message)
        else:
            self._fit_close()
            tqdm.write(str(message), file=sys.stderr)

    def _fit_update(self, p: FitProgress) -> None:
        if p.stage != self._fit_stage:
            self._fit_close()
            # Started at the first report (its chunk included compilation): the rate counts the rest.
            self._fit = tqdm(total=p.max_iters, initial=p.iteration, desc=p.stage, unit="it", file=sys.stderr,
                             dynamic_ncols=True)
            self._fit_stage = p.stage
        self._fit.update(p.iteration - self._fit.n)
        target = f" target={p.target:.1e}" if p.target is not None else ""
        self._fit.set_postfix_str(f"loss={p.loss:.2e}{target}")

    def _fit_close(self) -> None:
        if self._fit is not None:
            self._fit.total = self._fit.n  # a stage ends at its tolerance or plateau, seldom at its cap
            self._fit.close()
            self._fit, self._fit_stage = None, None

    def step(self, rec: StepRecord) -> None:
        self.last = rec
        if not self.enabled:
            return
        self._fit_close()
        if self.steps is None:
            self.steps = tqdm(total=rec.of, desc=self.name, unit="step", file=sys.stderr, dynamic_ncols=True)
        if rec.step == 1:
            self.steps.reset(total=rec.of)  # the rate counts steps, not compilation (None: dt=auto)
        if rec.step > 0:
            shown = {k: rec.metrics[k] for k in ("t", "dt", "rel_l2", "est_rel_l2", "step_loss")
                     if k in rec.metrics}
            self.steps.set_postfix_str(" ".join(f"{k}={v:.2e}" for k, v in shown.items()), refresh=False)
            self.steps.update(rec.step - self.steps.n)

    def close(self) -> None:
        self._fit_close()
        if self.steps is not None:
            self.steps.close()
            self.steps = None


def main(cfg: DictConfig, context: JobContext) -> float:
    """The job (the body of ``pipeline/sweep.py``'s Hydra main): its global error.

    A bad config exits with one line. A failed run (diverged, overfit, a file it
    could not write) exits with its reason in a single job; in a multirun its
    MLflow run is FAILED with the reason and the other jobs go on (the sweep's
    parent reports it). A signal ends the job (and a multirun) with one line and
    the exit status 128 + its number, after its run is saved and KILLED; under
    submitit, its preemption signal then requeues the job. A store that never came
    back ends it with one line naming the local record of what was not logged."""
    job_start = time.perf_counter()
    interrupts.install()
    # matplotlib (slow to import) loads beside θ₀ and compilation, not after the run.
    threading.Thread(target=importlib.import_module, args=("teng_eq.plots",), daemon=True).start()
    try:
        job = validate_job(cfg, root=context.root, overrides=context.overrides)
    except ConfigError as err:
        sys.exit(f"error: {err}")
    enable_compilation_cache(job.options.cache_dir)
    try:
        with logging_redirect_tqdm(tqdm_class=tqdm):
            return tracked_job(cfg, job, context, job_start)[0]
    except interrupts.Interrupted as stop:
        then = "submitit requeues the job" if interrupts.chained(stop) else "the same command resumes it"
        print(f"error: stopped by {stop}: the run is KILLED; {then}", file=sys.stderr)
        interrupts.chain(stop)  # submitit's handler requeues the job (and exits)
        raise SystemExit(stop.exit_code) from None
    except RunFailed as err:
        if not context.multirun:
            sys.exit(f"error: {err}")
        log.error("job %s FAILED: %s", context.job_num, err)
        return float("nan")
    except tracking.StoreUnavailable as err:
        sys.exit(f"error: {err}")
    except tracking.RunInProgress as err:
        if not context.multirun:
            sys.exit(f"error: {err}")
        raise


def enable_compilation_cache(folder) -> None:
    """Keep compiled programs in :func:`teng_eq.cache.compilation_folder` of the run's
    cache (jax's persistent compilation cache): a later job of the same program (the
    other Δt of a sweep, a rerun) loads it instead of compiling it again. A folder the
    user gave jax (``JAX_COMPILATION_CACHE_DIR``) is kept; ``JAX_ENABLE_COMPILATION_CACHE=
    false`` turns the cache off."""
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", str(compilation_folder(folder)))


#: Steps between flushes of a run's step metrics to the store (also at step 1, for `mlflow
#: ui`, and at every checkpoint, so that a resumed run's store is not behind it).
FLUSH_EVERY = 100


@dataclasses.dataclass(frozen=True)
class StepLogger:
    """A :data:`~teng_eq.driver.Callback`: every step's metrics into the job's ``run`` (a
    resumed run's steps already there are not written again), flushed as :data:`FLUSH_EVERY` says."""

    run: tracking.RunLogger
    checkpoint_every: int

    def __call__(self, record: StepRecord, state) -> None:
        with self.run.timed():
            for key, value in record.metrics.items():
                self.run.metric(key, value, record.step)
            if record.step == 1 or record.step % FLUSH_EVERY == 0 or record.step % self.checkpoint_every == 0:
                self.run.flush()


def defer_signals(record: StepRecord, state) -> None:
    """Callback, the first: from now on a signal stops the run at the end of a step."""
    interrupts.defer()


def check_signals(record: StepRecord, state) -> None:
    """Callback, the last: raise the stop a signal asked for during the step (it is saved)."""
    interrupts.check()


#: Fields kept along a 1-D run for its x–t images (:func:`teng_eq.plots.line_fields`).
LINE_SNAPSHOTS = 200


def snapshot_plan(run_cfg) -> dict[str, list]:
    """The density plot's times: the start, a third, two thirds and the end, as steps
    (fixed Δt) or as the first steps at or after those times (``dt: auto``); on a line
    :data:`LINE_SNAPSHOTS` + 1 of them, the rows of its x–t images."""
    parts = LINE_SNAPSHOTS if run_cfg.equation.dim == 1 else 3
    if run_cfg.adaptive:
        return {"snapshot_times": [run_cfg.t_final * i / parts for i in range(parts)] + [run_cfg.t_final]}
    return {"snapshot_steps": spread(run_cfg.n_steps, parts, first=0)}


def job_tags(cfg: DictConfig, context: JobContext, chash: str) -> dict[str, str]:
    """The tags a job's run opens with (a frontier search's trial: its study and trial too)."""
    commit, dirty = tracking.git_state(context.root)
    tags = {"run_kind": "job", "method": cfg.method.name, "equation": cfg.equation.name,
            "hydra_overrides": " ".join(context.overrides), "config_hash": chash, "git_commit": commit,
            "git_dirty": str(dirty), "device": device_description(), "jax_version": jax.__version__}
    if context.multirun:
        tags["job_num"] = str(context.job_num)
        tags.update(search_tags(context.job_num))
    return tags


def tracked_job(cfg: DictConfig, job: Job, context: JobContext, job_start: float, *,
                callbacks: Sequence[Callback] = ()) -> tuple[float, RunResult | None]:
    """One job in its MLflow run: ``(global error, its RunResult)``; the result is None
    when the configuration's run is FINISHED already and is skipped (``resume``), the error
    then that run's. ``callbacks`` see every step too: :func:`teng_eq.api.run` passes its own."""
    run_cfg, opts = job.run, job.options
    resolved = OmegaConf.to_container(cfg, resolve=True)
    name, chash = f"{cfg.method.name}-{cfg.equation.name}-dt{cfg.dt}", config_hash(resolved)
    with tracking.tracked_run(job.tracking_uri, opts.experiment_name, run_name=name, tags=job_tags(cfg, context, chash),
                              artifact_root=tracking.artifact_root_for(job.tracking_uri, context.root),
                              parent_run_id=os.environ.get(tracking.PARENT_RUN_ENV) if context.multirun else None,
                              config_hash=chash, resume=opts.resume, retry_s=opts.store_retry_s,
                              claim_lock=tracking.claim_lock(cache_dir(opts.cache_dir)),
                              wait=context.multirun) as run:
        if run.outcome == "skipped":
            log.info("skipped: config_hash=%s is FINISHED as run %s (resume=false runs it again)",
                     chash, run.previous.info.run_id)
            return run_error(run.previous.data.metrics), None
        checkpoints = CheckpointStore.for_run(chash, run.run_id, directory=opts.cache_dir)
        run.spool = checkpoints.path.with_name(f"{run.run_id}.unlogged")  # beside the checkpoint
        run.params({**tracking.flatten(resolved), "method": cfg.method.name, "equation": cfg.equation.name})
        progress = Progress(opts.progress, name)
        callbacks = [defer_signals, StepLogger(run, opts.checkpoint_every), reporting(progress.step),
                     *callbacks, check_signals]
        try:
            result = run_simulation(run_cfg, callbacks=callbacks, cache_dir=opts.cache_dir, log=progress.log,
                                    checkpoints=checkpoints, checkpoint_every=opts.checkpoint_every,
                                    divergence_factor=opts.divergence_factor, divergence_error=opts.divergence_error,
                                    **snapshot_plan(run_cfg))
        except interrupts.Interrupted as stop:
            stop.where = (f"after {step_position(progress.last)} (saved)" if progress.last is not None
                          else "before the first step")
            raise
        finally:
            interrupts.defer(False)
            progress.close()
        interrupts.check()  # a stop after the last step: the final checkpoint holds the run
        finish(run, cfg, run_cfg, result, name, context, job_start)
    checkpoints.clear()  # the run is FINISHED: nothing left to resume
    shutil.rmtree(run.spool, ignore_errors=True)  # a local record of an earlier attempt is obsolete
    if not context.multirun:  # a sweep's callback says where all its runs are
        print(f"run: {tracking.ui_address(job.tracking_uri, run.experiment_id, context.root)}")
    return result.error, result


def finish(run: tracking.RunLogger, cfg: DictConfig, run_cfg, result: RunResult, name: str, context: JobContext,
           job_start: float) -> None:
    """A run that reached its end: its metrics, tags, artifacts and tracking overhead (MLflow
    calls and plots against the job's time); a failed held-out check then ends it FAILED."""
    log_result(run, result, name, run_cfg)
    log_artifacts(run, cfg, run_cfg, result, name, context.output_dir)
    run.flush()
    job_s = time.perf_counter() - job_start
    run.metric("tracking_s", run.seconds)
    run.metric("job_s", job_s)
    run.metric("tracking_fraction", run.seconds / job_s)
    if result.holdout_flag == "fail":
        raise Overfit(f"{name}: held-out loss exceeds the training loss more than "
                      f"holdout.fail={result.holdout.fail:g} times: the fits overfit the quadrature nodes")


def log_result(run: tracking.RunLogger, result: RunResult, name: str, run_cfg) -> None:
    """The end-of-run metrics and tags; what went wrong without failing the run
    (solver events, the held-out check's warning, θ₀ above its tolerance) is also
    printed at the end."""
    if result.rel_l2 is not None:  # against the reference, where the run has one
        if not result.sequential:  # a global-in-time method's error curve exists only now
            run.curve("rel_l2", range(len(result.rel_l2)), result.rel_l2)
        run.metric("global_rel_l2", result.global_rel_l2)
        run.metric("final_rel_l2", result.rel_l2[-1])
    for key in ("runtime_s", "eval_s", "compile_s", "reference_s", "checkpoint_s"):
        run.metric(key, getattr(result, key))
    run.tags({"reference": "yes" if result.rel_l2 is not None else "none", "estimate_used": result.estimate})
    for key, value in result.scalars.items():  # est_global_rel_l2, steps_accepted, steps_rejected, …
        run.metric(key, value)
    for key, count in result.events.items():
        run.metric(f"{key}_total", count)
    if result.resumed_from:
        run.tags({"resumed_from_step": result.resumed_from})
    fit = result.fit_report
    if fit is not None:
        run.metric("fit_s", fit.seconds)
        run.tags({"theta0_cached": fit.cached, "theta0_loss": f"{fit.stage2_loss:.3e}",
                  "theta0_converged": fit.converged})
    ratios = result.metrics.get("holdout_ratio")
    if ratios is not None:
        run.metric("holdout_ratio_max", float(np.nanmax(ratios)))
        run.tags({"holdout_flag": result.holdout_flag})
    if "iterations" in result.metrics:
        run.metric("iterations_mean", float(np.mean(result.metrics["iterations"])))
    warn = []
    if any(result.events.values()):
        warn.append("solver events: " + ", ".join(f"{k}={v}" for k, v in result.events.items()))
    if result.holdout_flag != "ok":
        warn.append(f"held-out check: {result.holdout_flag} (max held-out/training loss ratio "
                    f"{np.nanmax(ratios):.3g}; holdout.warn={result.holdout.warn:g}, "
                    f"holdout.fail={result.holdout.fail:g}): the fits may overfit the quadrature nodes")
    if fit is not None and not fit.converged:
        warn.append(f"θ₀ fit ended above fit.stage2_tol (relative loss {fit.stage2_rel_loss:.2e})")
    if result.estimate not in (run_cfg.estimate, "none"):
        why = ("needs a periodic box" if run_cfg.estimate == "transport" else
               f"needs derivatives of twice the operator's order ({2 * run_cfg.equation.order})")
        print(f"note: {name}: estimate={run_cfg.estimate} {why}: the run's estimate is {result.estimate}",
              file=sys.stderr)
    for msg in warn:
        print(f"warning: {name}: {msg}", file=sys.stderr)
    if result.sequential and "est_global_rel_l2" in result.scalars:
        print(summary_line(result, name))


def summary_line(result: RunResult, name: str) -> str:
    """One line on what a run reached and what it estimates of its own error, e.g.
    ``teng_heun-heat-dtauto: t=1 in 61 steps (3 rejected), Δt 0.0031–0.026;
    error 1.1e-07 (estimate 2.3e-07), global 9.8e-08 (estimate 1.9e-07)``; without a
    reference, ``…; no reference: estimated error 2.3e-07, global 1.9e-07``."""
    s = result.scalars
    steps = f"t={result.times[-1]:.6g} in {len(result.times) - 1} steps"
    if "steps_rejected" in s:
        dt = np.diff(result.times)
        steps += f" ({int(s['steps_rejected'])} rejected), Δt {dt.min():.2g}–{dt.max():.2g}"
    if result.rel_l2 is None:
        return (f"{name}: {steps}; no reference: estimated error {result.est_rel_l2[-1]:.2g}, "
                f"global {s['est_global_rel_l2']:.2g}")
    return (f"{name}: {steps}; error {result.rel_l2[-1]:.2g} (estimate {result.est_rel_l2[-1]:.2g}), "
            f"global {result.global_rel_l2:.2g} (estimate {s['est_global_rel_l2']:.2g})")


def log_artifacts(run: tracking.RunLogger, cfg: DictConfig, run_cfg, result: RunResult, name: str,
                  output_dir: Path) -> None:
    """Config (resolved, and Hydra's .hydra/), plots, the per-iteration loss table, θ.
    A file that cannot be written (a full disk) ends the run FAILED
    (:class:`~teng_eq.errors.WriteFailed`): its checkpoint after the last step stays,
    and running the same command again logs the results from it."""
    try:
        _write_artifacts(run, cfg, run_cfg, result, name, output_dir)
    except OSError as err:
        raise WriteFailed(f"{name}: an artifact could not be written ({err.strerror or err}: "
                          f"{getattr(err, 'filename', None) or 'unknown file'}); the checkpoint after step "
                          f"{len(result.step_loss)} is kept: the same command logs the results") from err


def _write_artifacts(run: tracking.RunLogger, cfg: DictConfig, run_cfg, result: RunResult, name: str,
                     output_dir: Path) -> None:
    plots = importlib.import_module("teng_eq.plots")  # loaded in the background at the job's start
    with tempfile.TemporaryDirectory() as tmp, run.timed():
        tmp = Path(tmp)
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        run.artifact(tmp / "config.yaml", "config")
        if (output_dir / ".hydra").is_dir():
            run.artifact(output_dir / ".hydra", "config/.hydra")
        table = result.loss_table()
        np.savetxt(tmp / "losses.csv", table, delimiter=",",
                   header=f"step,t,stage,iteration,loss,{result.inner_measure}", comments="",
                   fmt=["%d", "%.10g", "%d", "%d", "%.17g", "%.17g"])
        run.artifact(tmp / "losses.csv", "tables")
        run.artifact(save_network(tmp / "theta.eqx", result.network), "params")
        step_times = result.times[1:] if result.sequential else np.arange(1, len(result.step_loss) + 1)
        plots.error_curve(tmp / "error.png", result.times, result.rel_l2, result.step_loss, title=name,
                          step_times=step_times, estimate=result.est_rel_l2)
        plots.loss_iterations(tmp / "loss_iterations.png", table, spread(len(result.step_loss), 5),
                              result.step_loss, step_times, title=name)
        for png in ("error.png", "loss_iterations.png"):
            run.artifact(tmp / png, "plots")
        if result.snapshots:
            draw = plots.line_fields if run_cfg.equation.dim == 1 else plots.density
            evaluation = run_cfg.equation.evaluation(run_cfg.eval_grid)
            for suffix, snapshots, points in plots.by_component(result.snapshots, evaluation):
                draw(tmp / f"density{suffix}.png", snapshots, result.times, points, title=name + suffix.replace("_", " "))
                run.artifact(tmp / f"density{suffix}.png", "plots")
