"""θ₀ on its own terms: its own grid (``fit.grid``), each stage's budget, and the damping
of stage 2's plain iterations (:func:`teng_eq.fit.theta0.value_stage`)."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_config

from teng_eq.domains.quadrature import rotated
from teng_eq.fit import theta0 as initial_fit
from teng_eq.fit.iterate import CHUNK
from teng_eq.fit.stage import StageSolver
from teng_eq.fit.theta0 import FitReport, resolve_init
from teng_eq.network.space import ParamSpace
from teng_eq.run.simulation import build_method


def test_theta0_is_fitted_on_its_own_grid_and_shared_by_runs_on_any_grid(tmp_path, monkeypatch):
    """``fit.grid`` sets θ₀'s quadrature whatever the run's ``grid``; the steps keep the
    run's; two runs on different grids with the same fit grid fit θ₀ once."""
    fitted = []

    def fit(net, u0, quadrature, *, key, fit, log=None, move=None):  # stands for the fit; records its nodes
        fitted.append(quadrature.points.shape[0])
        theta = ParamSpace(net).flatten(net)
        return theta, FitReport(stage1_loss=1e-8, stage2_loss=1e-16, stage2_rel_loss=1e-16, converged=True,
                                stage1_s=1.0, stage2_s=1.0, stage2_damping=1e-8)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    small = ("equation.initial_condition=sines2d", "subsample_first=256", "subsample=256",
             "network.init=paper")
    base = (*small, "fit.grid=48")
    method = build_method(make_config(*base, "grid=16"), cache_dir=tmp_path)
    assert fitted == [48 * 48]
    assert method.advance.solver.points.shape[0] == 16 * 16  # the steps' grid is the run's
    again = build_method(make_config(*base, "grid=32"), cache_dir=tmp_path)
    assert fitted == [48 * 48] and again.fit_report().cached  # one θ₀ for both grids
    np.testing.assert_array_equal(again.theta0, method.theta0)
    build_method(make_config(*small, "grid=16"), cache_dir=tmp_path)
    assert fitted == [48 * 48, 16 * 16]  # fit.grid null: the run's grid


def test_odd_init_needs_every_grid_symmetric():
    """``init: auto`` starts odd only where both the run's and θ₀'s grid map onto
    themselves under the half-period shift (even point counts)."""
    heat = make_config().equation
    assert resolve_init("auto", heat, 64, 128) == "odd"
    assert resolve_init("auto", heat, 64, 63) == "paper"
    assert resolve_init("paper", heat, 64, 64) == "paper"


def test_stage2_raises_its_damping_only_where_the_iterations_are_stuck(monkeypatch):
    """:func:`~teng_eq.fit.theta0.value_stage` keeps the first damping whose plain
    iterations make progress, tenfold steps from ``fit.damping``, and ends at the last
    try's result when none does."""
    cfg = make_config("equation.initial_condition=sines2d", "grid=16", "network.init=paper")
    method = cfg.method
    net = method.cls.network_template(method.options, cfg.problem)
    space = ParamSpace(net)
    theta = space.flatten(net)
    tried = []

    def fake_refine(solver, theta, target, *, give_up_if_stuck, **kw):
        tried.append((solver.damping, give_up_if_stuck))
        moves = solver.damping >= moves_from
        return (theta + 1.0 if moves else theta), (1e-9 if moves else 1.0), not moves

    monkeypatch.setattr(initial_fit, "refine", fake_refine)
    fit = dataclasses.replace(method.options.fit, damping=1e-9)
    quadrature = cfg.equation.quadrature(16)
    for moves_from, expected in ((1e-9, [1e-9]), (1e-8, [1e-9, 1e-8]), (1.0, [1e-9, 1e-8, 1e-7])):
        tried.clear()
        fitted, loss, damping, stalled = initial_fit.value_stage(space, quadrature, theta, jnp.zeros(256),
                                                                 fit, key=None)
        assert [d for d, _ in tried] == pytest.approx(expected) and damping == pytest.approx(expected[-1])
        assert [g for _, g in tried] == [True] * (len(expected) - 1) + [len(expected) < 3]
        moved = moves_from <= expected[-1]
        np.testing.assert_array_equal(fitted, theta + 1.0 if moved else theta)
        assert loss == (1e-9 if moved else 1.0) and stalled is not moved  # the last try's


#: A sampled box at a size where a chunk of θ₀'s iterations takes a moment.
CUBE = ("equation=heat_cube", "equation.dim=2", "grid=64", "fit.grid=64", "network.width=8")


def test_theta0s_value_stage_runs_each_chunk_on_fresh_points():
    """With ``move`` (a sampled box's ``fresh``), each chunk of θ₀'s value stage runs on
    the fit's points moved afresh — one shift for all of them, inside the box, u₀'s values
    there — and the loss it returns is its θ's on the last points drawn."""
    cfg = make_config(*CUBE)
    eq, method = cfg.equation, cfg.method
    net = method.cls.network_template(method.options, cfg.problem)
    space, quadrature = ParamSpace(net), eq.quadrature(64)
    draw = initial_fit.fresh_points(quadrature.points, functools.partial(rotated, periods=eq.periods), eq.u0,
                                    jax.random.PRNGKey(0))
    drawn = []

    def recorded():
        drawn.append(draw())
        return drawn[-1]

    solver = StageSolver(space, quadrature, "cholesky", 1e-6)
    fitted, loss, _ = initial_fit.refine(solver, space.flatten(net), jax.vmap(eq.u0)(quadrature.points),
                                      key=jax.random.PRNGKey(1), subsample=32, tol=0.0, max_iters=2 * CHUNK,
                                      patience=10, redraw=initial_fit.moved_solver(solver, recorded))
    assert len(drawn) == 2
    for points, target in drawn:
        shift = np.mod(np.asarray(points) - np.asarray(quadrature.points), 2 * math.pi)
        np.testing.assert_allclose(np.abs(np.mod(shift - shift[0] + math.pi, 2 * math.pi) - math.pi), 0,
                                   atol=1e-12)
        assert np.all((np.asarray(points) >= 0) & (np.asarray(points) < 2 * math.pi))
        np.testing.assert_allclose(target, jax.vmap(eq.u0)(points), rtol=1e-14)
    assert not np.allclose(drawn[0][0], drawn[1][0])
    last = StageSolver(space, eq.quadrature(64)._replace(points=drawn[-1][0]), "cholesky", 1e-6)
    assert loss == pytest.approx(float(last.loss(fitted, drawn[-1][1])), rel=1e-9)


def test_only_a_fresh_sampled_box_moves_theta0s_points(tmp_path, monkeypatch):
    """The method hands θ₀'s fit a ``move`` where the box's points are ``fresh``, and no
    other; the two θ₀ are cached apart."""
    moves = []

    def fit(net, u0, quadrature, *, key, fit, log=None, move=None):  # records what it was handed
        moves.append(move)
        return ParamSpace(net).flatten(net), FitReport(stage1_loss=1e-8, stage2_loss=1e-16,
                                                       stage2_rel_loss=1e-16, converged=True, stage1_s=1.0,
                                                       stage2_s=1.0, stage2_damping=1e-8)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    for fresh in ("true", "false"):
        build_method(make_config(*CUBE, f"equation.fresh={fresh}"), cache_dir=tmp_path)
    assert moves[0] is not None and moves[1] is None
    points = jnp.zeros((4, 2))
    assert np.ptp(np.asarray(moves[0](points, jax.random.PRNGKey(0))), axis=0) == pytest.approx(0)
