"""Which run a job writes: decided under a lock, so that two jobs of one
configuration never both start it.

A job run carries its ``config_hash`` tag (the numerics of its config). Opening a
run for a hash with ``resume=True`` looks in the experiment for runs of that hash:
a FINISHED one means the work is done (``outcome == "skipped"``: nothing is
written); else the most recent unfinished one (FAILED, KILLED, or RUNNING with its
process gone) is reopened (``outcome == "resumed"``) and written on: the params, and
the metric steps, it already holds are not written again, so a resumed job may
replay its history. A run of the hash that is RUNNING with its process alive is
refused (:class:`RunInProgress`), or, with ``wait=True`` (a job of a multirun: two
sweeps that overlap), waited for: then skipped if it finished, resumed if not.
Deciding and creating (or reopening) happen under :func:`claim_lock`, a file in the
cache folder the jobs share. An open run's :class:`Heartbeat` tells other processes
it is alive.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teng_eq.cache.files import file_lock
from teng_eq.tracking.store import (
    HEARTBEAT_S,
    ensure_experiment,
    is_stale,
    open_client,
    process_tags,
    reap_stale,
    retrying,
    search,
)

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: Seconds between looks at a live run of the same configuration that a job waits for.
WAIT_POLL_S = 2.0

#: Tag prefix on a sweep's parent run: ``reused_run.<job_num> = <run id>`` names a
#: job's FINISHED run made under another sweep (a job run has one parent).
REUSED_TAG = "reused_run."

#: Tags a failed or killed run carries that a reopened run must not keep.
_FAILURE_TAGS = ("failure_reason", "killed_reason", "failure_tags", "failed_jobs")

_log = logging.getLogger(__name__)


def claim_lock(cache: Path) -> Path:
    """The lock file, in the cache folder ``cache`` that jobs sharing a store share
    (their checkpoints are there), under which a job decides what to do with its
    configuration's runs and a sweep with its parent."""
    return Path(cache) / "checkpoints" / ".claim.lock"


class RunInProgress(RuntimeError):
    """A run of the same configuration is being written by a live process."""


class Heartbeat:
    """Refreshes the ``heartbeat`` tag of a run every ``interval`` seconds from a
    daemon thread, until :meth:`stop`."""

    def __init__(self, client: MlflowClient, run_id: str, interval: float = HEARTBEAT_S):
        self._stop = threading.Event()

        def beat():
            while not self._stop.wait(interval):
                with contextlib.suppress(Exception):  # a missed beat only ages the tag
                    client.set_tag(run_id, "heartbeat", f"{time.time():.0f}")

        threading.Thread(target=beat, name=f"heartbeat-{run_id[:8]}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


@dataclasses.dataclass
class Opened:
    """The run a job writes (``outcome``: ``new``, ``resumed`` or ``skipped``), with the
    metric steps and params it already holds; or (``busy``, :func:`_claim` only) the run of
    the configuration that a live process holds."""

    client: Any
    run_id: str
    outcome: str  # "new", "resumed", "skipped" or "busy"
    previous: Any = None  # the FINISHED run (skipped), the reopened one (resumed), the live one (busy)
    logged: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    params: set[str] = dataclasses.field(default_factory=set)
    heartbeat: Heartbeat | None = None
    experiment_id: str = ""


def reopen(client: MlflowClient, run, tags: Mapping[str, str]) -> int:
    """Set ``run`` RUNNING again with ``tags``, without its failure tags; its attempt number."""
    from mlflow.entities import RunTag

    run_id, old = run.info.run_id, run.data.tags
    client.update_run(run_id, status="RUNNING")
    extra = [t for t in old.get("failure_tags", "").split(",") if t]
    for key in (*_FAILURE_TAGS, *extra):
        if key in old:
            client.delete_tag(run_id, key)
    attempt = int(old.get("attempt", "1")) + 1
    client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in {**tags, "attempt": attempt}.items()])
    return attempt


def _resume(client: MlflowClient, run, tags: Mapping[str, str] | None) -> Opened:
    """Reopen ``run`` for this job (``tags`` None: it is reopened already), noting
    the metric steps and params it holds."""
    if tags is not None:
        reopen(client, run, tags)
    run_id = run.info.run_id
    logged = {key: {m.step for m in client.get_metric_history(run_id, key)} for key in run.data.metrics}
    return Opened(client, run_id, "resumed", previous=run, logged=logged, params=set(run.data.params))


def _is_mine(run, mine: Mapping[str, str]) -> bool:
    """``run`` was made or reopened by this very claim, tried again after its
    answer was lost on the way: it carries the claim's process tags, and the
    heartbeat value (to the millisecond) the claim wrote."""
    return all(run.data.tags.get(k) == mine[k] for k in ("host", "pid", "pid_start", "heartbeat"))


def _claim(client, exp_id, run_name, tags, config_hash, resume) -> Opened:
    """Decide what this job does with its configuration's runs, and do it; ``busy``: the
    live run of another process holds it."""
    if config_hash is None or not resume:
        return Opened(client, client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id, "new")
    runs = search(client, [exp_id], f"tags.config_hash = '{config_hash}' and tags.run_kind = 'job'",
                  order_by=["attributes.start_time DESC"])
    finished = [r for r in runs if r.info.status == "FINISHED"]
    if finished:
        done = finished[0]
        parent = tags.get("mlflow.parentRunId")
        if parent and done.data.tags.get("mlflow.parentRunId") != parent:
            # Finished under another sweep: the parent lists it as one of its jobs.
            client.set_tag(parent, f"{REUSED_TAG}{tags.get('job_num', done.info.run_id)}", done.info.run_id)
        return Opened(client, done.info.run_id, "skipped", previous=done)
    for r in runs:
        if r.info.status == "RUNNING" and _is_mine(r, tags):
            return (_resume(client, r, None) if "attempt" in r.data.tags
                    else Opened(client, r.info.run_id, "new"))
    live = [r for r in runs if r.info.status == "RUNNING" and not is_stale(r.data.tags)]
    if live:
        return Opened(client, live[0].info.run_id, "busy", previous=live[0])
    if runs:
        return _resume(client, runs[0], tags)
    return Opened(client, client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id, "new")


def open_run(tracking_uri, experiment, artifact_root, run_name, tags, config_hash, resume, *,
              retry_s: float, claim_lock: Path | None, wait: bool, cancel: threading.Event) -> Opened:
    client = open_client(tracking_uri)
    exp_id = retrying(ensure_experiment, client, experiment, artifact_root, budget_s=retry_s,
                      what=tracking_uri, stop=cancel)
    said = False
    while True:
        # The heartbeat to the millisecond: this claim's mark (_is_mine).
        tags = {**tags, **process_tags(), "heartbeat": f"{time.time():.3f}"}
        with file_lock(claim_lock) if claim_lock is not None else contextlib.nullcontext():
            opened = retrying(_claim, client, exp_id, run_name, tags, config_hash, resume, budget_s=retry_s,
                              what=tracking_uri, stop=cancel)
        if opened.outcome != "busy":
            break
        t = opened.previous.data.tags
        pid = f"pid {t.get('pid', '?')} on {t.get('host', '?')}"
        holder = f"run {opened.run_id} ({pid})"
        if not wait:
            raise RunInProgress(f"config_hash={config_hash}: run {opened.run_id} of this configuration is "
                                f"still being written ({pid}); resume=false starts a separate run")
        if not said:
            _log.info("config_hash=%s is being run by %s: waiting for it to end", config_hash, holder)
            said = True
        if cancel.wait(WAIT_POLL_S):
            raise RunInProgress(f"config_hash={config_hash}: stopped while waiting for {holder}")
    if cancel.is_set() and opened.outcome != "skipped":  # the job stopped meanwhile: end what it opened
        with contextlib.suppress(Exception):
            client.set_tag(opened.run_id, "killed_reason", "the job stopped before its run opened")
            client.set_terminated(opened.run_id, status="KILLED")
        raise RunInProgress("the job stopped before its run opened")
    opened.experiment_id = exp_id
    if opened.outcome != "skipped":
        with contextlib.suppress(Exception):  # a courtesy to the store: other jobs reap them too
            reap_stale(client, [exp_id], keep=[opened.run_id])
        opened.heartbeat = Heartbeat(client, opened.run_id)
    return opened
