import socket
import subprocess
import sys
import time

import mlflow
import pytest
from helpers.configs import compose_conf

from teng_eq.jobs.job import NAME_OVERRIDES, run_name
from teng_eq.tracking import (
    RunInProgress,
    check_store,
    default_tracking_uri,
    flatten,
    is_stale,
    load_runs,
    reap_stale,
    sweep_hash,
    sweep_jobs,
    tracked_run,
    ui_address,
)
from teng_eq.tracking.claims import Heartbeat
from teng_eq.tracking.store import EXPERIMENT_KIND, ensure_experiment, process_tags


def _client(tmp_path):
    return mlflow.tracking.MlflowClient(default_tracking_uri(tmp_path))


def test_flatten_nested_config():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": "1", "a.c": "[1, 2]", "d": "x"}


def test_the_address_of_an_experiments_runs_table(tmp_path):
    """MLflow's UI (3.16 on) opens an experiment on the page its GenAI / Model training
    switch says (GenAI: an overview of traces); the address carries the switch."""
    page = "#/experiments/7?workflowType=machine_learning"
    assert ui_address("http://host:5000/", "7", tmp_path) == f"http://host:5000/{page}"
    assert ui_address(default_tracking_uri(tmp_path), "7", tmp_path) == \
        f"mlflow ui (in {tmp_path.resolve()}), then http://127.0.0.1:5000/{page}"
    assert ui_address("sqlite:////data/m.db", "7", tmp_path) == \
        f"mlflow ui --backend-store-uri sqlite:////data/m.db, then http://127.0.0.1:5000/{page}"


def test_experiments_open_on_their_runs_in_the_ui(tmp_path):
    """MLflow 3's UI opens an experiment on its GenAI overview unless the experiment's
    ``mlflow.experimentKind`` tag says otherwise: ours are tagged when made, and one
    made before (untagged) is tagged when a job next uses it."""
    client = _client(tmp_path)
    new = ensure_experiment(client, "new", tmp_path / "mlruns")
    old = client.create_experiment("old")
    assert ensure_experiment(client, "old", tmp_path / "mlruns") == old
    for exp_id in (new, old):
        assert client.get_experiment(exp_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert EXPERIMENT_KIND == {"mlflow.experimentKind": "custom_model_development"}


def test_run_logs_curves_in_one_batch_and_finishes(tmp_path):
    uri = default_tracking_uri(tmp_path)
    with tracked_run(uri, "exp", artifact_root=tmp_path / "mlruns") as run:
        run.params({"dt": "0.005"})
        run.curve("rel_l2", range(2500), [1e-7 * (i + 1) for i in range(2500)])
        run.metric("global_rel_l2", 3e-7)
    client = _client(tmp_path)
    (r,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert r.info.status == "FINISHED" and r.data.params["dt"] == "0.005"
    history = client.get_metric_history(r.info.run_id, "rel_l2")
    assert [m.step for m in history] == list(range(2500))
    assert history[-1].value == pytest.approx(2.5e-4)
    assert r.info.artifact_uri.startswith((tmp_path / "mlruns").as_uri())


def test_failed_run_is_marked_with_reason(tmp_path):
    uri = default_tracking_uri(tmp_path)
    with pytest.raises(FloatingPointError), tracked_run(uri, "exp") as run:
        run.metric("rel_l2", 1.0, 1)
        raise FloatingPointError("loss is NaN at step 3")
    client = _client(tmp_path)
    (r,) = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert r.info.status == "FAILED"
    assert r.data.tags["failure_reason"] == "FloatingPointError: loss is NaN at step 3"
    assert r.data.metrics["rel_l2"] == 1.0


def test_unreachable_store_is_refused_before_any_run(tmp_path):
    missing = f"sqlite:///{tmp_path / 'no' / 'such' / 'mlflow.db'}"
    with pytest.raises(ValueError, match=r"^tracking_uri=sqlite:///.*: folder .* does not exist$"):
        check_store(missing)
    with socket.socket() as s:  # a port nobody listens on once this block closes it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ValueError, match=rf"^tracking_uri=http://127.0.0.1:{port}: no MLflow server answers"):
        check_store(f"http://127.0.0.1:{port}")
    check_store(default_tracking_uri(tmp_path))  # an existing folder is fine


def test_body_error_wins_when_the_run_cannot_be_opened(tmp_path):
    # The run is opened in the background; if that fails too, the caller still
    # sees its own exception, not the store's.
    missing = f"sqlite:///{tmp_path / 'no' / 'mlflow.db'}"
    with pytest.raises(KeyError, match="boom"), tracked_run(missing, "exp"):
        raise KeyError("boom")


# --- Resume, skip, stale runs (one store: creating one costs seconds) --------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = default_tracking_uri(tmp_path_factory.mktemp("store"))
    return uri, mlflow.tracking.MlflowClient(uri)


def _runs(client, experiment):
    return client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


class _Broke(FloatingPointError):
    @property
    def tags(self):  # as simulation.Diverged: logged on the failed run
        return {"diverged_at_step": "7", "last_good_step": "6"}


def _job(uri, experiment, resume=True, config_hash="h1"):
    return tracked_run(uri, experiment, tags={"run_kind": "job", "config_hash": config_hash},
                       config_hash=config_hash, resume=resume)


def test_unfinished_run_is_reopened_and_steps_are_not_written_twice(store):
    uri, client = store
    exp = "reopen"
    curve = [1e-7 * (i + 1) for i in range(11)]
    with pytest.raises(_Broke), _job(uri, exp) as run:
        assert run.outcome == "new"
        run.params({"dt": "0.1", "progress": "true"})
        run.curve("rel_l2", range(4), curve[:4])
        raise _Broke("diverged at step 7")
    (r,) = _runs(client, exp)
    first = r.info.run_id
    assert r.info.status == "FAILED" and r.data.tags["last_good_step"] == "6"
    with pytest.raises(KeyboardInterrupt), _job(uri, exp) as run:
        assert (run.outcome, run.run_id) == ("resumed", first)
        run.curve("rel_l2", range(7), curve[:7])  # replays 0..3, adds 4..6
        run.flush()
        raise KeyboardInterrupt
    (r,) = _runs(client, exp)
    assert r.info.status == "KILLED" and "last_good_step" not in r.data.tags
    with _job(uri, exp) as run:
        assert (run.outcome, run.run_id) == ("resumed", first)
        run.params({"dt": "0.1", "progress": "false"})  # a bookkeeping value changed: kept as first logged
        run.curve("rel_l2", range(11), curve)
    (r,) = _runs(client, exp)
    assert r.info.status == "FINISHED" and r.data.tags["attempt"] == "3"
    assert not {"failure_reason", "diverged_at_step", "last_good_step", "failure_tags"} & r.data.tags.keys()
    assert r.data.params == {"dt": "0.1", "progress": "true"}
    history = client.get_metric_history(first, "rel_l2")
    assert sorted(m.step for m in history) == list(range(11))
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == curve

    # Finished: the same configuration is skipped, and nothing is written.
    with _job(uri, exp) as run:
        assert (run.outcome, run.run_id) == ("skipped", first)
        assert run.previous.data.metrics["rel_l2"] == curve[-1]
    assert [x.info.run_id for x in _runs(client, exp)] == [first]
    # resume=false, or another configuration: a new run.
    for kw in ({"resume": False}, {"config_hash": "h2"}):
        with _job(uri, exp, **kw) as run:
            assert run.outcome == "new"
    assert len(_runs(client, exp)) == 3


def test_a_live_run_of_the_same_configuration_is_not_taken_over(store):
    uri, client = store
    with _job(uri, "live") as run:
        live = run.run_id
        busy = rf"config_hash=h1: run {live} .* still being written \(pid "
        with pytest.raises(RunInProgress, match=busy), _job(uri, "live") as other:
            other.flush()
    (r,) = _runs(client, "live")
    assert r.info.status == "FINISHED"


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_running_runs_are_detected_and_killed(store):
    _, client = store
    exp = client.create_experiment("stale")
    me = process_tags()
    now = time.time()
    cases = {  # tags -> stale?
        "alive here": (me, False),
        "dead pid here": ({**me, "pid": str(_dead_pid())}, True),
        "pid recycled": ({**me, "pid_start": "1"}, True),
        "elsewhere, beating": ({"host": "node-17", "pid": "1", "heartbeat": f"{now:.0f}"}, False),
        "elsewhere, silent": ({"host": "node-17", "pid": "1", "heartbeat": f"{now - 3600:.0f}"}, True),
        "never beat": ({}, True),
    }
    ids = {name: client.create_run(exp, tags=tags).info.run_id for name, (tags, _) in cases.items()}
    for name, (tags, stale) in cases.items():
        assert is_stale(tags, now) is stale, name
    reaped = set(reap_stale(client, [exp]))
    assert reaped == {ids[n] for n, (_, stale) in cases.items() if stale}
    for name, (_, stale) in cases.items():
        run = client.get_run(ids[name])
        assert run.info.status == ("KILLED" if stale else "RUNNING"), name
        assert ("killed_reason" in run.data.tags) is stale
        client.set_terminated(ids[name])


def test_heartbeat_refreshes_its_tag(store):
    _, client = store
    run_id = client.create_run(client.create_experiment("beat"), tags={"heartbeat": "0"}).info.run_id
    beat = Heartbeat(client, run_id, interval=0.05)
    deadline = time.time() + 20
    while client.get_run(run_id).data.tags["heartbeat"] == "0":
        assert time.time() < deadline
        time.sleep(0.05)
    beat.stop()
    client.set_terminated(run_id)
    assert abs(float(client.get_run(run_id).data.tags["heartbeat"]) - time.time()) < 30


def test_sweep_hash_ignores_order_hydra_and_bookkeeping_keys():
    a = sweep_hash(["dt=0.1,0.2", "iters=3", "tracking_uri=x", "hydra.sweep.dir=/a", "resume=true"])
    assert a == sweep_hash(["iters=3", "dt=0.1,0.2", "progress=false", "checkpoint_every=5"])
    assert a != sweep_hash(["iters=3", "dt=0.1,0.3"])


def test_a_sweep_lists_the_finished_runs_it_reused(store):
    # A job skipped because another sweep finished its configuration stays that
    # sweep's child; the new sweep names it in a reused_run.<job> tag.
    uri, client = store
    exp = client.create_experiment("reused")
    old_parent = client.create_run(exp, tags={"run_kind": "sweep"}).info.run_id
    parent = client.create_run(exp, tags={"run_kind": "sweep"}).info.run_id
    done = client.create_run(exp, tags={"run_kind": "job", "config_hash": "h", "job_num": "0",
                                        "mlflow.parentRunId": old_parent}).info.run_id
    own = client.create_run(exp, tags={"run_kind": "job", "job_num": "1",
                                       "mlflow.parentRunId": parent}).info.run_id
    for run_id in (old_parent, done, own):
        client.set_terminated(run_id)
    with tracked_run(uri, "reused", tags={"run_kind": "job", "config_hash": "h", "job_num": "0"},
                     parent_run_id=parent, config_hash="h", resume=True) as run:
        assert (run.outcome, run.run_id) == ("skipped", done)
    assert client.get_run(parent).data.tags["reused_run.0"] == done
    assert {r.info.run_id for r in sweep_jobs(client, parent)} == {done, own}
    assert set(load_runs(uri, sweep=parent)["run_id"]) == {done, own}
    assert set(load_runs(uri, sweep=old_parent)["run_id"]) == {done}
    client.set_terminated(parent)


def test_store_calls_retry_transient_failures_within_their_budget():
    """A locked database or a refused connection is tried again (with backoff) until
    the budget is spent; a refused request is raised at once."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, TEMPORARILY_UNAVAILABLE

    from teng_eq.tracking import StoreUnavailable
    from teng_eq.tracking.store import is_transient, retrying

    locked = MlflowException("(sqlite3.OperationalError) database is locked",
                             error_code=TEMPORARILY_UNAVAILABLE)
    refused = MlflowException("API request to http://h:5000/api/2.0/mlflow/runs/get failed with exception "
                              "HTTPConnectionPool(host='h', port=5000): "
                              "Max retries exceeded (Connection refused)")
    bad = MlflowException("Invalid value for parameter", error_code=INVALID_PARAMETER_VALUE)
    assert is_transient(locked) and is_transient(refused) and not is_transient(bad)
    calls = []

    def flaky():
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise locked if len(calls) == 1 else refused
        return "done"

    assert retrying(flaky, budget_s=30, what="store") == "done" and len(calls) == 3
    assert calls[2] - calls[1] > calls[1] - calls[0] > 0.3  # backing off
    with pytest.raises(StoreUnavailable,
                       match=r"^the MLflow store store did not answer for 1 s \(Connection refused\)"):
        retrying(lambda: (_ for _ in ()).throw(refused), budget_s=1, what="store")
    calls.clear()
    with pytest.raises(MlflowException, match="Invalid value"):
        retrying(lambda: calls.append(1) or (_ for _ in ()).throw(bad), budget_s=30, what="store")
    assert calls == [1]


def test_run_names_tell_apart_runs_that_differ_in_a_setting():
    """A run's name is ``<method>-<equation>-dt<Δt>`` and every other override that is not
    bookkeeping: one command line with another ``method.conserve`` is another name; a run
    whose overrides are all in the bare name keeps it; a long list is cut and hashed."""
    cfg = compose_conf(["equation=schrodinger", "method=teng_rk4", "dt=0.01"])
    bare = ["equation=schrodinger", "method=teng_rk4", "dt=0.01", "tracking_uri=sqlite:///x.db",
            "cache_dir=/tmp/c", "progress=false", "hydra.searchpath=[file:///u]"]
    assert run_name(cfg, bare) == "teng_rk4-schrodinger-dt0.01"
    names = {run_name(cfg, [*bare, "grid=32", f"method.conserve={c}"]) for c in ("true", "false")}
    assert names == {"teng_rk4-schrodinger-dt0.01 grid=32 method.conserve=true",
                     "teng_rk4-schrodinger-dt0.01 grid=32 method.conserve=false"}
    long = [f"equation.initial_condition=sines2d grid=32 eval_grid=64 t_final=0.08 iters={n}".split()
            for n in (5, 7)]
    cut = [run_name(cfg, [*bare, *o, "subsample=256", "subsample_first=256"]) for o in long]
    assert cut[0] != cut[1] and cut[0][:-9] == cut[1][:-9]  # the same cut, two hashes
    assert all(len(n) <= len("teng_rk4-schrodinger-dt0.01 ") + NAME_OVERRIDES for n in cut)
