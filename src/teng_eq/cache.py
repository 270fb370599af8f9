"""On-disk cache shared by θ₀ fits and reference solutions."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir(path=None) -> Path:
    """``path``, else ``$TENG_EQ_CACHE``, else ``~/.cache/teng-eq``."""
    if path is not None:
        return Path(path).expanduser()
    env = os.environ.get("TENG_EQ_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "teng-eq"


def digest(description: dict, extra: bytes = b"") -> str:
    """sha256 of a canonical JSON ``description`` (plus raw ``extra`` bytes)."""
    text = json.dumps(description, sort_keys=True).encode()
    return hashlib.sha256(text + extra).hexdigest()


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
