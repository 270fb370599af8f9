"""Implicit and IMEX TENG on periodic systems (teng_eq.stepping.implicit): a stage's solve per
wave vector with the system's m × m symbol where its operator is linear with constant
coefficients (rotating diffusion), the chord Newton with GMRES on the stacked components
otherwise (the Brusselator), IMEX with the per-component stiff part; at steps ten times
the explicit stable one, against the exact solution or the reference."""

from __future__ import annotations

import math
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, make_equation
from helpers.user_files import write_user_system

from teng_eq.api import run
from teng_eq.estimate.transport import SystemTransport
from teng_eq.stepping.implicit import ImplicitStage, constant_symbol

#: RotDiff (κ = 0.2, ω = 1) on 32 nodes: the fit's fastest mode |k| = 16 decays at κk² = 51.2,
#: so TENG-RK4 is stable for Δt ≤ 2.79/51.2 = 0.0545 (measured: stable at 0.05, diverged at 0.1).
ROTDIFF = ["grid=32", "progress=false", *CHEAP_FIT]


def test_a_systems_stage_solves_each_wave_vectors_matrix_symbol():
    """The Brusselator's IMEX stiff part on 32²: its symbol is diag(−ν_u|k|², −ν_v|k|²) per wave
    vector, and the stage's solve u − hSu = r is exact on two modes (one per species), to rounding."""
    eq = make_equation("brusselator")
    q = eq.quadrature(32)
    transport = SystemTransport(eq.periods, q.grid_shape, eq.order, 2)
    symbol = np.asarray(constant_symbol(eq, True, transport, q.points))
    k = np.fft.fftfreq(32, 1 / 32)
    k2 = sum(kk**2 for kk in np.meshgrid(k, k, indexing="ij")).ravel()
    expected = np.stack([np.stack([-0.05 * k2, 0 * k2]), np.stack([0 * k2, -0.2 * k2])])
    np.testing.assert_allclose(symbol, expected, rtol=0, atol=1e-12)
    stage = ImplicitStage(None, eq, transport, 1, imex=True, symbol=symbol)
    x = np.asarray(q.points)
    r = np.where(x[:, 2] == 0, np.sin(x[:, 0]) * np.cos(2 * x[:, 1]), np.cos(3 * x[:, 0]))
    h = 0.1
    u = np.asarray(stage.multiply(stage.resolvent(h, jnp.asarray(symbol)), jnp.asarray(r)))
    exact = np.where(x[:, 2] == 0, r / (1 + h * 0.05 * 5), r / (1 + h * 0.2 * 9))
    np.testing.assert_allclose(u, exact, rtol=0, atol=1e-13)


@pytest.fixture(scope="module")
def rotdiff(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rotdiff")
    write_user_system(folder)
    sys.path.insert(0, str(folder))
    sys.modules.pop("my_system", None)
    from my_system import ExactRotDiff
    yield ExactRotDiff(name="rotdiff", omega=1.0, kappa=0.2, lengths=(2 * math.pi,), initial_condition="wave")
    sys.modules.pop("my_system", None)
    sys.path.remove(str(folder))


@pytest.mark.slow  # θ₀ and the step compiled: 41 s for the first, 5–11 s for the others; CI's slow stage
@pytest.mark.parametrize("method, dt, bound", [("teng_sdirk2", 0.6, 4e-2), ("teng_sdirk3", 0.6, 1.2e-2),
                                               ("teng_ars222", 0.6, 1.5e-1)])
def test_rotating_diffusion_at_eleven_times_the_explicit_stable_step(rotdiff, cache_dir, method, dt, bound):
    """Δt = 0.6 (11× RK4's limit), two steps to T = 1.2, against the exact solution: the stages
    invert [[1 + hκk², hω], [−hω, 1 + hκk²]] per wave number (SDIRK) or the diffusion alone
    (ARS(2,2,2), the rotation explicit). The error is the schemes' own on the rotation
    (ωΔt = 0.6): measured 2026-12-02 (SDIRK2, SDIRK3, ARS222) 1.9e-2, 6.5e-3, 7.8e-2 at T, the
    bounds about 2× those; SDIRK2 at Δt/2 ends at 4.8e-3 (ratio 3.96: second order).
    """
    eq = rotdiff
    r = run(eq, f"method={method}", f"dt={dt}", "t_final=1.2", *ROTDIFF, cache_dir=cache_dir)
    print(method, r.rel_l2)
    assert r.rel_l2.shape == (3,) and np.all(np.isfinite(r.rel_l2)) and r.rel_l2[-1] < bound, r.rel_l2
    if method == "teng_sdirk2":  # the order's trend: Δt/2 to the same T
        half = run(eq, f"method={method}", f"dt={dt / 2}", "t_final=1.2", *ROTDIFF, cache_dir=cache_dir)
        print("half", half.rel_l2)
        assert 3.0 < r.rel_l2[-1] / half.rel_l2[-1] < 5.0, (r.rel_l2, half.rel_l2)


@pytest.mark.slow  # θ₀ on 32² and its ETDRK4 reference: CI's slow stage
@pytest.mark.parametrize("method, bound", [("teng_sdirk2", 8e-4), ("teng_ars222", 4e-3)])
def test_the_brusselator_by_implicit_and_imex_steps_meets_its_reference(cache_dir, method, bound):
    """The preset on 32² (RK4's limit 2.79/(ν_v·16²) = 0.054), Δt = 0.25 to T = 0.5: SDIRK2's
    reaction by the chord Newton (GMRES on both species, preconditioned by the mean
    coefficients' 2 × 2 symbols), ARS(2,2,2)'s explicitly beside the diffusion's diagonal solve.
    ``damping=1e-4``: at the default 1e-7 the fits of a step this long diverge (loss growing
    from its start's 2.8e-2). Measured 2026-12-02: 3.0e-4 and 1.7e-3 at T; bounds ~2.5×."""
    r = run("brusselator", f"method={method}", "dt=0.25", "t_final=0.5", "grid=32", "eval_grid=32",
            "estimate=none", "damping=1e-4", "progress=false", *CHEAP_FIT, cache_dir=cache_dir)
    print(method, r.rel_l2)
    assert r.rel_l2.shape == (3,) and r.rel_l2[-1] < bound, r.rel_l2
