"""The multi-stage network (``network=multistage``, :mod:`teng_eq.network.multistage`): its
factored Jacobian is autodiff's, its θ₀ is fitted stage by stage (stage 1 the network alone,
each later stage to the residual, rescaled), and bad settings are refused in one line."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, make_config
from helpers.networks import assert_factored_jacobian, reloaded_network, rows

from teng_eq.errors import ConfigError
from teng_eq.fit import theta0 as initial_fit
from teng_eq.network.kinds import parameter_count
from teng_eq.network.multistage import MultiStageNet, scaled_output
from teng_eq.network.paper import TENGNet
from teng_eq.network.separable import SeparableNet
from teng_eq.network.space import ParamSpace

#: A small multi-stage network of the paper's kind on heat's u₀, stage 1 fitted on 32² and stage 2
#: on 64² with harmonics 1..8: fits of seconds that stall far above round-off (tolerance 1e-20:
#: no stage stops at it).
SMALL = ["grid=32", "network=multistage", "network.stage.width=16", "network.stage.features=8",
         "network.stage.depth=4", "network.harmonics=8", *CHEAP_FIT, "fit.stage2_tol=1e-20"]


@pytest.mark.parametrize(("kind", "outputs"), [("paper", 1), ("paper", 2), ("separable", 1)])
def test_the_factored_jacobian_is_autodiffs(kind, outputs):
    """``Gᵀ[gcol] ∘ Hᵀ[hcol]`` of the stacked stages is ``jacfwd`` of the sum's values, column
    by column in θ's order (stages scaled as a fit leaves them), for a scalar and a system's
    rows ``(x, c)``, on either stage kind."""
    keys = jax.random.split(jax.random.PRNGKey(3), 3)
    if kind == "paper":
        stages = [TENGNet(dim=2, features=4, width=6, depth=4, outputs=outputs, init="paper", key=k)
                  for k in keys]
    else:
        stages = [SeparableNet(2, 3, 4, 5, 4, outputs=outputs, key=k) for k in keys]
    net = MultiStageNet(tuple(scaled_output(s, e) for s, e in zip(stages, (1.0, 1e-3, 1e-6))))
    x = rows(2, outputs, 11)
    assert_factored_jacobian(net, x)
    total = sum(jax.vmap(s)(x) for s in net.stages)
    np.testing.assert_allclose(np.asarray(jax.vmap(net)(x)), np.asarray(total), rtol=0, atol=1e-14)


def test_its_parameters_are_the_stages():
    """S stages of a kind: S times that kind's parameters."""
    options = make_config("network=multistage", "network.stages=3").method.options.network
    for dim in (1, 2, 3):
        periods = (2 * math.pi,) * dim
        assert parameter_count(options, dim, periods) == 3 * parameter_count(options.stage, dim, periods)


@pytest.mark.slow  # ~60 s: two small θ₀ fits, the second stage on 64²
def test_theta0_is_fitted_stage_by_stage():
    """Stage 1 is the paper's network fitted alone, bit for bit; stage 2, fitted on the finer
    grid to the residual over ε = ‖r‖/‖u₀‖ and scaled back, takes the whole sum's relative loss
    there (the report's, which the fitted sum's own values give) below stage 1's, and its error
    between both grids' nodes (on 96²) below stage 1's. Measured (2026-12-04): relative loss on
    64² 5.3e-16 → 1.8e-17, error on 96² 2.3e-8 → 4.3e-9."""
    alone = make_config(*[o for o in SMALL if not o.startswith("network")], "network.width=16",
                        "network.features=8", "network.depth=4")
    two = make_config(*SMALL, "network.stages=2")
    eq, key = two.equation, jax.random.PRNGKey(0)
    coarse, fine = eq.quadrature(32), eq.quadrature(64)
    net1 = alone.method.cls.network_template(alone.method.options, alone.problem)
    theta1, report1 = initial_fit.initial_parameters(net1, eq.u0, coarse, key=key,
                                                     fit=alone.method.options.fit)
    net2 = two.method.cls.network_template(two.method.options, two.problem)
    theta2, report2 = initial_fit.stage_by_stage(net2, eq.u0, coarse, key=key, fit=two.method.options.fit,
                                                 later=fine)
    assert isinstance(net2, MultiStageNet) and len(net2.stages) == 2
    assert net2.stages[1].embedding.harmonics[-1] == 8 and net2.stages[0].embedding.harmonics is None
    np.testing.assert_array_equal(theta2[:theta1.size], theta1)
    assert report2.stage_rel_losses[0] == report1.stage2_rel_loss

    def rel(theta, net, q, squared=True):
        u0 = jax.vmap(eq.u0)(q.points)
        u = ParamSpace(net).apply(theta, q.points)
        w = jnp.broadcast_to(q.weights, u.shape)
        r = float(jnp.sum(w * (u - u0) ** 2) / jnp.sum(w * u0**2))
        return r if squared else math.sqrt(r)

    assert rel(theta2, net2, fine) == pytest.approx(report2.stage2_rel_loss, rel=1e-6)
    assert report2.stage2_rel_loss == report2.stage_rel_losses[1] < 0.1 * rel(theta1, net1, fine)
    between = eq.evaluation(96)
    assert rel(theta2, net2, between, False) < 0.5 * rel(theta1, net1, between, False)


@pytest.mark.parametrize(("overrides", "message"), [
    (["network=multistage", "network.stages=0"], r"network\.stages=0: must be an integer >= 1"),
    (["network=multistage", "+network.stage.kind=spinn"],
     r"network\.stage\.kind='spinn': unknown, choose one of \['paper', 'separable'\]"),
    (["network=multistage", "network.stage.depth=2"], r"network\.stage\.depth=2: must be >= 3"),
    (["network=multistage", "equation=heat_box_dirichlet", "equation.enforce=exact"],
     r"network\.kind='multistage': sums networks fitted to residuals, .* take equation\.enforce=rows"),
])
def test_bad_multistage_settings_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        make_config(*overrides)
    assert "\n" not in str(err.value)


@pytest.mark.slow  # ~80 s: the two stages' θ₀ is fitted in the test
def test_a_logged_multistage_run_is_reloaded_with_its_final_field(tmp_path, warm_cache):
    """A TENG-Heun heat run on a two-stage network through MLflow (a cheap fit; harmonic 1 and
    the fit grid for stage 2: with harmonics 1–8 this run diverged, docs/guides/accuracy.md)
    follows the exact heat flow (below 1e-4 after four steps; measured 1.0e-5 from θ₀'s 3.9e-6),
    and its θ artifact and config rebuild the network
    (:func:`teng_eq.api.load_run`), whose field gives the logged ``final_rel_l2``."""
    from helpers.configs import TINY_SWEEP

    from teng_eq.api import run

    uri = f"sqlite:///{tmp_path}/runs.db"
    result = run("heat", *TINY_SWEEP, "network=multistage", "network.harmonics=1", "network.refine=1",
                 *CHEAP_FIT, "dt=0.02", mlflow=True, tracking_uri=uri, cache_dir=warm_cache)
    assert result.rel_l2[-1] < 1e-4, result.rel_l2
    network = reloaded_network(result, uri)
    assert isinstance(network, MultiStageNet) and len(network.stages) == 2
