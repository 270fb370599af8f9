"""A shared store that asks who is writing: MLflow's authenticated server
(``mlflow server --app-name basic-auth``) on loopback, the jobs' credentials in
their environment (MLflow's own ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD``), none on
a command line or in a file of the repo."""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import urllib.error
import urllib.request

import pytest
from helpers.configs import TINY_SWEEP_NO_GRID
from helpers.fake_methods import TOY
from helpers.mlflow_store import Server
from helpers.processes import job_env, sweep_command
from mlflow.tracking import MlflowClient

from teng_eq.tracking.store import EXPERIMENT_KIND

# slow: out of the default suite (≤ 15 min on 2 cores); .ci/run runs it after README's command.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # an mlflow server and pipeline/sweep.py in subprocesses

USER = "jobs"


def _request(url: str, path: str, user: str | None = None, password: str | None = None, body=None):
    request = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    if user is not None:
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server, with a user of its own for the jobs (made by the admin, as an
    operator would); its password, as the jobs' environment holds it."""
    s = Server(tmp_path_factory.mktemp("auth-server"), admin_password=secrets.token_urlsafe(16))
    s.start()
    s.password = secrets.token_urlsafe(16)
    _request(s.url, "/api/2.0/mlflow/users/create", "admin", s.admin_password,
             body={"username": USER, "password": s.password})
    yield s
    s.stop()


def _job(tmp_path, url: str, **credentials: str) -> subprocess.CompletedProcess:
    """A one-job sweep of the Toy method; the credentials of its environment are ``credentials`` alone."""
    cmd = sweep_command(tmp_path, url, tmp_path / "cache", "dt=0.02", "experiment_name=auth",
                        tiny=[*TINY_SWEEP_NO_GRID, *TOY])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=job_env(drop=["MLFLOW_TRACKING_"], **credentials), check=False)


def test_a_request_without_credentials_is_refused(server):
    with pytest.raises(urllib.error.HTTPError) as err:
        _request(server.url, "/api/2.0/mlflow/experiments/search?max_results=1")
    assert err.value.code == 401
    assert "experiments" in _request(server.url, "/api/2.0/mlflow/experiments/search?max_results=1",
                                     USER, server.password)


def test_a_job_with_credentials_in_its_environment_logs_its_run(server, tmp_path, monkeypatch):
    proc = _job(tmp_path, server.url, MLFLOW_TRACKING_USERNAME=USER, MLFLOW_TRACKING_PASSWORD=server.password)
    assert proc.returncode == 0, proc.stderr[-3000:]
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", server.password)
    client = MlflowClient(server.url)
    exp = client.get_experiment_by_name("auth")
    assert exp.tags.items() >= EXPERIMENT_KIND.items()
    runs = {r.data.tags["run_kind"]: r for r in client.search_runs([exp.experiment_id])}
    assert runs.keys() == {"sweep", "job"}
    assert all(r.info.status == "FINISHED" for r in runs.values())
    assert runs["job"].data.tags["mlflow.parentRunId"] == runs["sweep"].info.run_id
    assert [m.step for m in client.get_metric_history(runs["job"].info.run_id, "step_loss")] == [1, 2, 3, 4]
    assert client.list_artifacts(runs["job"].info.run_id, "plots")


@pytest.mark.parametrize("credentials, needle", [
    ({}, "the server asks for credentials: set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD "
         "in the environment"),
    ({"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": "wrong"},
     f"the server refuses the credentials of MLFLOW_TRACKING_USERNAME={USER} (HTTP 401)"),
])
def test_a_job_without_valid_credentials_stops_before_any_compute(server, tmp_path, credentials, needle):
    proc = _job(tmp_path, server.url, **credentials)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0] == f"error: invalid config: tracking_uri={server.url}: {needle}"
    assert not (tmp_path / "cache").exists()
