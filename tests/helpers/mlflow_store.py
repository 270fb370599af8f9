"""A store read back (every run, the jobs, a metric's history), and a real ``mlflow
server`` for the jobs to log to."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from mlflow.entities import Metric, Run
from mlflow.tracking import MlflowClient


def all_runs(uri: str) -> list[Run]:
    """Every run of the store at ``uri``, across experiments."""
    client = MlflowClient(uri)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def job_runs(uri: str) -> list[Run]:
    """The job runs (``run_kind=job``) of the store at ``uri``: no sweep parents, no analyses."""
    return [r for r in all_runs(uri) if r.data.tags.get("run_kind") == "job"]


def history(client: MlflowClient, run_id: str, key: str) -> list[Metric]:
    """Metric ``key`` of run ``run_id``, by step."""
    return sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)


def free_port() -> int:
    """A local port nobody listens on (once this returns, nobody holds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A real ``mlflow server`` (its own SQLite store, or ``backend``: a PostgreSQL
    database's URL, and its artifact folder, served through it) on a free local port
    that stays its own when the test stops and starts it again (conftest's
    ``mlflow_server``; tests/test_tracking_auth.py's, authenticated;
    tests/test_many_writers.py's, on PostgreSQL with ``workers`` processes)."""

    def __init__(self, tmp: Path, admin_password: str | None = None, backend: str | None = None,
                 workers: int = 1):
        self.port = free_port()
        self.tmp, self.url, self.proc = tmp, f"http://127.0.0.1:{self.port}", None
        self.artifacts = tmp / "server-artifacts"
        self.admin_password = admin_password
        self.backend = backend or f"sqlite:///{tmp / 'server.db'}"
        self.workers = workers

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
        if self.backend.startswith("postgresql"):
            # SQLAlchemy's default pool (5 + 10 overflow) is smaller than the requests a worker's
            # threads serve at once: under 20 writers a request waited 30 s for a connection and failed.
            env.update(MLFLOW_SQLALCHEMYSTORE_POOL_SIZE="20", MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW="20")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", *app, "--host", "127.0.0.1", "--port", str(self.port),
             "--backend-store-uri", self.backend, "--serve-artifacts",
             "--artifacts-destination", str(self.artifacts), "--workers", str(self.workers)],
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

    def stop(self, grace_s: float = 30) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` seconds."""
        if self.proc is None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.log.close()
