"""The same sweep through other launchers and stores: joblib workers and
submitit processes on a fresh SQLite store (no race on its creation), and a real
``mlflow server`` over HTTP."""


import numpy as np
import pytest
from helpers.mlflow_store import all_runs
from helpers.processes import run_sweep
from mlflow.tracking import MlflowClient

# slow: out of the default suite (≤ 15 min on 2 cores); .ci/run runs it after README's command.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # pipeline/sweep.py (and an mlflow server) in subprocesses


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
        n = round(0.08 / float(r.data.params["dt"]))
        losses = [m.value for m in client.get_metric_history(r.info.run_id, "step_loss")]
        err = [m.value for m in client.get_metric_history(r.info.run_id, "rel_l2")]
        # What the run guarantees: its error against the exact solution at every step (the
        # step losses of 32² nodes for 8,361 parameters are round-off of an interpolation).
        assert len(losses) == n and all(np.isfinite(losses))
        assert len(err) == n + 1 and max(err) < 1e-5
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


def test_sweep_against_a_remote_mlflow_server(tmp_path, warm_cache, mlflow_server):
    url, artifact_dir = mlflow_server.url, mlflow_server.artifacts
    run_sweep(tmp_path, url, warm_cache, "dt=0.02,0.04")
    jobs = _check_sweep(url)
    # The artifacts went over HTTP into the server's own artifact store.
    for r in jobs:
        (found,) = artifact_dir.rglob(f"{r.info.run_id}/artifacts/params/theta.eqx")
        assert found.stat().st_size > 0
    assert not (tmp_path / "mlruns").exists()
