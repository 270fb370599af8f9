"""The baselines through pipeline/sweep.py and analyze.py: the Table-1 presets compose
one valid job per cell, a global-in-time method logs its blocks and its error curve
like any run, and PINN-ENGD on another equation stops with one line."""

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers.configs import CONF, TINY_SWEEP_NO_GRID, make_config
from helpers.mlflow_store import history, job_runs
from helpers.processes import job_env, run_script, run_sweep
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from teng_eq.domains.quadrature import grid_points
from teng_eq.run.config import RunConfig
from teng_eq.run.metrics import squared_norms
from teng_eq.run.simulation import load_network

METHODS = ["teng_euler", "teng_heun", "tdvp_rk4", "obti_adam", "obti_lbfgs", "pinn_bfgs", "pinn_engd"]
DT = {"heat": 0.005, "allen_cahn": 0.005, "burgers": 0.001}


@pytest.mark.parametrize("preset", ["table1_cpu", "table1"])
def test_table1_presets_compose_one_valid_job_per_cell(preset):
    cases = sorted(p.stem for p in (CONF / "table1_case").glob("*.yaml"))
    expected = {(eq, m) for eq in DT for m in METHODS if m != "pinn_engd" or eq == "heat"}
    assert len(cases) == len(expected) == 19
    seen = set()
    for case in cases:
        # The sweeper's own order: its params, then the command line.
        cfg = make_config(f"table1_case={case}", f"experiment={preset}")
        seen.add((cfg.equation.name, cfg.method.name))
        assert cfg.dt == DT[cfg.equation.name]
        assert cfg.t_final == (4.0 if preset == "table1" else 0.05)
        opts = cfg.method.options
        if preset == "table1":  # the paper's values of the methods' own keys
            paper = {"tdvp_rk4": {"subsample": 2560}, "obti_adam": {"iterations": 300},
                     "obti_lbfgs": {"iterations": 150}, "pinn_bfgs": {"iterations": 100_000},
                     "pinn_engd": {"iterations": 4000}}.get(cfg.method.name, {})
            assert all(getattr(opts, k) == v for k, v in paper.items()), (case, opts)
            assert getattr(opts, "grid", 512) == 512 and getattr(opts, "subsample_first", 1536) == 1536
    assert seen == expected
    # table1 is table1_cpu's sweep at the paper's size (a delta on it).
    sweeper = OmegaConf.load(CONF / "experiment" / "table1_cpu.yaml").hydra.sweeper.params
    assert dict(sweeper) == {"table1_case": "glob(*)"}
    assert OmegaConf.load(CONF / "experiment" / "table1.yaml").defaults[0] == "table1_cpu"


@pytest.mark.parametrize(("method", "equation", "why"), [
    ("pinn_engd", "allen_cahn", "runs only linear equations (the paper's heat equations)"),
    ("pinn_engd", "burgers", "runs only linear equations (the paper's heat equations)"),
    ("pinn_engd", "heat_disk", "needs a periodic domain (it has no boundary term)"),
    ("obti_adam", "heat_disk", "needs a periodic domain (it has no boundary term)"),
    ("tdvp_rk4", "heat_disk", "needs a periodic domain (it has no boundary term)"),
])
@pytest.mark.e2e
def test_a_method_on_an_equation_it_does_not_run_stops_in_one_line(tmp_path, method, equation, why):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = run_script("sweep.py", f"method={method}", f"equation={equation}", f"tracking_uri={uri}",
                      cwd=tmp_path, env=job_env(TENG_EQ_CACHE=str(tmp_path / "cache")))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"error: invalid config: equation='{equation}': method {method} {why}"
    assert not (tmp_path / "cache").exists()


@pytest.mark.e2e
def test_a_bad_key_in_a_preset_case_stops_the_sweep_before_any_run(tmp_path):
    """The preset's own sweep (hydra.sweeper.params, hydra.mode: MULTIRUN, no ``-m``)
    is expanded and every case validated before Hydra starts: one line, no store."""
    proc = run_script("sweep.py", "experiment=table1_cpu",
                      "hydra.sweeper.params={table1_case: 'heat-tdvp_rk4,heat-obti_adam'}",
                      "++method.subsample=0", f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                      cwd=tmp_path, env=job_env(TENG_EQ_CACHE=str(tmp_path / "cache")))
    assert proc.returncode != 0
    # Checked as TDVP's key (the first case), not against the default method the
    # command line alone composes to (teng_heun, whose subsample is the top-level one).
    assert proc.stderr.strip().splitlines() == [
        "error: invalid config: method.subsample=0: must be an integer in [1, 8361] (the parameter count)"]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "cache").exists()


@pytest.fixture(scope="module")
def pinn_table(tmp_path_factory, warm_cache):
    """Two cells of experiment=table1_cpu (PINN-BFGS, PINN-ENGD on heat) at tiny size (no
    ``grid``: a PINN does not read it). The PINN keys are forced (``++``): Hydra first
    composes the command line alone (without a case, so with the default method, which
    lacks them)."""
    tmp = tmp_path_factory.mktemp("table1")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    run_sweep(tmp, uri, warm_cache, "experiment=table1_cpu",
              "hydra.sweeper.params={table1_case: 'heat-pinn_bfgs,heat-pinn_engd'}",
              "++method.iterations=20", "++method.block=10", "++method.collocation=256",
              "++method.initial=16", tiny=TINY_SWEEP_NO_GRID)
    return tmp, uri


@pytest.mark.e2e
@pytest.mark.slow  # a sweep of both PINNs (~2.5 min on busy cores): out of the default suite, run by .ci/run
def test_a_pinn_job_logs_blocks_and_its_error_curve(pinn_table, cache_dir, tmp_path):
    _, uri = pinn_table
    client = MlflowClient(uri)
    jobs = job_runs(uri)
    assert sorted(r.data.params["method"] for r in jobs) == ["pinn_bfgs", "pinn_engd"]
    n = round(0.08 / 0.005)  # TINY_SWEEP's horizon, the case's Δt
    for r in jobs:
        rid, m = r.info.run_id, r.data.metrics
        assert r.info.status == "FINISHED"
        err = history(client, rid, "rel_l2")
        loss = history(client, rid, "step_loss")
        assert [x.step for x in err] == list(range(n + 1)) and [x.step for x in loss] == [1, 2]
        assert loss[1].value < loss[0].value and m["final_rel_l2"] == err[-1].value
        table = pd.read_csv(client.download_artifacts(rid, "tables/losses.csv", str(tmp_path)))
        assert len(table) == 2 * 11 and table["t"].isna().all()  # two blocks of 10 iterations
        np.testing.assert_allclose(table.groupby("step").tail(1)["loss"], [x.value for x in loss],
                                   rtol=1e-12, atol=0)

        # θ read back into the method's own network reproduces the final error.
        cfg = RunConfig.from_mapping(OmegaConf.to_container(OmegaConf.load(
            client.download_artifacts(rid, "config/config.yaml", str(tmp_path))), resolve=True))
        net = load_network(cfg, client.download_artifacts(rid, "params/theta.eqx", str(tmp_path)))
        points = grid_points(cfg.eval_grid, cfg.equation.lengths)
        u = jax.vmap(net)(jnp.concatenate([points, jnp.full((points.shape[0], 1), n * cfg.dt)], axis=1))
        ref = cfg.equation.reference(np.arange(n + 1) * cfg.dt, cache_dir=cache_dir)
        err, norm = squared_norms(u, ref.values(n, cfg.eval_grid))
        assert math.isclose(math.sqrt(err / norm), m["final_rel_l2"], rel_tol=1e-8)


@pytest.mark.e2e
@pytest.mark.slow  # a sweep of both PINNs (~2.5 min on busy cores): out of the default suite, run by .ci/run
def test_analyze_puts_the_pinns_in_table1_order(pinn_table):
    tmp, uri = pinn_table
    out = Path(tmp) / "report"
    proc = run_script("analyze.py", f"tracking_uri={uri}", f"out={out}", "mlflow=false", cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wide = (out / "table.md").read_text().split("method × equation")[1]
    assert wide.index("| pinn_engd |") < wide.index("| pinn_bfgs |")
    assert not (out / "loss_overlay.png").exists()  # no TENG or OBTI run to overlay
