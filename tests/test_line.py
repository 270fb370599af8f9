"""One dimension: the line's equations, references, error metrics, estimate and plots
(docs/guides/dimensions.md). RSNG's benchmarks themselves run as presets
(``experiment=rsng_allen_cahn``, ``rsng_burgers``); here at test size."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.bands import TRANSPORT
from helpers.configs import CHEAP_FIT, make_config, make_equation
from helpers.numerics import self_convergence

from teng_eq.analysis import plots
from teng_eq.jobs.artifacts import LINE_SNAPSHOTS, snapshot_plan
from teng_eq.run.metrics import frobenius_relative_l2, global_relative_l2
from teng_eq.run.simulation import run_simulation
from teng_eq.stepping.base import Holdout

#: Heat on [0, 2π) from sin x + ½ cos 3x at test size: 64 nodes, errors on 128 points.
HEAT = ["equation=heat_1d", "grid=64", "eval_grid=128", "t_final=0.1", "progress=false", *CHEAP_FIT]


@pytest.mark.parametrize("name", ["allen_cahn_1d", "kuramoto_sivashinsky_1d",
                                  pytest.param("burgers_1d", marks=pytest.mark.slow)])
def test_the_line_references_converge_to_1e_9_at_t4(name):
    """RSNG's setups at T = 4 at the default resolution (Allen–Cahn n = 512, Δt = 10⁻³;
    Burgers n = 4096, Δt = 2.5·10⁻⁴), and Kuramoto–Sivashinsky's (n = 512, Δt = 10⁻²,
    its linear part |k|² − |k|⁴): more modes or half the step change them by ≤ 1e-9."""
    d_modes, d_steps = self_convergence(name, 4.0, *make_equation(name).reference_scheme().default(4.0))
    assert d_modes <= 1e-9 and d_steps <= 1e-9, (d_modes, d_steps)


def test_rsng_initial_conditions_are_theirs_and_periodic():
    """Allen–Cahn's u₀ at x = π/2 is ⅓tanh 2 − 1 + (the far bumps); Burgers' on [0, 2) is
    (1 − y²)e^{−30(y + ½)²} at y = x − 1, 0.75 at its centre y = −½, and both meet
    their periodic images to round-off."""
    ac, burgers = make_equation("allen_cahn_1d"), make_equation("burgers_1d")
    far = math.exp(-27 * (math.pi / 2 - 4.2) ** 2) + math.exp(-38 * (math.pi / 2 - 5.4) ** 2)
    assert ac.u0(np.array([[math.pi / 2]]))[0] == pytest.approx(math.tanh(2) / 3 - 1 + far, abs=1e-15)
    assert burgers.u0(np.array([[0.5]]))[0] == pytest.approx(0.75, abs=1e-15)
    for eq in (ac, burgers):
        ends = eq.u0(np.array([[0.0, eq.lengths[0]]]))
        assert abs(ends[0] - ends[1]) < 1e-9


def test_heat_on_a_line_follows_its_exact_solution(cache_dir):
    """TENG-Heun on u_t = 0.1 u_xx: the error stays at θ₀'s plus Heun's, the estimate in
    [0.8, 3] of it at the steps after the fifth (tests/helpers/bands.py, ``TRANSPORT``), and
    the Frobenius error over all steps matches the per-step errors."""
    r = run_simulation(make_config(*HEAT, "dt=0.01"), cache_dir=cache_dir)
    assert r.global_rel_l2 < 2e-5 and np.all(r.rel_l2 < 3e-5), r.rel_l2
    TRANSPORT.check(r.est_rel_l2, r.rel_l2, min_steps=5)  # 10 steps: 6 to 10
    assert r.estimate == "transport"
    assert r.scalars["frobenius_rel_l2"] == pytest.approx(r.global_rel_l2, rel=0.2)


def test_the_frobenius_error_weights_every_time_alike():
    """‖Û − U‖_F/‖U‖_F: the square root of the summed squared norms' ratio; on a uniform
    time grid it is the trapezoid global error with full weights at both ends."""
    err, ref = np.array([1.0, 4.0, 9.0]), np.array([100.0, 100.0, 100.0])
    assert frobenius_relative_l2(err, ref) == pytest.approx(math.sqrt(14 / 300), rel=1e-15)
    assert global_relative_l2(err, ref, [0, 1, 2]) == pytest.approx(math.sqrt((0.5 + 4 + 4.5) / 200),
                                                                    rel=1e-15)


def test_a_line_keeps_its_held_out_points_and_its_fields_for_the_x_t_images():
    """On a line the held-out check gets up to 32² points (a 1-D front needs them), and
    the run keeps LINE_SNAPSHOTS + 1 fields, the start and end among them."""
    holdout = Holdout(None, 1e3, 1e8)
    assert (holdout.points(2048, dim=1) == 1024 and holdout.points(64, dim=2) == 32
            and holdout.points(16, 3) == 16)
    plan = snapshot_plan(make_config(*HEAT, "dt=0.0001"))["snapshot_steps"]
    assert len(plan) == LINE_SNAPSHOTS + 1 and plan[0] == 0 and plan[-1] == 1000


def test_line_fields_draw_profiles_and_x_t_images(tmp_path):
    eq = make_equation("heat_1d")
    evaluation = eq.evaluation(64)
    x = np.asarray(evaluation.points)[:, 0]
    times = np.linspace(0, 1, 11)
    snapshots = {n: (np.sin(x) * math.exp(-0.1 * times[n]) + 1e-6, np.sin(x) * math.exp(-0.1 * times[n]))
                 for n in range(11)}
    path = plots.line_fields(tmp_path / "f.png", snapshots, times, evaluation, title="heat")
    assert path.stat().st_size > 10_000
    no_ref = {n: (u, None) for n, (u, _) in snapshots.items()}
    assert plots.line_fields(tmp_path / "g.png", no_ref, times, evaluation).stat().st_size > 5_000
