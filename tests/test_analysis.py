"""pipeline/analyze.py and teng_eq.analysis.compare on a synthetic MLflow store (no TENG compute).

The store holds one sweep whose jobs have err = 0.3 Δt (Euler, slope 1) and
err = 5 Δt² (Heun, slope 2), runtime 0.1/Δt and 0.12/Δt, one Heun job of
another equation in another experiment, a FAILED job, an older sweep's job and
a job from before run_kind tags existed.
"""

import time

import mlflow
import numpy as np
import pandas as pd
import pytest
from helpers.configs import ROOT, compose_conf
from helpers.processes import run_script
from mlflow.entities import Metric, Param

from teng_eq.analysis import compare as analysis
from teng_eq.analysis import report
from teng_eq.tracking import SelectionError, load_runs, metric_curves

T_FINAL = 0.04
LAW = {"teng_euler": (0.3, 1), "teng_heun": (5.0, 2)}
COST = {"teng_euler": 0.1, "teng_heun": 0.12}
NU = {"heat": 0.1, "burgers": 0.001}


def _params(method, equation, dt, exp):
    return {
        "dt": str(dt), "t_final": str(T_FINAL), "iters": "7", "iters_later": "5",
        "subsample_first": "512", "subsample": "384", "solver": "cholesky", "damping": "1e-07",
        "grid": "64", "eval_grid": "256", "seed": "0", "network.width": "40",
        "equation.name": equation, "equation.nu": str(NU[equation]),
        "equation.lengths": "[6.283185307179586, 6.283185307179586]",
        "method.name": method, "method.integrator": method.split("_")[1],
        "tracking_uri": "sqlite:///x.db", "experiment_name": exp, "cache_dir": "None",
        "progress": "False", "method": method, "equation": equation,
    }


def _job(client, exp_id, exp, method, equation, dt, *, parent=None, kind="job", err=None,
         status="FINISHED", runtime=None):
    tags = {"method": method, "equation": equation, "config_hash": "h", "git_commit": "c"}
    if kind is not None:
        tags["run_kind"] = kind
    if parent is not None:
        tags["mlflow.parentRunId"] = parent
        tags["hydra_overrides"] = f"method={method} dt={dt}"
    run = client.create_run(exp_id, tags=tags, run_name=f"{method}-{equation}-dt{dt}")
    c, p = LAW[method]
    err = c * dt**p if err is None else err
    runtime = COST[method] / dt if runtime is None else runtime
    n = round(T_FINAL / dt)
    now = int(time.time() * 1000)
    # rel_l2 grows linearly to 2·err at t_final: a known curve to read back.
    curve = [Metric("rel_l2", 2 * err * k / n + 1e-7, now, k) for k in range(n + 1)]
    scalars = [Metric(k, v, now, 0) for k, v in
               [("global_rel_l2", err), ("runtime_s", runtime), ("compile_s", 1.0)]]
    client.log_batch(run.info.run_id, metrics=curve + scalars,
                     params=[Param(k, v) for k, v in _params(method, equation, dt, exp).items()])
    client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``(uri, tmp, ids)``: ids of the sweep's FINISHED jobs, its parent, and the rest."""
    tmp = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    heat = client.create_experiment("heat", artifact_location=(tmp / "mlruns" / "heat").as_uri())
    burgers = client.create_experiment("burgers",
                                       artifact_location=(tmp / "mlruns" / "burgers").as_uri())
    old = client.create_run(heat, tags={"run_kind": "sweep", "sweep_overrides": "dt=0.01"})
    foreign = _job(client, heat, "heat", "teng_euler", "heat", 0.01, parent=old.info.run_id,
                   err=0.5, runtime=0.01)
    legacy = _job(client, heat, "heat", "teng_heun", "heat", 0.01, kind=None, err=1e-9,
                  runtime=1e-3)
    client.set_terminated(old.info.run_id)
    time.sleep(0.01)  # the sweep below starts strictly later: it is the latest
    parent = client.create_run(heat, tags={"run_kind": "sweep",
                                           "sweep_overrides": "method=teng_euler,teng_heun dt=…"})
    pid = parent.info.run_id
    jobs = [_job(client, heat, "heat", m, "heat", dt, parent=pid)
            for m in LAW for dt in (0.005, 0.01, 0.02)]
    jobs += [_job(client, burgers, "burgers", "teng_heun", "burgers", dt, parent=pid)
             for dt in (0.005, 0.01)]
    failed = _job(client, heat, "heat", "teng_heun", "heat", 0.0025, parent=pid, status="FAILED")
    client.set_terminated(pid)
    return uri, tmp, {"jobs": jobs, "parent": pid, "failed": failed, "foreign": foreign,
                      "legacy": legacy}


def _analyze(tmp, uri, *overrides):
    return run_script("analyze.py", f"tracking_uri={uri}", *overrides, cwd=tmp, timeout=120)


def _analyze_here(cfg):
    """What pipeline/analyze.py runs, in this process."""
    return report.analyze(cfg, ROOT)


def _compose(*overrides):
    return compose_conf(overrides, config_name="analyze")


# --- the maths on hand-made arrays ---------------------------------------------------------


def test_pareto_front_by_hand():
    runtime = [1.0, 2.0, 3.0, 2.0, 1.0, 5.0, np.nan, 0.5]
    error = [5.0, 2.0, 1.0, 3.0, 5.0, 0.5, 1e-9, np.inf]
    # (1,5) twice: equal, neither dominates; (2,3) by (2,2); non-finite points never.
    expected = [True, True, True, False, True, True, False, False]
    assert analysis.pareto_front(runtime, error).tolist() == expected


def test_pareto_front_matches_brute_force_on_random_points():
    rng = np.random.default_rng(1)
    r, e = rng.integers(0, 6, 60).astype(float), rng.integers(0, 6, 60).astype(float)
    brute = [not any(r[j] <= r[i] and e[j] <= e[i] and (r[j] < r[i] or e[j] < e[i])
                     for j in range(60)) for i in range(60)]
    assert analysis.pareto_front(r, e).tolist() == brute


def test_fit_slope_recovers_power_laws():
    dt = np.array([0.0016, 0.0032, 0.005, 0.01, 0.02])
    assert analysis.fit_power_law(dt, 3e-2 * dt).slope == pytest.approx(1.0, abs=1e-12)
    law = analysis.fit_power_law(dt, 7.0 * dt**2)
    assert law.slope == pytest.approx(2.0, abs=1e-12) and law.prefactor == pytest.approx(7.0)
    # Least squares on logs: noise symmetric in log space leaves the slope.
    assert analysis.fit_power_law(dt, dt**4 * np.exp([0.1, -0.1, 0.1, -0.1, 0.0])).slope == pytest.approx(
        4.0, abs=0.1)
    assert np.isnan(analysis.fit_power_law([0.01, 0.01], [1e-3, 2e-3]).slope)
    assert analysis.fit_power_law([0.01, 0.02, 0.0], [1e-4, 4e-4, 0.0]).slope == pytest.approx(2.0)


def test_varied_axes_skip_bookkeeping_and_implied_params():
    method, dt, seed = (a.ravel() for a in np.meshgrid(["e", "h"], [0.01, 0.02], [0, 1]))
    df = pd.DataFrame({
        "run_id": list("abcdefgh"), "method": method, "method.name": method, "equation": "heat",
        "equation.nu": 0.1, "dt": dt, "seed": seed, "iters": 3, "tracking_uri": list("stuvwxyz"),
        "global_rel_l2": np.arange(8.0),
    })
    assert analysis.varied_axes(df) == ["method", "dt", "seed"]
    # A param that moves with the time step alone says nothing new: not an axis.
    df["t_final"] = df["dt"] * 10
    assert analysis.varied_axes(df) == ["method", "dt", "seed"]
    df["equation"] = np.where(df["seed"] == 0, "heat", "burgers")
    assert analysis.varied_axes(df) == ["method", "equation", "dt"]


def test_summary_table_takes_medians_over_seeds():
    df = pd.DataFrame({
        "run_id": list("abcde"), "method": ["h"] * 5, "equation": ["heat"] * 5,
        "iters": [3, 3, 3, 5, 5], "seed": [0, 1, 2, 0, 1],
        "global_rel_l2": [1e-5, 3e-5, 2e-5, 4e-6, 6e-6], "runtime_s": [1, 2, 9, 4, 6],
    })
    table = analysis.summary_table(df)
    assert table[["iters", "n_runs"]].values.tolist() == [[3, 3], [5, 2]]
    assert table["global_rel_l2"].tolist() == pytest.approx([2e-5, 5e-6])
    assert table["runtime_s"].tolist() == pytest.approx([2, 5])
    assert "| h | heat | 3 | 2.000e-05 | 2 | 3 |" in analysis.table_markdown(table)


# --- selection ---------------------------------------------------------------------------


def test_load_runs_selects_the_sweep_across_experiments(store):
    uri, _, ids = store
    runs = load_runs(uri, sweep="latest")
    assert set(runs["run_id"]) == set(ids["jobs"]) | {ids["failed"]}
    assert runs["experiment_id"].nunique() == 2  # burgers and heat
    jobs, n_failed = analysis.select_jobs(runs)
    assert set(jobs["run_id"]) == set(ids["jobs"]) and n_failed == 1
    heat = load_runs(uri, experiments=["heat"])
    assert {ids["parent"], ids["foreign"], ids["legacy"]} <= set(heat["run_id"])
    jobs, _ = analysis.select_jobs(heat)
    assert ids["parent"] not in set(jobs["run_id"]) and ids["legacy"] in set(jobs["run_id"])
    only = load_runs(uri, sweep=ids["parent"], filter_string="params.method = 'teng_euler'")
    assert len(only) == 3


@pytest.mark.parametrize("kwargs, needle", [
    ({"experiments": ["nope"]}, "experiment='nope'"),
    ({"sweep": "0123abcd"}, "sweep='0123abcd'"),
    ({"filter_string": "params.dt ~~ 3"}, "filter='params.dt ~~ 3'"),
])
def test_load_runs_names_the_bad_key(store, kwargs, needle):
    with pytest.raises(SelectionError, match=needle):
        load_runs(store[0], **kwargs)


def test_a_job_is_not_a_sweep(store):
    uri, _, ids = store
    with pytest.raises(SelectionError, match="not a sweep parent run"):
        load_runs(uri, sweep=ids["jobs"][0])


def test_metric_curves_read_back_in_step_order(store):
    uri, _, ids = store
    curves = metric_curves(uri, ids["jobs"][:1], "rel_l2")  # Euler, dt = 0.005: 8 steps
    steps, values = curves[ids["jobs"][0]]
    assert steps == list(range(9))
    assert values == pytest.approx([2 * 0.3 * 0.005 * k / 8 + 1e-7 for k in range(9)])


# --- the script end to end ------------------------------------------------------------------


def test_analyze_writes_report_that_matches_mlflow(store):
    uri, tmp, ids = store
    out = tmp / "report"
    proc = _analyze(tmp, uri, f"out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "excluded 1 job run(s) not FINISHED" in proc.stdout
    assert "| teng_heun | burgers | 0.005 |" in proc.stdout

    for name in ("error_vs_runtime.png", "error_vs_dt.png", "error_vs_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / name).stat().st_size > 10_000
    assert (out / "table.md").read_text().startswith("| method | equation | dt |")

    # The table against each run's own scalars, read back from MLflow.
    client = mlflow.tracking.MlflowClient(uri)
    truth = {}
    for run_id in ids["jobs"]:
        r = client.get_run(run_id)
        key = (r.data.params["method"], r.data.params["equation"], float(r.data.params["dt"]))
        truth[key] = (r.data.metrics["global_rel_l2"], r.data.metrics["runtime_s"])
    table = pd.read_csv(out / "table.csv")
    assert list(table.columns) == ["method", "equation", "dt", "global_rel_l2", "runtime_s", "n_runs"]
    got = {(m, e, dt): (err, rt) for m, e, dt, err, rt, _ in table.itertuples(index=False)}
    assert got == truth and (table["n_runs"] == 1).all()

    # Pareto flags against brute force on the same scalars, within each equation.
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["run_id"]) == set(ids["jobs"])  # FAILED, foreign, legacy all out
    for _, g in runs.groupby("equation"):
        pts = [truth[(m, e, dt)] for m, e, dt in zip(g["method"], g["equation"], g["dt"])]
        brute = [not any(q[1] <= p[1] and q[0] <= p[0] and q != p for q in pts) for p in pts]
        assert g["pareto"].tolist() == brute
    # Heat: Euler at 0.02 is the fastest (5 s); each other Euler job loses to a faster, better Heun.
    front = runs[runs["pareto"] & (runs["equation"] == "heat")]
    assert sorted(zip(front["method"], front["dt"])) == [
        ("teng_euler", 0.02), ("teng_heun", 0.005), ("teng_heun", 0.01), ("teng_heun", 0.02)]

    slopes = pd.read_csv(out / "slopes.csv").set_index(["equation", "group"])["slope"]
    assert slopes[("heat", "teng_euler")] == pytest.approx(1.0, abs=1e-9)
    assert slopes[("heat", "teng_heun")] == pytest.approx(2.0, abs=1e-9)
    assert slopes[("burgers", "teng_heun")] == pytest.approx(2.0, abs=1e-9)

    # Logged as an analysis run in the sweep parent's experiment, with the same files.
    heat = client.get_experiment_by_name("heat").experiment_id
    (run,) = client.search_runs([heat], "tags.run_kind = 'analysis'")
    assert run.data.tags["analysis_of"] == ids["parent"] and run.info.status == "FINISHED"
    logged = {a.path for a in client.list_artifacts(run.info.run_id, "reports")}
    assert logged == {f"reports/{p.name}" for p in out.iterdir()}

    # A later analysis of the whole experiment counts jobs only: not the sweep, not itself.
    _analyze_here(_compose(f"tracking_uri={uri}", "experiments=[heat]", "mlflow=false",
                               f"out={tmp / 'again'}"))
    again = pd.read_csv(tmp / "again" / "runs.csv")
    assert set(again["run_id"]) == set(ids["jobs"][:6]) | {ids["foreign"], ids["legacy"]}
    assert len(client.search_runs([heat], "tags.run_kind = 'analysis'")) == 1


@pytest.mark.parametrize("override, message", [
    ("sweep=feedbeef", "sweep='feedbeef': no such run in {uri}"),
    ("experiments=[heat,nope]", "experiment='nope': no such experiment (known: Default, burgers, heat)"),
    ("filter='params.dt ~~ 3'", "filter='params.dt ~~ 3': "),
    ("filter=\"params.method = 'tdvp'\"", "no FINISHED job runs in selection filter-"),
])
def test_analyze_bad_selection_one_line_nothing_logged(store, override, message):
    uri, tmp, _ = store
    client = mlflow.tracking.MlflowClient(uri)
    before = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    with pytest.raises(SystemExit) as exc:
        _analyze_here(_compose(f"tracking_uri={uri}", override, f"out={tmp / 'bad'}"))
    assert str(exc.value.code).startswith("error: " + message.format(uri=uri))
    assert "\n" not in str(exc.value.code)
    assert not (tmp / "bad").exists()
    after = len(client.search_runs([e.experiment_id for e in client.search_experiments()]))
    assert after == before


def test_analyze_refuses_a_store_that_does_not_exist(tmp_path):
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(SystemExit, match=r"tracking_uri='sqlite:///.*none.db': no such MLflow store"):
        _analyze_here(_compose(f"tracking_uri={uri}"))
    assert not (tmp_path / "none.db").exists()


def test_report_groups_by_the_swept_axes(tmp_path):
    """``-m iters=3,5,7 subsample=256,512`` with two seeds: Δt fixed, so no slope."""
    iters, subsample, seed = (a.ravel() for a in np.meshgrid([3, 5, 7], [256, 512], [0, 1]))
    err = 1e-3 / iters * (1 + 0.1 * seed) * (512 / subsample)
    df = pd.DataFrame({
        "run_id": [f"r{i}" for i in range(12)], "experiment_id": "1", "method": "teng_heun",
        "equation": "heat", "dt": 0.005, "iters": iters, "subsample": subsample, "seed": seed,
        "tracking_uri": "x", "global_rel_l2": err, "runtime_s": iters * subsample / 100.0,
        "compile_s": 1.0,
    })
    df["pareto"] = analysis.pareto_by_equation(df)
    curves = {r: ([0, 1, 2], [1e-7, e / 2, e]) for r, e in zip(df["run_id"], err)}
    paths = report.write_report(df, curves, tmp_path)
    assert {p.name for p in paths} == {"error_vs_runtime.png", "error_vs_dt.png",
                                       "error_vs_time.png", "table.md", "table.csv", "runs.csv",
                                       "slopes.csv"}
    table = pd.read_csv(tmp_path / "table.csv")
    assert list(table.columns[:4]) == ["method", "equation", "iters", "subsample"]
    assert table[["iters", "subsample"]].values.tolist() == [
        [3, 256], [3, 512], [5, 256], [5, 512], [7, 256], [7, 512]]
    assert (table["n_runs"] == 2).all()
    expected = 1e-3 / table["iters"] * 1.05 * (512 / table["subsample"])  # median of 2 seeds
    assert table["global_rel_l2"].tolist() == pytest.approx(expected.tolist())
    slopes = pd.read_csv(tmp_path / "slopes.csv")
    assert slopes["group"].tolist()[:2] == ["teng_heun iters=3 subsample=256",
                                            "teng_heun iters=3 subsample=512"]
    assert slopes["slope"].isna().all() and (slopes["n_runs"] == 2).all()


def test_method_by_equation_is_the_papers_table_layout():
    table = pd.DataFrame({
        "method": ["teng_euler", "teng_heun", "teng_heun"], "equation": ["heat", "heat", "burgers"],
        "global_rel_l2": [3.0e-4, 1.5e-6, 2.25e-6], "runtime_s": [10.0, 20.0, 30.5], "n_runs": [1, 1, 2],
    })
    wide = analysis.method_by_equation(table)
    assert list(wide.columns) == ["method", "heat", "burgers"]
    assert wide.set_index("method").loc["teng_heun"].tolist() == ["1.500e-06 (20 s)", "2.250e-06 (30.5 s)"]
    assert wide.set_index("method").loc["teng_euler", "burgers"] == "–"


# --- Table 1 across methods, the in-step loss overlay ------------------------------------------


def test_method_by_equation_follows_the_papers_order():
    table = pd.DataFrame({
        "method": ["pinn_bfgs", "obti_adam", "teng_heun", "mine", "teng_heun"],
        "equation": ["burgers", "heat", "allen_cahn", "heat", "heat"],
        "global_rel_l2": [1e-1, 1e-2, 1e-5, 1e-3, 1e-6], "runtime_s": [1.0, 2.0, 3.0, 4.0, 5.0],
        "n_runs": [1] * 5,
    })
    wide = analysis.method_by_equation(table, methods=["teng_heun", "obti_adam", "pinn_bfgs"],
                                       equations=["heat", "allen_cahn", "burgers"])
    assert list(wide.columns) == ["method", "heat", "allen_cahn", "burgers"]
    assert list(wide["method"]) == ["teng_heun", "obti_adam", "pinn_bfgs", "mine"]  # unnamed last
    assert wide.iloc[0].tolist() == ["teng_heun", "1.000e-06 (5 s)", "1.000e-05 (3 s)", "–"]


def _loss_table(steps, dt, stages, iters, floor):
    """A run's losses.csv: loss halving per iteration from 1e-6 · step down to ``floor``."""
    rows = [(n, n * dt, s, i, max(1e-6 * n * 0.5**i, floor), np.nan)
            for n in range(1, steps + 1) for s in range(stages) for i in range(iters + 1)]
    return np.asarray(rows, dtype=float)


def test_step_near_and_in_step_losses():
    table = _loss_table(8, 0.005, 2, 3, 0.0)
    assert analysis.step_near(table, 0.0101) == 2 and analysis.step_near(table, 9.0) == 8
    stages = analysis.in_step_losses(table, 3)
    assert sorted(stages) == [0, 1]
    iterations, losses = stages[1]
    assert iterations.tolist() == [0, 1, 2, 3] and losses.tolist() == pytest.approx(
        [3e-6 * 0.5**i for i in range(4)])


def test_analyze_overlays_in_step_losses_from_the_artifacts(tmp_path):
    """Runs of TENG-Euler and OBTI-Adam with a ``tables/losses.csv`` artifact and a PINN
    (no time in its table): the overlay shows the two sequential ones."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    exp = client.create_experiment("heat", artifact_location=(tmp_path / "mlruns").as_uri())
    parent = client.create_run(exp, tags={"run_kind": "sweep"}).info.run_id
    for method, stages, iters, floor in [("teng_euler", 1, 7, 1e-14), ("obti_adam", 1, 300, 1e-8),
                                         ("pinn_bfgs", 1, 50, 1e-5)]:
        run_id = client.create_run(exp, tags={"run_kind": "job", "mlflow.parentRunId": parent}).info.run_id
        params = {**_params("teng_euler", "heat", 0.005, "heat"), "method": method, "method.name": method}
        client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()],
                         metrics=[Metric("step_loss", floor, 0, k) for k in range(1, 9)]
                         + [Metric("global_rel_l2", floor, 0, 0), Metric("runtime_s", 1.0, 0, 0)])
        table = _loss_table(8, 0.005, stages, iters, floor)
        if method == "pinn_bfgs":
            table[:, 1] = np.nan
        np.savetxt(tmp_path / "losses.csv", table, delimiter=",", header="step,t,stage,iteration,loss,lsq",
                   comments="")
        client.log_artifact(run_id, str(tmp_path / "losses.csv"), "tables")
        client.set_terminated(run_id)
    client.set_terminated(parent)
    module = report
    df = analysis.tidy(analysis.select_jobs(load_runs(uri, sweep="latest"))[0])
    losses = module._run_losses(uri, df, ["teng_euler", "obti_adam", "pinn_bfgs"])
    assert sorted(df.set_index("run_id").loc[list(losses), "method"]) == ["obti_adam", "teng_euler"]
    table, (steps, values) = losses[df.loc[df["method"] == "obti_adam", "run_id"].item()]
    assert table.shape == (8 * 301, 6) and steps == list(range(1, 9)) and values == [1e-8] * 8
    df["pareto"] = analysis.pareto_by_equation(df)
    curves = {r: ([0, 1], [1e-7, 1e-6]) for r in df["run_id"]}
    paths = module.write_report(df, curves, tmp_path / "out", losses=losses, loss_time=0.01)
    assert (tmp_path / "out" / "loss_overlay.png") in paths
    assert (tmp_path / "out" / "loss_overlay.png").stat().st_size > 10_000
    panels = module._overlay_panels(df, losses, ["method"], 0.01)
    t, in_step, final = panels["heat"]
    assert sorted(final) == sorted(in_step)
    assert t == pytest.approx(0.01) and sorted(in_step) == ["obti_adam", "teng_euler"]
    assert in_step["obti_adam"][0][1][-1] == pytest.approx(1e-8)  # floor reached inside step 2
