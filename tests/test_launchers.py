"""The same sweep through other launchers and stores: joblib workers and
submitit processes on a fresh SQLite store (no race on its creation), and a real
``mlflow server`` over HTTP."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from conftest import all_runs, run_sweep
from mlflow.tracking import MlflowClient


def _check_sweep(uri, n_jobs=2):
    runs = all_runs(uri)
    (parent,) = [r for r in runs if r.data.tags.get("run_kind") == "sweep"]
    jobs = [r for r in runs if r.data.tags.get("run_kind") == "job"]
    assert len(jobs) == n_jobs and parent.info.status == "FINISHED"
    client = MlflowClient(uri)
    for r in jobs:
        assert r.info.status == "FINISHED", r.data.tags.get("failure_reason")
        assert r.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert r.data.metrics["global_rel_l2"] < 1e-5
        losses = [m.value for m in client.get_metric_history(r.info.run_id, "step_loss")]
        assert len(losses) == round(0.08 / float(r.data.params["dt"])) and np.median(losses) < 1e-9
        assert {a.path for a in client.list_artifacts(r.info.run_id)} == {
            "config", "params", "plots", "tables"}
    return jobs


@pytest.mark.parametrize("launcher", [
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15"],
], ids=["joblib", "submitit_local"])
def test_parallel_launcher_on_a_fresh_store(tmp_path, warm_cache, launcher):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_sweep(tmp_path, uri, warm_cache, "dt=0.02,0.04", *launcher)
    _check_sweep(uri)


@pytest.fixture
def mlflow_server(tmp_path):
    """A real ``mlflow server`` on a free local port with its own SQLite store;
    stopped through its PID (and its process group) at teardown."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
         "--artifacts-destination", str(tmp_path / "server-artifacts"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "mlflow server did not start in 180 s"
            time.sleep(0.5)
        yield url, tmp_path / "server-artifacts"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_sweep_against_a_remote_mlflow_server(tmp_path, warm_cache, mlflow_server):
    url, artifact_dir = mlflow_server
    run_sweep(tmp_path, url, warm_cache, "dt=0.02,0.04")
    jobs = _check_sweep(url)
    # The artifacts went over HTTP into the server's own artifact store.
    for r in jobs:
        (found,) = artifact_dir.rglob(f"{r.info.run_id}/artifacts/params/theta.eqx")
        assert found.stat().st_size > 0
    assert not (tmp_path / "mlruns").exists()
