"""pipeline/sweep.py end to end: a multirun is one parent MLflow run with a child
per job, each child holding every metric and artifact; analyze.py reads it back."""

import math

import jax
import matplotlib.image
import numpy as np
import pandas as pd
import pytest
from helpers.mlflow_store import all_runs, history, job_runs
from helpers.processes import run_script, run_sweep
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from teng_eq.analysis.compare import pareto_front
from teng_eq.cache.files import compilation_folder
from teng_eq.domains.quadrature import grid_points
from teng_eq.run.config import RunConfig
from teng_eq.run.metrics import squared_norms
from teng_eq.run.simulation import load_network

ARTIFACTS = {
    "config/config.yaml", "config/.hydra/config.yaml", "config/.hydra/hydra.yaml",
    "config/.hydra/overrides.yaml", "plots/error.png", "plots/loss_iterations.png",
    "plots/density.png", "tables/losses.csv", "params/theta.eqx",
}

pytestmark = pytest.mark.e2e  # pipeline/sweep.py in a subprocess


def _artifacts(client, run_id, path=None):
    out = set()
    for a in client.list_artifacts(run_id, path):
        out |= _artifacts(client, run_id, a.path) if a.is_dir else {a.path}
    return out


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory, warm_cache):
    tmp = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    proc = run_sweep(tmp, uri, warm_cache, "dt=0.02,0.04", "iters=3,7")
    return tmp, uri, proc.stdout


def test_multirun_is_one_parent_with_a_child_per_job(sweep_store):
    _, uri, stdout = sweep_store
    runs = all_runs(uri)
    (parent,) = [r for r in runs if r.data.tags.get("run_kind") == "sweep"]
    jobs = [r for r in runs if r.data.tags.get("run_kind") == "job"]
    assert len(runs) == 5 and len(jobs) == 4
    assert parent.info.status == "FINISHED" and parent.data.metrics["n_jobs"] == 4
    assert parent.data.tags["sweep_overrides"].endswith("dt=0.02,0.04 iters=3,7")
    assert parent.data.tags["sweep_dir"].endswith("multirun")
    assert {r.data.tags["job_num"] for r in jobs} == {"0", "1", "2", "3"}
    assert {(r.data.params["dt"], r.data.params["iters"]) for r in jobs} == {
        ("0.02", "3"), ("0.02", "7"), ("0.04", "3"), ("0.04", "7")}
    assert len({r.data.tags["config_hash"] for r in jobs}) == 4
    for r in jobs:
        t = r.data.tags
        assert r.info.status == "FINISHED"
        assert t["mlflow.parentRunId"] == parent.info.run_id
        assert f"dt={r.data.params['dt']}" in t["hydra_overrides"].split()
        assert f"iters={r.data.params['iters']}" in t["hydra_overrides"].split()
        assert len(t["git_commit"]) == 40 and t["git_dirty"] in ("True", "False")
        assert t["jax_version"] == jax.__version__ and t["device"].startswith("cpu")
        assert t["theta0_cached"] == "True"  # warm_cache's θ₀ is the one a job would fit
    # Its last line: where MLflow's UI shows its runs table (the experiment, not the GenAI overview).
    exp = MlflowClient(uri).get_experiment(parent.info.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert stdout.strip().splitlines()[-1] == (f"runs: mlflow ui --backend-store-uri {uri}, then http://127.0.0.1:5000/"
                                               f"#/experiments/{exp.experiment_id}?workflowType=machine_learning")


def test_jobs_keep_their_compiled_programs_in_the_run_cache(sweep_store, warm_cache):
    """The jobs turned on jax's persistent compilation cache in the cache folder they
    were given, under the machine's own subfolder (teng_eq.cache.files.compilation_folder)."""
    folder = compilation_folder(warm_cache)
    assert folder.parent == warm_cache / "xla"
    assert any(folder.glob("*-cache")), sorted(p.name for p in (warm_cache / "xla").rglob("*"))


def test_every_job_holds_its_curves_table_and_parameters(sweep_store, cache_dir, tmp_path):
    _, uri, _ = sweep_store
    client = MlflowClient(uri)
    for r in job_runs(uri):
        rid, p, m = r.info.run_id, r.data.params, r.data.metrics
        dt, iters = float(p["dt"]), int(p["iters"])
        n = round(0.08 / dt)
        err = history(client, rid, "rel_l2")
        loss = history(client, rid, "step_loss")
        wall = history(client, rid, "wall_time_s")
        assert [x.step for x in err] == list(range(n + 1))
        assert [x.step for x in loss] == [x.step for x in wall] == list(range(1, n + 1))
        assert all(a.value < b.value for a, b in zip(wall, wall[1:]))
        # What the run guarantees: its error against the exact solution at every step (the
        # step losses of 32² nodes for 8,361 parameters are round-off of an interpolation).
        assert all(x.value < 1e-5 for x in err) and all(np.isfinite(x.value) for x in loss)
        assert m["final_rel_l2"] == err[-1].value and m["global_rel_l2"] < 1e-5
        assert m["runtime_s"] > 0 and m["compile_s"] > 0 and 0 < m["tracking_s"] < m["job_s"]
        assert _artifacts(client, rid) == ARTIFACTS

        # Per-iteration table: Heun = two stages of at most `iters` and `iters_later`
        # iterations, each row the loss after k iterations (k = 0 … iterations run).
        table = pd.read_csv(client.download_artifacts(rid, "tables/losses.csv", str(tmp_path)))
        assert list(table.columns) == ["step", "t", "stage", "iteration", "loss", "lsq"]
        used = [int(x.value) for x in history(client, rid, "iterations")]
        assert all(4 <= k <= iters + int(p["iters_later"]) for k in used)
        assert len(table) == sum(used) + 2 * n
        # The fixed policy returns a stage's last iterate, the adaptive one its best.
        final = table[table["stage"] == 1].groupby("step")["loss"]
        final = final.last() if p["stopping.policy"] == "fixed" else final.min()
        np.testing.assert_allclose(final, [x.value for x in loss], rtol=1e-12, atol=0)
        np.testing.assert_allclose(table.groupby("step")["t"].first(), np.arange(1, n + 1) * dt,
                                   rtol=1e-9, atol=0)
        assert [x.step for x in history(client, rid, "holdout_loss")] == list(range(1, n + 1))
        # (32² nodes are few for 8,361 parameters: the held-out loss may read ~100× the
        # training loss here, a warning; it is ~1× on the default 64² grid.)
        assert r.data.tags["holdout_flag"] in ("ok", "warn") and m["holdout_ratio_max"] < 1e4
        assert m["fallbacks_total"] == m["zero_steps_total"] == 0

        # θ read back from params/theta.eqx reproduces the logged final error.
        cfg = RunConfig.from_mapping(OmegaConf.to_container(OmegaConf.load(
            client.download_artifacts(rid, "config/config.yaml", str(tmp_path))), resolve=True))
        net = load_network(cfg, client.download_artifacts(rid, "params/theta.eqx", str(tmp_path)))
        ref = cfg.equation.reference(np.arange(n + 1) * dt, cache_dir=cache_dir)
        u = jax.vmap(net)(grid_points(cfg.eval_grid, cfg.equation.lengths))
        err_sq, ref_sq = squared_norms(u, ref.values(n, cfg.eval_grid))
        assert math.isclose(math.sqrt(err_sq / ref_sq), m["final_rel_l2"], rel_tol=1e-8)


def test_analyze_tabulates_the_sweep_from_its_own_mlflow_data(sweep_store):
    tmp, uri, _ = sweep_store
    out = tmp / "report"
    proc = run_script("analyze.py", f"tracking_uri={uri}", f"out={out}", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("error_vs_runtime.png", "error_vs_dt.png", "error_vs_time.png"):
        image = matplotlib.image.imread(out / name)  # a PNG that decodes, at least 300 px, not blank
        assert min(image.shape[:2]) >= 300 and image[..., :3].std() > 0.05, name
    assert (out / "table.md").stat().st_size > 0  # the same table as table.csv, checked below
    jobs = {(float(r.data.params["dt"]), int(r.data.params["iters"])): r for r in job_runs(uri)}
    table = pd.read_csv(out / "table.csv")
    assert len(table) == 4
    for _, row in table.iterrows():
        m = jobs[(row["dt"], row["iters"])].data.metrics
        assert row["global_rel_l2"] == pytest.approx(m["global_rel_l2"], rel=1e-12)
        assert row["runtime_s"] == pytest.approx(m["runtime_s"], rel=1e-12)
    runs = pd.read_csv(out / "runs.csv")
    runtime, error = (np.array([jobs[(r.dt, r.iters)].data.metrics[k] for r in runs.itertuples()])
                      for k in ("runtime_s", "global_rel_l2"))
    brute = [not any(runtime[j] <= runtime[i] and error[j] <= error[i]
                     and (runtime[j] < runtime[i] or error[j] < error[i]) for j in range(len(runs)))
             for i in range(len(runs))]
    assert list(runs["pareto"]) == brute == list(pareto_front(runtime, error))
    (analysis_run,) = [r for r in all_runs(uri) if r.data.tags.get("run_kind") == "analysis"]
    assert analysis_run.info.status == "FINISHED"


def test_single_job_is_a_plain_run(tmp_path, warm_cache):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = run_sweep(tmp_path, uri, warm_cache, "dt=0.04", multirun=False)
    (r,) = all_runs(uri)
    assert proc.stdout.strip().splitlines()[-1].startswith(f"run: mlflow ui --backend-store-uri {uri}, then ")
    assert r.info.status == "FINISHED" and r.data.tags["run_kind"] == "job"
    assert "mlflow.parentRunId" not in r.data.tags and "job_num" not in r.data.tags
    assert r.data.tags["hydra_overrides"].split()[0] == "equation.initial_condition=sines2d"
