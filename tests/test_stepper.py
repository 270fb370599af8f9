"""One TENG stage reaches near machine-precision loss in a few iterations."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from teng_eq import ParamSpace, TENGNet, make_equation, operator
from teng_eq.grid import cell_volume, grid_points
from teng_eq.lstsq import SOLVERS
from teng_eq.stepper import Stepper

L = (2 * math.pi, 2 * math.pi)


@pytest.fixture(scope="module")
def setup():
    net = TENGNet(key=jax.random.PRNGKey(0))
    space = ParamSpace(net)
    points, weight = grid_points(32, L), cell_volume(32, L)
    theta = space.flatten(net)
    heat = make_equation("heat", 0.1)
    u = space.apply(theta, points)
    # One heat Euler target (Δt = 0.05) from the network's own function û_θ.
    target = u + 0.05 * operator(heat, lambda p: space.apply(theta, p), points)
    return space, points, weight, theta, target


@pytest.mark.parametrize("solver", SOLVERS)
def test_heat_step_loss_below_1e12_within_7_iterations(setup, solver):
    space, points, weight, theta, target = setup
    stepper = Stepper(space, points, weight, solver=solver)
    run = jax.jit(lambda th, k: stepper.stage(th, target, k, 7, 512, 384))
    _, log = run(theta, jax.random.PRNGKey(1))
    loss = np.asarray(log.loss)
    assert loss[0] > 1e-8  # the target is a real step away
    assert loss[-1] < 1e-12, loss
    # The loss recorded after the stage is the loss of the returned θ.
    assert np.isfinite(np.asarray(log.lsq)).all()


def test_stage_loss_matches_definition(setup):
    space, points, weight, theta, target = setup
    stepper = Stepper(space, points, weight)
    r = space.apply(theta, points) - target
    # ‖r‖²_{L²} by the periodic trapezoid rule: (2π)²/n² Σ r².
    expected = (2 * math.pi) ** 2 / points.shape[0] * float(jnp.sum(r * r))
    assert abs(float(stepper.loss(theta, target)) - expected) <= 1e-14 * expected


def test_subset_update_touches_only_the_subset(setup):
    space, points, weight, theta, target = setup
    stepper = Stepper(space, points, weight)
    new, _, _ = stepper.iteration(theta, target, jax.random.PRNGKey(5), 100)
    changed = np.flatnonzero(np.asarray(new != theta))
    assert 0 < changed.size <= 100
