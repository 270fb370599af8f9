"""Many writers on one store and one study (issue "beyond one machine";
docs/guides/server-and-cluster.md, "Many writers: PostgreSQL"): a real PostgreSQL
server (Debian's binaries, tests/helpers/postgres.py) and a real ``mlflow server`` on it,
artifacts served through it, both started and stopped by the fixtures.

* a sweep of 8 jobs in 4 joblib workers: 8 runs FINISHED, each with the metrics and
  artifacts of the same job run alone;
* 20 processes each logging 500 values at once: every value there, none twice;
* two frontier searches started at once on one PostgreSQL study: the study holds the
  trials both launched, numbered without gap or repeat, no point twice, both parents
  FINISHED.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path

import optuna
import pytest
from helpers.configs import TINY_SWEEP_NO_GRID
from helpers.fake_methods import TOY
from helpers.metric_writer import VALUES
from helpers.mlflow_store import Server, all_runs, job_runs
from helpers.postgres import Postgres
from helpers.processes import SWEEP, finish, run_sweep, start
from mlflow.tracking import MlflowClient

# slow: out of the default suite (≤ 15 min on 2 cores); .ci/run installs PostgreSQL and runs it.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # PostgreSQL, an mlflow server, pipeline/sweep.py

#: Toy (a job in seconds) on the tiny problem: dt=0.02 to t=0.08 is 4 steps.
TOY_TINY = [*TINY_SWEEP_NO_GRID, *TOY, "dt=0.02"]
SEEDS = list(range(8))


@pytest.fixture(scope="module")
def postgres():
    server = Postgres()
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mlflow_on_postgres(postgres, tmp_path_factory):
    """``mlflow server`` on a PostgreSQL database, artifacts through it. One worker process
    (its threads serve requests side by side): on a loaded 2-core machine uvicorn's
    supervisor kills workers that start slower than its 5 s health check, over and over."""
    server = Server(tmp_path_factory.mktemp("pg-mlflow"), backend=postgres.database("mlflow"))
    server.start()
    yield server
    server.stop(grace_s=5)  # its store is PostgreSQL's: nothing to flush, and uvicorn lingers on SIGTERM


# --- (a) a parallel sweep ----------------------------------------------------------------

def _timed(key: str) -> bool:
    """Whether metric ``key`` is a time or a share of one (``runtime_s``, ``tracking_fraction``):
    equal in name and steps between two runs of a job, not in value."""
    return key.endswith(("_s", "_fraction"))


def _record(client: MlflowClient, run) -> dict:
    """A run's metrics (every point; times by step only) and artifacts (each path; the
    bytes' hash of the deterministic ones, the loss table and θ; the config names its
    folders and experiment, and so differs)."""
    metrics = {}
    for key in run.data.metrics:
        points = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        metrics[key] = [s for s, _ in points] if _timed(key) else points
    artifacts, todo = {}, [""]
    while todo:
        for item in client.list_artifacts(run.info.run_id, todo.pop() or None):
            if item.is_dir:
                todo.append(item.path)
            elif item.path.startswith(("tables/", "params/")):
                local = client.download_artifacts(run.info.run_id, item.path)
                artifacts[item.path] = hashlib.sha256(Path(local).read_bytes()).hexdigest()
            else:
                artifacts[item.path] = item.file_size > 0
    return {"metrics": metrics, "artifacts": artifacts}


def test_a_parallel_sweep_on_the_postgresql_server_logs_each_job_as_it_logs_alone(
        mlflow_on_postgres, tmp_path):
    url = mlflow_on_postgres.url
    for folder in ("sweep", "alone"):
        (tmp_path / folder).mkdir()
    run_sweep(tmp_path / "sweep", url, tmp_path / "cache", f"seed={','.join(map(str, SEEDS))}",
              "experiment_name=parallel", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", tiny=TOY_TINY)
    run_sweep(tmp_path / "alone", url, tmp_path / "cache", "seed=5", "experiment_name=alone",
              "resume=false", multirun=False, tiny=TOY_TINY)
    client = MlflowClient(url)
    runs = [r for r in all_runs(url) if r.info.experiment_id
            == client.get_experiment_by_name("parallel").experiment_id]
    (parent,) = [r for r in runs if r.data.tags["run_kind"] == "sweep"]
    jobs = {int(r.data.params["seed"]): r for r in runs if r.data.tags["run_kind"] == "job"}
    assert parent.info.status == "FINISHED" and sorted(jobs) == SEEDS
    assert all(r.info.status == "FINISHED" for r in jobs.values())
    assert {r.data.tags["mlflow.parentRunId"] for r in jobs.values()} == {parent.info.run_id}
    (alone,) = [r for r in job_runs(url) if r.data.params.get("experiment_name") == "alone"]
    records = {seed: _record(client, run) for seed, run in jobs.items()}
    single = _record(client, alone)
    for part in ("metrics", "artifacts"):
        mine, theirs = records[5][part], single[part]
        differ = {k: (mine.get(k), theirs.get(k)) for k in mine.keys() | theirs.keys()
                  if mine.get(k) != theirs.get(k)}
        assert not differ, f"{part} of job 5 in the sweep and alone: {differ}"
    # Every job's record has the same shape (steps 1–4, the same artifacts); its values are its seed's own.
    for record in records.values():
        assert record["metrics"].keys() == records[5]["metrics"].keys()
        assert [s for s, _ in record["metrics"]["step_loss"]] == [1, 2, 3, 4]
        assert record["artifacts"].keys() == records[5]["artifacts"].keys()
    assert len({str(r["metrics"]["step_loss"]) for r in records.values()}) == len(SEEDS)
    assert not (tmp_path / "sweep" / "mlruns").exists()  # the artifacts went through the server


# --- (b) a load test ------------------------------------------------------------------

WRITERS = 20


def test_twenty_concurrent_writers_lose_and_repeat_nothing(mlflow_on_postgres, tmp_path):
    """20 processes (:mod:`helpers.metric_writer`, MLflow's client alone), five on each of 4
    runs, each logging 500 points in batches of 50, all at once."""
    url = mlflow_on_postgres.url
    client = MlflowClient(url)
    exp = client.create_experiment("load")
    runs = [client.create_run(exp).info.run_id for _ in range(4)]
    writer = [sys.executable, "-m", "helpers.metric_writer", url]
    procs = [start([*writer, runs[w % 4], str(w)], tmp_path, f"w{w}") for w in range(WRITERS)]
    for w, proc in enumerate(procs):
        code, log = finish(proc, timeout=300)
        assert code == 0, f"writer {w}: {log[-2000:]}"
    for w in range(WRITERS):
        points = client.get_metric_history(runs[w % 4], f"w{w}")
        steps = Counter(m.step for m in points)
        assert len(points) == VALUES and sorted(steps) == list(range(VALUES)) and set(steps.values()) == {1}
        assert all(m.value == w * 1e6 + m.step for m in points)


# --- (c) two frontier searches on one study --------------------------------------------

N_TRIALS = 8


def _search(tmp: Path, url: str, storage: str, name: str) -> list[str]:
    return [sys.executable, str(SWEEP), "-m", "hydra/sweeper=frontier", *TOY_TINY,
            "method.growth=interval(1.01,1.5)", f"hydra.sweeper.n_trials={N_TRIALS}",
            "hydra.sweeper.study=toy",
            f"hydra.sweeper.storage={storage}", "experiment_name=frontier", f"tracking_uri={url}",
            f"cache_dir={tmp / 'cache'}", f"hydra.sweep.dir={tmp / name}", f"hydra.run.dir={tmp / 'outputs'}"]


def test_two_searches_at_once_extend_one_postgresql_study(postgres, mlflow_on_postgres, tmp_path):
    url, storage = mlflow_on_postgres.url, postgres.database("optuna")
    procs = [start(_search(tmp_path, url, storage, name), tmp_path, name) for name in ("a", "b")]
    results = [finish(p, timeout=400) for p in procs]
    for code, log in results:
        assert code == 0, log[-3000:]
    study = optuna.load_study(study_name="toy", storage=storage)
    trials = study.get_trials()
    assert [t.number for t in trials] == list(range(N_TRIALS))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    points = [t.params["method.growth"] for t in trials]
    assert len(set(points)) == N_TRIALS, points
    runs = [r for r in all_runs(url) if r.data.tags.get("study") == "toy"]
    parents = [r for r in runs if r.data.tags["run_kind"] == "sweep"]
    assert len(parents) == 2 and all(p.info.status == "FINISHED" for p in parents)
    trial_runs = [r for r in runs if r.data.tags["run_kind"] == "job"]
    by_parent = Counter(r.data.tags["mlflow.parentRunId"] for r in trial_runs)
    # Each search launched its own share (a share each), and the shares add up to the study.
    assert set(by_parent) == {p.info.run_id for p in parents} and sum(by_parent.values()) == N_TRIALS
    numbers = sorted(int(r.data.tags["trial"]) for r in trial_runs)
    assert numbers == list(range(N_TRIALS))
    for t in trials:
        (run,) = [r for r in trial_runs if r.data.tags["trial"] == str(t.number)]
        assert t.user_attrs["mlflow_run_id"] == run.info.run_id and run.info.status == "FINISHED"
        assert t.values == [run.data.metrics["global_rel_l2"], run.data.metrics["runtime_s"]]
        assert float(run.data.params["method.growth"]) == t.params["method.growth"]
    assert trials[0].user_attrs.get("baseline") is True  # enqueued once: the config's own growth
    assert sum(bool(t.user_attrs.get("baseline")) for t in trials) == 1
