"""The baselines at their best faithful form: a change that weakens one fails here.

Each baseline of Table 1 on heat at ``experiment=table1_cpu`` size (Δt = 0.005,
T = 0.05, 64² grid, the method yamls' CPU sizes), seed 0, θ₀ fitted once in the session's
cache. Measured 2026-11-28 on `f08f12e` (the 2-core development machine), global relative
L², seed 0 and, for the spread, seeds 1 and 2 (another θ₀ draw, another PINN start):

=============  =========  ===================  ==============
method         seed 0     seeds 1, 2           band
=============  =========  ===================  ==============
TDVP-RK4       2.650e-6   2.04/2.27/2.54e-6 †  [1.5e-6, 3.0e-6]
OBTI-Adam      3.196e-4   3.754e-4, 3.639e-4   [2.0e-4, 4.5e-4]
OBTI-L-BFGS    2.006e-4   1.915e-4, 2.666e-4   [1.2e-4, 3.2e-4]
PINN-BFGS      7.009e-4   6.245e-4, 1.256e-3   [4.0e-4, 1.0e-3]
PINN-ENGD      3.888e-4   7.399e-4, 3.047e-3   [2.5e-4, 1.0e-3]
=============  =========  ===================  ==============

† TDVP: θ₀ of seed 0 with the step keys of seeds 1, 2, 3 (its subsets are drawn per stage).

Each run is deterministic on one machine (the same value from a fresh θ₀ fit and from
the cached one). Machines of this kind differ in the last bits, which moves TENG's and
TDVP's errors by about 1 % (TDVP at `4a080d2`: 2.474e-6 on another machine, 2.477e-6
here) but PINN-ENGD's by 2× (7.345e-4 on another machine; 3.888e-4 here from the same
commit and from today's code): its band holds both. The upper ends hold seed 0 with
13 % (TDVP), 41 % (OBTI-Adam), 60 % (OBTI-L-BFGS), 43 % (PINN-BFGS) and 36 % over the
other machine's PINN-ENGD, and fail a baseline made worse beyond what a draw or a
machine explains (a larger damping bias, a dropped row scaling on a non-uniform grid,
fewer parameters per stage or iterations per step, a learning-rate schedule lost). The
seed-2 PINNs fall outside: a PINN's error moves 2–8× with its start, so a new draw of
the suite's keys means re-measuring, not a weaker baseline. Below the lower ends the
problem itself has changed: re-measure.

TDVP-RK4 measured 2.474e-6 at `4a080d2` (before the layers change) and 2.650e-6 since:
its step is unchanged — the old θ₀ in today's code gives 2.4773804710891813e-06 and
today's θ₀ in the old code 2.650076953553127e-06, each bit for bit the other commit's
value — and what moved it is the CPU θ₀ fit, whose θ₀ is 6× closer to u₀ now (start
error 1.1e-8 against 7.1e-8; TENG-Heun's global error 5.81e-8 against 8.91e-8 from the
old θ₀). TDVP's error is its projections' noise, not θ₀'s: both values lie in the spread
of its draws above. OBTI-Adam likewise: 3.649e-4 at `4a080d2` and from the old θ₀ in
today's code, 3.196e-4 from today's θ₀; the PINNs, which do not start from θ₀, give the
same values at both commits here.
"""

import pytest
from helpers.configs import make_config

from teng_eq.simulation import run_simulation

#: ``table1_case`` → the band of its global relative L² (table above).
BANDS = {
    "heat-tdvp_rk4": (1.5e-6, 3.0e-6),
    "heat-obti_adam": (2.0e-4, 4.5e-4),
    "heat-obti_lbfgs": (1.2e-4, 3.2e-4),
    "heat-pinn_bfgs": (4.0e-4, 1.0e-3),
    "heat-pinn_engd": (2.5e-4, 1.0e-3),
}


@pytest.mark.slow  # θ₀'s fit at CPU size once, then 20 s (TDVP) to 80 s (PINN-BFGS) a method
@pytest.mark.parametrize("case", list(BANDS))
def test_each_baseline_on_heat_at_cpu_size_keeps_its_error(cache_dir, case):
    cfg = make_config("experiment=table1_cpu", f"table1_case={case}", "progress=false")
    assert (cfg.method.name, cfg.dt, cfg.t_final, cfg.seed) == (case.split("-")[1], 0.005, 0.05, 0)
    result = run_simulation(cfg, cache_dir=cache_dir)
    low, high = BANDS[case]
    assert low <= result.global_rel_l2 <= high, (case, result.global_rel_l2)
