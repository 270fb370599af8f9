"""Raissi's Burgers on [−1, 1] with zero Dirichlet data: the Cole–Hopf reference against a
published number, its own quadrature, the periodic line's ETDRK4 and the PDE; TENG on it."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, make_equation

from teng_eq import api
from teng_eq.equations.line import BurgersLine
from teng_eq.reference import reference_solution
from teng_eq.reference.cole_hopf import ColeHopf, cole_hopf

NU = 0.01 / np.pi


def test_cole_hopf_gives_the_published_steepest_slope_and_converges_in_its_nodes():
    """At t = 1.6037/π the slope at x = 0 is −152.00516 (Basdevant et al. 1986, their Table of
    the exact solution); 2,001 and 4,001 trapezoid nodes agree to round-off on Raissi's grid."""
    t, d = 1.6037 / np.pi, 1e-7
    slope = (cole_hopf(np.array([d]), t, NU) - cole_hopf(np.array([-d]), t, NU))[0] / (2 * d)
    assert slope == pytest.approx(-152.00516, abs=5e-5)
    x = np.linspace(-1, 1, 256)
    for s in (0.05, 0.5, 1.0):
        assert np.max(np.abs(cole_hopf(x, s, NU) - cole_hopf(x, s, NU, nodes=4001))) < 1e-11


def test_cole_hopf_solves_burgers_and_agrees_with_the_periodic_lines_etdrk4():
    """Centred differences of the integral satisfy uₜ = νu_xx − uu_x to their own O(h²), and the
    periodic line's pseudo-spectral reference from u₀ moved by 1 (u is odd and 2-periodic) gives
    the same field to 1e-10 at t = 0.2."""
    x, t, h, k = np.linspace(-0.9, 0.9, 19), 0.2, 1e-4, 1e-5
    u = cole_hopf(x, t, NU)
    ut = (cole_hopf(x, t + k, NU) - cole_hopf(x, t - k, NU)) / (2 * k)
    ux = (cole_hopf(x + h, t, NU) - cole_hopf(x - h, t, NU)) / (2 * h)
    uxx = (cole_hopf(x + h, t, NU) - 2 * u + cole_hopf(x - h, t, NU)) / h**2
    assert np.max(np.abs(ut - NU * uxx + u * ux)) < 1e-5 * np.max(np.abs(ut))
    line = BurgersLine(name="burgers_1d", nu=NU, lengths=(2.0,), initial_condition="raissi")
    n = 512
    periodic = reference_solution(line, [t], n=n, cache_dir=False).values(0, n)
    grid = np.arange(n) * 2.0 / n - 1.0  # the line's points moved back to [−1, 1)
    np.testing.assert_allclose(periodic, cole_hopf(grid, t, NU), atol=1e-10)


def test_the_preset_takes_cole_hopf_and_another_problem_takes_none():
    """Raissi's problem has the Cole–Hopf reference; moved off [−1, 1] it has none."""
    assert isinstance(make_equation("burgers_raissi").reference_scheme(), ColeHopf)
    assert make_equation("burgers_raissi", "equation.origin=[0.0]").reference_scheme() is None


@pytest.mark.slow
def test_teng_follows_raissis_burgers_with_its_dirichlet_ends(cache_dir):
    """TENG-RK4 on 128 Gauss–Legendre nodes (a cheap θ₀), 10 steps of 0.002: the error against
    Cole–Hopf stays below 1e-4 and the ends' |û| below 1e-5 at every step (the preset's run to
    t = 1, 1,024 nodes: 1.8e-6 at t = 1, docs/guides/boundaries.md)."""
    records = []
    result = api.run("burgers_raissi", "grid=128", "eval_grid=256", "dt=0.002", "t_final=0.02",
                     "method=teng_rk4", "subsample_first=256", "subsample=192", "progress=false", *CHEAP_FIT,
                     cache_dir=cache_dir, on_step=records.append)
    assert len(result.rel_l2) == 11 and np.all(np.asarray(result.rel_l2) <= 1e-4)
    assert max(r.metrics["boundary_error"] for r in records) <= 1e-5
