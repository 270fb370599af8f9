"""One job of ``pipeline/sweep.py`` in its MLflow run: the composed config checked
(:func:`teng_eq.jobs.preflight.validate_job`), the run opened (new, or its configuration's
unfinished run resumed from its checkpoint; a finished configuration is skipped),
:func:`teng_eq.run.simulation.run_simulation` with a progress display and a callback that
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
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from teng_eq import interrupts, tracking
from teng_eq.cache.files import cache_dir, compilation_folder, digest
from teng_eq.config.options import BOOKKEEPING
from teng_eq.errors import ConfigError, RunFailed
from teng_eq.fit.results import StepRecord
from teng_eq.jobs.artifacts import finish, snapshot_plan
from teng_eq.jobs.preflight import Job, validate_job
from teng_eq.jobs.progress import Progress
from teng_eq.run.callbacks import Callback
from teng_eq.run.checkpoint import CheckpointStore
from teng_eq.run.result import RunResult, run_error
from teng_eq.run.simulation import run_simulation
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


def step_position(rec: StepRecord) -> str:
    """``step 6 of 20`` at a fixed Δt; ``step 6 (t=0.0247)`` where the controller
    chooses the steps and their number is not known until the run ends."""
    return f"step {rec.step} of {rec.of}" if rec.of is not None else f"step {rec.step} (t={rec.t:.6g})"


def config_hash(resolved: dict) -> str:
    """The numerics of a job's resolved config (bookkeeping keys aside), hashed:
    what a resumed or skipped job is matched on. ``devices: 1`` is left out, so that a config
    hashes as it did before the key existed; split over devices, a run sums in another order
    (its last bits differ) and is a run of its own."""
    numerics = {k: v for k, v in resolved.items() if k not in BOOKKEEPING}
    if numerics.get("devices") == 1:
        del numerics["devices"]
    return digest(numerics)[:16]


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
    threading.Thread(target=importlib.import_module, args=("teng_eq.analysis.plots",), daemon=True).start()
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
    """Keep compiled programs in :func:`teng_eq.cache.files.compilation_folder` of the run's
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
class StepLogger(Callback):
    """Every step's metrics into the job's ``run`` (a resumed run's steps already there are
    not written again), flushed as :data:`FLUSH_EVERY` says."""

    run: tracking.RunLogger
    checkpoint_every: int

    def step(self, record: StepRecord, state) -> None:
        with self.run.timed():
            for key, value in record.metrics.items():
                self.run.metric(key, value, record.step)
            if record.step == 1 or record.step % FLUSH_EVERY == 0 or record.step % self.checkpoint_every == 0:
                self.run.flush()


class Signals(Callback):
    """The signals that stop a job (:mod:`teng_eq.interrupts`), a callback of the ``stop``
    stage: from the loop's start a signal only marks a stop, raised at the end of the step
    (once it is logged and checkpointed) or at the run's end; before the loop (θ₀'s fit) and
    after it, at once."""

    stage = "stop"

    def begin(self, state) -> None:
        interrupts.defer()

    def step(self, record: StepRecord, state) -> None:
        self._check(f"after {step_position(record)} (saved)")

    def end(self, state) -> None:
        interrupts.defer(False)
        self._check(f"after its last step, {state.n} (saved)")

    def abort(self, state, error: BaseException) -> None:
        interrupts.defer(False)

    @staticmethod
    def _check(where: str) -> None:
        try:
            interrupts.check()
        except interrupts.Interrupted as stop:
            stop.where = where
            raise


def unlogged_folder(chash: str, directory) -> Callable[[str], Path]:
    """Where what a run could not log goes: beside its checkpoint, ``<run id>.unlogged``."""
    def folder(run_id: str) -> Path:
        return (CheckpointStore.for_run(chash, run_id, directory=directory).path
                .with_name(f"{run_id}.unlogged"))
    return folder


#: Override keys a run's name leaves out: those ``<method>-<equation>-dt<Δt>`` names already.
NAMED = frozenset({"method", "equation", "dt"})
#: Longest list of overrides a run's name spells out; a longer one is cut and followed by a
#: hash of them all.
NAME_OVERRIDES = 80


def run_name(cfg: DictConfig, overrides: Sequence[str]) -> str:
    """The MLflow run's name: ``<method>-<equation>-dt<Δt>`` (the job's log lines' label),
    then every override of the command line that it does not name and that is not
    bookkeeping (:data:`~teng_eq.config.options.BOOKKEEPING`, ``hydra.*``), as given; past
    :data:`NAME_OVERRIDES` characters cut, with ``#`` and 8 hex digits of a hash of them all.
    So two runs of one command line that differ in a setting have different names, and a
    run with no other override keeps the bare name."""
    base = f"{cfg.method.name}-{cfg.equation.name}-dt{cfg.dt}"
    keys = [o.lstrip("+~").split("=", 1)[0] for o in overrides]
    extra = [o for o, key in zip(overrides, keys)
             if key not in NAMED and key.split(".")[0] not in BOOKKEEPING and not key.startswith("hydra.")]
    text = " ".join(extra)
    if len(text) > NAME_OVERRIDES:
        text = f"{text[:NAME_OVERRIDES - 11].rstrip()}… #{digest({'overrides': extra})[:8]}"
    return f"{base} {text}" if text else base


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
    with tracking.tracked_run(job.tracking_uri, opts.experiment_name,
                              run_name=run_name(cfg, context.overrides), tags=job_tags(cfg, context, chash),
                              artifact_root=tracking.artifact_root_for(job.tracking_uri, context.root),
                              parent_run_id=(os.environ.get(tracking.PARENT_RUN_ENV) if context.multirun
                                             else None),
                              config_hash=chash, resume=opts.resume, retry_s=opts.store_retry_s,
                              claim_lock=tracking.claim_lock(cache_dir(opts.cache_dir)),
                              wait=context.multirun, spool=unlogged_folder(chash, opts.cache_dir)) as run:
        if run.outcome == "skipped":
            log.info("skipped: config_hash=%s is FINISHED as run %s (resume=false runs it again)",
                     chash, run.previous.info.run_id)
            return run_error(run.previous.data.metrics), None
        checkpoints = CheckpointStore.for_run(chash, run.run_id, directory=opts.cache_dir)
        run.params({**tracking.flatten(resolved), "method": cfg.method.name, "equation": cfg.equation.name})
        callbacks = [StepLogger(run, opts.checkpoint_every), Progress(opts.progress, name), *callbacks,
                     Signals()]
        try:
            result = run_simulation(run_cfg, callbacks=callbacks, cache_dir=opts.cache_dir,
                                    checkpoints=checkpoints, checkpoint_every=opts.checkpoint_every,
                                    divergence_factor=opts.divergence_factor,
                                    divergence_error=opts.divergence_error, **snapshot_plan(run_cfg))
        except interrupts.Interrupted as stop:
            stop.where = stop.where or "before the first step"
            raise
        finish(run, cfg, run_cfg, result, name, context.output_dir, job_start)
    checkpoints.clear()  # the run is FINISHED: nothing left to resume
    shutil.rmtree(run.spool_dir(), ignore_errors=True)  # a local record of an earlier attempt is obsolete
    if not context.multirun:  # a sweep's callback says where all its runs are
        print(f"run: {tracking.ui_address(job.tracking_uri, run.experiment_id, context.root)}")
    return result.error, result
