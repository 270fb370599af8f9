"""The baselines at their best faithful form: a change that weakens one fails here.

TDVP-RK4 on heat at ``experiment=table1_cpu`` size (Δt = 0.005, T = 0.05, 64² grid,
1,024 of 8,361 parameters drawn per RK stage, θ₀ fitted fresh in the test's cache).
Measured 2026-11-27 on main b2135f4 (the 2-core dev machine): global relative L²
2.650e-6, the same bit for bit from a fresh θ₀ fit and from the cached one (the fit is
deterministic). What moves it is the draw of the parameter subsets: with that θ₀ and
the step keys of seeds 1, 2, 3 it is 2.04e-6, 2.27e-6, 2.54e-6. The band [1.5e-6, 3.0e-6]
holds every draw measured with 13 % to spare above; 3.3e-6, the 1.34× worse value
reported in issue 30, fails it, as would a projection made worse (a larger damping
bias, a dropped row scaling on a non-uniform grid, fewer parameters per stage).
Below 1.5e-6 the problem itself has changed (the test says so): re-measure.
"""

import pytest
from helpers.configs import make_config

from teng_eq.simulation import run_simulation


@pytest.mark.slow  # θ₀'s fit at CPU size and 10 TDVP steps: ~5 minutes on 2 busy cores
def test_tdvp_rk4_heat_at_cpu_size(tmp_path):
    cfg = make_config("experiment=table1_cpu", "table1_case=heat-tdvp_rk4")
    assert (cfg.method.name, cfg.dt, cfg.t_final) == ("tdvp_rk4", 0.005, 0.05)
    result = run_simulation(cfg, cache_dir=tmp_path)
    assert 1.5e-6 <= result.global_rel_l2 <= 3.0e-6, result.global_rel_l2
