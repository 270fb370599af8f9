"""The separable network (``network=separable``, :mod:`teng_eq.network.separable`): its
hand-factored Jacobian is autodiff's, its parameters grow linearly in the dimension, and bad
settings are refused in one line."""

from __future__ import annotations

import math

import jax
import pytest
from helpers.configs import make_config
from helpers.networks import assert_factored_jacobian, reloaded_network, rows

from teng_eq.errors import ConfigError
from teng_eq.network.kinds import parameter_count
from teng_eq.network.separable import SeparableNet


@pytest.mark.parametrize(("dim", "outputs", "rank", "periodic"),
                         [(3, 1, 8, True), (2, 2, 3, True), (1, 1, 1, True), (2, 1, 4, False)])
def test_the_factored_jacobian_is_autodiffs(dim, outputs, rank, periodic):
    """``Gᵀ[gcol] ∘ Hᵀ[hcol]`` is ``jacfwd`` of the values, column by column in θ's order, for a
    scalar, a system's rows ``(x, c)``, one term and a non-periodic input."""
    net = SeparableNet(dim, rank, 5, 7, 4, periodic=periodic, outputs=outputs, key=jax.random.PRNGKey(1))
    assert_factored_jacobian(net, rows(dim, outputs))


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
    (["+network.kind=spinn"],
     r"network\.kind='spinn': unknown, choose one of \['paper', 'separable', 'multistage'\]"),
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

    from teng_eq.api import run

    uri = f"sqlite:///{tmp_path}/runs.db"
    result = run("heat", *TINY_SWEEP, "network=separable", "dt=0.02", mlflow=True, tracking_uri=uri,
                 cache_dir=warm_cache)
    assert result.rel_l2[-1] < 1e-3, result.rel_l2
    network = reloaded_network(result, uri)
    assert isinstance(network, SeparableNet)
