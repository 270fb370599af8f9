"""The baselines at their best faithful form: a change that weakens one fails here.

Each baseline of Table 1 on heat at ``experiment=table1_cpu`` size (Δt = 0.005,
T = 0.05, 64² grid, the method yamls' CPU sizes), seed 0, θ₀ fitted once in the session's
cache. Each run is deterministic on one machine, but what it gives depends on draws and
rounding that a faithful implementation does not fix, so each band holds every value
measured of today's code (2026-11-28, `f08f12e`, the 2-core development machine):

=============  ==========  ==================================================  ================
method         seed 0      other draws and roundings                            band
=============  ==========  ==================================================  ================
TDVP-RK4       2.650e-6    subsets 2.04/2.27/2.54e-6; θ₀ (a) 2.477e-6,          [1.5e-6, 5.0e-6]
                           (b) 3.752e-6
OBTI-Adam      3.196e-4    seeds 3.754/3.639e-4; θ₀ (a) 3.649e-4, (b) 3.404e-4  [2.0e-4, 4.5e-4]
OBTI-L-BFGS    2.006e-4    seeds 1.915/2.666e-4; θ₀ (b) 2.083e-4                [1.2e-4, 3.2e-4]
PINN-BFGS      7.009e-4    seeds 6.245e-4/1.256e-3; (c) 7.009e-4                [4.0e-4, 1.6e-3]
PINN-ENGD      3.888e-4    seeds 7.399e-4/3.047e-3; (c) 1.091e-3; (d) 7.345e-4  [2.5e-4, 4.0e-3]
=============  ==========  ==================================================  ================

seeds: seeds 1 and 2 (another θ₀, another PINN start); subsets: θ₀ of seed 0 with the step
keys of seeds 1–3 (TDVP draws its parameters per stage); (a) θ₀ of `4a080d2`'s fit in
today's code; (b) θ₀ fitted with two OpenBLAS threads (its last bits differ; start error
1.28e-8 against 1.12e-8), the steps with one; (c) the whole run with two OpenBLAS threads;
(d) seed 0 on another machine of this kind.

**TDVP-RK4 moved from 2.474e-6 to 2.650e-6 (and 3.3e-6 was reported) without changing.**
Its step is the same: the old θ₀ in today's code gives 2.4773804710891813e-06 and today's θ₀
in the old code 2.650076953553127e-06, each bit for bit the other commit's value, and two
OpenBLAS threads in the steps move it by 0.04 %. What moves it is which θ₀ it starts
from, not how close θ₀ is to u₀ — today's fit (start error 1.12e-8) gives 2.65e-6, the same
fit rounded otherwise (1.28e-8) 3.75e-6, the older fit (7.1e-8) 2.48e-6 — and which
parameters its stages draw. So 3.3e-6 lies inside the faithful method's spread,
and no θ₀ or draw is chosen here to make it look better: seed 0 is what a user gets.
OBTI-Adam moved with θ₀ the same way (3.649e-4 from `4a080d2`'s θ₀, 3.196e-4 from today's).

The upper ends hold the largest value measured with a margin of 33 % (TDVP), 20 % (OBTI-Adam,
OBTI-L-BFGS), 27 % (PINN-BFGS) and 31 % (PINN-ENGD), and fail a baseline made worse beyond
what a draw or a rounding explains: a larger damping bias, a dropped row scaling on a
non-uniform grid, fewer parameters per stage or iterations per step, a learning-rate schedule
lost. They sit below what a method that does nothing reaches (û = u₀: 9.1e-3 here). A
smaller weakening cannot be told from a draw by one run: PINN-ENGD moves 2.8× with OpenBLAS's
thread count alone. Below the lower ends the problem itself has changed: re-measure.
"""

import pytest
from helpers.configs import make_config

from teng_eq.simulation import run_simulation

#: ``table1_case`` → the band of its global relative L² (table above).
BANDS = {
    "heat-tdvp_rk4": (1.5e-6, 5.0e-6),
    "heat-obti_adam": (2.0e-4, 4.5e-4),
    "heat-obti_lbfgs": (1.2e-4, 3.2e-4),
    "heat-pinn_bfgs": (4.0e-4, 1.6e-3),
    "heat-pinn_engd": (2.5e-4, 4.0e-3),
}


@pytest.mark.slow  # θ₀'s fit at CPU size once, then 20 s (TDVP) to 80 s (PINN-BFGS) a method
@pytest.mark.parametrize("case", list(BANDS))
def test_each_baseline_on_heat_at_cpu_size_keeps_its_error(cache_dir, case):
    cfg = make_config("experiment=table1_cpu", f"table1_case={case}", "progress=false")
    assert (cfg.method.name, cfg.dt, cfg.t_final, cfg.seed) == (case.split("-")[1], 0.005, 0.05, 0)
    result = run_simulation(cfg, cache_dir=cache_dir)
    low, high = BANDS[case]
    assert low <= result.global_rel_l2 <= high, (case, result.global_rel_l2)
