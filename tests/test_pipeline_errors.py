"""Bad configs stop before any compute, with one line naming the key, and leave
no run behind in MLflow. Every key's check is in test_config.py; these run the
script for real on a few of them."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _sweep(tmp_path, *overrides):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "TENG_EQ_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "pipeline" / "sweep.py"), f"tracking_uri={uri}", *overrides],
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
