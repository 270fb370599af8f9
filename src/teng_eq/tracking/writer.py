"""One job's MLflow run: opened (or reopened) in the background, written in
batches, ended FINISHED, FAILED or KILLED.

Curves go through ``MlflowClient.log_batch`` (one call per 1000 points, not one
per point). MLflow itself is imported on first use (its import takes seconds):
the run is opened in a background thread, so that import overlaps the job's own
start-up (docs/performance.md, "Tracking overhead").

**Resume.** A job run carries its ``config_hash`` tag (the numerics of its
config). Opening a run for a hash with ``resume=True`` looks in the experiment
for runs of that hash: a FINISHED one means the work is done (``outcome ==
"skipped"``: nothing is written); else the most recent unfinished one
(FAILED, KILLED, or RUNNING with its process gone) is reopened (``outcome ==
"resumed"``) and written on: the params, and the metric steps, it already holds
are not written again, so a resumed job may replay its history. A run of the
hash that is RUNNING with its process alive is refused (:class:`RunInProgress`).
``resume=False`` always opens a new run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teng_eq.tracking.store import HEARTBEAT_S, ensure_experiment, is_stale, process_tags, reap_stale, search

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

_BATCH_METRICS = 1000
_BATCH_PARAMS = 100

#: Tag prefix on a sweep's parent run: ``reused_run.<job_num> = <run id>`` names a
#: job's FINISHED run made under another sweep (a job run has one parent).
REUSED_TAG = "reused_run."

#: Tags a failed or killed run carries that a reopened run must not keep.
_FAILURE_TAGS = ("failure_reason", "killed_reason", "failure_tags", "failed_jobs")


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
class _Opened:
    client: Any
    run_id: str
    outcome: str  # "new", "resumed" or "skipped"
    previous: Any = None  # the FINISHED run (skipped) or the reopened one (resumed)
    logged: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    params: set[str] = dataclasses.field(default_factory=set)
    heartbeat: Heartbeat | None = None


class RunLogger:
    """One run's logger: params, tags and metrics are buffered and written with
    ``log_batch`` at each :meth:`flush`.

    The run is opened in a background thread (``opening``); ``seconds`` adds up
    the time the caller spends in its calls and in :meth:`timed` blocks: the
    tracking overhead of the run. On a resumed run, metric steps and params the
    run already holds are dropped at flush (replayed history is not doubled).
    """

    def __init__(self, opening: Future):
        self._opening = opening
        self.seconds = 0.0
        # Plain tuples until flush: building mlflow entities would import mlflow
        # on the caller's thread.
        self._metrics: list[tuple[str, float, int, int]] = []
        self._params: list[tuple[str, str]] = []
        self._tags: list[tuple[str, str]] = []

    @property
    def _opened(self) -> _Opened:
        return self._opening.result()

    @property
    def client(self) -> MlflowClient:
        return self._opened.client

    @property
    def run_id(self) -> str:
        return self._opened.run_id

    @property
    def outcome(self) -> str:
        """``new``, ``resumed`` or ``skipped`` (waits for the run to be open)."""
        return self._opened.outcome

    @property
    def previous(self):
        """The FINISHED run found (skipped) or the run reopened (resumed); else None."""
        return self._opened.previous

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the block's time as tracking overhead (e.g. drawing the plots)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def params(self, params: Mapping[str, str]) -> None:
        self._params += [(k, str(v)[:6000]) for k, v in params.items()]

    def tags(self, tags: Mapping[str, str]) -> None:
        self._tags += [(k, str(v)) for k, v in tags.items()]

    def metric(self, name: str, value: float, step: int = 0) -> None:
        self._metrics.append((name, float(value), int(time.time() * 1000), int(step)))

    def curve(self, name: str, steps, values) -> None:
        now = int(time.time() * 1000)
        self._metrics += [(name, float(v), now, int(s)) for s, v in zip(steps, values)]

    def flush(self) -> None:
        """Write everything buffered (waits for the run to be open)."""
        with self.timed():
            opened = self._opened
            if opened.outcome == "skipped":
                raise RuntimeError(f"run {opened.run_id} is FINISHED: a skipped job writes nothing")
            from mlflow.entities import Metric, Param, RunTag

            params = [Param(k, v) for k, v in self._params if k not in opened.params]
            opened.params |= {p.key for p in params}
            tags = [RunTag(*t) for t in self._tags]
            metrics = []
            for name, value, stamp, step in self._metrics:
                steps = opened.logged.setdefault(name, set())
                if step not in steps:
                    steps.add(step)
                    metrics.append(Metric(name, value, stamp, step))
            self._params, self._tags, self._metrics = [], [], []
            client, run_id = opened.client, opened.run_id
            for i in range(0, len(params), _BATCH_PARAMS):
                client.log_batch(run_id, params=params[i : i + _BATCH_PARAMS])
            if tags:
                client.log_batch(run_id, tags=tags)
            for i in range(0, len(metrics), _BATCH_METRICS):
                client.log_batch(run_id, metrics=metrics[i : i + _BATCH_METRICS])

    def artifact(self, path: Path, folder: str | None = None) -> None:
        with self.timed():
            path = Path(path)
            if path.is_dir():
                self.client.log_artifacts(self.run_id, str(path), folder)
            else:
                self.client.log_artifact(self.run_id, str(path), folder)


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


def _resume(client: MlflowClient, run, tags: Mapping[str, str]) -> _Opened:
    """Reopen ``run`` for this job, noting the metric steps and params it holds."""
    reopen(client, run, tags)
    run_id = run.info.run_id
    logged = {key: {m.step for m in client.get_metric_history(run_id, key)} for key in run.data.metrics}
    return _Opened(client, run_id, "resumed", previous=run, logged=logged, params=set(run.data.params))


def _open_run(tracking_uri, experiment, artifact_root, run_name, tags, config_hash, resume) -> _Opened:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp_id = ensure_experiment(client, experiment, artifact_root)
    tags = {**tags, **process_tags()}
    opened = None
    if config_hash is not None:
        runs = search(client, [exp_id], f"tags.config_hash = '{config_hash}' and tags.run_kind = 'job'",
                      order_by=["attributes.start_time DESC"])
        if resume:
            finished = [r for r in runs if r.info.status == "FINISHED"]
            live = [r for r in runs if r.info.status == "RUNNING" and not is_stale(r.data.tags)]
            if finished:
                done = finished[0]
                parent = tags.get("mlflow.parentRunId")
                if parent and done.data.tags.get("mlflow.parentRunId") != parent:
                    # Finished under another sweep: the parent lists it as one of its jobs.
                    client.set_tag(parent, f"{REUSED_TAG}{tags.get('job_num', done.info.run_id)}",
                                   done.info.run_id)
                return _Opened(client, done.info.run_id, "skipped", previous=done)
            if live:
                t = live[0].data.tags
                raise RunInProgress(
                    f"config_hash={config_hash}: run {live[0].info.run_id} of this configuration is still "
                    f"being written (pid {t.get('pid', '?')} on {t.get('host', '?')}); resume=false starts "
                    f"a separate run")
            if runs:
                opened = _resume(client, runs[0], tags)
    if opened is None:
        opened = _Opened(client, client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id, "new")
    reap_stale(client, [exp_id], keep=[opened.run_id])
    opened.heartbeat = Heartbeat(client, opened.run_id)
    return opened


@contextlib.contextmanager
def tracked_run(tracking_uri: str, experiment: str, *, artifact_root: Path | None = None,
        run_name: str | None = None, tags: Mapping[str, str] | None = None, parent_run_id: str | None = None,
        config_hash: str | None = None, resume: bool = False) -> Iterator[RunLogger]:
    """An MLflow run that ends FINISHED, FAILED (``failure_reason`` set, plus the
    exception's own ``tags`` mapping if it has one) or KILLED (on
    ``KeyboardInterrupt``); a child of ``parent_run_id`` when given (it may live
    in another experiment). With ``config_hash``, ``resume`` picks up an earlier
    run of the same configuration (see the module's docstring); when that run
    is FINISHED (``run.outcome == "skipped"``) the block should write nothing,
    and the run is left as it is.

    The run is opened in the background (see :class:`RunLogger`); an error in
    doing so surfaces at the first flush or ``run.outcome``, or on leaving the block.
    """
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-open")
    opening = pool.submit(_open_run, tracking_uri, experiment, artifact_root, run_name, tags,
                          config_hash, resume)
    pool.shutdown(wait=False)
    logger = RunLogger(opening)
    try:
        yield logger
        if logger.outcome != "skipped":
            logger.flush()
    except BaseException as exc:
        try:
            opened = opening.result()
        except Exception:
            raise exc from None  # no run was made: nothing to mark
        if opened.heartbeat is not None:
            opened.heartbeat.stop()
        if opened.outcome == "skipped":
            raise
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        reason = f"{type(exc).__name__}: {exc}".strip()[:4000]
        extra = {str(k): str(v) for k, v in (getattr(exc, "tags", None) or {}).items()}
        with contextlib.suppress(Exception):
            logger.flush()
        with contextlib.suppress(Exception):
            logger.tags({"failure_reason": reason, **extra, "failure_tags": ",".join(extra)})
            logger.flush()
        opened.client.set_terminated(opened.run_id, status=status)
        raise
    opened = opening.result()
    if opened.heartbeat is not None:
        opened.heartbeat.stop()
    if opened.outcome != "skipped":
        opened.client.set_terminated(opened.run_id, status="FINISHED")
