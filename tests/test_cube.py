"""Many dimensions by sampled points (docs/guides/dimensions.md): the cube's
quadratures, the exact solutions, the moved points, the Monte Carlo standard error, the
preflight's sizes; a heat run at d = 4 at test size. The d = 4 to 10 benchmarks run as
presets with their measured results in the guide."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.bands import EVERY_STEP, SAMPLED_HERMITE
from helpers.configs import CHEAP_FIT, make_config, make_equation

from teng_eq.domains.sampled import sample_points
from teng_eq.equations import operator
from teng_eq.errors import ConfigError
from teng_eq.estimate.defect import fourier_modes
from teng_eq.jobs.resources import needs
from teng_eq.run.metrics import monte_carlo_se
from teng_eq.run.simulation import build_method, run_simulation

#: Heat at d = 4 at test size: 512 points of the fits (θ₀ on 1024, a short fit), errors on 20,000.
SMALL = ["equation=heat_cube", "equation.dim=4", "grid=512", "fit.grid=1024", "eval_grid=20000",
         "t_final=0.05", "dt=0.01", "progress=false", *CHEAP_FIT, "fit.stage2_subsample=512",
         "subsample_first=256", "subsample=192"]


def test_sampled_quadratures_integrate_within_their_error():
    """∫ ∏(1 + ½cos xᵢ)² over [0, 2π)⁶ = (2π)⁶ (9/8)⁶: the uniform rule of the errors within
    4 of its standard errors, the Sobol rule of the fits within half the standard error
    uniform points as many would have; the three point sets distinct, inside the cube."""
    eq = make_equation("heat_cube", "equation.dim=6")
    exact = (2 * math.pi) ** 6 * (9 / 8) ** 6
    fits, held, errors = eq.quadrature(4096), eq.holdout(4096, 1024), eq.evaluation(100_000)
    for q in (fits, held, errors):
        x = np.asarray(q.points)
        assert x.shape[1] == 6 and np.all((x >= 0) & (x < 2 * math.pi))

    def f(q):
        return np.asarray(eq.u0(np.asarray(q.points).T)) ** 2

    values = f(errors)
    se = eq.domain.volume * values.std() / math.sqrt(values.size)
    assert abs(np.sum(errors.weights * values) - exact) < 4 * se
    # Sobol: below half the standard error of 4096 uniform points.
    assert abs(np.sum(fits.weights * f(fits)) - exact) < 0.5 * se * math.sqrt(values.size / 4096)
    assert not np.any(np.isin(np.asarray(fits.points)[:, 0], np.asarray(held.points)[:, 0]))
    assert eq.point_count(4096) == 4096 and len(held.points) == 1024


@pytest.mark.parametrize("name", ["heat_cube", "advection_diffusion_cube", "kpz_cube"])
def test_the_exact_solutions_solve_their_equations(name):
    """u(x, t) of each cube equation: ∂ₜu (central difference) equals L[u] (autodiff) at
    random points of the 6-cube, and u(·, 0) = u₀."""
    eq = make_equation(name, "equation.dim=6")
    x = np.asarray(sample_points(64, 6, 2 * math.pi, "uniform", 7))
    t, h = 0.3, 1e-5
    dudt = (eq.solution(x.T, t + h) - eq.solution(x.T, t - h)) / (2 * h)
    np.testing.assert_allclose(np.asarray(operator(eq, lambda p: eq.solution(p.T, t), jnp.asarray(x), t)),
                               dudt, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(eq.solution(x.T, 0.0), np.asarray(eq.u0(x.T)), rtol=1e-14)


@pytest.mark.slow  # ~35 s (the default suite's 15 minutes)
def test_moved_points_are_fresh_each_step_and_stay_in_the_cube(cache_dir):
    """Under ``fresh`` a step moves its fit and held-out points by random shifts modulo
    2π: other points each step, every one inside the cube, the set's spacing kept."""
    method = build_method(make_config(*SMALL), cache_dir=cache_dir)
    step = method.advance
    assert step.moving
    a, b = step.moved(jax.random.PRNGKey(1)), step.moved(jax.random.PRNGKey(2))
    pa, pb, p0 = (np.asarray(s.solver.points) for s in (a, b, step))
    assert not np.allclose(pa, pb) and np.all((pa >= 0) & (pa < 2 * math.pi))
    d0 = np.mod(pa - p0, 2 * math.pi)
    np.testing.assert_allclose(d0, d0[:1].repeat(len(d0), axis=0), atol=1e-12)  # one shift for all
    assert not np.allclose(np.asarray(a.holdout.points) - np.asarray(step.holdout.points), d0[0])


def test_the_monte_carlo_standard_error_matches_the_spread_of_repeated_estimates():
    """monte_carlo_se of one sample of n points against the spread of the relative error
    over 200 independent samples: within 20 %."""
    rng = np.random.default_rng(0)
    def sample():
        x = rng.random((2000, 3)) * 2 * math.pi
        ref = np.prod(1 + 0.5 * np.cos(x), axis=1)
        return ref * (1 + 1e-3 * np.sin(x[:, 0] + x[:, 1])), ref
    rels = [np.linalg.norm(p - r) / np.linalg.norm(r) for p, r in (sample() for _ in range(200))]
    assert monte_carlo_se(*sample()) == pytest.approx(np.std(rels), rel=0.2)


def test_the_preflight_counts_sampled_points_not_a_grid():
    """``grid`` and ``eval_grid`` count points on the cube: 10⁵ error points in 10-D need
    ≈ 10⁵·(10·8 + 48) bytes, not 10⁵⁰."""
    cfg = make_config("equation=heat_cube", "equation.dim=10")
    by_key = {need.key: need for need in needs(cfg)}
    assert by_key["eval_grid"].nbytes == 100_000 * (8 * 10 + 8 + 8 + 32)
    with pytest.raises(ConfigError, match="equation.sampler"):
        make_config("equation=heat_cube", "equation.sampler=halton")
    with pytest.raises(ConfigError, match="equation.eps"):
        make_config("equation=kpz_cube", "equation.eps=1.5")


def test_heat_in_four_dimensions_follows_its_exact_solution(cache_dir):
    """TENG-Heun on the 4-cube at test size: the error stays near θ₀'s, its Monte Carlo
    standard error logged and ≥ 10× below it, and the estimate within [0.8, 3] of it at every
    step (five steps: none after the fifth; tests/helpers/bands.py, ``SAMPLED_HERMITE``)."""
    records = []
    r = run_simulation(make_config(*SMALL), cache_dir=cache_dir, on_step=records.append)
    assert r.estimate == "hermite"
    assert np.all(r.rel_l2 < 3 * r.rel_l2[0]) and r.rel_l2[0] < 5e-3, r.rel_l2
    se = [rec.metrics["rel_l2_se"] for rec in records]
    assert all(0 < s < 0.1 * rel for s, rel in zip(se, r.rel_l2))
    SAMPLED_HERMITE.check(r.est_rel_l2, r.rel_l2, first=EVERY_STEP, min_steps=5)


def test_the_measured_growth_rate_takes_axis_modes_above_three_dimensions():
    """Where an equation declares no growth rate (KPZ) the estimate measures it on Fourier
    modes: in 1-D to 3-D every wave vector up to K, above 3-D those along one axis (4d + 1
    rows), fewer than the 1024 held-out points of the presets even at d = 10."""
    assert [len(fourier_modes((2 * math.pi,) * d, 10**6)) for d in (1, 2, 3)] == [13, 49, 125]
    modes = np.asarray(fourier_modes((2 * math.pi,) * 10, 1024))
    assert modes.shape == (41, 11) and np.all(np.count_nonzero(modes[:, :-1], axis=1) <= 1)
