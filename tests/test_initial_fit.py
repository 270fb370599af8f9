"""θ₀ on its own terms: its own grid (``fit.grid``), each stage's budget, and the damping
of stage 2's plain iterations (:func:`teng_eq.initial_fit.value_stage`)."""


import numpy as np
from conftest import make_config

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
