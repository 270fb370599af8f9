"""Checkpoints of a run: enough to continue it as if it had never stopped.

A checkpoint after step n holds the method's state (whatever ``Method.init``
returned — TENG's θ, a baseline's optimiser state — as
``eqx.tree_serialise_leaves`` bytes), n itself, and the driver's record of steps
1..n (error terms, per-step scalars, cumulative wall time, loss tables, states
at the snapshot times). The random keys need no saving: step n draws
``fold_in(key_run, n)`` from the seed, so a resumed run draws the same subsets.

It is one self-checking file (:func:`teng_eq.cache.store_arrays`: npz, digest,
temporary file and rename), so a kill while writing leaves the previous
checkpoint whole, and a damaged file is ignored, not trusted.

Where: ``<cache_dir>/checkpoints/<config_hash>/<run_id>.npz``, a folder keyed by
configuration beside the θ₀ and reference caches, not an MLflow artifact:
the rename that makes a write atomic exists on a filesystem, not in an artifact
store (a remote one is written by upload, and an artifact cannot be replaced or
deleted through the client); a checkpoint is rewritten every few steps and is
worthless once its run is FINISHED, when it is deleted. Jobs that resume on
another machine need ``cache_dir`` on a shared filesystem, as the θ₀ cache
already asks.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path

import equinox as eqx
import numpy as np
from jaxtyping import PyTree

from teng_eq.cache import cache_dir, load_arrays, store_arrays

_log = logging.getLogger(__name__)

#: Bumped when the content of a checkpoint changes.
VERSION = 1


def state_bytes(state: PyTree) -> np.ndarray:
    """``state`` as ``eqx.tree_serialise_leaves`` bytes, a uint8 array."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, state)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def state_from_bytes(data: np.ndarray, like: PyTree) -> PyTree:
    """The state that :func:`state_bytes` wrote, with the structure of ``like``."""
    return eqx.tree_deserialise_leaves(io.BytesIO(np.asarray(data, dtype=np.uint8).tobytes()), like)


@dataclasses.dataclass
class Checkpoint:
    """A run after ``step`` steps: the method's ``state`` and the driver's ``record``
    (named arrays and ``info`` numbers, see :func:`teng_eq.simulation.run_simulation`)."""

    step: int
    state: PyTree
    record: dict[str, np.ndarray]
    info: dict[str, float]


class CheckpointStore:
    """The checkpoint file of one run, ``<root>/<config_hash>/<run_id>.npz``.

    ``describe`` (JSON-able) is the key the file is written for: a file written
    for another configuration, run or format is stale and ignored.
    """

    def __init__(self, path: Path, describe: Mapping):
        self.path = Path(path)
        self.key = {"kind": "checkpoint", "version": VERSION, **describe}
        self.seconds = 0.0  # time spent writing
        self.writes = 0

    @classmethod
    def for_run(cls, config_hash: str, run_id: str, *, directory=None) -> CheckpointStore:
        path = cache_dir(directory) / "checkpoints" / config_hash / f"{run_id}.npz"
        return cls(path, {"config_hash": config_hash, "run_id": run_id})

    def save(self, step: int, state: PyTree, record: Mapping[str, np.ndarray],
             info: Mapping[str, float]) -> None:
        start = time.perf_counter()
        arrays = {f"record.{k}": np.asarray(v) for k, v in record.items()}
        arrays["state"] = state_bytes(state)
        arrays["info"] = np.array(json.dumps({"step": int(step), **{k: float(v) for k, v in info.items()}}))
        store_arrays(self.path, arrays, self.key)
        self.seconds += time.perf_counter() - start
        self.writes += 1

    def load(self, like: PyTree) -> Checkpoint | None:
        """The checkpoint, its state shaped like ``like``; None if there is no sound one."""
        arrays = load_arrays(self.path, self.key)
        if arrays is None:
            return None
        info = json.loads(str(arrays["info"]))
        step = int(info.pop("step"))
        record = {k.removeprefix("record."): v for k, v in arrays.items() if k.startswith("record.")}
        try:
            state = state_from_bytes(arrays["state"], like)
        except (ValueError, TypeError, RuntimeError) as err:  # the state changed shape (code changed)
            _log.warning("checkpoint %s does not fit this method's state (%s): starting afresh",
                         self.path, err)
            return None
        return Checkpoint(step=step, state=state, record=record, info=info)

    def clear(self) -> None:
        """Delete the file (the run is FINISHED), and its folder once empty."""
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass
