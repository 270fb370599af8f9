"""Shared fixtures: Hydra composition of conf/, and an isolated cache per session."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"


def compose_conf(overrides=()):
    """conf/config.yaml with ``overrides`` (e.g. ``["dt=0.01"]``), as Hydra builds it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides))


def make_config(*overrides):
    """The validated :class:`RunConfig` of conf/ with ``overrides``: the one source of defaults."""
    from omegaconf import OmegaConf

    from teng_eq.config import RunConfig
    from teng_eq.preflight import key_namer

    cfg = compose_conf(overrides)
    return RunConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True), rename=key_namer(cfg))


@pytest.fixture
def compose_config():
    """``compose_config(["dt=0.01", …])``: :func:`compose_conf` as a fixture."""
    return compose_conf


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """θ₀ and reference cache shared by the tests of one session (never ~/.cache)."""
    return tmp_path_factory.mktemp("teng-cache")


@pytest.fixture(scope="session")
def warm_cache(cache_dir) -> Path:
    """``cache_dir`` holding θ₀ of the tiny problem below, fitted once in-process,
    so that parallel sweep jobs never fit it twice side by side."""
    from teng_eq.simulation import build_method

    build_method(make_config("equation.initial_condition=sines2d", "grid=32"), cache_dir=cache_dir)
    return cache_dir


# A sweep job small enough for the suite: band-limited IC, 32² grid, 4 steps at dt=0.02.
TINY = ["equation.initial_condition=sines2d", "grid=32", "eval_grid=64", "t_final=0.08", "progress=false"]


def run_sweep(tmp_path, uri, cache_dir, *overrides, multirun=True, timeout=900, tiny=TINY):
    """Run pipeline/sweep.py on the tiny problem in a subprocess; the finished process."""
    cmd = [sys.executable, str(ROOT / "pipeline" / "sweep.py"), *(["-m"] if multirun else []),
           *tiny, f"tracking_uri={uri}", f"cache_dir={cache_dir}",
           f"hydra.sweep.dir={tmp_path / 'multirun'}", f"hydra.run.dir={tmp_path / 'outputs'}",
           *overrides]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("TENG_EQ_PARENT_RUN", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def all_runs(uri):
    """Every run of the store at ``uri``, across experiments."""
    import mlflow

    client = mlflow.tracking.MlflowClient(uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


class Server:
    """A real ``mlflow server`` (its own SQLite store and artifact folder) on a
    free local port that stays its own when the test stops and starts it again
    (tests/test_faults.py, tests/test_launchers.py)."""

    def __init__(self, tmp: Path, admin_password: str | None = None):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.tmp, self.url, self.proc = tmp, f"http://127.0.0.1:{self.port}", None
        self.artifacts = tmp / "server-artifacts"
        self.admin_password = admin_password

    def start(self) -> None:
        """Start it; with ``admin_password``, MLflow's authenticated server (``--app-name
        basic-auth``): its user store in ``tmp``, the admin's password from the
        environment (never the command line), checked passwords cached for a minute
        (each check is a slow hash: without it every MLflow call waits for one)."""
        self.log = open(self.tmp / "server.log", "a")  # noqa: SIM115 - closed in stop()
        env, app = dict(os.environ), []
        if self.admin_password is not None:
            ini = self.tmp / "basic_auth.ini"
            ini.write_text("[mlflow]\ndefault_permission = READ\n"
                           f"database_uri = sqlite:///{self.tmp / 'auth.db'}\nadmin_username = admin\n"
                           "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                           "auth_cache_ttl_seconds = 60\n")
            env.update(MLFLOW_AUTH_CONFIG_PATH=str(ini), MLFLOW_AUTH_ADMIN_PASSWORD=self.admin_password,
                       MLFLOW_FLASK_SERVER_SECRET_KEY=os.urandom(16).hex())
            app = ["--app-name", "basic-auth"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", *app, "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", f"sqlite:///{self.tmp / 'server.db'}",
             "--artifacts-destination", str(self.artifacts), "--workers", "1"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            assert self.proc.poll() is None, (self.tmp / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "mlflow server did not start in 180 s"
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.log.close()
