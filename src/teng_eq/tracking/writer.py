"""One job's MLflow run: opened (or reopened) in the background, written in
batches by a background thread, ended FINISHED, FAILED or KILLED.

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
hash that is RUNNING with its process alive is refused (:class:`RunInProgress`),
or, with ``wait=True`` (a job of a multirun: two sweeps that overlap), waited
for: then skipped if it finished, resumed if not. Deciding and creating (or
reopening) happen under a lock (``claim_lock``, a file in the cache folder the
jobs share), so two jobs of one configuration never both start it.

**A store that goes away.** Metrics, params and tags are buffered, and a
background thread writes them (:class:`RunLogger`); while the store does not
answer it keeps them and tries again with backoff, and the run keeps stepping.
At the end the run waits up to ``retry_s`` for the store; if it never answers,
what the run would have logged goes to a local folder
(:mod:`~teng_eq.tracking.unlogged`) and :class:`StoreUnavailable` says how to
import it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

from teng_eq.cache import cache_dir, file_lock
from teng_eq.interrupts import Interrupted
from teng_eq.tracking.store import (
    BACKOFF_S,
    HEARTBEAT_S,
    StoreUnavailable,
    ensure_experiment,
    first_line,
    is_stale,
    is_transient,
    open_client,
    process_tags,
    reap_stale,
    retrying,
    search,
)
from teng_eq.tracking.unlogged import import_command, write_unlogged

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

_BATCH_METRICS = 1000
_BATCH_PARAMS = 100

#: Seconds a run that ends KILLED waits for an absent store: a signal usually
#: comes with a deadline (SLURM sends SIGKILL 30 s after SIGTERM).
KILLED_RETRY_S = 10.0
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
    ``log_batch`` by a background thread, woken by :meth:`flush`.

    The run is opened in a background thread (``opening``); ``seconds`` adds up
    the time the caller spends in its calls and in :meth:`timed` blocks: the
    tracking overhead of the run. On a resumed run, metric steps and params the
    run already holds are dropped (replayed history is not doubled).

    While the store does not answer, the writer keeps what it has, tries again
    with backoff (:data:`~teng_eq.tracking.store.BACKOFF_S`) and says so once in
    the log; the caller is never held up. An error that is not the store's
    absence (MLflow refusing a value) is raised by the next :meth:`flush`.
    Artifacts are uploaded at once, with up to ``retry_s`` of retries; past that
    they are kept in :attr:`spool` for the local record of the run.
    """

    def __init__(self, opening: Future, uri: str, retry_s: float):
        self._opening = opening
        self.uri, self.retry_s = uri, retry_s
        self.seconds = 0.0
        #: Where what cannot reach the store goes: ``<spool>/`` (set by the job
        #: beside its checkpoint; else ``<cache>/unlogged/<run id>``).
        self.spool: Path | None = None
        self.store_gone = False  # gave up once: later calls do not wait again
        # Plain tuples until the writer takes them: building mlflow entities would
        # import mlflow on the caller's thread.
        self._metrics: list[tuple[str, float, int, int]] = []
        self._params: list[tuple[str, str]] = []
        self._tags: list[tuple[str, str]] = []
        self._queue: list[tuple[str, list]] = []  # entity batches taken, not yet written
        self._artifacts: list[tuple[str, str | None]] = []  # spooled: (path in spool, artifact folder)
        self._lock = threading.Condition()
        self._wake, self._hurry, self._closing = threading.Event(), threading.Event(), threading.Event()
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.down_since: float | None = None

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
        with self._lock:
            self._params += [(k, str(v)[:6000]) for k, v in params.items()]

    def tags(self, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._tags += [(k, str(v)) for k, v in tags.items()]

    def metric(self, name: str, value: float, step: int = 0) -> None:
        with self._lock:
            self._metrics.append((name, float(value), int(time.time() * 1000), int(step)))

    def curve(self, name: str, steps, values) -> None:
        now = int(time.time() * 1000)
        with self._lock:
            self._metrics += [(name, float(v), now, int(s)) for s, v in zip(steps, values)]

    # --- The writer thread ---------------------------------------------------

    def flush(self) -> None:
        """Have everything buffered written, in the background (waits for the run
        to be open); raises an error the writer met that was not the store's absence."""
        with self.timed():
            if self._opened.outcome == "skipped":
                raise RuntimeError(f"run {self.run_id} is FINISHED: a skipped job writes nothing")
            if self._error is not None:
                raise self._error
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name=f"mlflow-writer-{self.run_id[:8]}",
                                                daemon=True)
                self._writer.start()
            self._wake.set()

    def sync(self, timeout: float) -> bool:
        """Flush and wait up to ``timeout`` seconds for everything to be written:
        True when it is (an error the writer met is raised)."""
        self.flush()
        deadline = time.monotonic() + timeout
        self._hurry.set()  # cut the current backoff short: someone is waiting
        with self._lock:
            while self._error is None and self._unwritten():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 1.0))
        if self._error is not None:
            raise self._error
        return not self._unwritten()

    def _unwritten(self) -> bool:
        return bool(self._queue or self._metrics or self._params or self._tags)

    def _take(self, opened: _Opened) -> None:
        """Move the buffer into entity batches on the queue (under the lock),
        dropping params and metric steps the run already holds."""
        from mlflow.entities import Metric, Param, RunTag

        params = [Param(k, v) for k, v in self._params if k not in opened.params]
        opened.params |= {p.key for p in params}
        metrics = []
        for name, value, stamp, step in self._metrics:
            steps = opened.logged.setdefault(name, set())
            if step not in steps:
                steps.add(step)
                metrics.append(Metric(name, value, stamp, step))
        self._queue += [("params", params[i : i + _BATCH_PARAMS]) for i in range(0, len(params), _BATCH_PARAMS)]
        if self._tags:
            self._queue.append(("tags", [RunTag(*t) for t in self._tags]))
        self._queue += [("metrics", metrics[i : i + _BATCH_METRICS])
                        for i in range(0, len(metrics), _BATCH_METRICS)]
        self._params, self._tags, self._metrics = [], [], []

    def _write_loop(self) -> None:
        """Write queued batches in order; a transient failure keeps the batch and
        tries it again after a backoff (a batch written twice is harmless: MLflow
        stores a metric point once per key, step, time and value)."""
        opened = self._opened
        delay = BACKOFF_S[0]
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                self._take(opened)
            while True:
                with self._lock:
                    if not self._queue:
                        self._lock.notify_all()
                        break
                    kind, batch = self._queue[0]
                try:
                    opened.client.log_batch(opened.run_id, **{kind: batch})
                except Exception as exc:  # noqa: BLE001 - sorted here: transient, or kept for flush()
                    if not is_transient(exc):
                        with self._lock:
                            self._error = exc
                            self._lock.notify_all()
                        return
                    if self.down_since is None:
                        self.down_since = time.monotonic()
                        _log.warning("MLflow store %s not answering (%s): the run goes on, its metrics wait "
                                     "in memory", self.uri, first_line(exc))
                    if self._closing.is_set():
                        return
                    self._hurry.wait(delay)
                    self._hurry.clear()
                    delay = min(2 * delay, BACKOFF_S[1])
                    with self._lock:
                        self._take(opened)  # what came meanwhile joins the queue
                    continue
                with self._lock:
                    self._queue.pop(0)
                if self.down_since is not None:
                    _log.warning("MLflow store %s answers again after %.0f s: writing what waited", self.uri,
                                 time.monotonic() - self.down_since)
                    self.down_since, delay = None, BACKOFF_S[0]
            if self._closing.is_set():
                return

    def stop_writer(self) -> None:
        """Stop the writer thread (what it has not written stays queued)."""
        self._closing.set()
        self._wake.set()
        self._hurry.set()

    # --- Artifacts and the local record -----------------------------------------

    def artifact(self, path: Path, folder: str | None = None) -> None:
        """Upload ``path`` (a file or a folder) under ``folder``, retrying for up to
        ``retry_s``; a store that does not answer by then gets it in the spool."""
        with self.timed():
            path = Path(path)
            if not self.store_gone:
                call = self.client.log_artifacts if path.is_dir() else self.client.log_artifact
                try:
                    retrying(call, self.run_id, str(path), folder, budget_s=self.retry_s, what=self.uri)
                    return
                except StoreUnavailable as err:
                    self.store_gone = True
                    _log.warning("%s: artifacts are kept locally", err)
            self._spool_artifact(path, folder)

    def spool_dir(self) -> Path:
        return self.spool if self.spool is not None else cache_dir() / "unlogged" / self.run_id

    def _spool_artifact(self, path: Path, folder: str | None) -> None:
        target = self.spool_dir() / "artifacts" / (folder or "") / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, target, dirs_exist_ok=True)
        else:
            shutil.copy2(path, target)
        self._artifacts.append((str(target.relative_to(self.spool_dir())), folder))

    def finish(self, status: str, budget_s: float) -> None:
        """Write everything and end the run ``status``, waiting up to ``budget_s``
        for the store. If it does not answer: the local record
        (:func:`~teng_eq.tracking.unlogged.write_unlogged`) and
        :class:`StoreUnavailable` saying how to import it. If MLflow refused a
        write, the run ends FAILED with that reason, which is raised."""
        opened = self._opened
        if opened.heartbeat is not None:
            opened.heartbeat.stop()
        deadline = time.monotonic() + budget_s
        written = False
        with contextlib.suppress(Exception):  # an error the writer met is handled below
            written = self.sync(0.0 if self.store_gone else budget_s)
        self.stop_writer()
        if self._error is not None:
            with contextlib.suppress(Exception):
                opened.client.set_tag(opened.run_id, "failure_reason", f"MLflow refused a write: "
                                                                       f"{first_line(self._error)}")
                opened.client.set_terminated(opened.run_id, status="FAILED")
            raise self._error
        if written and not self._artifacts:
            try:
                retrying(opened.client.set_terminated, opened.run_id, status=status,
                         budget_s=max(deadline - time.monotonic(), 1.0), what=self.uri)
                return
            except StoreUnavailable:
                pass
        with self._lock:
            self._take(opened)
            batches = list(self._queue)
        record = write_unlogged(self.spool_dir(), uri=self.uri, run_id=opened.run_id, status=status,
                                batches=batches, artifacts=self._artifacts)
        gone = f"{time.monotonic() - self.down_since:.0f} s" if self.down_since is not None else f"{budget_s:g} s"
        raise StoreUnavailable(f"the MLflow store {self.uri} has not answered for {gone}: what run "
                               f"{opened.run_id} would have logged is in {record}; once the store is "
                               f"back, log it with: {import_command(record)}")



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


def _resume(client: MlflowClient, run, tags: Mapping[str, str] | None) -> _Opened:
    """Reopen ``run`` for this job (``tags`` None: it is reopened already), noting
    the metric steps and params it holds."""
    if tags is not None:
        reopen(client, run, tags)
    run_id = run.info.run_id
    logged = {key: {m.step for m in client.get_metric_history(run_id, key)} for key in run.data.metrics}
    return _Opened(client, run_id, "resumed", previous=run, logged=logged, params=set(run.data.params))


def _is_mine(run, mine: Mapping[str, str]) -> bool:
    """``run`` was made or reopened by this very claim, tried again after its
    answer was lost on the way: it carries the claim's process tags, and the
    heartbeat value (to the millisecond) the claim wrote."""
    return all(run.data.tags.get(k) == mine[k] for k in ("host", "pid", "pid_start", "heartbeat"))


def _claim(client, exp_id, run_name, tags, config_hash, resume):
    """Decide what this job does with its configuration's runs, and do it: an
    :class:`_Opened`, or the live run of another process that holds it."""
    if config_hash is None or not resume:
        return _Opened(client, client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id, "new")
    runs = search(client, [exp_id], f"tags.config_hash = '{config_hash}' and tags.run_kind = 'job'",
                  order_by=["attributes.start_time DESC"])
    finished = [r for r in runs if r.info.status == "FINISHED"]
    if finished:
        done = finished[0]
        parent = tags.get("mlflow.parentRunId")
        if parent and done.data.tags.get("mlflow.parentRunId") != parent:
            # Finished under another sweep: the parent lists it as one of its jobs.
            client.set_tag(parent, f"{REUSED_TAG}{tags.get('job_num', done.info.run_id)}", done.info.run_id)
        return _Opened(client, done.info.run_id, "skipped", previous=done)
    for r in runs:
        if r.info.status == "RUNNING" and _is_mine(r, tags):
            return _resume(client, r, None) if "attempt" in r.data.tags else _Opened(client, r.info.run_id, "new")
    live = [r for r in runs if r.info.status == "RUNNING" and not is_stale(r.data.tags)]
    if live:
        return live[0]
    if runs:
        return _resume(client, runs[0], tags)
    return _Opened(client, client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id, "new")


def _open_run(tracking_uri, experiment, artifact_root, run_name, tags, config_hash, resume, *,
              retry_s: float, claim_lock: Path | None, wait: bool, cancel: threading.Event) -> _Opened:
    client = open_client(tracking_uri)
    exp_id = retrying(ensure_experiment, client, experiment, artifact_root, budget_s=retry_s, what=tracking_uri,
                      stop=cancel)
    said = False
    while True:
        # The heartbeat to the millisecond: this claim's mark (_is_mine).
        tags = {**tags, **process_tags(), "heartbeat": f"{time.time():.3f}"}
        with file_lock(claim_lock) if claim_lock is not None else contextlib.nullcontext():
            opened = retrying(_claim, client, exp_id, run_name, tags, config_hash, resume, budget_s=retry_s,
                              what=tracking_uri, stop=cancel)
        if isinstance(opened, _Opened):
            break
        t = opened.data.tags
        pid = f"pid {t.get('pid', '?')} on {t.get('host', '?')}"
        holder = f"run {opened.info.run_id} ({pid})"
        if not wait:
            raise RunInProgress(f"config_hash={config_hash}: run {opened.info.run_id} of this configuration is "
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
    if opened.outcome != "skipped":
        with contextlib.suppress(Exception):  # a courtesy to the store: other jobs reap them too
            reap_stale(client, [exp_id], keep=[opened.run_id])
        opened.heartbeat = Heartbeat(client, opened.run_id)
    return opened


def _in_background(fn: Callable, *args, **kwargs) -> Future:
    """``fn`` in a daemon thread (a ``ThreadPoolExecutor``'s is joined at exit,
    which a store that does not answer would hold up)."""
    future: Future = Future()

    def run():
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name="mlflow-open", daemon=True).start()
    return future


@contextlib.contextmanager
def tracked_run(tracking_uri: str, experiment: str, *, artifact_root: Path | None = None,
        run_name: str | None = None, tags: Mapping[str, str] | None = None, parent_run_id: str | None = None,
        config_hash: str | None = None, resume: bool = False, retry_s: float = 600.0,
        claim_lock: Path | None = None, wait: bool = False) -> Iterator[RunLogger]:
    """An MLflow run that ends FINISHED, FAILED (``failure_reason`` set, plus the
    exception's own ``tags`` mapping if it has one) or KILLED (on
    ``KeyboardInterrupt``, e.g. :class:`~teng_eq.interrupts.Interrupted` by a
    signal: ``killed_reason``); a child of ``parent_run_id`` when given (it may
    live in another experiment). With ``config_hash``, ``resume`` picks up an
    earlier run of the same configuration (see the module's docstring), under
    ``claim_lock``, waiting for a live one with ``wait``; when that run is
    FINISHED (``run.outcome == "skipped"``) the block should write nothing, and
    the run is left as it is.

    The run is opened in the background (see :class:`RunLogger`); an error in
    doing so surfaces at the first flush or ``run.outcome``, or on leaving the
    block. ``retry_s``: how long the store may be away when the run needs it
    (opening, artifacts, its end; :data:`KILLED_RETRY_S` at most for a KILLED end).
    """
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    cancel = threading.Event()
    opening = _in_background(_open_run, tracking_uri, experiment, artifact_root, run_name, tags, config_hash,
                             resume, retry_s=retry_s, claim_lock=claim_lock, wait=wait, cancel=cancel)
    logger = RunLogger(opening, tracking_uri, retry_s)
    try:
        yield logger
        if logger.outcome != "skipped":
            logger.finish("FINISHED", retry_s)
    except BaseException as exc:
        killed = isinstance(exc, KeyboardInterrupt)
        # The run may still be opening: wait for it (briefly, for a signal), to mark it.
        futures.wait([opening], timeout=min(retry_s, KILLED_RETRY_S) if killed else retry_s)
        if not opening.done():
            cancel.set()  # the opening thread ends whatever it still makes
            raise
        try:
            opened = opening.result()
        except Exception:  # noqa: BLE001 - whatever kept the run from opening
            raise exc from None  # no run was made: nothing to mark
        if opened.outcome == "skipped" or logger._closing.is_set():
            raise  # nothing of ours to end, or finish() already ended it (or wrote the local record)
        text = str(exc).strip()
        reason = (text if isinstance(exc, Interrupted) else
                  f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:4000]
        extra = {str(k): str(v) for k, v in (getattr(exc, "tags", None) or {}).items()}
        logger.tags({"killed_reason" if killed else "failure_reason": reason, **extra,
                     "failure_tags": ",".join(extra)})
        try:
            logger.finish("KILLED" if killed else "FAILED", min(retry_s, KILLED_RETRY_S) if killed else retry_s)
        except StoreUnavailable as err:
            _log.error("%s", err)  # the run's own failure is what the caller reports
        except Exception as err:  # noqa: BLE001 - the run's own failure is the one to raise
            _log.error("run %s could not be ended %s: %s", opened.run_id, "KILLED" if killed else "FAILED",
                       first_line(err))
        raise
