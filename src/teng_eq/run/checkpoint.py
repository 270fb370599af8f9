"""Checkpoints of a run: enough to continue it as if it had never stopped.

A checkpoint after step n holds the method's state (whatever ``Method.init``
returned — TENG's θ, a baseline's optimiser state — as ``eqx.tree_serialise_leaves``
bytes), n, the run loop's rows (:class:`~teng_eq.run.result.Row`) as named arrays
(:func:`rows_to_arrays`) and its counters. The random keys need no saving: step n draws
``fold_in(key_run, n)`` from the seed. Networks are saved here too (:func:`save_network`).

One self-checking file (:func:`teng_eq.cache.files.store_arrays`: npz, digest, temporary
file and rename): a kill while writing leaves the previous checkpoint whole, a
damaged file is ignored. Where: ``<cache_dir>/checkpoints/<config_hash>/<run_id>.npz``,
not an MLflow artifact: only a filesystem renames atomically and lets a file be
replaced and deleted (it is, once its run is FINISHED). Jobs that resume on another
machine need ``cache_dir`` on a shared filesystem, as the θ₀ cache already asks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
from jaxtyping import PyTree

from teng_eq.cache.files import cache_dir, load_arrays, store_arrays
from teng_eq.errors import WriteFailed
from teng_eq.fit.results import StepRecord
from teng_eq.run.callbacks import Callback
from teng_eq.run.result import Row

_log = logging.getLogger(__name__)

#: Bumped when the content of a checkpoint changes.
VERSION = 3


def state_bytes(state: PyTree) -> np.ndarray:
    """``state`` as ``eqx.tree_serialise_leaves`` bytes, a uint8 array."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, state)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def state_from_bytes(data: np.ndarray, like: PyTree) -> PyTree:
    """The state that :func:`state_bytes` wrote, with the structure of ``like`` and its arrays
    where ``like``'s are (on the devices of a sharded run's mesh, which its programs expect)."""
    state = eqx.tree_deserialise_leaves(io.BytesIO(np.asarray(data, dtype=np.uint8).tobytes()), like)
    return jax.tree_util.tree_map(_placed_like, state, like)


def _placed_like(new, old):
    if isinstance(old, jax.Array) and isinstance(new, jax.Array) and new.sharding != old.sharding:
        return jax.device_put(new, old.sharding)
    return new


def save_network(path: Path, network: eqx.Module) -> Path:
    """θ as ``eqx.tree_serialise_leaves`` bytes (no pickle); read back into an untrained
    network of the same shape (:func:`teng_eq.run.simulation.load_network`)."""
    eqx.tree_serialise_leaves(path, network)
    return Path(path)


#: Arrays of a checkpoint with one entry per time index 0..n (a sequential run's rows).
_PER_TIME = ("times", "err_sq", "ref_sq", "u_sq", "est", "boundary", "rel_se")


def rows_to_arrays(rows: Sequence[Row], est_vector: np.ndarray) -> dict[str, np.ndarray]:
    """A run's rows as a checkpoint's named arrays: per time index (``times``, ``err_sq``,
    ``ref_sq``, ``u_sq``, ``est``, ``boundary``: a sequential run's), per step
    (``wall``, ``scalar.<metric>``, the loss tables as ``losses`` split by ``loss_rows``),
    the start's metrics (``start.<metric>``: a system's per-component errors at t = 0), the
    snapshot states (``snapshot.<n>``), and the estimate's error vector."""
    timed = [r for r in rows if r.t is not None]
    steps = [r for r in rows if r.n > 0]
    names = list(dict.fromkeys(k for r in steps for k in r.metrics))
    out = {key: np.array([getattr(r, "t" if key == "times" else key) for r in timed], np.float64)
           for key in _PER_TIME}
    out |= {"wall": np.array([r.wall for r in steps], np.float64), "est_vector": np.asarray(est_vector),
            "loss_rows": np.array([len(r.table) for r in steps], np.int64),
            "losses": np.concatenate([r.table for r in steps]) if steps else np.zeros((0, 4))}
    out |= {f"scalar.{k}": np.array([r.metrics.get(k, np.nan) for r in steps], np.float64) for k in names}
    out |= {f"start.{k}": np.float64(v) for r in rows[:1] if r.n == 0 for k, v in r.metrics.items()}
    return out | {f"snapshot.{r.n}": r.state for r in rows if r.state is not None}


def rows_from_arrays(a: Mapping[str, np.ndarray], n: int, sequential: bool) -> list[Row]:
    """The rows :func:`rows_to_arrays` wrote of a run after step ``n`` (the start and
    steps 1..n, or blocks 1..n); arrays longer than the run (a checkpoint whose arrays
    were sized for the whole run) are read up to it. Snapshots are made again by the
    caller from ``state``."""
    tables = np.split(a["losses"], np.cumsum(a["loss_rows"][:n])[:-1]) if n else []
    scalars = {k.removeprefix("scalar."): v for k, v in a.items() if k.startswith("scalar.")}
    start = {k.removeprefix("start."): float(v) for k, v in a.items() if k.startswith("start.")}
    rows = []
    for i in range(0 if sequential else 1, n + 1):
        step = {"metrics": {k: float(v[i - 1]) for k, v in scalars.items()}, "table": tables[i - 1],
                "wall": float(a["wall"][i - 1])} if i > 0 else {"metrics": start}
        timed = ({key: float(a[key][i]) for key in _PER_TIME if key != "times" and key in a}
                 if sequential else {})
        rows.append(Row(i, float(a["times"][i]) if sequential else None, **step, **timed,
                        state=a.get(f"snapshot.{i}")))
    return rows


@dataclasses.dataclass
class Checkpoint:
    """A run after ``step`` steps: the method's ``state``, the loop's rows as named arrays
    (``history``: :func:`rows_to_arrays`) and ``info`` numbers."""

    step: int
    state: PyTree
    history: dict[str, np.ndarray]
    info: dict[str, float]

    def rows(self, sequential: bool) -> list[Row]:
        """The rows of the run (:func:`rows_from_arrays`)."""
        return rows_from_arrays(self.history, self.step, sequential)


class CheckpointStore:
    """The checkpoint file of one run, ``<root>/<config_hash>/<run_id>.npz``.

    ``describe`` (JSON-able) is the key the file is written for: a file written
    for another configuration, run or format is stale and ignored.
    """

    def __init__(self, path: Path, describe: Mapping):
        self.path = Path(path)
        self.key = {"kind": "checkpoint", "version": VERSION, **describe}

    @classmethod
    def for_run(cls, config_hash: str, run_id: str, *, directory=None) -> CheckpointStore:
        path = cache_dir(directory) / "checkpoints" / config_hash / f"{run_id}.npz"
        return cls(path, {"config_hash": config_hash, "run_id": run_id})

    def save(self, step: int, state: PyTree, rows: Sequence[Row], est_vector: np.ndarray,
             info: Mapping[str, float]) -> None:
        """Replace the checkpoint by the one after ``step`` (its ``rows`` and the estimate's
        vector: :func:`rows_to_arrays`); a file that cannot be written raises
        :class:`~teng_eq.errors.WriteFailed` and leaves the previous one."""
        arrays = {f"record.{k}": np.asarray(v) for k, v in rows_to_arrays(rows, est_vector).items()}
        arrays["state"] = state_bytes(state)
        arrays["info"] = np.array(json.dumps({"step": int(step), **{k: float(v) for k, v in info.items()}}))
        try:
            store_arrays(self.path, arrays, self.key)
        except OSError as err:  # the temporary file is gone, the previous checkpoint untouched
            before = load_arrays(self.path, self.key)  # the one on disk says its step
            kept = (f"the checkpoint of step {json.loads(str(before['info']))['step']} is intact: the same "
                    "command resumes from it" if before is not None else "there is no earlier checkpoint")
            raise WriteFailed(f"the checkpoint after step {step} could not be written in {self.path.parent} "
                              f"({err.strerror or err}); {kept}") from err

    def load(self, like: PyTree) -> Checkpoint | None:
        """The checkpoint, its state shaped like ``like``; None if there is no sound one."""
        arrays = load_arrays(self.path, self.key)
        if arrays is None:
            return None
        info = json.loads(str(arrays["info"]))
        step = int(info.pop("step"))
        history = {k.removeprefix("record."): v for k, v in arrays.items() if k.startswith("record.")}
        try:
            state = state_from_bytes(arrays["state"], like)
        except (ValueError, TypeError, RuntimeError) as err:  # the state changed shape (code changed)
            _log.warning("checkpoint %s does not fit this method's state (%s): starting afresh",
                         self.path, err)
            return None
        return Checkpoint(step=step, state=state, history=history, info=info)

    def clear(self) -> None:
        """Delete the file (the run is FINISHED), and its folder once empty."""
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass


@dataclasses.dataclass(frozen=True)
class Checkpoints(Callback):
    """A run's checkpoints into ``store``, a callback of the ``save`` stage: every ``every``
    steps (not at a fixed-Δt run's ``last`` step: the end's is next), at the end, and at the
    last good step of a run that ends early (unless a checkpoint could not be written:
    :class:`~teng_eq.errors.WriteFailed` ends the run, the previous one intact). ``since``:
    the step of the checkpoint the run resumed from (-1: none), already on disk. Which
    step is on disk at the end follows from these alone (:meth:`on_disk`); a run that ends
    early saves its last good step whatever the step's own hook did (its ``observe``
    callbacks may have raised before it ran)."""

    stage = "save"

    store: CheckpointStore
    every: int | None
    last: int | None
    since: int = -1

    def due(self, n: int) -> bool:
        """Whether step ``n``'s own hook writes its checkpoint."""
        return bool(self.every) and n > max(self.since, 0) and n % self.every == 0 and n != self.last

    def on_disk(self, n: int) -> bool:
        """Whether the checkpoint of step ``n`` is written already when the run ends there."""
        return n == self.since or self.due(n)

    def save(self, state) -> None:
        vector = state.estimate.vector if state.estimate is not None else np.zeros(0)
        self.store.save(state.n, state.method, state.rows, vector, state.info())

    def step(self, record: StepRecord, state) -> None:
        if record.step == state.n and self.due(state.n):
            self.save(state)

    def end(self, state) -> None:
        if not self.on_disk(state.n):
            self.save(state)

    def abort(self, state, error: BaseException) -> None:
        if state is not None and not isinstance(error, WriteFailed):
            self.save(state)  # else the previous checkpoint stands
