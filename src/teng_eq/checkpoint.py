"""Checkpoints of a run: enough to continue it as if it had never stopped.

A checkpoint after step n holds the method's state (whatever ``Method.init``
returned — TENG's θ, a baseline's optimiser state — as ``eqx.tree_serialise_leaves``
bytes), n, and the driver's :class:`History` of steps 1..n. The random keys need no
saving: step n draws ``fold_in(key_run, n)`` from the seed. Networks are saved here
too (:func:`save_network`).

One self-checking file (:func:`teng_eq.cache.store_arrays`: npz, digest, temporary
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
import time
from collections.abc import Mapping
from pathlib import Path

import equinox as eqx
import numpy as np
from jaxtyping import PyTree

from teng_eq.cache import cache_dir, load_arrays, store_arrays
from teng_eq.errors import WriteFailed
from teng_eq.results import StepRecord

_log = logging.getLogger(__name__)

#: Bumped when the content of a checkpoint changes.
VERSION = 3


def state_bytes(state: PyTree) -> np.ndarray:
    """``state`` as ``eqx.tree_serialise_leaves`` bytes, a uint8 array."""
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, state)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def state_from_bytes(data: np.ndarray, like: PyTree) -> PyTree:
    """The state that :func:`state_bytes` wrote, with the structure of ``like``."""
    return eqx.tree_deserialise_leaves(io.BytesIO(np.asarray(data, dtype=np.uint8).tobytes()), like)


def save_network(path: Path, network: eqx.Module) -> Path:
    """θ as ``eqx.tree_serialise_leaves`` bytes (no pickle); read back into an untrained
    network of the same shape (:func:`teng_eq.simulation.load_network`)."""
    eqx.tree_serialise_leaves(path, network)
    return Path(path)


@dataclasses.dataclass
class History:
    """What the driver keeps of a run's steps 1..n, as a checkpoint holds it
    (:class:`teng_eq.driver.RunState`). A run whose steps the controller chooses does
    not know their number: :meth:`reserve` grows the arrays."""

    err_sq: np.ndarray  # (n_times,) squared error norm at each time (sequential methods)
    ref_sq: np.ndarray  # (n_times,) squared reference norm
    boundary: np.ndarray  # (n_times,) max |û| on a Dirichlet boundary; NaN without one
    wall: np.ndarray  # (steps,) cumulative stepping time
    metrics: dict[str, np.ndarray]  # the method's per-step metrics, each (steps,)
    tables: list[np.ndarray]  # one (rows, 4) loss table per step done
    snapshot_states: dict[int, np.ndarray]  # time index -> state bytes (sequential methods)
    times: np.ndarray  # (n_times,) physical time of each time index
    u_sq: np.ndarray  # (n_times,) squared norm of û on the error estimate's points
    est: np.ndarray  # (n_times,) a-posteriori error estimate E_n (teng_eq.estimate); NaN without one
    est_vector: np.ndarray  # the estimate's error vector on its points, as of the last step (teng_eq.estimate)

    @classmethod
    def empty(cls, steps: int, n_times: int) -> History:
        return cls(np.zeros(n_times), np.zeros(n_times), np.full(n_times, np.nan), np.zeros(steps), {}, [], {},
                   np.zeros(n_times), np.zeros(n_times), np.full(n_times, np.nan), np.zeros(0))

    def reserve(self, steps: int) -> None:
        """Room for ``steps`` steps (and ``steps + 1`` times), at least doubling."""
        if len(self.wall) >= steps:
            return
        steps = max(steps, 2 * len(self.wall))

        def grow(a: np.ndarray, n: int, fill: float) -> np.ndarray:
            return np.concatenate([a, np.full(n - len(a), fill)])

        self.err_sq, self.ref_sq, self.times, self.u_sq = (
            grow(a, steps + 1, 0.0) for a in (self.err_sq, self.ref_sq, self.times, self.u_sq))
        self.boundary, self.est = grow(self.boundary, steps + 1, np.nan), grow(self.est, steps + 1, np.nan)
        self.wall = grow(self.wall, steps, 0.0)
        self.metrics = {k: grow(v, steps, np.nan) for k, v in self.metrics.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """The history as named arrays (a checkpoint's ``history``)."""
        rows = np.array([len(t) for t in self.tables], dtype=np.int64)
        out = {"err_sq": self.err_sq, "ref_sq": self.ref_sq, "boundary": self.boundary, "wall": self.wall,
               "times": self.times, "u_sq": self.u_sq, "est": self.est, "est_vector": self.est_vector,
               "loss_rows": rows,
               "losses": np.concatenate(self.tables) if self.tables else np.zeros((0, 4))}
        out.update({f"scalar.{k}": v for k, v in self.metrics.items()})
        out.update({f"snapshot.{n}": b for n, b in self.snapshot_states.items()})
        return out

    @classmethod
    def from_arrays(cls, a: Mapping[str, np.ndarray]) -> History:
        splits = np.cumsum(a["loss_rows"])[:-1]
        return cls(
            err_sq=a["err_sq"].copy(), ref_sq=a["ref_sq"].copy(), boundary=a["boundary"].copy(),
            wall=a["wall"].copy(),
            metrics={k.removeprefix("scalar."): v.copy() for k, v in a.items() if k.startswith("scalar.")},
            tables=list(np.split(a["losses"], splits)) if len(a["loss_rows"]) else [],
            snapshot_states={int(k.removeprefix("snapshot.")): v for k, v in a.items()
                             if k.startswith("snapshot.")},
            times=a["times"].copy(), u_sq=a["u_sq"].copy(), est=a["est"].copy(),
            est_vector=a["est_vector"].copy(),
        )

    def record(self, n: int, of: int | None, t: float | None) -> StepRecord:
        """Step ``n`` of ``of`` (None: not known yet) as first reported (replayed after a
        resume); ``t`` None: a block of a global-in-time method (no error measured yet)."""
        metrics = {k: float(v[n - 1]) for k, v in self.metrics.items()} if n > 0 else {}
        if t is not None and np.isfinite(self.err_sq[n]):  # NaN: no reference
            metrics["rel_l2"] = float(np.sqrt(self.err_sq[n] / self.ref_sq[n]))
            if np.isfinite(self.boundary[n]):
                metrics["boundary_max_abs"] = float(self.boundary[n])
            if np.isfinite(self.est[n]):
                metrics["est_rel_l2"] = float(self.est[n] / np.sqrt(self.u_sq[n]))
        if n > 0:
            metrics["wall_time_s"] = float(self.wall[n - 1])
        table = self.tables[n - 1] if n else np.zeros((0, 4))
        return StepRecord.from_table(table, metrics, step=n, of=of, t=t)


@dataclasses.dataclass
class Checkpoint:
    """A run after ``step`` steps: the method's ``state``, the driver's ``history`` (as
    named arrays: :meth:`History.arrays`) and ``info`` numbers."""

    step: int
    state: PyTree
    history: dict[str, np.ndarray]
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
        self.step: int | None = None  # the step of the checkpoint on disk (saved or loaded)

    @classmethod
    def for_run(cls, config_hash: str, run_id: str, *, directory=None) -> CheckpointStore:
        path = cache_dir(directory) / "checkpoints" / config_hash / f"{run_id}.npz"
        return cls(path, {"config_hash": config_hash, "run_id": run_id})

    def save(self, step: int, state: PyTree, history: Mapping[str, np.ndarray],
             info: Mapping[str, float]) -> None:
        """Replace the checkpoint by the one after ``step``; a file that cannot be
        written raises :class:`~teng_eq.errors.WriteFailed` and leaves the previous one."""
        start = time.perf_counter()
        arrays = {f"record.{k}": np.asarray(v) for k, v in history.items()}
        arrays["state"] = state_bytes(state)
        arrays["info"] = np.array(json.dumps({"step": int(step), **{k: float(v) for k, v in info.items()}}))
        try:
            store_arrays(self.path, arrays, self.key)
        except OSError as err:  # the temporary file is gone, the previous checkpoint untouched
            kept = (f"the checkpoint of step {self.step} is intact: the same command resumes from it"
                    if self.step is not None else "there is no earlier checkpoint")
            raise WriteFailed(f"the checkpoint after step {step} could not be written in {self.path.parent} "
                              f"({err.strerror or err}); {kept}") from err
        self.step = int(step)
        self.seconds += time.perf_counter() - start

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
        self.step = step
        return Checkpoint(step=step, state=state, history=history, info=info)

    def clear(self) -> None:
        """Delete the file (the run is FINISHED), and its folder once empty."""
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass
