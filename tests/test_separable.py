"""The separable network (``network=separable``, :mod:`teng_eq.network.separable`): its
hand-factored Jacobian is autodiff's, its parameters grow linearly in the dimension, and bad
settings are refused in one line."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_config

from teng_eq.errors import ConfigError
from teng_eq.network.kinds import parameter_count
from teng_eq.network.separable import SeparableNet
from teng_eq.network.space import ParamSpace


@pytest.mark.parametrize(("dim", "outputs", "rank", "periodic"),
                         [(3, 1, 8, True), (2, 2, 3, True), (1, 1, 1, True), (2, 1, 4, False)])
def test_the_factored_jacobian_is_autodiffs(dim, outputs, rank, periodic):
    """``Gᵀ[gcol] ∘ Hᵀ[hcol]`` is ``jacfwd`` of the values, column by column in θ's order, for a
    scalar, a system's rows ``(x, c)``, one term and a non-periodic input."""
    net = SeparableNet(dim, rank, 5, 7, 4, periodic=periodic, outputs=outputs, key=jax.random.PRNGKey(1))
    space = ParamSpace(net)
    x = jax.random.uniform(jax.random.PRNGKey(2), (13, dim), maxval=2 * math.pi)
    if outputs > 1:
        x = jnp.concatenate([x, (jnp.arange(13) % outputs)[:, None].astype(x.dtype)], axis=1)
    theta = space.flatten(net)
    jac = jax.jit(jax.jacfwd(lambda t: space.apply(t, x)))(theta)
    u, Gt, Ht = eqx.filter_jit(lambda n, p: n.jacobian_factors_t(p))(net, x)
    gcol, hcol = net.factor_columns()
    assert (Gt.shape[0], Ht.shape[0]) == net.factor_rows()
    assert gcol.shape == hcol.shape == (space.size,)
    scale = float(jnp.max(jnp.abs(jac)))
    # Measured ≤ 4.5e-16 absolute (entries up to ~10): the same products in another order.
    np.testing.assert_allclose(np.asarray((Gt[gcol] * Ht[hcol]).T), np.asarray(jac), rtol=0,
                               atol=64 * np.finfo(float).eps * scale)
    np.testing.assert_allclose(np.asarray(u), np.asarray(space.apply(theta, x)), rtol=0, atol=1e-14)


def test_its_parameters_grow_linearly_in_the_dimension():
    """3F + (F + 1)w + (depth − 3)(w + 1)w + (w + 1)r per axis, (r + 1) per component."""
    options = make_config("network=separable").method.options.network
    f, w, r = options.features, options.width, options.rank
    per_axis = 3 * f + (f + 1) * w + (options.depth - 3) * (w + 1) * w + (w + 1) * r
    for dim in (1, 2, 3, 6, 10):
        assert parameter_count(options, dim, (2 * math.pi,) * dim) == dim * per_axis + r + 1
    assert parameter_count(options, 3, (2 * math.pi,) * 3) == 2523
    assert parameter_count(options, 2, (2 * math.pi,) * 2, outputs=2) == 2 * per_axis + 2 * (r + 1)


@pytest.mark.parametrize(("overrides", "message"), [
    (["+network.kind=spinn"], r"network\.kind='spinn': unknown, choose one of \['paper', 'separable'\]"),
    (["network=separable", "network.rank=0"], r"network\.rank=0: must be an integer >= 1"),
    (["network=separable", "network.depth=2"], r"network\.depth=2: must be >= 3"),
    (["network=separable", "+network.embedding_activation=tanh"], r"network\.embedding_activation='tanh': "
                                                                  r"unknown key"),
    (["network=separable", "network.components=separate"], r"network\.components='separate': the separable "
                                                           r"network takes 'shared' only"),
])
def test_bad_network_settings_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        make_config(*overrides)
    assert "\n" not in str(err.value)


@pytest.mark.slow  # ~30 s: the separable network's θ₀ is fitted in the test
def test_a_logged_separable_run_is_reloaded_with_its_final_field(tmp_path, warm_cache):
    """A TENG-Heun heat run on the separable network through MLflow: its θ artifact and config
    rebuild the network (:func:`teng_eq.api.load_run`), whose field on the evaluation grid gives
    the logged ``final_rel_l2`` and equals the run's own; its error stays that of a fit to the
    heat flow (below 1e-3 after four steps from a θ₀ of this cheap fit)."""
    from helpers.configs import TINY_SWEEP
    from helpers.mlflow_store import job_runs

    from teng_eq.api import load_run, run
    from teng_eq.run.metrics import squared_norms

    uri = f"sqlite:///{tmp_path}/runs.db"
    result = run("heat", *TINY_SWEEP, "network=separable", "dt=0.02", mlflow=True, tracking_uri=uri,
                 cache_dir=warm_cache)
    assert result.rel_l2[-1] < 1e-3, result.rel_l2
    (job,) = job_runs(uri)
    field = load_run(job.info.run_id, tracking_uri=uri)
    assert isinstance(field.network, SeparableNet)
    points, values = field.on_grid()
    cfg = field.config
    reference = cfg.equation.reference_anytime(cfg.t_final).values_at(cfg.t_final, cfg.eval_grid)
    err_sq, ref_sq = squared_norms(values, reference, cfg.equation.evaluation(cfg.eval_grid).weights)
    np.testing.assert_allclose(np.sqrt(err_sq / ref_sq), job.data.metrics["final_rel_l2"], rtol=1e-10, atol=0)
    np.testing.assert_array_equal(field(points), result.field(points))
