"""On-disk cache shared by θ₀ fits, reference solutions and run checkpoints.

Every entry is one ``.npz`` (no pickle) that checks itself: next to its arrays it
holds the *describing key* it was written for (canonical JSON) and a sha256
over that key and every array's name, dtype, shape and bytes. :func:`load_arrays`
recomputes both and returns ``None`` — the caller rebuilds the entry — when
the file is missing, unreadable (truncated: a zip's directory is at its end),
corrupt (a byte changed) or stale (written for another key or format). Writes
go through a temporary file in the same folder and a rename, so a reader or a
concurrent writer (parallel sweep jobs) sees the old complete file or the new
one, never half of one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import platform
import tempfile
import zipfile
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

_log = logging.getLogger(__name__)

#: Bumped when the layout of an entry changes: older entries are then stale.
FORMAT = "teng-eq-npz-v1"
_KEY, _DIGEST = "__key__", "__digest__"


def cache_dir(path=None) -> Path:
    """``path``, else ``$TENG_EQ_CACHE``, else ``~/.cache/teng-eq``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get("TENG_EQ_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "teng-eq"


#: Tries of :func:`probe_folder` when a folder vanishes under it.
PROBE_TRIES = 5


def probe_folder(path) -> str | None:
    """Why this process cannot write files in folder ``path``, or None when it can.

    Checked by doing it: the missing folders are created, a file is created and
    removed in it, and the folders this made are removed again. ``os.access``
    cannot tell: as root it says every folder is writable, ``/proc`` included.

    Jobs started together probe the same new folder at once (two sweeps sharing a
    cache). A folder another process made in the meantime is used, not reported,
    and left to that process to remove. A folder that another process removes
    after this one saw it (the other's clean-up) makes this probe start again,
    at most :data:`PROBE_TRIES` times."""
    folder = Path(path).expanduser().absolute()
    for _ in range(PROBE_TRIES):
        why, vanished = _probe_once(folder)
        if not vanished:
            break
    return why


def _probe_once(folder: Path) -> tuple[str | None, bool]:
    """One try of :func:`probe_folder`: ``(why not, whether a folder vanished)``."""
    made: list[Path] = []
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        return f"{existing} is not a folder", not existing.exists()  # gone since the look: again
    try:
        for p in reversed([p for p in (folder, *folder.parents) if not p.exists()]):
            try:
                p.mkdir()
            except FileExistsError:
                continue  # made by another process since the check: not ours to remove
            made.append(p)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".teng-eq-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        vanished = isinstance(err, FileNotFoundError)  # a folder this saw or made is gone
        return f"cannot write in {folder} ({err.strerror or err}: {err.filename})", vanished
    finally:
        for p in reversed(made):
            with contextlib.suppress(OSError):
                p.rmdir()  # only if still empty: a parallel job may have started using it
    return None, False


def compilation_folder(path=None) -> Path:
    """Where jax keeps this machine's compiled programs (its persistent compilation
    cache, enabled by the pipeline's jobs): ``<cache>/xla/<machine>``.

    ``<machine>`` digests the processor (architecture, CPU features) and jaxlib's
    version: compiled XLA:CPU programs are native code for the CPU that compiled them,
    and a cache folder shared by machines of different CPUs (a cluster's home folder)
    would otherwise hand one node's programs to another. Deleting the folder only costs
    the next runs their compilation."""
    features = platform.processor()
    # Linux: x86's "flags", ARM's "Features"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as info:
        features = next((line for line in info if line.startswith(("flags", "Features"))), features)
    try:
        jaxlib = version("jaxlib")
    except PackageNotFoundError:
        jaxlib = "unknown"
    machine = hashlib.sha256(f"{platform.machine()}|{features}|{jaxlib}".encode()).hexdigest()[:16]
    return cache_dir(path) / "xla" / f"{platform.machine()}-{machine}"


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive ``flock`` on the file ``path`` (created if missing; left in
    place) for the duration of the block: processes on one host, and on hosts
    sharing the filesystem where it supports locks, take turns. The lock goes
    with the process, so a killed holder never leaves it taken."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def write_atomic(path: Path, write: Callable) -> None:
    """Write through a temporary file in the same folder, then rename: readers and
    concurrent writers (parallel sweep jobs) never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _canonical_key(key: Mapping) -> str:
    return json.dumps({"format": FORMAT, **key}, sort_keys=True)


def _content_digest(key_json: str, arrays: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256(key_json.encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def store_arrays(path: Path, arrays: Mapping[str, np.ndarray], key: Mapping) -> Path:
    """Write ``arrays`` (names without ``__``) to ``path`` as a self-checking entry
    for ``key`` (a JSON-able mapping that describes what the arrays are), atomically."""
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    for name, a in arrays.items():
        if name.startswith("__") or a.dtype == object:
            raise ValueError(f"cache entry {path}: array {name!r} cannot be stored "
                             "(reserved name or object dtype)")
    key_json = _canonical_key(key)
    members = {**arrays, _KEY: np.array(key_json), _DIGEST: np.array(_content_digest(key_json, arrays))}
    write_atomic(path, lambda f: np.savez(f, **members))
    return Path(path)


def store_or_warn(path: Path, arrays: Mapping[str, np.ndarray], key: Mapping, what: str) -> bool:
    """:func:`store_arrays`, except that a cache that cannot be written (disk full,
    folder gone or read-only) costs only the cache: one warning line, and the
    caller uses what it computed for this run. True when stored."""
    try:
        store_arrays(path, arrays, key)
    except OSError as err:
        _log.warning("%s not cached (%s: %s): used for this run only", what, Path(path).parent,
                     err.strerror or err)
        return False
    return True


def check_arrays(path: Path, key: Mapping) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """``(arrays, None)`` for a sound entry of ``key`` at ``path``, else ``(None, why)``
    with ``why`` one of ``missing``, ``unreadable …``, ``stale …``, ``corrupt …``."""
    path = Path(path)
    if not path.is_file():
        return None, "missing"
    try:
        with np.load(path, allow_pickle=False) as data:
            members = {name: data[name] for name in data.files}
    except zipfile.BadZipFile as err:
        if "CRC" in str(err):  # zip checks each member's CRC-32 as it is read
            return None, f"corrupt ({err})"
        return None, f"unreadable (truncated or not an npz: {err})"
    except (OSError, ValueError, EOFError, KeyError) as err:
        return None, f"unreadable (truncated or not an npz: {type(err).__name__}: {err})"
    stored_key, stored_digest = members.pop(_KEY, None), members.pop(_DIGEST, None)
    if stored_key is None or stored_digest is None:
        return None, "stale (written without a key and digest)"
    if str(stored_key) != _canonical_key(key):
        return None, "stale (written for another key or format)"
    if str(stored_digest) != _content_digest(str(stored_key), members):
        return None, "corrupt (content digest mismatch)"
    return members, None


def load_arrays(path: Path, key: Mapping) -> dict[str, np.ndarray] | None:
    """The arrays of the entry of ``key`` at ``path``; ``None`` when there is no sound
    one (a damaged or stale file is reported in the log, and the caller's rebuild
    replaces it)."""
    arrays, why = check_arrays(path, key)
    if arrays is None and why != "missing":
        _log.warning("cache entry %s is %s: rebuilding it", path, why)
    return arrays


def digest(description: dict, extra: bytes = b"") -> str:
    """sha256 of a canonical JSON ``description`` (plus raw ``extra`` bytes)."""
    text = json.dumps(description, sort_keys=True).encode()
    return hashlib.sha256(text + extra).hexdigest()


def content_description(obj) -> dict:
    """What an object *is*, for a cache key: its class (``module:qualname``) and every
    dataclass field (an ``eqx.Module`` is one) by name, as canonical JSON values.

    Keys built from this change whenever any field does (a coefficient, a length, a
    field a subclass adds), so that an edited equation never meets an entry written
    for its old self. Values: numbers, strings, booleans and None as they are;
    sequences and mappings element by element; arrays by dtype, shape and a sha256
    of their bytes; functions by ``module:qualname``; nested dataclasses the same
    way; anything else by ``repr`` (a cache miss at worst, never a wrong hit)."""
    return {"class": _qualified(type(obj)),
            "fields": {f.name: _canonical_value(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}


def _qualified(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', repr(obj))}"


def _canonical_value(value):
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, (float, np.floating)):
        return float(value)  # json writes floats by repr: the exact float64
    if isinstance(value, Mapping):
        return {str(k): _canonical_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical_value(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return content_description(value)
    if hasattr(value, "__array__") or isinstance(value, np.generic):
        return {"array": array_digest(value)}
    if callable(value):
        return _qualified(value)
    return repr(value)


def array_digest(*arrays) -> str:
    """sha256 over the dtype, shape and bytes of each array (as float64 when real):
    the content of sampled values, e.g. u₀ on a fit grid, for a cache key."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "biuf":
            a = a.astype(np.float64)
        a = np.ascontiguousarray(a)
        h.update(json.dumps([a.dtype.str, list(a.shape)]).encode())
        h.update(a.tobytes())
    return h.hexdigest()
