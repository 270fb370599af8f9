"""The fixtures the tests share: an isolated cache per session (and θ₀ of the tiny
problem fitted in it once), and a real ``mlflow server``. The helpers they share are
in tests/helpers/."""

from __future__ import annotations

import os

# As pipeline/sweep.py does, before NumPy, SciPy or jaxlib load OpenBLAS: with its own
# threads it rounds differently on some machines (measured on an AMD EPYC: a run in the test
# process ended at 5.43986e-5, the same run through sweep.py at 5.44085e-5), and README's
# test command does not set it. .ci/run exports it too.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# MLflow's telemetry (set up when mlflow is imported) unsets a variable of os.environ from a
# thread of its own while requests reads os.environ for proxies: a test's first client call
# then fails with KeyError '_MLFLOW_TELEMETRY_SESSION_ID' (seen once in tests/test_many_writers.py).
# Off in the tests and the jobs they start (helpers.processes.job_env copies this environment).
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402
from helpers.configs import make_config  # noqa: E402
from helpers.mlflow_store import Server  # noqa: E402

from teng_eq.cache.files import compilation_folder, file_lock
from teng_eq.run.simulation import build_method


def _session_folder(tmp_path_factory, name: str) -> Path:
    """``name`` under the session's temporary folder, one for both pytest-xdist workers
    (their own folders' parent) — never ~/.cache."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name
    folder.mkdir(exist_ok=True)
    return folder


@pytest.fixture(scope="session", autouse=True)
def compiled_programs(cache_dir) -> Path:
    """jax's persistent compilation cache for the whole session, in the session's cache:
    most tests compile the same few programs (the tiny problems' steps and estimates),
    and compilation, not stepping, is most of the suite's time. A cached program is the
    same executable, so results do not change; a test that counts compilations switches
    the cache off."""
    folder = compilation_folder(cache_dir)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """θ₀ and reference cache shared by the tests of one session and both workers
    (entries are written atomically)."""
    return _session_folder(tmp_path_factory, "teng-cache")


@pytest.fixture(scope="session")
def warm_cache(cache_dir) -> Path:
    """``cache_dir`` holding θ₀ of helpers.configs.TINY_SWEEP, fitted once in-process,
    so that parallel sweep jobs never fit it twice side by side; the other worker waits
    for it and reads it (the lock) instead of fitting it too."""
    with file_lock(cache_dir / "warm.lock"):
        build_method(make_config("equation.initial_condition=sines2d", "grid=32"), cache_dir=cache_dir)
    return cache_dir


@pytest.fixture
def mlflow_server(tmp_path) -> Iterator[Server]:
    """A real ``mlflow server`` with its own SQLite store and artifact folder in
    ``tmp_path`` (:class:`helpers.mlflow_store.Server`), started; stopped at teardown."""
    server = Server(tmp_path)
    try:
        server.start()
        yield server
    finally:
        server.stop()
