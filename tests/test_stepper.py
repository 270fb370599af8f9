"""One TENG stage reaches near machine-precision loss in a few iterations."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_config

from teng_eq import operator
from teng_eq.grid import cell_volume, grid_points, holdout_points
from teng_eq.integrators import INTEGRATORS, TENGStep
from teng_eq.lstsq import SOLVERS
from teng_eq.simulation import holdout_flag, prepare
from teng_eq.stepper import Stepper, Stopping, random_subset

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
    stepper = Stepper(p.space, p.points, p.weight, solver, 1e-7)
    run = jax.jit(lambda th, k: stepper.stage(th, target, k, 7, 512, 384))
    theta, log = run(p.theta0, jax.random.PRNGKey(1))
    loss = np.asarray(log.loss)
    assert loss[0] > 1e-6  # the target is a real step away
    assert loss[-1] < 1e-12, loss
    assert float(log.final_loss) == loss[-1] == pytest.approx(float(stepper.loss(theta, target)), rel=1e-6)
    assert np.isfinite(np.asarray(log.lsq)).all()
    assert int(log.iterations) == 7 and int(log.fallbacks) == int(log.zero_steps) == 0


def test_stage_loss_matches_definition(heat_step):
    p, target = heat_step
    stepper = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7)
    r = p.space.apply(p.theta0, p.points) - target
    # ‖r‖²_{L²} by the periodic trapezoid rule: (2π)²/n Σ r².
    expected = (2 * math.pi) ** 2 / p.points.shape[0] * float(jnp.sum(r * r))
    assert abs(float(stepper.loss(p.theta0, target)) - expected) <= 1e-13 * expected


def test_subset_update_touches_only_the_subset(heat_step):
    p, target = heat_step
    stepper = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7)
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


def test_adaptive_stage_stops_early_when_already_converged(heat_step):
    """Restarted from its own converged result, a stage has nothing left to gain:
    it stops after ``min_iters`` of its 10 allowed iterations — by the floor, or by
    the relative-decrease test — returns the best iterate, and its per-iteration
    record is NaN after the stop."""
    p, target = heat_step
    fixed = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7)
    theta, first = jax.jit(lambda th, k: fixed.stage(th, target, k, 10, 512, 384))(p.theta0, jax.random.PRNGKey(1))
    converged = float(first.final_loss)
    assert converged < 1e-8 * float(first.loss[0])  # the first fit had work to do
    scale = p.weight * float(jnp.sum(target * target))
    by_floor = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7,
                       Stopping("adaptive", min_iters=2, rtol=0.5, patience=2, floor=10 * converged / scale))
    by_decrease = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7,
                          Stopping("adaptive", min_iters=2, rtol=0.999, patience=1, floor=0.0))
    for stepper in (by_floor, by_decrease):
        theta2, again = jax.jit(lambda th, k, s=stepper: s.stage(th, target, k, 10, 512, 384))(
            theta, jax.random.PRNGKey(2))
        assert int(again.iterations) == 2
        loss = np.asarray(again.loss)
        assert np.isfinite(loss[:3]).all() and np.isnan(loss[3:]).all()
        assert np.isnan(np.asarray(again.lsq)[2:]).all()
        assert float(again.final_loss) == np.nanmin(loss)
        assert float(again.final_loss) == pytest.approx(float(stepper.loss(theta2, target)), rel=1e-6)


def test_adaptive_stage_runs_to_the_cap_while_it_improves(heat_step):
    """Heavy damping makes every iteration a small, sure improvement: the stage
    never meets its stopping test and runs to the cap."""
    p, target = heat_step
    stepper = Stepper(p.space, p.points, p.weight, "cholesky", 3e-3,
                      Stopping("adaptive", min_iters=1, rtol=0.01, patience=1, floor=1e-17))
    _, log = jax.jit(lambda th, k: stepper.stage(th, target, k, 6, 512, 384))(p.theta0, jax.random.PRNGKey(1))
    loss = np.asarray(log.loss)
    assert int(log.iterations) == 6
    assert np.all(loss[1:] <= 0.99 * loss[:-1]), loss
    assert loss[-1] > 1e-11  # far from converged (~1e-15 undamped): the cap, not the loss, ended it


def test_solver_events_are_counted(heat_step):
    """With the output layer zeroed, every hidden parameter's Jacobian column is
    zero; undamped, each Cholesky breaks down (counted as a fallback) and the QR
    that redoes it is singular too (counted as a zero step): θ never moves."""
    p, target = heat_step
    net = p.space.network(p.theta0)
    dead = p.space.flatten(eqx.tree_at(lambda n: n.output.weight, net, jnp.zeros_like(net.output.weight)))
    stepper = Stepper(p.space, p.points, p.weight, "cholesky", 0.0)
    theta, log = jax.jit(lambda th, k: stepper.stage(th, target, k, 3, 64, 64))(dead, jax.random.PRNGKey(3))
    assert int(log.iterations) == int(log.fallbacks) == int(log.zero_steps) == 3
    np.testing.assert_array_equal(np.asarray(theta), np.asarray(dead))


def _heat_step_on(p, grid, solver, damping, n_first, n_rest):
    """A TENG-Heun step of the heat equation on a ``grid``² node grid, checked on
    the 16² grid of cell centres of the 32² grid (no node of either grid)."""
    lengths = p.equation.lengths
    stepper = Stepper(p.space, grid_points(grid, lengths), cell_volume(grid, lengths), solver, damping)
    return TENGStep(INTEGRATORS["heun"], stepper, p.equation, DT, 4, 3, n_first, n_rest,
                    holdout=holdout_points(32, 16, lengths), holdout_weight=cell_volume(16, lengths))


def test_holdout_loss_exposes_a_fit_that_overfits_the_nodes(heat_step):
    """On 8² = 64 nodes, 384 parameters drawn and an undamped SVD interpolate the
    nodes: the training loss reads as perfect while the held-out loss does not. On
    a 64² grid with the default least squares both agree."""
    p, _ = heat_step
    key = jax.random.PRNGKey(4)
    _, good = jax.jit(_heat_step_on(p, 64, "cholesky", 1e-7, 512, 384).__call__)(p.theta0, key)
    _, bad = jax.jit(_heat_step_on(p, 8, "svd", 1e-14, 384, 384).__call__)(p.theta0, key)
    assert float(good.loss) < 1e-10 and 0.3 < float(good.holdout_ratio) < 3, (good.loss, good.holdout_ratio)
    assert float(bad.loss) < 1e-20  # the training loss alone says all is well
    assert float(bad.holdout_loss) > 1e4 * float(good.holdout_loss)
    assert float(bad.holdout_ratio) > 1e6  # far past the default holdout.fail = 1e4
    assert holdout_flag(np.array([float(good.holdout_ratio)]), 100, 1e4) == "ok"
    assert holdout_flag(np.array([float(good.holdout_ratio), float(bad.holdout_ratio)]), 100, 1e4) == "fail"
    assert holdout_flag(np.array([1.0, 500.0]), 100, 1e4) == "warn"
