"""The study of a frontier search: an Optuna study with two objectives, both
minimised — a run's error (``global_rel_l2``, or ``est_global_rel_l2`` for an
equation without a reference) and its cost (``runtime_s``) — kept in a storage that
outlives the search, so that a second invocation continues it.

**Where it is kept** (``hydra.sweeper.storage``, :func:`check_storage`): SQLite next to
the MLflow store by default (:func:`default_storage`); or a storage that several
searches write at once, on one machine or several (:func:`is_shared`): a PostgreSQL
database (``postgresql+psycopg://user@host/db``, Optuna's RDB storage) or Optuna's
journal file on a shared filesystem (``journal:///<path>``).

**One search or many.** SQLite takes one writer at a time: one search holds a SQLite
study for its whole length (:func:`study_lock`), and a second refuses in one line.
A shared storage lets searches interleave: each change of a study's bookkeeping
(counting its trials against ``n_trials``, enqueueing the baseline, asking a batch,
taking over a dead search's trials) happens in turns (:func:`bookkeeping_turn`: a
PostgreSQL advisory lock, a ``flock`` beside a journal), so a batch's trial numbers are
consecutive, the study never holds more than ``n_trials`` trials, and no trial is taken
by two searches. Optuna is imported on first use (the sweeper's module is loaded by
Hydra at every start, a search or not)."""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from teng_eq.cache.files import digest, file_lock, probe_folder
from teng_eq.config.options import BOOKKEEPING
from teng_eq.errors import ConfigError
from teng_eq.search.space import Space

#: Where the recipe of a storage for many writers is (PostgreSQL, or a journal file).
SERVER_RECIPE = "docs/guides/server-and-cluster.md#many-writers-postgresql"

#: The storages a study may be kept in, by URL prefix (PostgreSQL with any SQLAlchemy driver).
STORAGES = ("sqlite:///", "postgresql://", "postgresql+<driver>://", "journal:///")


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


def check_storage(storage: str) -> None:
    """A storage URL the frontier takes (:data:`STORAGES`), its file's folder writable
    (SQLite, journal): else one line naming ``hydra.sweeper.storage``."""
    def refuse(why: str):
        raise ConfigError(f"invalid config: hydra.sweeper.storage={storage!r}: {why}", "storage", storage,
                          why)

    if not isinstance(storage, str) or not storage.strip():
        refuse("must be a storage URL (or null: SQLite beside the MLflow store)")
    scheme = storage.split("://", 1)[0] if "://" in storage else ""
    if scheme.split("+", 1)[0] == "postgresql":
        if not storage.split("://", 1)[1].strip("/"):
            refuse("a PostgreSQL storage is postgresql+psycopg://<user>@<host>[:port]/<database>")
        return
    if scheme not in ("sqlite", "journal"):
        refuse(f"not a storage the frontier takes: {', '.join(STORAGES)}")
    path = _file_of(storage)
    if path is None:
        refuse(f"a {scheme} storage is {scheme}:///<absolute path of a file>")
    if path.is_dir():
        refuse(f"{path} is a folder, not a file")
    why = probe_folder(path.parent)
    if why is not None:
        refuse(why)


def is_shared(storage: str) -> bool:
    """Whether several searches may write the study at once (not SQLite's)."""
    return not storage.startswith("sqlite:")


def _file_of(storage: str) -> Path | None:
    """The file of a storage: ``sqlite:///<path>`` as SQLAlchemy reads it (relative to
    the working folder unless it starts with ``/``), ``journal:///<absolute path>`` as a
    ``file:`` URL; else None."""
    if storage.startswith("sqlite:///") and len(storage) > len("sqlite:///"):
        return Path(storage.removeprefix("sqlite:///"))
    if storage.startswith("journal:///") and storage.strip("/") != "journal:":
        return Path(storage.removeprefix("journal://"))
    return None


def optuna_storage(storage: str):
    """What Optuna is given for ``storage``: the URL of an RDB storage (SQLite,
    PostgreSQL), or a journal storage on the file of a ``journal:///`` URL."""
    if not storage.startswith("journal:///"):
        return storage
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = _file_of(storage)
    path.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(path)))


@contextlib.contextmanager
def bookkeeping_turn(storage: str, name: str) -> Iterator[None]:
    """This process's turn at study ``name``'s bookkeeping in a shared storage: a
    session-level advisory lock in PostgreSQL (on its own connection; the server
    frees it if the process dies), a ``flock`` beside a journal file. SQLite: nothing
    (one search holds the whole study, :func:`study_lock`)."""
    if not is_shared(storage):
        yield
        return
    if storage.startswith("journal:///"):
        path = _file_of(storage)
        with file_lock(path.with_name(f"{path.name}-{digest({'study': name})[:12]}.lock")):
            yield
        return
    import sqlalchemy

    key = int(digest({"study": name})[:15], 16)  # 60 bits: a PostgreSQL bigint
    engine = sqlalchemy.create_engine(storage, poolclass=sqlalchemy.pool.NullPool)
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql(f"SELECT pg_advisory_lock({key})")
            try:
                yield
            finally:
                connection.exec_driver_sql(f"SELECT pg_advisory_unlock({key})")
    finally:
        engine.dispose()


def _lock_path(storage: str, name: str) -> Path | None:
    if not storage.startswith("sqlite:///"):
        return None
    db = Path(storage.removeprefix("sqlite:///"))
    return db.with_name(f"{db.name}-{digest({'study': name})[:12]}.lock")


@contextlib.contextmanager
def study_lock(storage: str, name: str) -> Iterator[None]:
    """Hold a SQLite study for this process (a ``flock`` beside the file, which goes
    with the process): a second search of the same study refuses with one line
    instead of interleaving its trials (a shared storage: nothing held;
    :func:`bookkeeping_turn` takes turns instead)."""
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
            raise ConfigError(busy(storage, name)) from None
        yield
    finally:
        os.close(fd)


def busy(storage: str, name: str) -> str:
    """The line that refuses a second search of a SQLite study."""
    return (f"study {name!r} in {storage} is being searched by another process: SQLite takes one search "
            "at a time; wait for it, name another study (hydra.sweeper.study=…), or keep the study in "
            f"PostgreSQL for searches at once ({SERVER_RECIPE})")


def is_busy(storage: str, name: str) -> bool:
    """Whether another process holds SQLite study ``name`` (:func:`study_lock`) now."""
    path = _lock_path(storage, name)
    if path is None or not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases a lock taken here
    return False


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
    not draw its first random points again (:func:`reseed`: before each ask in a
    shared storage)."""
    import optuna

    if storage.startswith("sqlite:///"):
        db = Path(storage.removeprefix("sqlite:///"))
        db.parent.mkdir(parents=True, exist_ok=True)
        lock = db.with_name(db.name + "-lock")  # two searches creating one fresh file's tables
    else:
        lock = None
    with file_lock(lock) if lock is not None else bookkeeping_turn(storage, name):
        study = optuna.create_study(storage=optuna_storage(storage), study_name=name,
                                    directions=["minimize", "minimize"], load_if_exists=True)
    reseed(study, sampler, seed, startup_trials)
    return study


def reseed(study, sampler: str, seed: int, startup_trials: int) -> None:
    """A new sampler for ``study``, seeded with ``seed`` plus the number of trials it
    holds. In a shared storage this is done in each turn before asking: two searches
    started at once hold different counts whenever they ask, so they never draw with
    one seed (and so the same points)."""
    study.sampler = make_sampler(sampler, seed + len(study.get_trials(deepcopy=False)), startup_trials)


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
