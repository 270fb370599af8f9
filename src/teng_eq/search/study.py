"""The study of a frontier search: an Optuna study with two objectives, both
minimised — a run's error (``global_rel_l2``, or ``est_global_rel_l2`` for an
equation without a reference) and its cost (``runtime_s``) — kept in SQLite next to
the MLflow store, so that a second invocation continues it.

One search at a time writes a study (:func:`study_lock`): trial numbers are then
consecutive within a batch, and a trial left RUNNING by an earlier invocation is
known to be an orphan, not another process's. Optuna is imported on first use (the
sweeper's module is loaded by Hydra at every start, a search or not)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from teng_eq.cache.files import digest, file_lock
from teng_eq.config.options import BOOKKEEPING
from teng_eq.errors import ConfigError
from teng_eq.search.space import Space


def default_storage(tracking_uri: str, root: Path) -> str:
    """``sqlite:///<folder>/optuna.db`` beside a SQLite MLflow store; beside the repo
    root's default store for any other (a server)."""
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri.removeprefix("sqlite:///")).parent
    else:
        folder = Path(root)
    return f"sqlite:///{folder / 'optuna.db'}"


def study_name(experiment: str, space: Space, error: str, cost: str) -> str:
    """``<experiment>-frontier-<hash>``: the same search (axes, fixed overrides but the
    bookkeeping ones, objectives) names the same study, whatever else the command says."""
    fixed = [o for o in space.fixed if o.split("=", 1)[0].lstrip("+~") not in BOOKKEEPING]
    described = {**space.describe(), "fixed": fixed, "objectives": [error, cost]}
    return f"{experiment}-frontier-{digest(described)[:8]}"


def _lock_path(storage: str, name: str) -> Path | None:
    if not storage.startswith("sqlite:///"):
        return None
    db = Path(storage.removeprefix("sqlite:///"))
    return db.with_name(f"{db.name}-{digest({'study': name})[:12]}.lock")


@contextlib.contextmanager
def study_lock(storage: str, name: str) -> Iterator[None]:
    """Hold the study for this process (a ``flock`` beside a SQLite storage, which
    goes with the process): a second search of the same study refuses with one line
    instead of interleaving its trials."""
    path = _lock_path(storage, name)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"study {name!r} in {storage} is being searched by another process: "
                              "wait for it, or name another study (hydra.sweeper.study=…)") from None
        yield
    finally:
        os.close(fd)


def make_sampler(name: str, seed: int, startup_trials: int):
    """The Optuna sampler ``name`` (:data:`~teng_eq.search.space.SAMPLERS`), seeded with ``seed``."""
    import optuna

    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(2, startup_trials))
    return optuna.samplers.RandomSampler(seed=seed)


def open_study(storage: str, name: str, *, sampler: str, seed: int, startup_trials: int):
    """Create or load study ``name`` (two objectives, minimised) in ``storage``. The
    sampler's seed moves on with the trials the study holds: a continued study does
    not draw its first random points again."""
    import optuna

    if storage.startswith("sqlite:///"):
        db = Path(storage.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
        lock = db.with_name(db.name + "-lock")  # two searches creating one fresh file's tables
    else:
        lock = None
    with file_lock(lock) if lock is not None else contextlib.nullcontext():
        study = optuna.create_study(storage=storage, study_name=name, directions=["minimize", "minimize"],
                                    load_if_exists=True)
    study.sampler = make_sampler(sampler, seed + len(study.get_trials(deepcopy=False)), startup_trials)
    return study


def front(study) -> list:
    """The study's non-dominated COMPLETE trials, cheapest first."""
    return sorted(study.best_trials, key=lambda t: (t.values[1], t.values[0]))


def cheapest(study, target: float):
    """The COMPLETE trial of least cost whose error is at most ``target``; None if none."""
    from optuna.trial import TrialState

    ok = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.values[0] <= target]
    return min(ok, key=lambda t: (t.values[1], t.values[0], t.number), default=None)


def objective_values(metrics: dict[str, float], names: Sequence[str]) -> tuple[list[float] | None, str]:
    """``(values, "")`` of ``names`` in a run's ``metrics``, or ``(None, why)`` when one
    is missing or not finite."""
    values = []
    for key in names:
        value = metrics.get(key)
        if value is None:
            return None, f"the run has no metric {key}"
        if not math.isfinite(value):
            return None, f"{key} = {value}"
        values.append(float(value))
    return values, ""


def describe(params: dict[str, Any]) -> str:
    """``dt=0.01 iters=3``: a trial's parameters in one line."""
    return " ".join(f"{k}={v!r}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())
