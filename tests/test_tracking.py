import socket

import mlflow
import pytest

from teng_eq.tracking import check_store, default_tracking_uri, flatten, tracked_run


def _client(tmp_path):
    return mlflow.tracking.MlflowClient(default_tracking_uri(tmp_path))


def test_flatten_nested_config():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": "x"}) == {"a.b": "1", "a.c": "[1, 2]", "d": "x"}


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
    with pytest.raises(FloatingPointError):
        with tracked_run(uri, "exp") as run:
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
    with pytest.raises(KeyError, match="boom"):
        with tracked_run(f"sqlite:///{tmp_path / 'no' / 'mlflow.db'}", "exp"):
            raise KeyError("boom")
