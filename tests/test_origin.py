"""A periodic box from an origin: ``lengths: [[a, b], …]`` (one ``[a, b)`` per axis) or
``origin:`` with ``lengths:`` (docs/guides/your-own-pde.md). The grids start at the origin,
u₀, the operator and the references see the points where they are, and the runs' errors
are those of the same box from 0."""
from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, SINES32, make_config, make_equation

from teng_eq.errors import ConfigError
from teng_eq.run.simulation import run_simulation

PI = math.pi
#: [−π, π): the line's heat from sin x + ½ cos 3x (tests/test_line.py's problem).
CENTRED_LINE = f"equation.lengths=[[{-PI!r},{PI!r}]]"


def test_intervals_give_the_origin_and_the_grids_start_there():
    """``[[a, b]]`` is ``origin: [a]``, ``lengths: [b − a]``; every quadrature's points lie in
    [a, b), the fit grid's first node on a; from 0 the points are exactly those of before."""
    eq, plain = make_equation("heat_1d", CENTRED_LINE), make_equation("heat_1d")
    assert eq.origin == (-PI,) and eq.lengths == (2 * PI,) and plain.origin is None
    for quadrature in (eq.quadrature(64), eq.holdout(64, 32), eq.evaluation(128)):
        x = np.asarray(quadrature.points)[:, 0]
        assert x.min() >= -PI and x.max() < PI
    assert np.asarray(eq.quadrature(64).points)[0, 0] == -PI
    shift = np.asarray(eq.quadrature(64).points) - np.asarray(plain.quadrature(64).points)
    assert np.max(np.abs(shift + PI)) < 1e-15
    square = make_equation("heat", "equation.lengths=[[-1.0,1.0],[2.0,4.0]]")
    assert square.origin == (-1.0, 2.0) and square.lengths == (2.0, 2.0)


@pytest.mark.parametrize("lengths, why", [
    ("[[1.0,0.0]]", "must be one \\[a, b\\] per axis, numbers with a < b"),
    ("[[0.0,1.0],2.0]", "must be one \\[a, b\\] per axis"),
    ("[[0.0,1.0],[0.0,1.0]]", "must be 1 numbers > 0, one per dimension"),
])
def test_a_bad_interval_is_one_line(lengths, why):
    with pytest.raises(ConfigError, match=f"^invalid config: equation.lengths=.*: {why}"):
        make_equation("heat_1d", f"equation.lengths={lengths}")
    with pytest.raises(ConfigError, match="^invalid config: equation.lengths=.*leave equation.origin out$"):
        make_equation("heat_1d", "equation.lengths=[[0.0,1.0]]", "+equation.origin=[0.0]")


def test_the_references_sample_u0_from_the_origin():
    """Exact Fourier decay on [−π, π): e^{−0.1t} sin x + ½ e^{−0.9t} cos 3x at the evaluation
    points to round-off; pseudo-spectral ETDRK4 (Allen–Cahn on a line from sin x + ½ cos 3x,
    shifted by half its period, whose nodes are the same set) the field from 0 rolled by half the grid."""
    eq = make_equation("heat_1d", CENTRED_LINE)
    x = np.asarray(eq.evaluation(128).points)[:, 0]
    values = eq.reference(np.array([0.0, 0.5])).values(1, 128)
    exact = math.exp(-0.05) * np.sin(x) + 0.5 * math.exp(-0.45) * np.cos(3 * x)
    assert np.max(np.abs(values - exact)) < 1e-14
    ac = make_equation("allen_cahn_1d", "equation.initial_condition=two_waves")
    half = ac.lengths[0] / 2
    moved = make_equation("allen_cahn_1d", "equation.initial_condition=two_waves",
                          f"equation.lengths=[[{-half!r},{half!r}]]")
    times, n, m = np.array([0.0, 0.2]), 128, 64
    base = ac.reference(times, n=n, dt=1e-3).values(1, m)
    shifted = moved.reference(times, n=n, dt=1e-3).values(1, m)
    assert np.max(np.abs(shifted - np.roll(base, m // 2))) < 1e-12 * np.max(np.abs(base))


@pytest.mark.slow  # ~25–35 s (the default suite's 15 minutes)
def test_teng_on_a_line_from_an_origin_has_the_errors_of_the_line_from_zero(cache_dir):
    """TENG-Heun on u_t = 0.1 u_xx on [−π, π) and on [0, 2π), one u₀: both within θ₀'s and
    Heun's error of the exact solution, and within a factor 2 of each other at every step."""
    common = ["equation=heat_1d", "grid=64", "eval_grid=128", "t_final=0.1", "progress=false", *CHEAP_FIT,
              "dt=0.01"]
    centred = run_simulation(make_config(*common, CENTRED_LINE), cache_dir=cache_dir)
    plain = run_simulation(make_config(*common), cache_dir=cache_dir)
    assert centred.global_rel_l2 < 2e-5 and np.all(centred.rel_l2 < 3e-5), centred.rel_l2
    ratio = centred.rel_l2[1:] / plain.rel_l2[1:]
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio


@pytest.mark.slow  # its θ₀ fit on the moved grid (~45 s on 2 cores)
def test_teng_on_a_square_from_an_origin_has_the_errors_of_the_square_from_zero(warm_cache):
    """The paper's heat on [−π, π)² from sin x₁ sin x₂ + ½ cos(2x₁ + x₂) (a 32² grid, Δt
    0.02): each step's error within a factor 2 of the same run on [0, 2π)²."""
    common = [*SINES32, "t_final=0.06", "dt=0.02", "progress=false"]
    centred = run_simulation(make_config(*common, f"equation.lengths=[[{-PI!r},{PI!r}],[{-PI!r},{PI!r}]]"),
                             cache_dir=warm_cache)
    plain = run_simulation(make_config(*common), cache_dir=warm_cache)
    ratio = centred.rel_l2[1:] / plain.rel_l2[1:]
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio
    assert centred.global_rel_l2 < 1e-5, centred.global_rel_l2
