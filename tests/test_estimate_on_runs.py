"""The error estimate on real runs: on every equation with a reference, with the paper's
network, both estimates (``hermite``, ``embedded``) under a fixed Δt and under
``dt=auto``: ``est_rel_l2 / rel_l2`` lies in README's band at every step after the
fifth — the estimate never below the error it never saw, and at most 11 times it on the
periodic equations (the measured ratios: docs/claims.md).

The 2-D periodic equations run at test size, where θ₀ is a short fit (errors 3e-4 to
1e-3), so the known start error e(0) weighs in every step's estimate and the band checks
less than it does at CPU size, where the Error control guide's table has the Hermite
ratios in [1.00, 10.2] and ``embedded`` over-estimating by up to 545× (it measures the
Euler step's error; README says so).

The disk runs at its CPU default (its own θ₀ fit; 16 nodes with a short θ₀ diverge
within 12 steps of Δt = 0.001), to t = 0.03. There the true error decays (Dirichlet
damping) and the estimate's sum of past defects does not, so the ratio grows along the
run (``hermite`` to about 11, ``embedded`` to about 290: docs/claims.md). README's band
there is [1, 15] for ``hermite`` and [1, 600] for ``embedded``.

3-D heat runs on 12³ nodes (errors on 24³) from its own θ₀ fit on 16³ (about 2.5 min;
θ₀ 1.1e-3 — on 8³ nodes the fixed-Δt run blows up between the nodes, which the estimate,
made on them, cannot see)."""
from __future__ import annotations

import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, make_config

from teng_eq.simulation import run_simulation

#: README's band for ``est_rel_l2 / rel_l2`` at every step after the fifth (periodic
#: equations, both estimates).
BAND = (1.0, 11.0)
#: README's bands on the disk, per estimate (measured maxima 11.05 and 290, above).
DISK_BAND = {"hermite": (1.0, 15.0), "embedded": (1.0, 600.0)}
#: Test size: 16² nodes (errors on 32²), 12 steps of Δt = 0.005 or the controller's.
SIZE = ["grid=16", "eval_grid=32", "t_final=0.06", "progress=false", *CHEAP_FIT]
STEPS = {"fixed": ["dt=0.005"], "auto": ["dt=auto", "controller.rtol=1e-5"]}
#: The disk at its CPU default: its own Δt, 30 steps to t = 0.03.
DISK = ["equation=heat_disk", "t_final=0.03", "progress=false"]
DISK_STEPS = {"fixed": ["dt=0.001"], "auto": STEPS["auto"]}
#: Each periodic equation at its test size; 3-D heat keeps its own (longer) θ₀ fit.
EQUATIONS = {
    "heat": SIZE,
    "allen_cahn": SIZE,
    "burgers": SIZE,
    "burgers_rect": SIZE,
    "heat3d": ["grid=12", "eval_grid=24", "fit.grid=16", "t_final=0.06", "progress=false"],
}


def _both_estimates(cache_dir, overrides, bands, min_steps):
    """The run under ``overrides`` once with each estimate, its ``est_rel_l2 / rel_l2``
    within ``bands[kind]`` at every step after the fifth (at least ``min_steps`` of them)."""
    runs = {}
    for kind in ("hermite", "embedded"):
        result = run_simulation(make_config(*overrides, f"estimate={kind}"), cache_dir=cache_dir)
        assert result.estimate == kind
        ratio = result.est_rel_l2[6:] / result.rel_l2[6:]
        low, high = bands[kind]
        assert len(ratio) >= min_steps and low <= ratio.min() and ratio.max() <= high, (kind, ratio)
        runs[kind] = result
    return runs


@pytest.mark.slow  # 20 runs, each compiling its own step and estimate: CI's slow stage
@pytest.mark.parametrize("steps", list(STEPS))
@pytest.mark.parametrize("name", list(EQUATIONS))
def test_both_estimates_bracket_the_error_on_real_runs(cache_dir, name, steps):
    runs = _both_estimates(cache_dir, [f"equation={name}", *EQUATIONS[name], *STEPS[steps]],
                           dict.fromkeys(("hermite", "embedded"), BAND), min_steps=6)
    # The estimate watches the run; it does not steer it (the controller reads local_error).
    np.testing.assert_array_equal(runs["hermite"].times, runs["embedded"].times)
    np.testing.assert_array_equal(runs["hermite"].rel_l2, runs["embedded"].rel_l2)


@pytest.mark.slow  # the disk's θ₀ fit at CPU size (~4 min, shared with test_heat_disk) and 4 runs
@pytest.mark.parametrize("steps", list(DISK_STEPS))
def test_both_estimates_bound_the_error_on_the_disk(cache_dir, steps):
    runs = _both_estimates(cache_dir, [*DISK, *DISK_STEPS[steps]], DISK_BAND, min_steps=24)
    np.testing.assert_array_equal(runs["hermite"].times, runs["embedded"].times)
