"""pipeline/sweep.py end to end: a 2-job multirun into a fresh MLflow store."""

import os
import subprocess
import sys

import mlflow
import numpy as np

from conftest import ROOT


def test_multirun_logs_one_finished_run_per_job(tmp_path, cache_dir):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cmd = [
        sys.executable, str(ROOT / "pipeline" / "sweep.py"), "-m", "dt=0.02,0.04",
        "equation.initial_condition=sines2d", "grid=32", "eval_grid=64", "t_final=0.08",
        f"tracking_uri={uri}", f"cache_dir={cache_dir}", "progress=false",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
    ]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]

    client = mlflow.tracking.MlflowClient(uri)
    exp = client.get_experiment_by_name("heat")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.data.params["dt"] for r in runs) == ["0.02", "0.04"]
    for r in runs:
        assert r.info.status == "FINISHED"
        n_steps = round(0.08 / float(r.data.params["dt"]))
        assert r.data.params["method"] == "teng_heun" and r.data.params["equation.nu"] == "0.1"
        err = client.get_metric_history(r.info.run_id, "rel_l2")
        assert [m.step for m in sorted(err, key=lambda m: m.step)] == list(range(n_steps + 1))
        losses = [m.value for m in client.get_metric_history(r.info.run_id, "step_loss")]
        assert len(losses) == n_steps and np.median(losses) < 1e-11
        wall = sorted(client.get_metric_history(r.info.run_id, "wall_time_s"), key=lambda m: m.step)
        assert all(a.value < b.value for a, b in zip(wall, wall[1:]))
        m = r.data.metrics
        assert m["global_rel_l2"] < 1e-4 and m["runtime_s"] > 0 and m["compile_s"] > 0
        names = {a.path for a in client.list_artifacts(r.info.run_id, "plots")}
        names |= {a.path for a in client.list_artifacts(r.info.run_id, "config")}
        assert names == {"plots/error.png", "config/config.yaml"}
