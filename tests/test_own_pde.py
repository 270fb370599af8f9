"""A PDE of the user's own (examples/, docs/guides/your-own-pde.md): operators of any
form through :class:`~teng_eq.equations.Field`, time-dependent ones, a run without a
reference whose error is its own estimate, the growth rate measured where none is
declared. The examples at small size: where a truth exists, the estimate brackets it
within the band the guide states (tests/helpers/bands.py, ``TRANSPORT``), at every step
after the fifth, and on the global error."""

from __future__ import annotations

import dataclasses
import math
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.bands import KDV_SMALL_ERROR, TRANSPORT
from helpers.configs import CHEAP_FIT, ROOT, make_config

from teng_eq import api
from teng_eq.equations import Equation, Field, operator
from teng_eq.equations.heat import Heat
from teng_eq.errors import ConfigError, Diverged
from teng_eq.estimate.defect import Defect, fourier_modes, measured_growth_rate
from teng_eq.jobs.preflight import initial_radius, stability_warning
from teng_eq.run.simulation import build_method, run_simulation

EXAMPLES = ROOT / "examples"
SEARCH = f"hydra.searchpath=[file://{EXAMPLES / 'conf'}]"


@pytest.fixture(scope="module", autouse=True)
def examples_importable():
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))


def example(name: str, *overrides: str):
    return make_config(SEARCH, f"equation={name}", "grid=16", "eval_grid=32", *CHEAP_FIT, *overrides)


def _bracketed(result) -> None:
    """``est_rel_l2 / rel_l2`` within the transport's band (tests/helpers/bands.py) at every
    step after the fifth, at least 3 of them."""
    TRANSPORT.check(result.est_rel_l2, result.rel_l2, min_steps=3)


def _global_bracketed(result) -> None:
    """The run's estimated global error within the transport's band of its true one."""
    TRANSPORT.check_ratio(result.scalars["est_global_rel_l2"] / result.global_rel_l2)


# --- The operator: any derivative, x and t ----------------------------------------------


def test_a_field_gives_any_derivative_of_a_function():
    """∂₁∂₁∂₂∂₂ and friends of ``sin(2x₁) cos(3x₂)`` against calculus, to round-off."""
    pts = jax.random.uniform(jax.random.PRNGKey(0), (50, 2), minval=0.0, maxval=6.0)

    def fn(p):
        return jnp.sin(2 * p[:, 0]) * jnp.cos(3 * p[:, 1])

    u, s, c = Field(fn, pts), jnp.sin(2 * pts[:, 0]), jnp.cos(3 * pts[:, 1])
    exact = {(): s * c, (0,): 2 * jnp.cos(2 * pts[:, 0]) * c, (1, 1): -9 * s * c,
             (0, 0, 1, 1): 4 * 9 * s * c, (1, 0, 1, 0): 36 * s * c, (0, 0, 0, 0): 16 * s * c}
    for axes, value in exact.items():
        np.testing.assert_allclose(u.d(*axes), value, rtol=0, atol=1e-12)
    np.testing.assert_allclose(u.lap, -13 * s * c, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(u.x, pts.T)


class HeatAsOperator(Heat):
    """Heat written as an operator of its own form: L[u] = ν (∂₁₁u + ∂₂₂u)."""

    def operator(self, u, t):
        return self.nu * (u.d(0, 0) + u.d(1, 1))


def test_an_operator_of_any_form_is_the_short_form_where_they_agree(warm_cache):
    """Heat's short form and the same operator written through Field.d: the same L[û],
    and the same Hermite defect by either route (the short form's fields, or L applied to
    p(½) as a function), to round-off."""
    cfg = make_config("equation.initial_condition=sines2d", "grid=32")
    method, heat = build_method(cfg, cache_dir=warm_cache), cfg.equation
    general = HeatAsOperator.from_config({f: getattr(heat, f) for f in ("name", "nu", "lengths",
                                                                        "initial_condition")})
    theta0 = method.theta0
    theta1 = theta0 + 1e-4 * jax.random.normal(jax.random.PRNGKey(1), theta0.shape)
    points = heat.evaluation(16).points
    np.testing.assert_allclose(operator(general, lambda p: method.space.apply(theta0, p), points),
                               operator(heat, lambda p: method.space.apply(theta0, p), points), rtol=0,
                               atol=1e-12)
    short, other = (Defect(method.space, eq, heat.holdout(32, 16), "hermite") for eq in (heat, general))
    assert short.short and not other.short and other.hermite
    (v0, _), (v1, _) = (d.combine(d.fields(theta0), d.fields(theta1), 0.01, (theta0, theta1), 0.0)
                        for d in (short, other))
    np.testing.assert_allclose(v1["defect"], v0["defect"], rtol=0,
                               atol=1e-10 * float(jnp.abs(v0["defect"]).max()))


# --- The growth rate, measured where not declared -------------------------------------


@pytest.mark.parametrize("name, declared", [("heat", 0.0), ("allen_cahn", 1.0), ("burgers", None)])
def test_the_measured_growth_rate_is_below_the_declared_bound(warm_cache, name, declared):
    """The logarithmic norm of L'[û] on the low Fourier modes, at θ₀ of the tiny problem:
    heat's is 0 (the constant mode; every other decays), Allen–Cahn's at most 1 (the
    one-sided Lipschitz constant of u − u³), Burgers' at most its declared exact bound."""
    eq = make_config(f"equation={name}", "equation.initial_condition=sines2d", "grid=32").equation
    method = build_method(make_config("equation.initial_condition=sines2d", "grid=32"), cache_dir=warm_cache)
    holdout = eq.holdout(32, 16)
    weights = jnp.broadcast_to(jnp.asarray(holdout.weights), holdout.points.shape[:1])
    # û at θ₀ of heat's tiny problem
    u = Field(lambda p: method.space.apply(method.theta0, p), holdout.points)
    mu = float(measured_growth_rate(eq, u.fn, holdout.points, weights, 0.0,
                                    fourier_modes(eq.periods, len(holdout.points))))
    bound = declared if declared is not None else float(eq.growth_rate(u.value, u.grad))
    eps = 1e-9
    assert mu <= bound + eps, (mu, bound)
    if name == "heat":
        assert abs(mu) <= eps


# --- The examples -----------------------------------------------------------------------


@pytest.mark.slow  # ~35 s (the default suite's 15 minutes)
def test_advection_diffusion_against_its_exact_solution(warm_cache):
    r = run_simulation(example("advection_diffusion", "t_final=0.1", "dt=0.01"), cache_dir=warm_cache)
    _bracketed(r)
    assert r.estimate == "transport"
    _global_bracketed(r)
    # The transport's fastest rate: the mean mode's, 0 (advection moves the error, diffusion damps it).
    np.testing.assert_allclose(r.metrics["growth_rate"], 0.0, rtol=0, atol=1e-12)


def test_a_velocity_that_varies_in_x_is_carried_by_substeps(warm_cache):
    """Advection by a shear flow, c = sin x₂, ν = 0 (examples/shear_advection.py): the
    coefficient of ∂₁ in L′ varies over the grid with no damping to dominate it, where the
    frozen-coefficient rule would grow the error the flow only moves; only a first-order
    coefficient varies, so the default ``transport`` carries the rest by Lawson's RK4 in
    substeps (``estimate_used`` stays ``transport``), and the estimate follows the error by
    characteristics; the forced diffusion's variable diffusivity keeps the frozen rule (below)."""
    r = run_simulation(example("shear_advection", "t_final=0.08", "dt=0.01"), cache_dir=warm_cache)
    assert r.estimate == "transport"
    _bracketed(r)
    _global_bracketed(r)


@pytest.mark.slow  # ~25–35 s (the default suite's 15 minutes)
def test_a_phase_space_density_moved_by_the_pendulum(warm_cache):
    """∂ₜf = −v∂ₓf + sin(x)∂ᵥf on [−π, π)² (examples/pendulum_vlasov.py, exact along the
    orbits): velocities that depend on the point in both axes, and a coefficient −v that
    jumps at the box's v edge; the substepped transport follows the error."""
    r = run_simulation(example("pendulum_vlasov", "t_final=0.1", "dt=0.01"), cache_dir=warm_cache)
    assert r.estimate == "transport"
    _bracketed(r)
    _global_bracketed(r)


def test_lawsons_substeps_carry_a_field_along_a_shear_flow():
    """:meth:`~teng_eq.estimate.transport.Transport.lawson` on ∂ₜe = −sin(x₂)∂₁e over h = 0.1
    on 32²: e₀ = sin x₁ cos x₂ moved along the characteristics, sin(x₁ − h sin x₂) cos x₂
    (its spectrum below 1e-13 past the grid's band), to RK4's local error in one substep
    (hρ_R = 1.6; (h|c|)⁵/5! ≈ 8e-8 on the k₁ = 1 wave; measured 2.1e-8): 5e-8; with ⟨c⟩ ≠ 0
    (c = 1 + sin x₂) the mean's e^{hΛ} exact and the rest's substeps, the same."""
    from teng_eq.estimate.transport import Transport

    n, h = 32, 0.1
    tr = Transport((2 * math.pi, 2 * math.pi), (n, n), 1, substepped=True)
    x1, x2 = (v.ravel() for v in np.meshgrid(*[np.arange(n) * 2 * math.pi / n] * 2, indexing="ij"))
    index = {a: i for i, a in enumerate(tr.alphas)}
    for mean in (0.0, 1.0):
        a = np.zeros((len(tr.alphas), n * n))
        a[index[(1, 0)]] = -(mean + np.sin(x2))
        moved = tr.propagate(np.sin(x1) * np.cos(x2), np.zeros(n * n), a, h)
        exact = np.sin(x1 - h * (mean + np.sin(x2))) * np.cos(x2)
        assert np.max(np.abs(moved - exact)) < 5e-8


def test_the_frozen_coefficient_rule_on_variable_coefficients():
    """:meth:`~teng_eq.estimate.transport.Transport.frozen` on L′'s coefficients on a 16² grid:
    a constant velocity and a constant anti-diffusion hold (no variable part), a shear flow
    c(x₂)∂₁ does not (nothing damps its variable part), with ν = 0.05 it still does not at
    |k₁| = 1 (|c − ⟨c⟩| = 1 > ν|k|²), a diffusivity 1 + ½ sin x₁ sin x₂ holds (its variable part at most
    ν(½|k|² + ½|k|) ≤ ν|k|²), e^{2 sin x₁} does not: it exceeds twice its mean ⟨a⟩ = I₀(2) =
    2.28 (e² = 7.39), so |a − ⟨a⟩| > ⟨a⟩ on the short waves, where the explicit rule for the
    rest would amplify (1 − e^{−hd}) r/d < −1."""
    from teng_eq.estimate.transport import Transport

    periods, n = (2 * math.pi, 2 * math.pi), 16
    tr = Transport(periods, (n, n), 2)
    x = np.meshgrid(*[np.arange(n) * 2 * math.pi / n] * 2, indexing="ij")
    x1, x2 = (v.ravel() for v in x)
    index = {a: i for i, a in enumerate(tr.alphas)}

    def coefficients(**terms):
        a = np.zeros((len(tr.alphas), n * n))
        for name, value in terms.items():
            a[index[tuple(int(c) for c in name[1:])]] = value
        return a

    assert tr.frozen(coefficients(a10=-1.0 + 0 * x1, a01=-0.5 + 0 * x1))
    assert tr.frozen(coefficients(a20=1.0 + 0 * x1))  # constant, growing every mode (KS's long waves)
    assert not tr.frozen(coefficients(a10=-np.sin(x2)))
    assert not tr.frozen(coefficients(a10=-np.sin(x2), a20=0.05 + 0 * x1, a02=0.05 + 0 * x1))
    a = 1 + 0.5 * np.sin(x1) * np.sin(x2)
    da = (0.5 * np.cos(x1) * np.sin(x2), 0.5 * np.sin(x1) * np.cos(x2))
    assert tr.frozen(coefficients(a20=0.1 * a, a02=0.1 * a, a10=0.1 * da[0], a01=0.1 * da[1]))
    a = np.exp(2 * np.sin(x1))
    assert not tr.frozen(coefficients(a20=0.1 * a, a02=0.1 * a, a10=0.1 * 2 * np.cos(x1) * a))
    # where it fails, Lawson's substeps carry a rest of first order only
    assert tr.transports(coefficients(a10=-np.sin(x2), a20=0.05 + 0 * x1, a02=0.05 + 0 * x1))
    assert tr.transports(coefficients(a10=-x2, a01=np.sin(x1), a00=np.cos(x1)))
    assert not tr.transports(coefficients(a20=0.1 * a, a02=0.1 * a, a10=0.1 * 2 * np.cos(x1) * a))


@pytest.mark.slow  # ~25–35 s (the default suite's 15 minutes)
def test_a_forced_equation_with_a_variable_coefficient_against_its_manufactured_solution(warm_cache):
    cfg = example("forced_diffusion", "t_final=0.1", "dt=0.01")
    assert not cfg.equation.autonomous
    r = run_simulation(cfg, cache_dir=warm_cache)
    _bracketed(r)
    assert r.estimate == "transport"
    _global_bracketed(r)


def test_a_fourth_order_equation_against_its_exact_solution(warm_cache):
    """The biharmonic heat equation: the Hermite term would need eighth derivatives, so the
    transport carries the trapezoid one; the estimate follows the error, its damped modes
    damped (the contractive bound, ``hermite``'s, drifts up here)."""
    r = run_simulation(example("biharmonic", "t_final=0.1", "dt=0.01"), cache_dir=warm_cache)
    assert r.estimate == "transport"
    _bracketed(r)
    _global_bracketed(r)


def test_an_implicit_steps_estimate_follows_a_stiff_equations_error(warm_cache):
    """SDIRK2 on the biharmonic at κ = 0.01, Δt = 0.02 (hκ|k|⁴ up to 13 on the fit's
    16² grid): the fit's error between the nodes sits still through the implicit steps, and
    the estimate's local term, the linearised flow's defect with Λû spectral on the held-out
    grid, sees it sit still (the trapezoid defect, weighted by φ₁(hΛ), counted it anew each
    step: 8.5–12.4 after step 5 here, and growing)."""
    cfg = example("biharmonic", "equation.kappa=0.01", "method=teng_sdirk2", "dt=0.02", "t_final=0.16")
    r = run_simulation(cfg, cache_dir=warm_cache)
    assert r.estimate == "transport"
    _bracketed(r)
    _global_bracketed(r)


@pytest.mark.slow  # ~25–35 s (the default suite's 15 minutes)
def test_an_implicit_steps_estimate_follows_a_forced_stiff_equations_error(warm_cache):
    """SDIRK2 on ∂ₜu = −κ∂ₓ⁴u + f(x, t) on a line (examples/forced_hyperdiffusion.py, κ = 0.01,
    32 nodes, Δt = 0.02): the flow defect's rest N is the forcing, taken quadratic in time
    through the step's middle, and the estimate is the error itself: within 15 % (measured
    1.052–1.059 here, 1.000 on 64 nodes; the trapezoid defect 2.97 there, N linear between
    the ends only 4.45)."""
    cfg = example("forced_hyperdiffusion", "grid=32", "eval_grid=64", "method=teng_sdirk2", "dt=0.02",
                  "t_final=0.16")
    r = run_simulation(cfg, cache_dir=warm_cache)
    assert r.estimate == "transport"
    ratios = TRANSPORT.check(r.est_rel_l2, r.rel_l2, min_steps=3)
    np.testing.assert_allclose(ratios, 1.0, atol=0.15)


def test_dt_auto_keeps_a_stiff_equations_steps_stable(warm_cache):
    """The biharmonic at κ = 0.01 on 32² nodes under ``dt=auto``: the embedded estimate
    alone lets Δt grow past Heun's stability limit on the fastest mode the fit resolves
    (0.004 to 0.005; at CPU size the run then diverged at t = 0.036); every try is capped
    at 0.9·2/(κ|k|⁴_max), |k| ≤ 16, the cap binds, and the estimate follows the error. On the
    embedded estimate alone (``controller.error=time``): the fits' residual would hold the
    steps near 0.0008, below the cap, and the cap would not be tested."""
    cfg = example("biharmonic", "grid=32", "equation.kappa=0.01", "t_final=0.05", "dt=auto",
                  "controller.error=time")
    r = run_simulation(cfg, cache_dir=warm_cache)
    cap = 0.9 * 2.0 / (0.01 * 16**4)
    np.testing.assert_allclose(r.metrics["dt_stable"], cap, rtol=1e-9)
    assert np.all(r.metrics["dt"] <= cap * (1 + 1e-12)) and np.sum(r.metrics["dt"] > 0.99 * cap) >= 3
    assert r.times[-1] == 0.05
    _bracketed(r)


#: RK4's stability region on the imaginary axis, |R(iy)| ≤ 1 for y ≤ 2√2.
RK4_IMAGINARY = 2 * math.sqrt(2)


@pytest.mark.slow  # ~100 s: KdV's θ₀ on 64 nodes; the cap itself: test_error_control
def test_dt_auto_bounds_a_dispersive_equations_steps(warm_cache):
    """KdV's soliton (examples/kdv.py) on 64 nodes of [0, 50) under ``dt=auto`` with
    TENG-RK4: L′[û]'s rates i(k³ − 6⟨û⟩k) are purely imaginary, |k| ≤ π·64/50, so every try
    is at most 0.9·2√2/max|Λ| (logged as ``dt_stable``, within the 1.5% of the −6⟨û⟩k
    term of 0.9·2√2/k³_max), the cap binds, and the run follows the exact soliton. On the
    embedded estimate alone (``controller.error=time``): the fits' residual holds the steps
    at a quarter of the cap, which then is not tested."""
    cfg = example("kdv", "grid=64", "eval_grid=128", "method=teng_rk4", "t_final=0.1", "dt=auto",
                  "controller.error=time")
    r = run_simulation(cfg, cache_dir=warm_cache)
    k_max = math.pi * 64 / 50
    np.testing.assert_allclose(r.metrics["dt_stable"], 0.9 * RK4_IMAGINARY / k_max**3, rtol=0.02)
    assert np.all(r.metrics["dt"] <= r.metrics["dt_stable"] * (1 + 1e-12))
    assert np.sum(r.metrics["dt"] > 0.99 * r.metrics["dt_stable"]) >= 1 and r.times[-1] == 0.1
    assert r.rel_l2[-1] < KDV_SMALL_ERROR


def test_the_preflight_warns_of_a_fixed_step_beyond_the_stable_one_before_theta0(tmp_path):
    """From L′[u₀]'s spectrum, before θ₀ (u₀ is known): on KdV's 64 nodes RK4's stable step
    is 2√2/max|Λ| (within the 1.5 % of the −6⟨u₀⟩k term of 2√2/k³_max), and a fixed Δt past
    it gets one warning naming it and what to do, one below none; the biharmonic's real
    spectrum gives Heun 2/(κ|k|⁴_max) exactly, flagged where that mode would grow more than
    tenfold over the run; an implicit method has no such step.
    Under ``dt=auto`` Heun's cap on the dispersive spectrum (1.4e-5) below dt_min is refused
    in one line before θ₀ (no θ₀ file): what the run itself says after it (the slow test below)."""
    k_max = math.pi * 64 / 50
    rk4 = example("kdv", "grid=64", "eval_grid=128", "method=teng_rk4", "t_final=0.1", "dt=0.05")
    stable = rk4.method.cls.stability_limit(rk4.method.options) / initial_radius(rk4)
    np.testing.assert_allclose(stable, RK4_IMAGINARY / k_max**3, rtol=0.02)
    line = stability_warning(rk4)
    assert line.startswith(f"warning: dt=0.05 is beyond teng_rk4's stable step {stable:.3g} ")
    assert line.endswith(f"take dt <= {stable:.3g}, dt=auto, or an implicit method (e.g. method=teng_sdirk2)")
    assert stability_warning(dataclasses.replace(rk4, dt=0.02)) is None
    implicit = example("kdv", "grid=64", "method=teng_sdirk2", "t_final=0.1", "dt=0.05")
    assert stability_warning(implicit) is None
    heun = example("biharmonic", "grid=32", "equation.kappa=0.01", "t_final=0.05", "dt=0.01")
    assert 2.0 / initial_radius(heun) == pytest.approx(2.0 / (0.01 * 16**4), rel=1e-9)
    assert "teng_heun's stable step 0.00305 " in stability_warning(heun)
    # Past a real decay's bound by little: the main job's Δt 0.02 (Δtρ = 2.05 > 2, Heun's |R| 1.05
    # a step, 1.6 over its 10) is not flagged; its 100 steps to T = 2 (|R|¹⁰⁰ = 120) are.
    main = make_config("dt=0.02")
    assert main.dt * initial_radius(main) == pytest.approx(2.048, rel=1e-9)
    assert stability_warning(main) is None
    assert "teng_heun's stable step 0.0195 " in stability_warning(make_config("dt=0.02", "t_final=2.0"))
    with pytest.raises(ConfigError, match=r"^invalid config: teng_heun: at t=0 the stable step 1\.4e-05 .* "
                                          r"below controller\.dt_min=0\.0001: .*method=teng_rk4 or teng_bs3"):
        api.run("kdv", "grid=64", "eval_grid=128", "method=teng_heun", "t_final=0.1", "dt=auto",
                "controller.dt_min=1e-4", *CHEAP_FIT, config_dir=EXAMPLES / "conf", cache_dir=tmp_path)
    assert not (tmp_path / "theta0").exists()


@pytest.mark.slow  # ~100 s: KdV's θ₀ on 64 nodes; the cap itself: test_error_control
def test_heun_cannot_follow_a_dispersive_equation_under_dt_auto(warm_cache):
    """Heun's region holds no segment of the imaginary axis (|R(iy)|² = 1 + y⁴/4): on KdV's
    rates its cap is the region's tabulated 10⁻³/max|Λ| (0.9 of it: 1.4e-5 on 64 nodes), and
    with ``dt_min`` above it the run ends before its first step, naming the methods that can."""
    cfg = example("kdv", "grid=64", "eval_grid=128", "method=teng_heun", "t_final=0.1", "dt=auto",
                  "controller.dt_min=1e-4")
    with pytest.raises(Diverged, match=r"the stable step 1\.\de-05 .* method=teng_rk4 or teng_bs3"):
        run_simulation(cfg, cache_dir=warm_cache)


@pytest.mark.slow  # ~80 s: Kuramoto–Sivashinsky's θ₀ and 0.1 of its time (the default suite's 15 minutes)
def test_a_fourth_order_equation_without_a_reference_runs_on_its_estimate(warm_cache):
    """Kuramoto–Sivashinsky with dt=auto: no rel_l2 anywhere, the estimate at every step,
    its fastest rate (max Re Λ(k) of the transport, the mean coefficients of L′[û]) below
    the analytic bound ``max_k(a|k|² − b|k|⁴) + ½ max Δû`` (wave numbers of the box)."""
    cfg = example("kuramoto_sivashinsky", "t_final=0.1", "dt=auto", "controller.dt_initial=0.01")
    assert not cfg.has_reference
    records = []
    r = run_simulation(cfg, cache_dir=warm_cache, on_step=records.append)
    assert r.rel_l2 is None and r.global_rel_l2 is None and r.estimate == "transport"
    assert all("rel_l2" not in rec.metrics for rec in records)
    assert all(math.isfinite(rec.metrics["est_rel_l2"]) for rec in records[1:])  # [0]: the start
    est = r.scalars["est_global_rel_l2"]
    assert 0 < est < 0.1 and r.error == est and r.times[-1] == 0.1
    eq = cfg.equation
    linear = max(eq.a * k2 - eq.b * k2**2 for k2 in range(0, 50))
    assert np.all(r.metrics["growth_rate"] <= linear + 0.5 * 3.5 + 1e-6)  # |Δu₀| ≤ 1 + 2 + ½
    assert np.all(r.metrics["growth_rate"] > 0)


def test_a_reference_an_equation_cannot_give_is_refused_before_any_compute():
    with pytest.raises(ConfigError) as err:
        example("kuramoto_sivashinsky", "reference=required", "dt=auto")
    assert str(err.value).startswith("invalid config: reference='required': equation kuramoto_sivashinsky "
                                     "has none") and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^invalid config: estimate='none': equation kuramoto_sivashinsky "
                                          r"has no reference"):
        example("kuramoto_sivashinsky", "estimate=none", "dt=auto")
    with pytest.raises(ConfigError, match="method tdvp_rk4 with estimate=transport has none"):
        example("kuramoto_sivashinsky", "method=tdvp_rk4", "dt=0.01", "t_final=0.02")


def test_reference_none_runs_a_reference_equation_on_its_estimate_alone(warm_cache):
    cfg = make_config("equation.initial_condition=sines2d", "grid=32", "eval_grid=32", "t_final=0.04",
                      "dt=0.02", "reference=none")
    r = run_simulation(cfg, cache_dir=warm_cache)
    assert r.rel_l2 is None and r.reference_s == 0.0 and math.isfinite(r.scalars["est_global_rel_l2"])


class _NoOperator(HeatAsOperator):
    """A user's equation that forgot its operator: the short form's N is not defined."""

    operator = Equation.operator

    def nonlinear(self, u, grad_u):
        raise NotImplementedError


class _FlatU0(Heat):
    """A user's equation whose u₀ returns one value per coordinate, not per point."""

    initial_conditions = {"flat": lambda x: x[0][:, None] * x[1][None, :]}


@pytest.mark.parametrize("cls, ic, message", [
    (_NoOperator, "sines2d", "equation.impl='test_own_pde:_NoOperator': test_own_pde:_NoOperator.nonlinear "
                             "is not defined: the short form's nonlinear(u, grad_u), or operator(u, t)"),
    (_FlatU0, "flat", "equation.initial_condition='flat': test_own_pde:_FlatU0.<lambda> returns shape "
                      "(16, 16) on 16 points, expected (16,)"),
])
def test_a_bad_user_equation_is_one_line_before_any_compute(cls, ic, message):
    """Built from its config (as a run builds it), before θ₀: u₀ and L called once."""
    with pytest.raises(ConfigError) as err:
        cls.from_config({"name": "mine", "nu": 0.1, "lengths": [2 * math.pi] * 2, "initial_condition": ic})
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
