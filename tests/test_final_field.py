"""The final field one call away: a run's û at its end evaluated on any points and on a
grid (``RunResult.field``), and the same from a logged run (:func:`teng_eq.api.load_run`,
by run id or artifact folder), which reproduces the run's logged ``final_rel_l2``; the
store's artifacts beside a SQLite store of the user's choosing."""

import jax
import numpy as np
import pytest
from helpers.configs import TINY_SWEEP
from helpers.mlflow_store import job_runs

from teng_eq.api import load_run, run
from teng_eq.errors import ConfigError
from teng_eq.run.metrics import squared_norms


@pytest.fixture(scope="module")
def logged(tmp_path_factory, warm_cache):
    """The tiny heat run through the API with MLflow, its store in a folder of its own."""
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder}/runs.db"
    result = run("heat", *TINY_SWEEP, mlflow=True, tracking_uri=uri, cache_dir=warm_cache)
    return result, uri, folder


def test_a_result_is_evaluated_on_any_points_and_on_a_grid(logged):
    result, _, _ = logged
    points = np.random.default_rng(0).uniform(0, 2 * np.pi, (100, 2))
    values = result.field(points)
    assert values.shape == (100,)
    # The network itself takes (n, dim) points too: the same values, but for the compiled
    # evaluation's rounding.
    np.testing.assert_array_equal(np.asarray(result.network(points)),
                                  np.asarray(jax.vmap(result.network)(points)))
    np.testing.assert_allclose(values, np.asarray(result.network(points)), rtol=1e-13, atol=1e-15)
    grid, on_grid = result.field.on_grid(16)
    assert grid.shape == (256, 2) and on_grid.shape == (256,)
    with pytest.raises(ValueError, match=r"points must be \(n, 2\)"):
        result.field(points.T)


def test_a_logged_run_reproduces_its_final_error(logged):
    """From the run id: θ and the config from its artifacts; û on the evaluation grid
    against the reference at t_final is the logged ``final_rel_l2`` (same arithmetic)."""
    result, uri, folder = logged
    (job,) = job_runs(uri)
    field = load_run(job.info.run_id, tracking_uri=uri)
    points, values = field.on_grid()
    reference = field.config.equation.reference_anytime(field.config.t_final).values_at(
        field.config.t_final, field.config.eval_grid)
    err_sq, ref_sq = squared_norms(values, reference,
                                   field.config.equation.evaluation(field.config.eval_grid).weights)
    np.testing.assert_allclose(np.sqrt(err_sq / ref_sq), job.data.metrics["final_rel_l2"], rtol=1e-10, atol=0)
    np.testing.assert_array_equal(field(points), result.field(points))
    # The artifacts sit beside the store the user chose, as the default store's do.
    artifacts = folder / "mlruns"
    assert job.info.artifact_uri.startswith(f"file://{artifacts}") and (artifacts).is_dir()
    by_folder = load_run(job.info.artifact_uri.removeprefix("file://"))
    np.testing.assert_array_equal(by_folder(points), field(points))


def test_a_run_id_is_looked_up_in_mlflows_own_store_where_one_is_set(logged, monkeypatch, tmp_path):
    """No ``tracking_uri=``: the store ``$MLFLOW_TRACKING_URI`` names, or the one
    ``mlflow.set_tracking_uri`` made active, before the checkout's default store; the
    keyword before both. The field is the run's final one."""
    import mlflow

    result, uri, _ = logged
    (job,) = job_runs(uri)
    points = np.random.default_rng(1).uniform(0, 2 * np.pi, (50, 2))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    np.testing.assert_array_equal(load_run(job.info.run_id)(points), result.field(points))
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)
    try:
        np.testing.assert_array_equal(load_run(job.info.run_id)(points), result.field(points))
        elsewhere = f"sqlite:///{tmp_path / 'other.db'}"  # a store that does not hold the run
        with pytest.raises(ConfigError, match="no such MLflow store"):
            load_run(job.info.run_id, tracking_uri=elsewhere)
    finally:
        mlflow.set_tracking_uri(None)


def test_a_run_that_is_not_there_is_one_line(logged):
    _, uri, _ = logged
    with pytest.raises(ConfigError, match=r"^invalid config: run='0123abcd'") as err:
        load_run("0123abcd", tracking_uri=uri)
    assert "\n" not in str(err.value)
