"""One TENG stage reaches near machine-precision loss in a few iterations."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from teng_eq import operator
from conftest import make_config
from teng_eq.lstsq import SOLVERS
from teng_eq.simulation import prepare
from teng_eq.stepper import Stepper, random_subset

DT = 0.005


@pytest.fixture(scope="module")
def heat_step(cache_dir):
    """θ₀ fitted to ``sines2d`` on a 32² grid, and the heat Euler target û + Δt L[û]."""
    cfg = make_config("equation.initial_condition=sines2d", "grid=32", "eval_grid=64", "t_final=0.4")
    p = prepare(cfg, cache_dir=cache_dir)
    u = p.space.apply(p.theta0, p.points)
    lu = operator(p.equation, lambda x: p.space.apply(p.theta0, x), p.points)
    return p, u + DT * lu


@pytest.mark.parametrize("solver", SOLVERS)
def test_heat_step_loss_below_1e12_within_7_iterations(heat_step, solver):
    p, target = heat_step
    stepper = Stepper(p.space, p.points, p.weight, solver=solver)
    run = jax.jit(lambda th, k: stepper.stage(th, target, k, 7, 512, 384))
    _, log = run(p.theta0, jax.random.PRNGKey(1))
    loss = np.asarray(log.loss)
    assert loss[0] > 1e-6  # the target is a real step away
    assert loss[-1] < 1e-12, loss
    assert np.isfinite(np.asarray(log.lsq)).all()


def test_stage_loss_matches_definition(heat_step):
    p, target = heat_step
    stepper = Stepper(p.space, p.points, p.weight)
    r = p.space.apply(p.theta0, p.points) - target
    # ‖r‖²_{L²} by the periodic trapezoid rule: (2π)²/n Σ r².
    expected = (2 * math.pi) ** 2 / p.points.shape[0] * float(jnp.sum(r * r))
    assert abs(float(stepper.loss(p.theta0, target)) - expected) <= 1e-13 * expected


def test_subset_update_touches_only_the_subset(heat_step):
    p, target = heat_step
    stepper = Stepper(p.space, p.points, p.weight)
    new, _, _ = stepper.iteration(p.theta0, target, jax.random.PRNGKey(5), 100)
    changed = np.flatnonzero(np.asarray(new != p.theta0))
    assert 0 < changed.size <= 100


@pytest.mark.parametrize("n, k", [(8361, 384), (8361, 1), (1000, 999), (50, 50)])
def test_random_subset_is_the_top_k_set(n, k):
    for seed in range(5):
        key = jax.random.PRNGKey(seed)
        subset = np.asarray(random_subset(key, n, k))
        expected = np.asarray(jax.lax.top_k(jax.random.uniform(key, (n,)), k)[1])
        np.testing.assert_array_equal(subset, np.sort(expected))
