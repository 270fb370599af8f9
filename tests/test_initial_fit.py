"""θ₀ on its own terms: its own grid (``fit.grid``), each stage's budget, and the damping
of stage 2's plain iterations (:func:`teng_eq.initial_fit.value_stage`)."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_config

from teng_eq import initial_fit
from teng_eq.initial_fit import FitReport, resolve_init
from teng_eq.model import ParamSpace
from teng_eq.simulation import build_method


def test_theta0_is_fitted_on_its_own_grid_and_shared_by_runs_on_any_grid(tmp_path, monkeypatch):
    """``fit.grid`` sets θ₀'s quadrature whatever the run's ``grid``; the steps keep the
    run's; two runs on different grids with the same fit grid fit θ₀ once."""
    fitted = []

    def fit(net, u0, quadrature, *, key, fit, log=None):  # stands for the fit; records its nodes
        fitted.append(quadrature.points.shape[0])
        theta = ParamSpace(net).flatten(net)
        return theta, FitReport(stage1_loss=1e-8, stage2_loss=1e-16, stage2_rel_loss=1e-16, converged=True,
                                stage1_s=1.0, stage2_s=1.0, stage2_damping=1e-8)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    small = ("equation.initial_condition=sines2d", "subsample_first=256", "subsample=256", "network.init=paper")
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
    """:func:`~teng_eq.initial_fit.value_stage` keeps the first damping whose plain
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
        return (theta + 1.0 if moves else theta), (1e-9 if moves else 1.0)

    monkeypatch.setattr(initial_fit, "refine", fake_refine)
    fit = dataclasses.replace(method.options.fit, damping=1e-9)
    quadrature = cfg.equation.quadrature(16)
    for moves_from, expected in ((1e-9, [1e-9]), (1e-8, [1e-9, 1e-8]), (1.0, [1e-9, 1e-8, 1e-7])):
        tried.clear()
        fitted, loss, damping = initial_fit.value_stage(space, quadrature, theta, jnp.zeros(256), fit, key=None)
        assert [d for d, _ in tried] == pytest.approx(expected) and damping == pytest.approx(expected[-1])
        assert [g for _, g in tried] == [True] * (len(expected) - 1) + [len(expected) < 3]
        moved = moves_from <= expected[-1]
        np.testing.assert_array_equal(fitted, theta + 1.0 if moved else theta)
        assert loss == (1e-9 if moved else 1.0)
