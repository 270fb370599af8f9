"""Bad configs stop before any compute, with one line naming the key, and leave
no run behind in MLflow. Every key's check is in test_config.py; these run the
script for real on a few of them."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _sweep(tmp_path, *overrides, flags=()):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "TENG_EQ_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "pipeline" / "sweep.py"), *flags, f"tracking_uri={uri}",
         f"hydra.sweep.dir={tmp_path / 'multirun'}", *overrides],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env,
    )
    return proc, uri


def _runs(uri):
    import mlflow

    client = mlflow.tracking.MlflowClient(uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(exps) if exps else []


@pytest.mark.parametrize(
    "override, needle",
    [
        ("equation=wave", "equation='wave'"),
        ("method=teng_rk45", "method='teng_rk45'"),
        ("dt=-0.005", "dt=-0.005"),
        ("subsample=10000", "subsample=10000"),
    ],
)
def test_bad_config_one_line_no_run(tmp_path, override, needle):
    proc, uri = _sweep(tmp_path, override)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert lines, proc.stderr
    assert lines[-1].startswith("error: invalid config:") and needle in lines[-1], proc.stderr
    assert not (tmp_path / "cache").exists(), "compute started before validation"
    if (tmp_path / "mlflow.db").exists():
        assert all(r.info.status != "RUNNING" for r in _runs(uri))
        assert _runs(uri) == []


def test_sweep_stopped_by_a_bad_job_leaves_its_parent_failed(tmp_path):
    proc, uri = _sweep(tmp_path, "dt=-1,0.02", flags=["-m"])
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].startswith("error: invalid config: dt=-1")
    (parent,) = _runs(uri)  # the second job never started
    assert parent.data.tags["run_kind"] == "sweep" and parent.info.status == "FAILED"
    assert parent.data.tags["failure_reason"] == "the sweep stopped before all its jobs returned"
