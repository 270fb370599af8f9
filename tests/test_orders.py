"""The order of every TENG integrator and of its embedded error estimate, measured on
real TENG steps (the method's own tableau, stages, warm start and stage solver).

Regime: heat with sines2d on :class:`helpers.linear_model.FourierNet`, a network linear
in θ whose span the heat operator maps into itself, so that every stage's projection is
exact and θ₀ is the initial condition to round-off: the error left is the integrator's
alone, ``|R(z)ⁿ − eⁿᶻ|`` per mode (R the tableau's stability polynomial, z = −ν|k|²Δt),
which falls as Δtᵖ. (On the paper's network the projection floor, ~1e-7–4e-6 on the
64² evaluation grid after a fit on 32², hides RK4's time error at every Δt a test can
afford; these tests replace a 233 s one that measured Euler and Heun there.)

Δt are chosen so that the errors lie far above round-off (≥ 1e-9) and z ≤ 0.2 (the
slope within a few % of the asymptotic one; measured values in each parametrisation).
The tolerance 0.15 on the slope is derived from the next term: the error is
C Δtᵖ (1 + c z + …) with |c z| ≤ 0.2 · (p+1)/(p+2) < 0.2 at the largest Δt, which moves a
least-squares slope over a factor 4 in Δt by at most log(1.2)/log(4) ≈ 0.13."""

import jax
import numpy as np
import pytest
from helpers.configs import make_config
from helpers.linear_model import teng_on_fourier
from helpers.numerics import convergence_order

from teng_eq.methods.base import StepInputs

T_FINAL = 0.8
#: grid 16: resolves the modes (|k|∞ ≤ 3) exactly; all 12 parameters drawn in every fit.
SETUP = ["equation=heat", "equation.initial_condition=sines2d", "grid=16", "subsample_first=12",
         "subsample=12", "estimate=none", f"t_final={T_FINAL}"]


def _run(method, step, rates, dt: float):
    """θ(T) − θ₀e^{ΛT} relative, and the first step's ``local_error`` (None without);
    ``step``: the method's step compiled with Δt an argument (one program for every Δt)."""
    state, key, local = method.init(), jax.random.PRNGKey(0), None
    for n in range(round(T_FINAL / dt)):
        state, record = step(state, jax.random.fold_in(key, n), dt)
        if n == 0 and "local_error" in record.metrics:
            local = float(record.metrics["local_error"])
    theta0 = np.asarray(method.theta0)
    exact = theta0 * np.exp(rates * T_FINAL)
    # The basis is orthogonal on the grid with equal norms: the relative error of θ is
    # the relative L² error of û.
    return float(np.linalg.norm(np.asarray(method.parameters(state)) - exact) / np.linalg.norm(exact)), local


# (config, order, estimate's order, Δt); the measured slopes are in docs/claims.md.
CASES = [
    pytest.param(["method=teng_euler"], 1, None, [0.025, 0.05, 0.1], id="euler"),
    pytest.param(["method=teng_heun"], 2, 2, [0.05, 0.1, 0.2], id="heun"),
    pytest.param(["method=teng_heun", "method.integrator=heun_fsal"], 2, 3, [0.05, 0.1, 0.2], id="heun_fsal"),
    pytest.param(["method=teng_bs3"], 3, 3, [0.05, 0.1, 0.2], id="bs3"),
    pytest.param(["method=teng_rk4"], 4, 4, [0.1, 0.2, 0.4], id="rk4"),
    # Implicit and IMEX (teng_eq.stepping.implicit); embedded estimates for cn, sdirk2, sdirk3, sdirk4.
    # The IMEX pairs on heat split as S = 0.7νΔ implicit, N = 0.3νΔ explicit, so that both
    # tableaux and their coupling act (the short form's own split would leave N = 0).
    pytest.param(["method=teng_beuler"], 1, None, [0.025, 0.05, 0.1], id="beuler"),
    pytest.param(["method=teng_cn"], 2, 2, [0.05, 0.1, 0.2], id="cn"),
    pytest.param(["method=teng_sdirk2"], 2, 2, [0.05, 0.1, 0.2], id="sdirk2"),
    pytest.param(["method=teng_sdirk3"], 3, 3, [0.1, 0.2, 0.4], id="sdirk3"),
    pytest.param(["method=teng_sdirk4"], 4, 4, [0.1, 0.2, 0.4], id="sdirk4"),
    pytest.param(["method=teng_imex_euler", "equation.impl=helpers.split_heat:SplitHeat"], 1, None,
                 [0.025, 0.05, 0.1], id="imex_euler"),
    pytest.param(["method=teng_ars222", "equation.impl=helpers.split_heat:SplitHeat"], 2, None,
                 [0.05, 0.1, 0.2], id="ars222"),
]


@pytest.mark.parametrize("overrides, order, error_order, dts", CASES)
def test_integrator_and_its_estimate_have_their_orders(overrides, order, error_order, dts):
    cfg = make_config(*SETUP, *overrides, f"dt={dts[0]}")
    method, rates = teng_on_fourier(cfg)
    step = jax.jit(lambda s, k, d: method.step(s, k, StepInputs(dt=d)))
    runs = [_run(method, step, rates, dt) for dt in dts]
    errors, locals_ = [e for e, _ in runs], [loc for _, loc in runs]
    assert min(errors) > 1e-9, errors  # far above round-off: the slope is the integrator's
    slope = convergence_order(dts, errors)
    print(f"order {slope:.3f} errors {errors}")
    assert abs(slope - order) <= 0.15, (slope, errors)
    if error_order is None:
        assert all(loc is None for loc in locals_)
    else:
        # One step from θ₀: ‖Δt Σ b_errorⱼ kⱼ‖ = O(Δt^error_order).
        est_slope = convergence_order(dts, locals_)
        print(f"estimate's order {est_slope:.3f} local errors {locals_}")
        assert abs(est_slope - error_order) <= 0.15, (est_slope, locals_)
