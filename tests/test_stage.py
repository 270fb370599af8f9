"""One TENG stage: its loss falls by orders of magnitude in a few iterations; its
parts (loss, subsets, stopping policies, solver events, the held-out check)."""

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import small

from teng_eq.domains.quadrature import Quadrature, cell_volume, grid_points, holdout_points
from teng_eq.equations import network_operator
from teng_eq.fit.lstsq import SOLVERS
from teng_eq.fit.stage import BestSoFar, StageSolver, Stopping, random_subset
from teng_eq.run.simulation import build_method
from teng_eq.stepping.base import Holdout
from teng_eq.stepping.explicit import TENGStep
from teng_eq.stepping.tableau import EULER, HEUN, RK4, TABLEAUS, Tableau

DT = 0.005


class Problem(NamedTuple):
    """θ₀ and its network, on a quadrature."""

    equation: object
    space: object
    theta0: object
    quadrature: Quadrature

    @property
    def points(self):
        return self.quadrature.points

    def solver(self, solver="cholesky", damping=1e-7, stopping=None):
        return StageSolver(self.space, self.quadrature, solver, damping, *([stopping] if stopping else []))


@pytest.fixture(scope="module")
def heat_step(cache_dir):
    """θ₀ fitted to ``sines2d`` on a 32² grid, and the heat Euler target û + Δt L[û]
    on the 96² grid: more nodes (9,216) than the network has parameters (8,361), so
    that a stage's loss is a well-posed fit's, not round-off of an interpolation."""
    cfg = small("t_final=0.4")
    method = build_method(cfg, cache_dir=cache_dir)
    p = Problem(cfg.equation, method.space, method.theta0, cfg.equation.quadrature(96))
    u = p.space.apply(p.theta0, p.points)
    return p, u + DT * network_operator(p.equation, p.space, p.theta0, p.points)


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_stage_takes_the_loss_down_a_million_fold_within_7_iterations(heat_step, solver):
    """The projection of one step (its loss against the step's distance, loss[0]), on
    more nodes than parameters: what the stage achieves, not round-off."""
    p, target = heat_step
    stepper = p.solver(solver)
    run = jax.jit(lambda th, k: stepper.stage(th, target, k, 7, 512, 384))
    theta, log = run(p.theta0, jax.random.PRNGKey(1))
    loss = np.asarray(log.loss)
    assert loss[0] > 1e-6  # the target is a real step away
    assert loss[-1] < 1e-6 * loss[0], loss
    assert float(log.final_loss) == loss[-1] == pytest.approx(float(stepper.loss(theta, target)), rel=1e-6)
    assert np.isfinite(np.asarray(log.lsq)).all()
    assert int(log.iterations) == 7 and {k: int(v) for k, v in log.events.items()} == {
        "fallbacks": 0, "zero_steps": 0}


def test_stage_loss_matches_definition(heat_step):
    p, target = heat_step
    stepper = p.solver()
    r = p.space.apply(p.theta0, p.points) - target
    # ‖r‖²_{L²} by the periodic trapezoid rule: (2π)²/n Σ r².
    expected = (2 * math.pi) ** 2 / p.points.shape[0] * float(jnp.sum(r * r))
    assert abs(float(stepper.loss(p.theta0, target)) - expected) <= 1e-13 * expected


def test_subset_update_touches_only_the_subset(heat_step):
    p, target = heat_step
    stepper = p.solver()
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
    fixed = p.solver()
    theta, first = jax.jit(lambda th, k: fixed.stage(th, target, k, 10, 512, 384))(
        p.theta0, jax.random.PRNGKey(1))
    converged = float(first.final_loss)
    assert converged < 1e-6 * float(first.loss[0])  # the first fit had work to do
    scale = float(fixed.norm2(target))
    by_floor = p.solver(stopping=Stopping("adaptive", min_iters=2, rtol=0.5, patience=2,
                                         floor=10 * converged / scale))
    by_decrease = p.solver(stopping=Stopping("adaptive", min_iters=2, rtol=0.999, patience=1, floor=0.0))
    for stepper in (by_floor, by_decrease):
        theta2, again = jax.jit(lambda th, k, s=stepper: s.stage(th, target, k, 10, 512, 384))(
            theta, jax.random.PRNGKey(2))
        assert int(again.iterations) == 2
        loss = np.asarray(again.loss)
        assert np.isfinite(loss[:3]).all() and np.isnan(loss[3:]).all()
        assert np.isnan(np.asarray(again.lsq)[2:]).all()
        assert float(again.final_loss) == np.nanmin(loss)
        assert float(again.final_loss) == pytest.approx(float(stepper.loss(theta2, target)), rel=1e-6)


def test_local_error_stage_stops_at_a_fraction_of_the_expected_error(heat_step):
    """Under ``local_error`` a stage stops once its residual is below ``floor``·ε: with
    ε 100× the residual after one iteration and floor 0.1, after that one iteration
    (``min_iters`` = 1); with ε = 0 only by its patience or the cap — and then where
    the ``fixed`` policy's stage has gone."""
    p, target = heat_step
    fixed = p.solver()
    run = eqx.filter_jit(lambda s, th, k, e: s.stage(th, target, k, 7, 512, 384, e))
    _, log = run(fixed, p.theta0, jax.random.PRNGKey(1), None)
    eps = 100 * math.sqrt(float(log.loss[1]))
    by_error = p.solver(stopping=Stopping("local_error", min_iters=1, rtol=0.5, patience=3, floor=0.1))
    _, early = run(by_error, p.theta0, jax.random.PRNGKey(1), eps)
    assert int(early.iterations) == 1 and float(early.final_loss) == float(log.loss[1])
    _, late = run(by_error, p.theta0, jax.random.PRNGKey(1), 0.0)
    assert int(late.iterations) > 3 and float(late.final_loss) <= np.nanmin(np.asarray(log.loss)) * 10


def test_adaptive_stage_runs_to_the_cap_while_it_improves(heat_step):
    """Heavy damping makes every iteration a small, sure improvement: the stage
    never meets its stopping test and runs to the cap."""
    p, target = heat_step
    stepper = p.solver(damping=3e-3, stopping=Stopping("adaptive", min_iters=1, rtol=0.01, patience=1,
                                                       floor=1e-17))
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
    stepper = p.solver(damping=0.0)
    theta, log = jax.jit(lambda th, k: stepper.stage(th, target, k, 3, 64, 64))(dead, jax.random.PRNGKey(3))
    assert int(log.iterations) == int(log.events["fallbacks"]) == int(log.events["zero_steps"]) == 3
    np.testing.assert_array_equal(np.asarray(theta), np.asarray(dead))


def _heat_step_on(p, grid, solver, damping, n_first, n_rest):
    """A TENG-Heun step of the heat equation on a ``grid``² node grid, checked on
    the 16² grid of cell centres of the 32² grid (no node of either grid)."""
    lengths = p.equation.lengths
    nodes = Quadrature(grid_points(grid, lengths), cell_volume(grid, lengths))
    stepper = StageSolver(p.space, nodes, solver, damping)
    held_out = Quadrature(holdout_points(32, 16, lengths), cell_volume(16, lengths))
    return TENGStep(tableau=HEUN, solver=stepper, equation=p.equation, dt=DT, iters=4, iters_later=3,
                    subsample_first=n_first, subsample=n_rest, holdout=held_out)


def test_holdout_loss_exposes_a_fit_that_overfits_the_nodes(heat_step):
    """On 8² = 64 nodes, 384 parameters drawn and an undamped SVD interpolate the
    nodes: the training loss reads as perfect while the held-out loss does not. On
    a 64² grid with the default least squares both agree."""
    p, _ = heat_step
    key = jax.random.PRNGKey(4)
    _, good = jax.jit(_heat_step_on(p, 64, "cholesky", 1e-7, 512, 384).__call__)(p.theta0, key)
    _, bad = jax.jit(_heat_step_on(p, 8, "svd", 1e-14, 384, 384).__call__)(p.theta0, key)
    good, bad = good.metrics, bad.metrics
    assert 0.3 < float(good["holdout_ratio"]) < 3, good
    # The training loss alone says all is well: it is far below the good fit's.
    assert float(bad["step_loss"]) < 1e-6 * float(good["step_loss"])
    assert float(bad["holdout_loss"]) > 1e4 * float(good["holdout_loss"])
    assert float(bad["holdout_ratio"]) > 1e6  # far past the default holdout.fail = 1e4
    limits = Holdout(grid=None, warn=100, fail=1e4)
    assert limits.flag(np.array([float(good["holdout_ratio"])])) == "ok"
    assert limits.flag(np.array([float(good["holdout_ratio"]), float(bad["holdout_ratio"])])) == "fail"
    assert limits.flag(np.array([1.0, 500.0])) == "warn"
    assert limits.flag(np.array([1.0, np.nan])) == "fail"


def test_best_so_far_keeps_the_lowest_loss():
    best = BestSoFar(jnp.zeros(2), jnp.asarray(jnp.inf))
    for theta, loss in ((1.0, 3.0), (2.0, 1.0), (3.0, 2.0)):
        best = best.update(jnp.full(2, theta), jnp.asarray(loss))
    assert float(best.loss) == 1.0 and np.all(np.asarray(best.theta) == 2.0)


def test_a_tableau_checks_itself():
    """The tableaus in use satisfy Butcher's order conditions; an inconsistent one, or a
    row of the wrong length, is refused when it is made."""
    assert (sorted(TABLEAUS) == ["bs3", "euler", "heun", "heun_fsal", "rk4"]
            and (EULER.order, HEUN.order, RK4.order) == (1, 2, 4))
    with pytest.raises(ValueError, match="not of order 2: order condition 2"):
        Tableau.explicit_rk("bad", ((0.5,),), (0.5, 0.5), order=2)  # c₂ = ½ needs b = (0, 1)
    with pytest.raises(ValueError, match="not of order 1: order condition 1"):
        Tableau.explicit_rk("bad", ((1.0,),), (0.5, 0.6), order=1)
    with pytest.raises(ValueError, match="not of order 4: order condition 4"):  # RK4's nodes, not its A
        Tableau.explicit_rk("bad", ((0.5,), (0.25, 0.25), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6),
                            order=4)
    with pytest.raises(ValueError, match="row j of a must hold j\\+1 coefficients"):
        Tableau("bad", a=((0.0,), (0.5, 0.5, 0.0)), b=(0.5, 0.5), order=1)
