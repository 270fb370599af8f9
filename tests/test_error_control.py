"""Error control (docs/guides/error-control.md): embedded error estimates of the tableaux,
the step-size controller of ``dt: auto`` (accept/reject, landing on the horizon and
output times, resume), the a-posteriori error estimate (orders, a bound where the
projection is exact), the stability bounds the equations declare, the ETDRK4
reference at any t, and the analysis of runs with an estimate or adaptive steps."""

from __future__ import annotations

import dataclasses
import math
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from helpers.configs import CHEAP_FIT, ROOT, SINES32, TINY_ADAPTIVE, compose_conf, make_config, make_equation
from helpers.fake_methods import DECAY
from helpers.numerics import convergence_order, rel_l2
from helpers.stops import Stop, stop_at

from teng_eq.analysis import compare as analysis
from teng_eq.analysis import report
from teng_eq.domains.quadrature import Quadrature, cell_volume, holdout_points
from teng_eq.equations import operator
from teng_eq.errors import ConfigError, Diverged
from teng_eq.estimate.defect import Defect
from teng_eq.estimate.running import ErrorEstimate
from teng_eq.estimate.transport import Transport, oscillatory
from teng_eq.methods.base import StepInputs
from teng_eq.reference import Pseudospectral
from teng_eq.run.checkpoint import CheckpointStore
from teng_eq.run.controller import Controller, ControllerState
from teng_eq.run.schedule import Adaptive
from teng_eq.run.simulation import build_method, run_simulation
from teng_eq.stepping.tableau import BS3, HEUN, HEUN_FSAL, RK4, Tableau

TWO_PI = 2 * math.pi

# --- tableaux ----------------------------------------------------------------------------


def test_embedded_pairs_check_their_order():
    """Heun–Euler (diffrax's Heun) estimates to O(Δt²), Heun with the FSAL slope (its own
    error) and Bogacki–Shampine 3(2) (diffrax's Bosh3, FSAL) to O(Δt³), RK4 with its FSAL
    third-order pair to O(Δt⁴); a b_error whose embedded solution has the wrong order is
    refused when the tableau is made."""
    assert (HEUN.error_order, HEUN_FSAL.error_order, BS3.error_order, RK4.error_order) == (2, 3, 3, 4)
    assert (HEUN.fsal, HEUN_FSAL.fsal, BS3.fsal, RK4.fsal) == (False, True, True, True)
    assert HEUN.b_error == (0.5, -0.5) and len(BS3.b) == 3 and BS3.order == 3
    with pytest.raises(ValueError, match="embedded solution is not of order 1"):
        # b - b_error = (1/2, 1/2) is Heun itself: the "estimate" would be of order 3, not 2.
        Tableau.explicit_rk("bad", ((1.0,),), (0.5, 0.5), order=2, b_error=(0.0, 0.0), error_order=2)
    with pytest.raises(ValueError, match="embedded solution is not of order 3"):
        Tableau("bad", a=RK4.a, b=RK4.b, order=4, b_error=(0.1, -0.1, 0.0, 0.0, 0.0), error_order=4)


# --- the controller ------------------------------------------------------------------------


CONTROL = Controller(rtol=1e-3, atol=0.0, dt_initial=0.01, dt_min=1e-6, dt_max=0.5, safety=0.9, outputs=4)


def test_plan_lands_exactly_and_never_leaves_a_sliver():
    stops = CONTROL.stops(1.0, extra=(0.3,))
    assert stops == [0.25, 0.3, 0.5, 0.75, 1.0]
    assert CONTROL.plan(0.0, 0.1, stops) == (0.1, 0.1)
    assert (CONTROL.plan(0.2, 0.1, stops) == pytest.approx((0.05, 0.25))
            and CONTROL.plan(0.2, 0.1, stops)[1] == 0.25)
    # 0.12 left before the stop at 0.5 with a proposal of 0.1: two steps of 0.06, not 0.1 + 0.02.
    h, t = CONTROL.plan(0.38, 0.1, stops)
    assert h == pytest.approx(0.06) and t == pytest.approx(0.44)
    assert (CONTROL.plan(0.9, 5.0, stops) == pytest.approx((0.1, 1.0))
            and CONTROL.plan(0.9, 5.0, stops)[1] == 1.0)
    assert CONTROL.plan(0.0, 5.0, [2.0]) == (0.5, 0.5)  # dt_max


def test_pi_controller_steps():
    """Hairer & Wanner's PI step: h·safety·r_n^(−0.7/k)·r_{n−1}^(0.4/k), clipped to
    [0.2, 5]; after a rejection h·safety·r^(−1/k), and no growth on the next step."""
    s = ControllerState(dt=0.01, ratio=0.5)
    after = CONTROL.accept(s, 0.01, 0.25, order=2, clipped=False)
    assert after.dt == pytest.approx(0.01 * 0.9 * 0.25 ** (-0.35) * 0.5**0.2)
    assert (after.ratio, after.accepted, after.rejected) == (0.25, 1, 0)
    assert CONTROL.accept(s, 0.01, 1e-12, order=2, clipped=False).dt == pytest.approx(0.05)  # factor_max
    rejected = CONTROL.reject(s, 0.01, 4.0, order=2)
    assert rejected.dt == pytest.approx(0.01 * 0.9 / 2) and rejected.after_reject and rejected.rejected == 1
    assert CONTROL.reject(s, 0.01, math.inf, order=2).dt == pytest.approx(0.002)  # factor_min
    assert CONTROL.accept(rejected, 0.0045, 1e-6, order=2, clipped=False).dt == pytest.approx(0.0045)
    # A step cut short to land keeps the proposal it was cut from.
    assert CONTROL.accept(ControllerState(dt=0.2), 0.01, 0.9, order=2, clipped=True).dt == pytest.approx(0.2)
    state = ControllerState(dt=0.03, ratio=0.7, after_reject=True, accepted=4, rejected=2)
    assert ControllerState.from_info(state.as_info()) == state


def test_whole_error_adds_the_fits_residual_to_the_embedded_pair():
    """``controller.error``: ``time`` judges a try on the embedded pair's ``local_error``
    alone; ``whole`` adds the final fit's residual, √holdout_loss where held-out points
    measured it, else √step_loss; any other value is refused in one line."""
    metrics = {"local_error": 1e-7, "step_loss": 4e-10, "holdout_loss": 9e-10}
    time, whole = (dataclasses.replace(CONTROL, error=e) for e in ("time", "whole"))
    assert time.local(metrics) == 1e-7 and CONTROL.error == "whole"
    assert whole.local(metrics) == pytest.approx(1e-7 + 3e-5, rel=1e-14)
    assert whole.local(metrics | {"holdout_loss": math.nan}) == pytest.approx(1e-7 + 2e-5, rel=1e-14)
    with pytest.raises(ConfigError, match=r"^invalid config: controller.error=.*must be one of time, whole$"):
        make_config(*TINY_ADAPTIVE, "controller.error=fit")


def test_a_whole_error_run_keeps_every_steps_fit_residual_within_the_tolerance(warm_cache):
    """TENG-Heun, ``dt: auto`` on the tiny problem: under ``controller.error=whole`` every
    accepted step's embedded error plus its fit's held-out residual is within
    ``atol + rtol‖û‖``; under ``time`` the two together exceed it, in fewer steps."""
    def run(err):
        config = make_config(*TINY_ADAPTIVE, "t_final=0.04", "controller.outputs=2",
                             "controller.rtol=1e-6", f"controller.error={err}")
        return run_simulation(config, cache_dir=warm_cache)

    runs = {err: run(err) for err in ("time", "whole")}
    tol = {err: 1e-12 + 1e-6 * r.metrics["u_l2"] for err, r in runs.items()}
    both = {err: r.metrics["local_error"] + np.sqrt(r.metrics["holdout_loss"]) for err, r in runs.items()}
    assert np.all(both["whole"] <= tol["whole"]) and np.max(both["time"] / tol["time"]) > 1.0
    assert runs["whole"].metrics["dt"].size > runs["time"].metrics["dt"].size


def decay(*overrides):
    return make_config(*DECAY, "dt=auto", "t_final=0.5", "eval_grid=16", "equation.initial_condition=sines2d",
                       "controller.rtol=1e-3", "controller.atol=0", "controller.dt_initial=0.1",
                       "controller.outputs=2", *overrides)


def test_rejected_tries_leave_the_state_and_are_redone_smaller():
    """The controller on a method whose estimate is 0.5·Δt² and whose step multiplies
    the state by 1 − Δt: the first try (Δt = 0.1, estimate 6× the tolerance) is
    rejected and redone from the same state with Δt = 0.1·0.9/√6.06; the state at the
    end is the product over the *accepted* steps alone; every accepted step met the
    tolerance; the run lands on t = 0.25 and ends exactly at t_final; only accepted
    steps are reported."""
    seen = []
    r = run_simulation(decay(), on_step=lambda rec: seen.append(rec.step))
    dt = r.metrics["dt"]
    assert r.scalars["steps_rejected"] >= 1 and r.scalars["steps_accepted"] == len(dt)
    first_ratio = 0.5 * 0.1**2 / (1e-3 * 0.9 * math.sqrt(1 + 0.25 + 0.0625))
    assert first_ratio > 1 and dt[0] == pytest.approx(0.1 * 0.9 * first_ratio**-0.5, rel=1e-12)
    assert r.times[-1] == 0.5 and 0.25 in r.times and np.all(np.diff(r.times) > 0)
    np.testing.assert_allclose(np.diff(r.times), dt, rtol=1e-12, atol=0)
    expected = np.array([1.0, 0.5, -0.25])
    for h in dt:
        expected = expected * (1.0 - h)
    np.testing.assert_allclose(np.asarray(r.network), expected, rtol=1e-15, atol=0)
    assert seen == list(range(len(dt) + 1))
    assert np.all(0.5 * dt**2 <= 1e-3 * r.metrics["u_l2"])


def test_a_controller_that_needs_a_step_below_dt_min_fails_the_run():
    with pytest.raises(Diverged, match="below controller.dt_min"):
        run_simulation(decay("controller.rtol=1e-12", "controller.dt_min=1e-3", "controller.dt_initial=0.01"))


def test_dt_auto_needs_an_embedded_estimate():
    with pytest.raises(ConfigError, match=r"dt='auto': method teng_euler has no embedded error estimate"):
        make_config("dt=auto", "method=teng_euler")
    with pytest.raises(ConfigError, match=r"controller.dt_initial=.*dt_min"):
        make_config("dt=auto", "controller.dt_min=0.01", "controller.dt_initial=0.001")
    with pytest.raises(ConfigError, match=r"estimate='exact'"):
        make_config("estimate=exact")
    assert make_config("dt=auto").n_steps is None and make_config("dt=auto", "method=teng_bs3").adaptive


# --- TENG under the controller ------------------------------------------------------------

def _leaves(network):
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(eqx.filter(network, eqx.is_inexact_array))]


@pytest.mark.parametrize("warm", [pytest.param("previous", marks=pytest.mark.slow), "extrapolate"])
def test_adaptive_teng_resumed_equals_uninterrupted(tmp_path, warm_cache, warm):
    """TENG-Heun with dt: auto on the tiny problem: the first try is rejected, the run
    lands on its output times and ends exactly at t_final; killed when it reports its
    third step (which the driver then saves, between the checkpoints of steps 2 and 4)
    and resumed, it ends where the uninterrupted run ends, bit for bit (θ, errors,
    estimate, step sizes, controller counts): one process runs the same compiled
    programs on the same values, so any difference is a resume that lost or repeated
    something. Under ``warm_start: extrapolate`` (the default; ``previous`` in the slow
    cases) the checkpoints carry the rate too."""
    cfg, cache_dir = make_config(*TINY_ADAPTIVE, f"method.warm_start={warm}"), warm_cache
    whole = run_simulation(cfg, cache_dir=cache_dir)
    assert whole.times[-1] == 0.06 and {0.02, 0.04} <= set(whole.times)
    assert whole.scalars["steps_rejected"] >= 1 and whole.metrics["dt"][0] < 0.05
    store = CheckpointStore(tmp_path / "c.npz", {"run": "r"})
    with pytest.raises(Stop):
        run_simulation(cfg, cache_dir=cache_dir, checkpoints=store, checkpoint_every=2, on_step=stop_at(3))
    resumed = run_simulation(cfg, cache_dir=cache_dir, checkpoints=store, checkpoint_every=2)
    assert resumed.resumed_from == 3
    for a, b in zip(_leaves(resumed.network), _leaves(whole.network), strict=True):
        np.testing.assert_array_equal(a, b)
    for name in ("times", "rel_l2", "est_rel_l2"):
        np.testing.assert_array_equal(getattr(resumed, name), getattr(whole, name), err_msg=name)
    assert resumed.global_rel_l2 == whole.global_rel_l2
    for key in ("est_global_rel_l2", "steps_accepted", "steps_rejected"):
        assert resumed.scalars[key] == whole.scalars[key], key
    for key in whole.metrics:
        np.testing.assert_array_equal(resumed.metrics[key], whole.metrics[key], err_msg=key)


@pytest.mark.parametrize("name, expected", [("teng_heun", 2.0),
                                            pytest.param("teng_bs3", 3.0, marks=pytest.mark.slow)])
def test_embedded_estimate_has_its_order_on_heat(warm_cache, name, expected):
    """One TENG step from θ₀ on heat (sines2d): Heun–Euler's ``local_error`` falls as Δt²
    (Bogacki–Shampine's as Δt³; slow): least-squares slope over Δt = 0.02 … 0.16."""
    dts = np.array([0.02, 0.04, 0.08, 0.16])
    method = build_method(make_config(*TINY_ADAPTIVE, f"method={name}"), cache_dir=warm_cache)
    step = jax.jit(lambda s, k, dt: method.step(s, k, StepInputs(dt=dt)))
    key = jax.random.PRNGKey(3)
    errors = [float(step(method.init(), key, dt)[1].metrics["local_error"]) for dt in dts]
    slope = convergence_order(dts, errors)
    assert abs(slope - expected) < 0.1, (slope, errors)


@pytest.mark.slow  # three RK4 methods compiled, 40–80 s: CI's slow stage
def test_extrapolated_warm_start_begins_each_fit_an_order_closer(warm_cache):
    """TENG-RK4, two steps from θ₀ on heat at Δt = 0.01 … 0.04: the loss at the start of a
    fit (before its first iteration) falls as Δt² under ``warm_start: previous`` (a
    residual O(Δt)) and as Δt⁴ under ``extrapolate`` with the whole rate (``warm_rate=1``:
    O(Δt²)), both for the second step's first fit (started from the first step's rate)
    and for its third fit (node 1 after the node ½ of the fit before). With the default
    ``warm_rate`` 0.9 the first fit's start is (1 − 0.9)·O(Δt) + O(Δt²): its loss about 1 %
    of ``previous``'s (4.5 % at Δt = 0.04, where the O(Δt²) term shows), ≤ 6 % here."""
    dts = np.array([0.01, 0.02, 0.04])
    slopes, starts_of = {}, {}
    for warm in ("previous", "extrapolate", "damped"):
        rate = "method.warm_rate=0.9" if warm == "damped" else "method.warm_rate=1"
        start = "previous" if warm == "previous" else "extrapolate"
        method = build_method(make_config(*TINY_ADAPTIVE, "method=teng_rk4", f"method.warm_start={start}",
                                          rate), cache_dir=warm_cache)
        step = jax.jit(lambda s, k, dt, method=method: method.step(s, k, StepInputs(dt=dt)))
        starts = []
        for dt in dts:
            state, _ = step(method.init(), jax.random.PRNGKey(1), dt)
            _, record = step(state, jax.random.PRNGKey(2), dt)
            starts.append(np.asarray(record.losses)[[0, 2], 0])
        starts_of[warm] = np.array(starts)
        slopes[warm] = [convergence_order(dts, starts) for starts in starts_of[warm].T]
    np.testing.assert_allclose(slopes["previous"], 2.0, rtol=0, atol=0.3, err_msg=str(slopes))
    np.testing.assert_allclose(slopes["extrapolate"], 4.0, rtol=0, atol=0.5, err_msg=str(slopes))
    assert np.all(starts_of["damped"][:, 0] <= 0.06 * starts_of["previous"][:, 0]), starts_of


# --- the estimate where the projection is exact ------------------------------------------


class Fourier(eqx.Module):
    """û_θ = Σⱼ θⱼ φⱼ with φⱼ = cos(kⱼ·x) or sin(kⱼ·x): linear in θ, and the heat operator
    maps the span into itself, so TENG's projections are exact."""

    waves: jax.Array
    phase: jax.Array

    def basis(self, points):
        return jnp.cos(points @ self.waves.T - self.phase)

    def apply(self, theta, points):
        return self.basis(points) @ theta


WAVES = np.array([[1, 1], [1, -1], [2, 1], [1, 2], [3, 0], [0, 2]], float)


def _fourier_model():
    waves = np.concatenate([WAVES, WAVES])
    phase = np.concatenate([np.zeros(len(WAVES)), np.full(len(WAVES), np.pi / 2)])  # cos and sin
    return Fourier(jnp.asarray(waves), jnp.asarray(phase))


def _heun_by_projection(model, eq, theta, dt, points):
    """TENG-Heun with the model: each stage the least-squares fit of its target on ``points``."""
    basis = np.asarray(model.basis(points))

    def fit(target):
        return jnp.asarray(np.linalg.lstsq(basis, np.asarray(target), rcond=None)[0])

    def slope(th):
        return operator(eq, lambda p: model.apply(th, p), points)

    u = model.apply(theta, points)
    k1 = slope(theta)
    temp = fit(u + dt * k1)
    return fit(u + dt / 2 * (k1 + slope(temp)))


@pytest.mark.parametrize("kind", ["hermite", "hermite_triangle", "trapezoid"])
def test_estimate_bounds_the_error_where_projection_is_exact(kind):
    """Heat with a model linear in θ (exact projections, exact θ₀): all the error is
    Heun's time error, and every kind of estimate stays above it at every step (Heun's
    amplification 1 + z + z²/2 ≥ e^z and the local terms |z|³/6 + z⁴/24 (Hermite) or
    |z|³/4 (trapezoid) ≥ Heun's local error, per mode), the Hermite ones within 30 %
    of it at the start, where the damping the contractive bound leaves out has not
    acted yet."""
    eq = make_config("equation.initial_condition=sines2d").equation
    model = _fourier_model()
    held = Quadrature(holdout_points(16, 16, eq.lengths), cell_volume(16, eq.lengths))
    fit_points = jnp.asarray(np.stack(np.meshgrid(*(np.arange(16) * TWO_PI / 16,) * 2, indexing="ij"), -1)
                             .reshape(-1, 2))
    u0 = np.asarray(eq.u0(np.asarray(fit_points).T))
    theta0 = np.linalg.lstsq(np.asarray(model.basis(fit_points)), u0, rcond=None)[0]
    theta = jnp.asarray(theta0)
    defect = Defect(model, eq, held, kind)
    e0, _ = defect.initial(theta)
    assert float(defect.norm(e0)) < 1e-14
    estimate = ErrorEstimate.start(kind, np.asarray(defect.weights), np.asarray(e0))
    rates = -eq.nu * np.sum(np.asarray(model.waves) ** 2, axis=1)
    dt, ratios = 0.4, []
    for n in range(1, 16):
        new = _heun_by_projection(model, eq, theta, dt, fit_points)
        vectors, scalars = defect(theta, new, dt)
        estimate = estimate.advance(dt, {k: float(v) for k, v in scalars.items()},
                                    np.asarray(vectors["defect"]), None)
        est = estimate.error
        exact = model.apply(jnp.asarray(theta0 * np.exp(rates * n * dt)), held.points)
        ratios.append(est / float(defect.norm(model.apply(new, held.points) - exact)))
        theta = new
    ratios = np.array(ratios)
    assert np.all(ratios >= 1.0), ratios
    if kind.startswith("hermite"):
        assert ratios[0] < 1.3, ratios


def _theta0(model, eq, points):
    return np.linalg.lstsq(np.asarray(model.basis(points)), np.asarray(eq.u0(np.asarray(points).T)),
                           rcond=None)[0]


def test_hermite_local_estimate_is_heuns_local_error_to_leading_order():
    """One step of the exact-projection Heun: the Hermite–Simpson defect over the true
    local error → 1 as Δt → 0 (by 1 + |z|/2 per mode), and falls as Δt³."""
    eq = make_config("equation.initial_condition=sines2d").equation
    model = _fourier_model()
    held = Quadrature(holdout_points(16, 16, eq.lengths), cell_volume(16, eq.lengths))
    points = jnp.asarray(np.stack(np.meshgrid(*(np.arange(16) * TWO_PI / 16,) * 2, indexing="ij"), -1)
                         .reshape(-1, 2))
    theta = jnp.asarray(_theta0(model, eq, points))
    rates = -eq.nu * np.sum(np.asarray(model.waves) ** 2, axis=1)
    defect = Defect(model, eq, held, "hermite")
    dts, est, true = [0.05, 0.1, 0.2, 0.4], [], []
    for dt in dts:
        new = _heun_by_projection(model, eq, theta, dt, points)
        est.append(float(defect(theta, new, dt)[1]["defect_l2"]))
        exact = model.apply(theta * np.exp(rates * dt), held.points)
        true.append(float(defect.norm(model.apply(new, held.points) - exact)))
    ratio = np.array(est) / np.array(true)
    assert np.all(ratio > 1) and ratio[0] < 1.02 and np.all(np.diff(ratio) > 0), ratio
    assert abs(convergence_order(dts, est) - 3) < 0.05


# --- the stability bounds the equations declare ------------------------------------------


def _spectral_fields(n, rng):
    """A random smooth field on the n² periodic grid, with its spectral gradient and Laplacian."""
    k = np.fft.fftfreq(n, 1.0 / n)
    kx, ky = np.meshgrid(k, k, indexing="ij")
    coef = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))) * np.exp(-(kx**2 + ky**2) / 4)
    u = np.fft.ifft2(coef).real * n
    hat = np.fft.fft2(u)
    grad = np.stack([np.fft.ifft2(1j * kx * hat).real, np.fft.ifft2(1j * ky * hat).real])
    return u, grad, np.fft.ifft2(-(kx**2 + ky**2) * hat).real


@pytest.mark.parametrize("name", ["burgers", "allen_cahn", "heat"])
def test_growth_rate_bounds_the_separation_of_two_solutions(name):
    """⟨L[v] − L[w], v − w⟩ ≤ μ(v) ‖v − w‖² for random smooth v, w on the periodic box,
    μ the equation's declared growth rate at v (exact integrals on the grid); for
    Burgers the identity −ν‖∇e‖² − ½∫e²(∂₁ + ∂₂)v behind μ holds to round-off."""
    eq = make_equation(name)
    rng = np.random.default_rng(0)
    n, w = 64, (TWO_PI / 64) ** 2
    for _ in range(5):
        v, gv, lv = _spectral_fields(n, rng)
        e, ge, le = (0.1 * a for a in _spectral_fields(n, rng))
        inner = w * np.sum((eq.rhs(v, gv, lv) - eq.rhs(v - e, gv - ge, lv - le)) * e)
        mu = float(eq.growth_rate(jnp.asarray(v), jnp.asarray(gv)))
        assert inner <= mu * w * np.sum(e * e) + 1e-12
        if name == "burgers":
            identity = -eq.nu * w * np.sum(ge * ge) - 0.5 * w * np.sum(e * e * (gv[0] + gv[1]))
            assert inner == pytest.approx(identity, rel=1e-10, abs=1e-14)


# --- the reference at any time ----------------------------------------------------------


def test_etdrk4_reference_at_a_non_grid_time_matches_a_run_ending_there():
    """Burgers' ETDRK4 reference stored at t = 0, 0.05, 0.1 and asked for t = 0.0731 (a
    partial step from 0.05) agrees with a reference run ending at 0.0731 to that
    scheme's own accuracy (its change when dt halves), at a stored time exactly."""
    eq = make_equation("burgers")
    scheme = Pseudospectral(degree=2, resolution=((math.inf, 32, 0.01),))
    stored = scheme.solution(eq, [0.0, 0.05, 0.1], cache_dir=False)
    direct = scheme.solution(eq, [0.0731], cache_dir=False).values(0, 32)
    finer = scheme.solution(eq, [0.0731], cache_dir=False, dt=0.005).values(0, 32)
    accuracy = rel_l2(direct, finer)
    assert 0 < rel_l2(stored.values_at(0.0731, 32), direct) < accuracy
    np.testing.assert_array_equal(stored.values_at(0.05, 32), stored.values(1, 32))
    anytime = scheme.anytime(eq, 0.1, cache_dir=False)  # stored on its own step grid, 0.01 apart
    assert rel_l2(anytime.values_at(0.0731, 32), direct) < accuracy


def test_exact_references_at_any_time():
    heat = make_equation("heat")
    ref = heat.reference_anytime(1.0)
    sol = heat.reference([0.37])
    np.testing.assert_allclose(ref.values_at(0.37, 16), sol.values(0, 16), rtol=0, atol=1e-15)
    disk = make_equation("heat_disk")
    np.testing.assert_allclose(disk.reference_anytime(1.0).values_at(0.37, 8),
                               disk.reference([0.37]).values(0, 8), rtol=0, atol=1e-15)


# --- analysis -----------------------------------------------------------------------------


def test_estimate_ratio_and_curve_times():
    rel = ([0, 1, 2, 6, 7], [1e-7, 1e-7, 2e-7, 4e-7, 5e-7])
    est = ([0, 1, 6, 7], [1e-7, 9e-7, 8e-7, 5e-6])
    assert analysis.estimate_ratio(rel, est) == pytest.approx((2.0, 10.0))
    assert np.isnan(analysis.estimate_ratio(rel, ([1], [1.0]))[0])
    np.testing.assert_allclose(analysis.curve_times([0, 1, 2], 0.01), [0, 0.01, 0.02], rtol=1e-15, atol=0)
    np.testing.assert_allclose(analysis.curve_times([0, 1, 2], np.nan, ([1, 2], [0.3, 0.5])), [0, 0.3, 0.5],
                               rtol=1e-15, atol=0)


def test_report_of_fixed_and_adaptive_runs(tmp_path):
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "experiment_id": "1",
                         "params.method": "teng_heun", "params.equation": "heat",
                         "params.dt": ["0.005", "0.001", "auto"], "params.seed": "0",
                         "metrics.global_rel_l2": [2e-7, 1e-7, 1.5e-7],
                         "metrics.runtime_s": [10.0, 50.0, 8.0],
                         "metrics.est_global_rel_l2": [4e-7, 3e-7, 2e-7]})
    df = analysis.tidy(runs)
    assert df["adaptive"].tolist() == [False, False, True] and np.isnan(df["dt"][2])
    assert "adaptive" in analysis.varied_axes(df)
    df["pareto"] = analysis.pareto_by_equation(df)
    curves = {r: ([0, 1, 2, 6, 7], [1e-7] * 5) for r in df["run_id"]}
    extra = {"est_rel_l2": {r: ([0, 1, 2, 6, 7], [2e-7] * 5) for r in df["run_id"]},
             "t": {"c": ([1, 2, 6, 7], [0.1, 0.3, 0.6, 1.0])},
             "dt": {"c": ([1, 2, 6, 7], [0.1, 0.2, 0.3, 0.4])}}
    paths = report.write_report(df, curves, tmp_path, extra=extra)
    assert {"estimate_vs_error.png", "dt_vs_time.png", "estimate.csv"} <= {p.name for p in paths}
    quality = pd.read_csv(tmp_path / "estimate.csv")
    assert quality["ratio_min"].tolist() == [2.0, 2.0, 2.0] and quality["ratio_max"].tolist() == [2.0] * 3


def test_analyze_draws_estimates_and_step_sizes_from_the_store(tmp_path):
    """pipeline/analyze.py's own function on a store with one fixed-Δt and one adaptive
    run, each with its estimate: estimate_vs_error.png, dt_vs_time.png and estimate.csv
    (the ratio estimate/error after step 5, from the curves read back)."""
    import time

    import mlflow
    from mlflow.entities import Metric, Param

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.tracking.MlflowClient(uri)
    exp = client.create_experiment("heat", artifact_location=(tmp_path / "mlruns").as_uri())
    now = int(time.time() * 1000)
    for dt, times in (("0.1", np.arange(9) * 0.1),
                      ("auto", np.array([0, 0.05, 0.15, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0]))):
        run = client.create_run(exp, tags={"run_kind": "job", "method": "teng_heun", "equation": "heat"})
        err = 1e-7 * (1 + times)
        est = err * (3.0 if dt == "auto" else 2.0) * np.where(np.arange(9) == 7, 2.0, 1.0)
        curves = [Metric("rel_l2", e, now, k) for k, e in enumerate(err)]
        curves += [Metric("est_rel_l2", e, now, k) for k, e in enumerate(est)]
        if dt == "auto":
            curves += [Metric("t", t, now, k) for k, t in enumerate(times) if k]
            curves += [Metric("dt", h, now, k + 1) for k, h in enumerate(np.diff(times))]
        scalars = [Metric(k, v, now, 0) for k, v in (("global_rel_l2", 1.5e-7), ("runtime_s", 3.0),
                                                     ("est_global_rel_l2", 4e-7))]
        client.log_batch(run.info.run_id, metrics=curves + scalars,
                         params=[Param("dt", dt), Param("method", "teng_heun"), Param("equation", "heat")])
        client.set_terminated(run.info.run_id)
    cfg = compose_conf([f"tracking_uri={uri}", "experiments=[heat]", f"out={tmp_path / 'out'}",
                        "mlflow=false"], config_name="analyze")
    out = report.analyze(cfg, ROOT)
    assert (out / "estimate_vs_error.png").is_file() and (out / "dt_vs_time.png").is_file()
    quality = pd.read_csv(out / "estimate.csv").sort_values("run")
    assert quality["run"].tolist() == ["teng_heun adaptive=False", "teng_heun adaptive=True"]
    assert quality["ratio_min"].tolist() == pytest.approx([2.0, 3.0])
    assert quality["ratio_max"].tolist() == pytest.approx([4.0, 6.0])


@pytest.mark.parametrize("kind", ["hermite", "trapezoid", "hermite_triangle", "embedded"])
def test_the_estimate_carries_its_past_error_at_the_declared_growth_rate(kind):
    """E_{n+1} = e^{μΔt}E_n + (the step's local term), μ the equation's growth rate
    (positive for Allen–Cahn and Burgers, zero for heat, so that no heat run tells).
    Three steps with μ = 2, Δt = 0.1 from E₀ of norm 1 and unit local terms in one
    direction: E₃ = g³ + g² + g + 1 with g = e^{0.2}. Exact but for a few roundings."""
    weights, e0 = np.full(4, 0.25), np.ones(4)
    estimate = ErrorEstimate.start(kind, weights, e0)
    g = math.exp(2.0 * 0.1)
    scalars = {"growth_rate": 2.0, "defect_l2": 1.0, "local_error": 1.0, "holdout_loss": 0.0}
    for _ in range(3):
        estimate = estimate.advance(0.1, scalars, np.ones(4), None)
    assert estimate.error == pytest.approx(g**3 + g**2 + g + 1, rel=1e-14, abs=0)


def test_the_transport_estimate_follows_the_error_where_projection_is_exact():
    """As the test above, with the error carried through L′ on the held-out grid
    (``transport``): every mode decays in the estimate as in the truth, each step's defect
    too (weighted by φ₁(ΔtΛ): spread over the step), so the estimate is Heun's error to
    0.1 % at every step (measured 0.9997; with the defect unweighted it ran up to 30 %
    above), where the contractive bound (``hermite``) drifts up as the damped modes die."""
    eq = make_config("equation.initial_condition=sines2d").equation
    model = _fourier_model()
    held = Quadrature(holdout_points(16, 16, eq.lengths), cell_volume(16, eq.lengths), grid_shape=(16, 16))
    points = jnp.asarray(np.stack(np.meshgrid(*(np.arange(16) * TWO_PI / 16,) * 2, indexing="ij"), -1)
                         .reshape(-1, 2))
    theta0 = _theta0(model, eq, points)
    theta = jnp.asarray(theta0)
    defect = Defect(model, eq, held, "transport")
    assert defect.kind == "transport"
    e0, _ = defect.initial(theta)
    estimate = ErrorEstimate.start("transport", np.asarray(defect.weights), np.asarray(e0), defect.transport)
    rates = -eq.nu * np.sum(np.asarray(model.waves) ** 2, axis=1)
    dt, ratios, start = 0.4, [], defect.fields(theta)
    for n in range(1, 16):
        new = _heun_by_projection(model, eq, theta, dt, points)
        end = defect.fields(new)
        vectors, scalars = defect.combine(start, end, dt)
        estimate = estimate.advance(dt, {k: float(v) for k, v in scalars.items()},
                                    np.asarray(vectors["defect"]), (start, end))
        exact = model.apply(jnp.asarray(theta0 * np.exp(rates * n * dt)), held.points)
        ratios.append(estimate.error / float(defect.norm(model.apply(new, held.points) - exact)))
        theta, start = new, end
    ratios = np.array(ratios)
    assert np.all(np.abs(ratios - 1.0) <= 1e-3), ratios


@pytest.mark.parametrize("name, expected", [
    ("heat", {(2, 0): 0.1, (0, 2): 0.1}),
    ("anisotropic", {(2, 0): 0.2, (1, 1): 0.1, (0, 2): 0.1}),
])
def test_the_linearised_operator_has_the_coefficients_of_the_operator(name, expected):
    """L′[û] = Σ_α a_α ∂^α, its coefficients read off L by autodiff (:class:`Transport`):
    those of a constant-coefficient operator exactly (the rest 0), whatever û is."""
    eq = make_config("equation.initial_condition=sines2d").equation
    if name == "anisotropic":
        sys.path.insert(0, str(ROOT / "examples"))
        from anisotropic_diffusion import AnisotropicDiffusion

        eq = AnisotropicDiffusion(name="aniso", a=0.2, b=0.05, c=0.1, lengths=eq.lengths,
                                  initial_condition="two_modes")
    held = eq.holdout(16, 16)
    transport = Transport(eq.periods, held.grid_shape, eq.order)
    a = np.asarray(transport.coefficients(eq, lambda p: jnp.sin(p[:, 0]) * jnp.cos(2 * p[:, 1]) ** 2,
                                          held.points, 0.0))
    for alpha, row in zip(transport.alphas, a):
        np.testing.assert_allclose(row, expected.get(alpha, 0.0), rtol=0, atol=1e-14, err_msg=str(alpha))


def test_burgers_linearised_coefficients_are_its_jacobian():
    """Burgers' L[u] = νΔu − u(∂₁u + ∂₂u): a₀ = −(∂₁û + ∂₂û), a_{e_i} = −û, a_{2e_i} = ν."""
    eq = make_config("equation=burgers", "equation.initial_condition=sines2d").equation
    held = eq.holdout(16, 16)
    transport = Transport(eq.periods, held.grid_shape, eq.order)

    def u(p):
        return jnp.sin(p[:, 0]) * jnp.cos(2 * p[:, 1])

    a = dict(zip(transport.alphas, np.asarray(transport.coefficients(eq, u, held.points, 0.0))))
    x, y = np.asarray(held.points).T
    value, grad = np.sin(x) * np.cos(2 * y), (np.cos(x) * np.cos(2 * y), -2 * np.sin(x) * np.sin(2 * y))
    expected = {(0, 0): -(grad[0] + grad[1]), (1, 0): -value, (0, 1): -value, (2, 0): eq.nu, (0, 2): eq.nu,
                (1, 1): 0.0}
    for alpha, want in expected.items():
        np.testing.assert_allclose(a[alpha], want, rtol=0, atol=1e-13, err_msg=str(alpha))


@pytest.mark.parametrize("tableau", [HEUN, HEUN_FSAL, BS3, RK4], ids=lambda t: t.name)
def test_the_embedded_estimates_leading_constant(tableau):
    """``err ≈ C (ΔtL)^q y`` on y′ = λy: the tableau walked with slopes λ·(stage value),
    its embedded difference over (Δtλ)^q → C as Δt → 0 (what ``dt_initial: auto`` uses)."""
    lam, q = -1.0, tableau.error_order

    def err(h):
        k = [lam]
        for row in [*tableau.lower, *([tableau.b] if tableau.fsal else [])]:
            k.append(lam * (1 + h * sum(a * kj for a, kj in zip(row, k))))
        return h * sum(w * kj for w, kj in zip(tableau.b_error, k))

    h = 1e-3
    assert err(h) / (h * lam) ** q == pytest.approx(tableau.error_constant, rel=1e-2)


@pytest.mark.parametrize("tableau, x", [(HEUN, 2.0), (BS3, 2.512), (RK4, 2.785)],
                         ids=lambda v: getattr(v, "name", ""))
def test_the_stability_interval_of_each_tableau(tableau, x):
    """|R(−s)| ≤ 1 on [0, x] and not beyond (R the stability polynomial: Heun's
    1 + z + z²/2 is 1 at −2; the others' by their known intervals, to 1e-3)."""
    limit = tableau.stability_limit
    assert limit == pytest.approx(x, abs=2e-3)
    R = np.polynomial.Polynomial([1.0, 1.0, 1 / 2, 1 / 6, 1 / 24][: tableau.order + 1])
    assert np.all(np.abs(R(-np.linspace(0, limit, 200))) <= 1 + 1e-9) and abs(R(-limit - 0.01)) > 1


def test_the_fastest_resolved_decay_of_the_biharmonic_sets_the_stable_step():
    """On ∂ₜu = −κΔ²u fitted on a 32² grid of [0, 2π)² the fastest decay a fit can hold is
    κ·16⁴ (|k| ≤ 16); under ``dt: auto`` Heun's tries are then at most 0.9·2/(κ·16⁴)."""
    sys.path.insert(0, str(ROOT / "examples"))
    from kuramoto_sivashinsky import Biharmonic

    base = make_config("equation.initial_condition=sines2d").equation
    eq = Biharmonic(name="b", kappa=0.01, lengths=base.lengths, initial_condition="two_modes")
    held = eq.holdout(32, 16)
    transport = Transport(eq.periods, held.grid_shape, eq.order, resolved=(32, 32))
    a = transport.coefficients(eq, lambda p: jnp.sin(p[:, 0]) * jnp.cos(p[:, 1]), held.points, 0.0)
    assert transport.radius(a) == pytest.approx(0.01 * 16**4, rel=1e-12)
    schedule = Adaptive(make_config("dt=auto").controller, [0.1], 2, HEUN.error_constant,
                        HEUN.stability_limit)
    assert schedule.stable_step(transport.radius(a)) == pytest.approx(0.9 * 2.0 / (0.01 * 16**4), rel=1e-12)
    assert schedule.stable_step(None) == math.inf


def _imaginary_extent(tableau) -> float:
    """The largest y with |R(is)| ≤ 1 + 10⁻¹² for every s in [0, y], on a grid of step 10⁻⁵:
    the tableau's stability region on the imaginary axis, computed directly."""
    y = np.linspace(0.0, 4.0, 400_001)
    outside = np.abs(tableau.stability_polynomial(1j * y)) > 1 + 1e-12
    return float(y[np.argmax(outside) - 1])


@pytest.mark.parametrize("tableau", [RK4, BS3, HEUN], ids=lambda t: t.name)
def test_a_scalar_dispersive_spectrums_stable_step_is_the_regions_extent(tableau):
    """KdV's linear part −∂ₓ³ on 256 nodes of [0, 50) has the purely imaginary rates ik³,
    |k| ≤ π·256/50: ``dt: auto``'s cap is safety·y*/max|k|³, y* the region's extent on the
    imaginary axis from |R(iy)| directly (RK4 2.83, BS3 1.73; Heun 10⁻³, the table's first
    step, where its growth per step is below 10⁻¹²) to the table's step 10⁻³. A real
    spectrum (diffusion ν∂ₓ²) keeps the real-axis ρ = ν max k², bit for bit, and an advective
    one (−c∂ₓ + ν∂ₓ²) puts every Δtλ at the cap inside the region."""
    transport = Transport((50.0,), (256,), 3, resolved=(256,), region=tableau.equivalent_radius)
    schedule = Adaptive(make_config("dt=auto").controller, [1.0], tableau.error_order, tableau.error_constant,
                        tableau.stability_limit)
    k_max = math.pi * 256 / 50

    def cap(*a):
        return schedule.stable_step(transport.radius(np.repeat(np.array(a, float)[:, None], 256, axis=1)))

    extent = _imaginary_extent(tableau)
    assert cap(0, 0, 0, -1) * k_max**3 / 0.9 == pytest.approx(extent, abs=1e-3)
    assert abs(tableau.stability_polynomial(1j * cap(0, 0, 0, -1) / 0.9 * k_max**3)) <= 1 + 1e-12
    diffusion = np.repeat([[0.0], [0.0], [0.3], [0.0]], 256, axis=1)
    real_axis = Transport((50.0,), (256,), 3, resolved=(256,))  # no region: ρ = max −Re λ
    assert transport.radius(diffusion) == real_axis.radius(diffusion)
    assert transport.radius(diffusion) == pytest.approx(0.3 * k_max**2, rel=1e-12)
    rates = transport.rates(np.repeat([[0.0], [-2.0], [0.01], [0.0]], 256, axis=1))
    h = cap(0, -2.0, 0.01, 0)
    assert h < 0.9 * tableau.stability_limit / (0.01 * k_max**2)  # tighter than the real axis alone
    assert np.max(np.abs(tableau.stability_polynomial(h * rates))) <= 1 + 1e-9


def test_the_first_try_takes_the_whole_cap_only_on_rates_off_the_real_axis():
    """``dt_initial: auto`` caps the first try at a quarter of the stable step where that is a
    real decay's (θ₀'s residual between the nodes is no part of the error model), at all of it
    where the region's radius of oscillatory rates sets it: KdV's dispersion −∂ₓ³ and an
    advection −c∂ₓ are oscillatory, diffusion is not; a number ``dt_initial`` is capped at
    the whole step either way."""
    transport = Transport((50.0,), (256,), 3, resolved=(256,), region=RK4.equivalent_radius)

    def spectrum(*a):
        a = np.repeat(np.array(a, float)[:, None], 256, axis=1)
        return transport.radius(a), oscillatory(transport, a)

    assert spectrum(0, 0, 0, -1)[1] and spectrum(0, -2.0, 0, 0)[1]
    assert not spectrum(0, 0, 0.3, 0)[1] and not spectrum(-1.0, 0, 0.3, 0)[1]
    for dt_initial, shares in (("auto", {True: 1.0, False: Adaptive.FIRST_OF_CAP}),
                               (1.0, {True: 1.0, False: 1.0})):
        controller = dataclasses.replace(make_config("dt=auto").controller, dt_initial=dt_initial)
        schedule = Adaptive(controller, [1.0], RK4.error_order, RK4.error_constant, RK4.stability_limit)
        for rates in ((0, 0, 0, -1), (0, 0, 0.3, 0)):
            rho, wavy = spectrum(*rates)
            cap = schedule.stable_step(rho)
            first = schedule.first(1.0, 1e-12, cap, wavy).dt  # the tolerance's step dt_max: the cap binds
            assert first == pytest.approx(shares[wavy] * cap, rel=1e-12)


def test_dt_initial_auto_sizes_the_first_try_at_the_tolerance(cache_dir):
    """``dt_initial: auto`` on heat: the first try is the step whose embedded estimate
    |C|Δt^q ‖∂ₜ^q u‖ (Heun–Euler: C = −½, q = 2; ‖∂ₜ²u‖ from L′[û₀]L[û₀]) is 0.9 times the
    tolerance; the step taken reports an estimate within 10 % of that, and is kept (judged on
    that estimate alone, ``controller.error=time``: the model does not know the fit's residual)."""
    records = []
    cfg = make_config(*SINES32, "t_final=0.05", "dt=auto", "controller.dt_initial=auto",
                      "controller.rtol=1e-5", "controller.error=time", "progress=false", *CHEAP_FIT)
    r = run_simulation(cfg, cache_dir=cache_dir, on_step=records.append)
    first = records[1].metrics
    tolerance = 1e-12 + 1e-5 * first["u_l2"]
    assert first["local_error"] / tolerance == pytest.approx(0.9, rel=0.1)
    assert r.scalars["steps_rejected"] == 0 and first["dt"] > 0.001
