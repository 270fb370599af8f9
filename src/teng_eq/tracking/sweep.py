"""A Hydra multirun as one parent MLflow run with a child run per job.

The parent is made by :class:`SweepCallback` in the launching process, before
any job starts, which also creates the store: parallel jobs opening a fresh
SQLite store race on its schema migration.

Re-running a multirun (same overrides, bookkeeping keys aside) reopens its
parent — unless ``resume=false`` or that parent's launcher is still alive — so
the jobs it resumes and the finished ones it skips stay its children, and the
parent's final status is that of the whole sweep.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from teng_eq import interrupts
from teng_eq.cache.files import cache_dir, digest, file_lock
from teng_eq.config.options import BOOKKEEPING
from teng_eq.tracking.claims import REUSED_TAG, Heartbeat, claim_lock, reopen
from teng_eq.tracking.store import (
    StoreUnavailable,
    all_experiment_ids,
    artifact_root_for,
    default_tracking_uri,
    ensure_experiment,
    git_state,
    is_stale,
    open_client,
    process_tags,
    reap_stale,
    retrying,
    search,
    ui_address,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: Environment variable through which the launching process hands the parent
#: run's id to its jobs (inherited by joblib workers, submitit and SLURM jobs).
PARENT_RUN_ENV = "TENG_EQ_PARENT_RUN"

#: Seconds the parent run's end waits for a store that does not answer.
CLOSE_RETRY_S = 60.0


def config_root(config) -> Path:
    """The folder holding the primary config folder (``conf/``): the repo root."""
    for source in config.hydra.runtime.config_sources:
        if source.provider == "main" and source.schema == "file":
            return Path(source.path).parent
    return Path.cwd()


def sweep_hash(task_overrides: list[str]) -> str:
    """What identifies a multirun across re-runs: its overrides, sorted, without
    Hydra's own keys and the bookkeeping ones (store, cache, progress, resume, …)."""
    def key(item: str) -> str:
        return item.split("=", 1)[0].lstrip("+~")

    kept = sorted(o for o in task_overrides if not key(o).startswith(("hydra.", "hydra/"))
                  and key(o) not in BOOKKEEPING)
    return digest({"overrides": kept})[:16]


def sweep_jobs(client: MlflowClient, parent_run_id: str) -> list:
    """The job runs of sweep ``parent_run_id``, in every experiment: its child
    runs, and the finished runs of other sweeps it reused (``reused_run.*`` tags)."""
    runs = search(client, all_experiment_ids(client), f"tags.`mlflow.parentRunId` = '{parent_run_id}'")
    have = {r.info.run_id for r in runs}
    tags = client.get_run(parent_run_id).data.tags
    reused = sorted({v for k, v in tags.items() if k.startswith(REUSED_TAG)} - have)
    return runs + [client.get_run(run_id) for run_id in reused]


class SweepCallback:
    """Hydra callback (``hydra.callbacks``) that gives a multirun one parent run.

    In the launching process, before any job starts, ``on_multirun_start`` opens
    the store (creating and migrating it once), ends stale RUNNING runs KILLED
    (:func:`teng_eq.tracking.store.reap_stale`), then reopens this multirun's
    earlier parent (see the module's docstring) or creates one tagged
    ``run_kind=sweep``, ``sweep_dir``, ``sweep_overrides`` and ``sweep_hash``,
    and exports its id in :data:`PARENT_RUN_ENV` for the jobs. The parent ends
    FINISHED when every job run is FINISHED, else FAILED with the unfinished
    jobs in ``failure_reason`` (and then the process exits non-zero); an exit
    that skips ``on_multirun_end`` (Hydra re-raises a job's exception) ends it
    through ``atexit``.

    Written against Hydra's callback protocol without importing Hydra (the
    library stays Hydra-free); the config is read by attribute.
    """

    def __init__(self) -> None:
        self.uri: str | None = None
        self.run_id: str | None = None
        self.address: str | None = None  # where its runs show in MLflow's UI
        self.attempt = 1
        self.retry_s = 60.0
        self._heartbeat: Heartbeat | None = None

    def __getstate__(self) -> dict:
        # Launchers pickle the callbacks into each job's process; the parent run
        # belongs to the launching process alone.
        return {"uri": None, "run_id": None, "address": None, "attempt": 1, "retry_s": 60.0,
                "_heartbeat": None}

    def on_multirun_start(self, config, **kwargs) -> None:
        try:
            self._open(config)
        except Exception as exc:
            # Hydra only warns about a callback's exception; a sweep without its
            # store must not start at all.
            raise SystemExit(f"error: cannot open the MLflow store for this sweep: {exc}") from exc
        os.environ[PARENT_RUN_ENV] = self.run_id
        atexit.register(self.close)
        # SIGTERM to the launching process (a joblib or submitit sweep waiting for
        # its jobs) ends it as Ctrl-C does, and the parent run KILLED (close).
        interrupts.install()

    def _open(self, config) -> None:
        root = config_root(config)
        uri = config.tracking_uri or default_tracking_uri(root)
        self.retry_s = float(config.get("store_retry_s", self.retry_s))
        client = open_client(uri)
        exp_id = ensure_experiment(client, config.experiment_name, artifact_root_for(uri, root))
        sweep_dir = str(config.hydra.sweep.dir)
        task = [str(o) for o in config.hydra.overrides.task]
        signature = sweep_hash(task)
        commit, dirty = git_state(root)
        tags = {"run_kind": "sweep", "sweep_dir": sweep_dir, "sweep_overrides": " ".join(task),
                "sweep_hash": signature, "git_commit": commit, "git_dirty": str(dirty), **process_tags()}
        query = f"tags.run_kind = 'sweep' and tags.sweep_hash = '{signature}'"
        # Two sweeps with the same overrides at once must not both reopen one parent.
        with file_lock(claim_lock(cache_dir(config.get("cache_dir")))):
            earlier = [r for r in search(client, [exp_id], query, order_by=["attributes.start_time DESC"])
                       if r.info.status != "RUNNING" or is_stale(r.data.tags)]
            if config.get("resume", True) and earlier:
                self.run_id = earlier[0].info.run_id
                self.attempt = reopen(client, earlier[0], tags)
            else:
                name = "/".join(Path(sweep_dir).parts[-2:])
                self.run_id = client.create_run(exp_id, run_name=f"sweep {name}", tags=tags).info.run_id
        self.uri, self.address = uri, ui_address(uri, exp_id, root)
        reap_stale(client, all_experiment_ids(client), keep=[self.run_id])
        self._heartbeat = Heartbeat(client, self.run_id)

    def on_multirun_end(self, config, **kwargs) -> None:
        if self.address is not None:
            print(f"runs: {self.address}", flush=True)
        failure = self.close(complete=True)
        if failure:
            # After every job returned: the sweep's exit status says it failed.
            raise SystemExit(f"error: sweep FAILED: {failure}")

    def close(self, complete: bool = False) -> str | None:
        """End the parent run (once); the failure reason, or None when FINISHED.
        Hydra calls ``on_multirun_end`` only when every job returned; any other
        exit reaches here through ``atexit``: a signal (ends it KILLED, with the
        signal in ``killed_reason``), a job's exception, a store that went away.
        A store that does not answer within ``store_retry_s`` (at most
        :data:`CLOSE_RETRY_S`: a job that gave up on it has waited already) leaves
        the parent RUNNING, with one warning line; the next sweep ends it as stale."""
        if self.run_id is None:
            return None
        run_id, self.run_id = self.run_id, None
        os.environ.pop(PARENT_RUN_ENV, None)
        if self._heartbeat is not None:
            self._heartbeat.stop()
        try:
            # One time stamp for every try: a metric point written twice is stored once.
            return retrying(self._end, run_id, complete, int(time.time() * 1000),
                            budget_s=min(self.retry_s, CLOSE_RETRY_S), what=self.uri)
        except StoreUnavailable as err:
            print(f"warning: sweep run {run_id} not ended: {err}", file=sys.stderr)
            return f"the sweep's parent run could not be ended: {err}"

    def _end(self, run_id: str, complete: bool, now: int) -> str | None:
        from mlflow.entities import Metric

        client = open_client(self.uri)
        runs = sweep_jobs(client, run_id)
        # A frontier search's trial that FAILED (teng_eq.search; tagged `trial`) is one of its answers,
        # not a failure of the search: only trials stopped or unfinished keep it from FINISHED.
        unfinished = sorted((r for r in runs if r.info.status != "FINISHED"
                             and not (r.info.status == "FAILED" and "trial" in r.data.tags)),
                            key=lambda r: int(r.data.tags.get("job_num", "-1")))
        client.log_batch(run_id, metrics=[
            Metric("n_jobs", len(runs), now, self.attempt - 1),
            Metric("n_finished", len(runs) - len(unfinished), now, self.attempt - 1),
        ])
        stop = interrupts.received()
        # A search that found its shared study full (another search ran the trials) launched
        # nothing, and that is its answer: it ends FINISHED, as a search does whose trials all ended.
        searched = not runs and "study" in client.get_run(run_id).data.tags
        if complete and (runs or searched) and not unfinished and stop is None:
            client.set_terminated(run_id, status="FINISHED")
            return None
        if unfinished:
            def why(r) -> str:
                text = r.data.tags.get("failure_reason") or r.data.tags.get("killed_reason") or ""
                detail = f": {text[:200]}" if text else ""
                return f"{r.data.tags.get('job_num', '?')} ({r.info.status}{detail})"

            reason = "jobs not finished: " + "; ".join(why(r) for r in unfinished)
            numbers = ",".join(r.data.tags.get("job_num", "?") for r in unfinished)
            client.set_tag(run_id, "failed_jobs", numbers)
        elif complete:
            reason = "no job ran"
        else:
            reason = "the sweep stopped before all its jobs returned"
        if stop is not None:
            reason = f"{stop.name} (signal {stop.signum}): the sweep was stopped; {reason}"
            client.set_tag(run_id, "killed_reason", reason[:4000])
            client.set_terminated(run_id, status="KILLED")
            return reason
        client.set_tag(run_id, "failure_reason", reason[:4000])
        client.set_terminated(run_id, status="FAILED")
        return reason

    def _nothing(self, *args, **kwargs) -> None:
        """Hydra's other callback events: nothing to do."""

    on_run_start = on_run_end = on_job_start = on_job_end = _nothing
