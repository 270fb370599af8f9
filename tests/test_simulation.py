"""Whole TENG runs (θ₀ fit, reference, time stepping, metrics) at test size.

The initial condition here is ``sines2d`` (two Fourier modes), which a 32² grid
resolves exactly, so that a run costs seconds; the paper's condition needs a
minutes-long θ₀ fit and is exercised by the pipeline's default sweep.
"""

import jax
import numpy as np
import pytest
from helpers.configs import small

from teng_eq.run.loop import lower_step
from teng_eq.run.simulation import build_method, run_simulation

#: TENG-Heun on heat, 20 steps. estimate=none: these runs test the steps; the estimate
#: has tests/test_error_control.py (and costs each run the compilation of its fourth derivatives).
HEUN = ["equation=heat", "method=teng_heun", "dt=0.02", "t_final=0.4", "subsample_first=512", "subsample=384",
        "estimate=none"]

heun_run_cfg = small(*HEUN)


@pytest.fixture(scope="module")
def heun_run(cache_dir):
    return run_simulation(heun_run_cfg, cache_dir=cache_dir)


def test_heun_run_tracks_exact_heat(heun_run):
    r = heun_run
    assert r.rel_l2.shape == (21,) and r.step_loss.shape == (20,)
    # 32² nodes for 8,361 parameters: the fits are looser between the nodes than
    # on them (θ₀: 1.2e-7 relative on the nodes, 2.9e-6 on the 64² evaluation
    # grid), well short of the failing held-out ratio.
    assert r.rel_l2[0] < 1e-5
    assert r.global_rel_l2 < 1e-5 and np.all(r.rel_l2 < 1e-5)
    ratio = r.metrics["holdout_ratio"]
    assert r.holdout_flag in ("ok", "warn") and np.all(ratio < 1e3), ratio
    assert r.events == {"fallbacks": 0, "zero_steps": 0}
    assert np.all(r.metrics["iterations"] == 7 + 5)  # the fixed policy: the caps of both stages
    assert np.all(np.diff(r.wall_time_s) > 0)
    assert r.compile_s > 0 and r.runtime_s == r.wall_time_s[-1] and r.eval_s > 0


def test_theta0_is_cached(heun_run, cache_dir):
    again = run_simulation(small(*HEUN, "t_final=0.04"), cache_dir=cache_dir)
    assert again.fit_report.cached is True
    assert again.rel_l2[0] == heun_run.rel_l2[0]


def test_stage_tables(heun_run):
    for n, table in enumerate(heun_run.losses):
        # Heun: each stage has one row per iteration it ran plus its starting loss.
        assert table.shape == (heun_run.metrics["iterations"][n] + 2, 4)
        last = table[table[:, 0] == 1]
        assert list(last[:, 1]) == list(range(len(last)))
        # The fixed policy returns the last iterate, the adaptive one the best.
        final = last[-1, 2] if heun_run_cfg.method.options.stopping.policy == "fixed" else last[:, 2].min()
        assert final == heun_run.step_loss[n]


def test_a_run_that_overfits_the_nodes_is_flagged(cache_dir):
    """8² quadrature nodes, 384 parameters drawn, an undamped SVD: the fits
    interpolate the 64 nodes. The held-out check on the cell centres fails the
    run, while its training losses alone look far better than the error is."""
    cfg = small(*HEUN, "grid=8", "holdout.grid=4", "solver=svd", "damping=1e-14", "subsample_first=384",
                "t_final=0.04", "fit.stage1_max_iters=50", "fit.stage2_max_iters=50",
                "fit.stage2_polish_iters=0")
    r = run_simulation(cfg, cache_dir=cache_dir)
    assert r.holdout_flag == "fail"
    assert np.all(r.metrics["holdout_ratio"] > cfg.method.options.holdout.fail), r.metrics["holdout_ratio"]


def test_runs_that_differ_only_in_dt_compile_one_step(cache_dir):
    """Δt is an argument of TENG's compiled step at a fixed Δt too, so that the jobs of
    a Δt sweep lower to one program (which jax's persistent compilation cache, enabled
    by the pipeline's jobs, then compiles once): the programs of Δt = 0.02 and 0.01 are
    the same text, and that of another iteration count is not."""

    def program(*overrides):
        cfg = small(*HEUN, "t_final=0.04", *overrides)
        method = build_method(cfg, cache_dir=cache_dir)
        return lower_step(method, cfg, jax.random.PRNGKey(0)).as_text()

    a, b = program("dt=0.02"), program("dt=0.01")
    assert a == b
    assert program("dt=0.02", "iters=3") != a
