"""One job's MLflow run: opened (or reopened: :mod:`~teng_eq.tracking.claims`) in the
background, written by a :class:`~teng_eq.tracking.writer.BatchWriter`, its artifacts
uploaded, ended FINISHED, FAILED or KILLED.

MLflow itself is imported on first use (its import takes seconds): the run is opened
in a background thread, so that import overlaps the job's own start-up. At the end
the run waits up to ``retry_s`` for a store that went away; if it never answers,
what the run would have logged goes to a local folder
(:mod:`~teng_eq.tracking.unlogged`) and :class:`StoreUnavailable` says how to import it.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from concurrent.futures import Future
from pathlib import Path

from teng_eq.cache.files import cache_dir
from teng_eq.interrupts import Interrupted
from teng_eq.tracking.claims import Opened, open_run
from teng_eq.tracking.store import StoreUnavailable, first_line, retrying
from teng_eq.tracking.unlogged import import_command, write_unlogged
from teng_eq.tracking.writer import BatchWriter

#: Seconds a run that ends KILLED waits for an absent store: a signal usually
#: comes with a deadline (SLURM sends SIGKILL 30 s after SIGTERM).
KILLED_RETRY_S = 10.0

_log = logging.getLogger(__name__)


class RunLogger:
    """One run's logger: params, tags and metrics go to its :class:`BatchWriter`,
    written in the background when :meth:`flush` wakes it.

    The run is opened in a background thread (``opening``); ``seconds`` adds up the
    time the caller spends in its calls and in :meth:`timed` blocks: the tracking
    overhead of the run. Artifacts are uploaded at once, with up to ``retry_s`` of
    retries; past that they are kept in the folder ``spool(run_id)`` gives (:meth:`spool_dir`) for the
    local record of the run.
    """

    def __init__(self, opening: Future, uri: str, retry_s: float, spool: Callable[[str], Path] | None = None):
        self._opening = opening
        self.uri, self.retry_s = uri, retry_s
        self.seconds = 0.0
        #: Where what cannot reach the store goes, by run id: the job's, beside its
        #: checkpoint; else ``<cache>/unlogged/<run id>``.
        self._spool = spool
        self.store_gone = False  # gave up once: later calls do not wait again
        self._writer = BatchWriter(opening.result, uri)
        self._artifacts: list[tuple[str, str | None]] = []  # spooled: (path in spool, artifact folder)

    @property
    def _opened(self) -> Opened:
        return self._opening.result()

    @property
    def client(self):
        return self._opened.client

    @property
    def run_id(self) -> str:
        return self._opened.run_id

    @property
    def experiment_id(self) -> str:
        return self._opened.experiment_id

    @property
    def outcome(self) -> str:
        """``new``, ``resumed`` or ``skipped`` (waits for the run to be open)."""
        return self._opened.outcome

    @property
    def previous(self):
        """The FINISHED run found (skipped) or the run reopened (resumed); else None."""
        return self._opened.previous

    @property
    def ended(self) -> bool:
        """Whether :meth:`finish` ended the run (or wrote its local record)."""
        return self._writer.closed

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the block's time as tracking overhead (e.g. drawing the plots)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def params(self, params: Mapping[str, str]) -> None:
        self._writer.params(params)

    def tags(self, tags: Mapping[str, str]) -> None:
        self._writer.tags(tags)

    def metric(self, name: str, value: float, step: int = 0) -> None:
        self._writer.metrics([(name, float(value), int(time.time() * 1000), int(step))])

    def curve(self, name: str, steps, values) -> None:
        now = int(time.time() * 1000)
        self._writer.metrics([(name, float(v), now, int(s)) for s, v in zip(steps, values)])

    def flush(self) -> None:
        """Have everything buffered written, in the background (waits for the run to
        be open); raises an error the writer met that was not the store's absence."""
        with self.timed():
            if self._opened.outcome == "skipped":
                raise RuntimeError(f"run {self.run_id} is FINISHED: a skipped job writes nothing")
            self._writer.flush()

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
        return self._spool(self.run_id) if self._spool is not None else cache_dir() / "unlogged" / self.run_id

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
            written = self._writer.sync(0.0 if self.store_gone else budget_s)
        self._writer.stop()
        if self._writer.error is not None:
            with contextlib.suppress(Exception):
                opened.client.set_tag(opened.run_id, "failure_reason", f"MLflow refused a write: "
                                                                       f"{first_line(self._writer.error)}")
                opened.client.set_terminated(opened.run_id, status="FAILED")
            raise self._writer.error
        if written and not self._artifacts:
            try:
                retrying(opened.client.set_terminated, opened.run_id, status=status,
                         budget_s=max(deadline - time.monotonic(), 1.0), what=self.uri)
                return
            except StoreUnavailable:
                pass
        record = write_unlogged(self.spool_dir(), uri=self.uri, run_id=opened.run_id, status=status,
                                batches=self._writer.unwritten(), artifacts=self._artifacts)
        down = self._writer.down_since
        gone = f"{time.monotonic() - down:.0f} s" if down is not None else f"{budget_s:g} s"
        raise StoreUnavailable(f"the MLflow store {self.uri} has not answered for {gone}: what run "
                               f"{opened.run_id} would have logged is in {record}; once the store is "
                               f"back, log it with: {import_command(record)}")


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
        claim_lock: Path | None = None, wait: bool = False,
        spool: Callable[[str], Path] | None = None) -> Iterator[RunLogger]:
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
    block. ``spool``: where, by run id, what the run could not log goes. ``retry_s``: how
    long the store may be away when the run needs it
    (opening, artifacts, its end; :data:`KILLED_RETRY_S` at most for a KILLED end).
    """
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    cancel = threading.Event()
    opening = _in_background(open_run, tracking_uri, experiment, artifact_root, run_name, tags, config_hash,
                             resume, retry_s=retry_s, claim_lock=claim_lock, wait=wait, cancel=cancel)
    logger = RunLogger(opening, tracking_uri, retry_s, spool)
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
        if opened.outcome == "skipped" or logger.ended:
            raise  # nothing of ours to end, or finish() already ended it (or wrote the local record)
        text = str(exc).strip()
        reason = (text if isinstance(exc, Interrupted) else
                  f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:4000]
        extra = {str(k): str(v) for k, v in (getattr(exc, "tags", None) or {}).items()}
        logger.tags({"killed_reason" if killed else "failure_reason": reason, **extra,
                     "failure_tags": ",".join(extra)})
        try:
            logger.finish("KILLED" if killed else "FAILED",
                          min(retry_s, KILLED_RETRY_S) if killed else retry_s)
        except StoreUnavailable as err:
            _log.error("%s", err)  # the run's own failure is what the caller reports
        except Exception as err:  # noqa: BLE001 - the run's own failure is the one to raise
            _log.error("run %s could not be ended %s: %s", opened.run_id, "KILLED" if killed else "FAILED",
                       first_line(err))
        raise
