"""The background writer of a run: params, tags and metrics buffered by the caller
and written with ``MlflowClient.log_batch`` (one call per 1000 points, not one per
point) by a thread of its own, which waits out a store that goes away.

While the store does not answer (a server restarting, a network blip, SQLite's
"database is locked"), the writer keeps what it has, tries again with backoff
(:data:`~teng_eq.tracking.store.BACKOFF_S`) and says so once in the log; the caller
is never held up. An error that is not the store's absence (MLflow refusing a
value) is kept and raised by the next :meth:`BatchWriter.flush`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from teng_eq.tracking.store import BACKOFF_S, first_line, is_transient

_BATCH_METRICS = 1000
_BATCH_PARAMS = 100

_log = logging.getLogger(__name__)


class BatchWriter:
    """Writes one run's buffered params, tags and metrics in the background.

    ``opened`` gives the open run (:class:`~teng_eq.tracking.claims.Opened`: its client,
    id and what it already holds, which is not written again); the thread starts at the
    first :meth:`flush`. ``uri`` names the store in the log."""

    def __init__(self, opened: Callable, uri: str):
        self._opened, self.uri = opened, uri
        # Plain tuples until the thread takes them: building mlflow entities would
        # import mlflow on the caller's thread.
        self._metrics: list[tuple[str, float, int, int]] = []
        self._params: list[tuple[str, str]] = []
        self._tags: list[tuple[str, str]] = []
        self._queue: list[tuple[str, list]] = []  # entity batches taken, not yet written
        self._lock = threading.Condition()
        self._wake, self._hurry, self._closing = threading.Event(), threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # what MLflow refused, if anything
        self.down_since: float | None = None  # since when the store has not answered

    @property
    def closed(self) -> bool:
        """Whether :meth:`stop` was called (the run was ended, or its record written)."""
        return self._closing.is_set()

    def params(self, params: Mapping[str, str]) -> None:
        with self._lock:
            self._params += [(k, str(v)[:6000]) for k, v in params.items()]

    def tags(self, tags: Mapping[str, str]) -> None:
        with self._lock:
            self._tags += [(k, str(v)) for k, v in tags.items()]

    def metrics(self, points: list[tuple[str, float, int, int]]) -> None:
        """``(name, value, time in ms, step)`` points."""
        with self._lock:
            self._metrics += points

    def flush(self) -> None:
        """Have everything buffered written (waits for the run to be open); raises an
        error the thread met that was not the store's absence."""
        if self.error is not None:
            raise self.error
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop,
                                            name=f"mlflow-writer-{self._opened().run_id[:8]}", daemon=True)
            self._thread.start()
        self._wake.set()

    def sync(self, timeout: float) -> bool:
        """Flush and wait up to ``timeout`` seconds for everything to be written: True
        when it is (an error the thread met is raised)."""
        self.flush()
        deadline = time.monotonic() + timeout
        self._hurry.set()  # cut the current backoff short: someone is waiting
        with self._lock:
            while self.error is None and self._unwritten():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 1.0))
        if self.error is not None:
            raise self.error
        return not self._unwritten()

    def stop(self) -> None:
        """Stop the thread (what it has not written stays queued: :meth:`unwritten`)."""
        self._closing.set()
        self._wake.set()
        self._hurry.set()

    def unwritten(self) -> list[tuple[str, list]]:
        """Everything not written, as entity batches (for the run's local record)."""
        with self._lock:
            self._take(self._opened())
            return list(self._queue)

    def _unwritten(self) -> bool:
        return bool(self._queue or self._metrics or self._params or self._tags)

    def _take(self, opened) -> None:
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
        self._queue += [("params", params[i : i + _BATCH_PARAMS])
                        for i in range(0, len(params), _BATCH_PARAMS)]
        if self._tags:
            self._queue.append(("tags", [RunTag(*t) for t in self._tags]))
        self._queue += [("metrics", metrics[i : i + _BATCH_METRICS])
                        for i in range(0, len(metrics), _BATCH_METRICS)]
        self._params, self._tags, self._metrics = [], [], []

    def _loop(self) -> None:
        """Write queued batches in order; a transient failure keeps the batch and
        tries it again after a backoff (a batch written twice is harmless: MLflow
        stores a metric point once per key, step, time and value)."""
        opened = self._opened()
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
                            self.error = exc
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
