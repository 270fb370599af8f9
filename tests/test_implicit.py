"""Implicit and IMEX TENG (teng_eq.stepping.implicit): the tableaux check themselves, what cannot
run is refused in one line before any compute, and on a stiff equation an implicit
step runs stably at a Δt many times the explicit one's limit. Their orders are measured
with the explicit ones (tests/test_orders.py)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, ROOT, make_config
from helpers.numerics import self_convergence

from teng_eq.errors import ConfigError, RunFailed
from teng_eq.run.simulation import run_simulation
from teng_eq.stepping.tableau import DIRK_TABLEAUS, Tableau

SEARCH = f"hydra.searchpath=[file://{ROOT / 'examples' / 'conf'}]"


@pytest.fixture(autouse=True)
def examples_importable():
    sys.path.insert(0, str(ROOT / "examples"))
    yield
    sys.path.remove(str(ROOT / "examples"))


def test_a_tableau_of_the_wrong_order_or_not_a_stable_is_refused():
    with pytest.raises(ValueError, match="is not of order 2"):
        Tableau("x", a=((0.5,), (0.5, 0.5)), order=2)  # b = (½, ½), c = (½, 1): bᵀc = ¾
    with pytest.raises(ValueError, match="not A-stable"):
        Tableau("x", a=((0.0,), (0.75, 0.25)), order=1)  # the θ-method at θ = ¼: |R(i∞)| = 3
    with pytest.raises(ValueError, match="coupling"):
        # ARS(2,2,2)'s implicit part with the explicit midpoint rule: each of order 2, bᵀĉ ≠ ½.
        g = 1 - 2**-0.5
        Tableau("x", order=2, a=((0.0,), (0.0, g), (0.0, 1 - g, g)),
                imex=((0.0, 0.0, 0.0), (0.5, 0.0, 0.0), (0.0, 1.0, 0.0)))


@pytest.mark.parametrize("name, decay", [("beuler", 0.0), ("cn", 1.0), ("sdirk2", 0.0), ("sdirk3", 0.0),
                                         ("sdirk4", 0.0), ("imex_euler", 0.0), ("ars222", 0.0)])
def test_l_stable_tableaus_damp_the_stiffest_modes(name, decay):
    """|R(−∞)|: 0 for the L-stable schemes, 1 for Crank–Nicolson (stiff modes flip sign)."""
    assert DIRK_TABLEAUS[name].stiff_decay == pytest.approx(decay, abs=1e-6)  # at z = −10⁸


def test_what_an_implicit_method_cannot_run_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        make_config(SEARCH, "equation=biharmonic", "method=teng_ars222")
    assert "method teng_ars222 is IMEX and it declares no stiff(u, t) part" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError,
                       match="heat_disk': method teng_sdirk2 solves its stages on a periodic grid"):
        make_config("equation=heat_disk", "method=teng_sdirk2")
    with pytest.raises(ConfigError, match="stopping.policy"):
        make_config("method=teng_beuler", "stopping.policy=local_error")


@pytest.mark.slow  # three runs and dt=auto's embedded steps compiled: 50–85 s, CI's slow stage
def test_an_implicit_step_runs_far_past_the_explicit_stability_limit(warm_cache):
    """The biharmonic ``∂ₜu = −κΔ²u`` (κ = 0.05) on 16² nodes: the fit's fastest mode
    (|k| = 8) decays at κ|k|⁴ = 205, so TENG-RK4 is stable only for Δt ≤ 2.79/205 = 0.014;
    at Δt = 0.05 its error grows 10⁵-fold in one step (or the run fails), while SDIRK2 at the
    same Δt follows the exact solution."""
    base = [SEARCH, "equation=biharmonic", "equation.kappa=0.05", "grid=16", "eval_grid=32", *CHEAP_FIT,
            "t_final=0.2", "dt=0.05"]
    try:
        explicit = np.max(run_simulation(make_config(*base, "method=teng_rk4"), cache_dir=warm_cache).rel_l2)
    except RunFailed:
        explicit = np.inf
    assert explicit > 1.0
    r = run_simulation(make_config(*base, "method=teng_sdirk2"), cache_dir=warm_cache)
    assert r.rel_l2[-1] < 1.5 * r.rel_l2[0] and np.all(np.isfinite(r.rel_l2)), r.rel_l2  # θ₀'s ~1e-3 kept
    # It follows the exact solution: at every step its error against it below 2e-3. Measured
    # (2026-12-01): 9.67e-4 (θ₀), 9.79e-4, 1.03e-3, 1.10e-3, 1.18e-3 at t = 0 to 0.2; the bound
    # is 1.7× the largest, and 18× below the solution's own change after one step (3.7e-2,
    # 1.5e-1 at t = 0.2: the error of a run that stood still at u₀).
    assert r.rel_l2.shape == (5,) and np.max(r.rel_l2) < 2e-3, r.rel_l2
    # dt=auto at a tolerance of θ₀'s error: the embedded estimate alone sizes the steps, and
    # they grow past twice the explicit limit (no stability cap binds an A-stable step).
    # Judged on the whole error, these fits' residual (θ₀'s, ~1e-3) is the tolerance and the
    # run stops asking for ever smaller steps, which the second run shows.
    auto = run_simulation(make_config(*base[:-1], "dt=auto", "controller.rtol=1e-3", "method=teng_sdirk2",
                                      "controller.error=time"), cache_dir=warm_cache)
    assert auto.times[-1] == 0.2 and np.max(auto.metrics["dt"]) > 2 * 2.79 / 204.8, auto.metrics["dt"]
    assert auto.rel_l2[-1] < 5e-3, auto.rel_l2
    with pytest.raises(RunFailed, match=r"below controller\.dt_min=1e-06 .*; the fit's residual alone is .* "
                                        r"times it: a looser controller\.rtol, more iterations, or "
                                        r"controller\.error=time"):
        run_simulation(make_config(*base[:-1], "dt=auto", "controller.rtol=1e-3", "method=teng_sdirk2"),
                       cache_dir=warm_cache)


@pytest.mark.slow  # 37 s: CI's slow stage (the default suite's 15 minutes; the IMEX orders stay in it)
def test_kuramoto_sivashinsky_on_a_line_by_imex_steps_follows_its_reference(cache_dir):
    """KS on [0, 32π) at test size (128 nodes, to T = 2): ARS(2,2,2) at Δt = 0.1 stays
    within 1e-4 of the ETDRK4 reference (its stiff part −u_xx − u_xxxx solved on the grid,
    −u u_x on the network)."""
    cfg = make_config("equation=kuramoto_sivashinsky_1d", "method=teng_ars222", "grid=128", "eval_grid=256",
                      "t_final=2.0", "dt=0.1", *CHEAP_FIT)
    r = run_simulation(cfg, cache_dir=cache_dir)
    print("ARS222 rel_l2", r.rel_l2)
    assert np.max(r.rel_l2) < 1e-4, r.rel_l2


@pytest.mark.slow  # θ₀ of the 2-D example at CPU size, SDIRK4's five stages compiled: minutes
def test_kuramoto_sivashinsky_in_2d_runs_implicitly_at_ten_times_a_step_that_breaks_rk4(cache_dir):
    """The 2-D example at CPU size (a = 0.1, b = 0.01, 32² nodes, T = 1, ``damping=1e-4``):
    TENG-RK4 diverges at Δt = 0.05 (its largest stable step lies between 1/27 and 1/26,
    docs/guides/methods.md); TENG-SDIRK4 at 10× that step, Δt = 0.5, ends within 2e-2 of
    the ETDRK4 reference. Measured 4.2e-4 on the machine that wrote the test, 8.6e-3 on
    another AMD EPYC (2026-12-01, the same at `cb3a1b1` and after it): two large steps whose
    fits round differently; RK4 at a tenth of the step fails on both."""
    base = [SEARCH, "equation=kuramoto_sivashinsky_etdrk4", "grid=32", "eval_grid=64", "t_final=1.0",
            "damping=1e-4"]
    try:
        rk4 = run_simulation(make_config(*base, "method=teng_rk4", "dt=0.05"), cache_dir=cache_dir)
        explicit = np.max(rk4.rel_l2)
    except RunFailed:
        explicit = np.inf
    assert explicit > 1.0
    cfg = make_config(*base, "method=teng_sdirk4", "dt=0.5", "method.newton=3")
    r = run_simulation(cfg, cache_dir=cache_dir)
    print("SDIRK4 rel_l2", r.rel_l2)
    assert r.rel_l2[-1] <= 2e-2, r.rel_l2


def test_the_examples_kuramoto_sivashinsky_reference_converges_to_1e_9():
    """The 2-D example's ETDRK4 reference (64² modes, Δt = 10⁻³) at T = 1: more modes or
    half the step change it by ≤ 1e-9 (measured 1e-13 and 7e-13)."""
    d_modes, d_steps = self_convergence("kuramoto_sivashinsky_etdrk4", 1.0, 64, 1e-3, SEARCH)
    assert d_modes <= 1e-9 and d_steps <= 1e-9, (d_modes, d_steps)


def test_a_nonlinear_stages_newton_correction_solves_with_the_whole_linearised_operator():
    """The chord Newton's correction δ = (I − hF′)⁻¹r for Kuramoto–Sivashinsky's F′ =
    −aΔ − bΔ² − ∇u·∇ at u = its u₀ (whose advection by ∇u has mean 0: the mean symbol Λ̄
    alone drops it): GMRES's δ satisfies δ − hF′δ = r to 1e-9, F′ applied on the host by
    :meth:`Transport.apply`'s NumPy path (the solve traces its JAX path; measured 1e-14);
    Λ̄'s multiplier alone misses by 23 %."""
    import jax
    import jax.numpy as jnp
    from kuramoto_sivashinsky import KuramotoSivashinsky

    from teng_eq.estimate.transport import Transport
    from teng_eq.stepping.implicit import ImplicitStage

    n, h = 32, 0.125
    eq = KuramotoSivashinsky(name="kuramoto_sivashinsky", a=0.1, b=0.01, lengths=(2 * np.pi, 2 * np.pi),
                             initial_condition="waves")
    x = 2 * np.pi * np.arange(n) / n
    points = jnp.asarray(np.stack(np.meshgrid(x, x, indexing="ij"), axis=-1).reshape(-1, 2))
    transport = Transport(eq.periods, (n, n), eq.order)
    a = transport.coefficients(eq, lambda p: eq.u0(p.T), points, 0.0)
    stage = ImplicitStage(solver=None, equation=eq, transport=transport, newton=1)
    r = jnp.asarray(np.cos(3 * points[:, 0] - points[:, 1]) + np.sin(points[:, 1]) ** 3)
    delta = np.asarray(stage.chord(a, h, jax.ShapeDtypeStruct(r.shape, r.dtype))(r))
    a, r = np.asarray(a), np.asarray(r)
    assert np.linalg.norm(delta - h * transport.apply(a, delta) - r) <= 1e-9 * np.linalg.norm(r)
    mean_only = np.asarray(stage.multiply(1.0 / (1.0 - h * transport.symbol(a)[0]), r))
    assert np.linalg.norm(mean_only - h * transport.apply(a, mean_only) - r) > 0.1 * np.linalg.norm(r)


@pytest.mark.parametrize("preset", ["stiff_frontier", "ks_frontier"])
def test_the_stiff_frontier_presets_pass_the_preflight_with_their_config_folder(tmp_path, preset):
    """``--config-dir examples/conf experiment=stiff_frontier`` (the biharmonic) and
    ``ks_frontier`` (Kuramoto–Sivashinsky): every point the preflight checks is composed
    with the user's folder on Hydra's search path (where the presets and equations live):
    the longest axis's 9 values and the corner of last values."""
    from teng_eq.jobs.preflight import preflight
    argv = ["--config-dir", str(ROOT / "examples" / "conf"), f"experiment={preset}",
            f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", f"cache_dir={tmp_path / 'cache'}"]
    assert preflight(argv, ROOT / "conf") == 10
    assert not (tmp_path / "mlflow.db").exists()
