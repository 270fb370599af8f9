"""Systems (vector-valued fields): the network with one output per component and its
factored Jacobian, the operator on every component, the one-line checks of a user's system,
and a wave-equation run measured against its exact standing waves (per-component errors,
the energy's drift)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, make_config, make_equation

from teng_eq.equations import network_operator
from teng_eq.equations.base import array_module
from teng_eq.equations.system import PeriodicSystem, select
from teng_eq.equations.wave import STANDING2D, Wave
from teng_eq.errors import ConfigError, Diverged
from teng_eq.network.paper import SYSTEM_NETWORKS, NetworkConfig, TENGNet, build_network
from teng_eq.network.space import ParamSpace


@pytest.mark.parametrize("components", SYSTEM_NETWORKS)
def test_factored_jacobian_of_a_system_network_is_autodiff(components):
    """Row by row, the factored Jacobian is that of component c at x: one trunk's (its
    output's cotangent one-hot) and one net per component's (net c's rows only)."""
    options = NetworkConfig(features=3, width=5, depth=4, embedding_activation="tanh", init="paper",
                            components=components)
    net = build_network(options, 2, (2 * math.pi,) * 2, seed=0, outputs=3)
    space = ParamSpace(net)
    theta = space.flatten(net)
    x = jax.random.uniform(jax.random.PRNGKey(1), (7, 2)) * 6
    c = jnp.array([0.0, 1, 2, 0, 1, 2, 1])
    rows = jnp.concatenate([x, c[:, None]], axis=1)
    u, Gt, Ht = net.jacobian_factors_t(rows)
    gcol, hcol = net.factor_columns()
    np.testing.assert_allclose(u, space.vector(theta, x)[jnp.arange(7), c.astype(int)], atol=1e-15)
    np.testing.assert_allclose((Gt[gcol] * Ht[hcol]).T, jax.jacfwd(lambda t: space.apply(t, rows))(theta),
                               atol=1e-14)
    # One trunk: a component more costs its output row (width + 1); a net per component, a net.
    scalar = ParamSpace(build_network(options, 2, (2 * math.pi,) * 2, seed=0)).size
    assert space.size == (scalar + 2 * (5 + 1) if components == "shared" else 3 * scalar)


def test_wave_operator_on_rows_is_the_systems():
    """L at rows (x, c): (v, c²Δu) of the exact standing waves, from the network's vector and
    from the rows' scalar function alike; the quadrature holds every point once per component."""
    eq = make_equation("wave", "equation.c=1.5")
    quad = eq.quadrature(8)
    assert quad.points.shape == (2 * 64, 3) and quad.components == ("u", "v")
    rows = jnp.asarray(quad.points)
    fn = jax.vmap(eq.u0)
    got = eq.operator_rows(fn, rows, 0.0)
    x = np.asarray(rows[:64, :2]).T
    _, v = eq.solution(x, 0.0)
    # Δu of u₀ = Σ A cos(k·x + φ), mode by mode.
    lap = sum(-(k1**2 + k2**2) * a * np.cos(k1 * x[0] + k2 * x[1] + phi) for k1, k2, phi, a, _ in STANDING2D)
    np.testing.assert_allclose(got, np.concatenate([v, 1.5**2 * lap]), atol=1e-12)
    # The exact solution's time derivative is L of it.
    h = 1e-4
    du = (np.concatenate(eq.solution(x, h)) - np.concatenate(eq.solution(x, -h))) / (2 * h)
    np.testing.assert_allclose(du, got, atol=1e-6)


def test_select_picks_components_on_numpy_and_jax():
    values = (np.arange(4.0), 10 + np.arange(4.0))
    index = np.array([0.0, 1, 1, 0])
    np.testing.assert_array_equal(select(values, index), [0, 11, 12, 3])
    np.testing.assert_array_equal(select(tuple(map(jnp.asarray, values)), jnp.asarray(index)), [0, 11, 12, 3])


def _waves(x):
    xp = array_module(x)
    return xp.sin(x[0]) + 0 * x[1], xp.cos(x[1]) + 0 * x[0]


_WAVES = {"waves": _waves}


class _Pair(PeriodicSystem):
    dim = 2
    components = ("a", "b")
    initial_conditions = _WAVES

    def operator(self, u, t):
        return u["b"].value, -u["a"].value


class _Three(_Pair):
    def operator(self, u, t):
        return u["b"].value, -u["a"].value, u["a"].lap


class _Misnamed(_Pair):
    def operator(self, u, t):
        return u["c"].value, u["a"].value


@pytest.mark.parametrize("cls, message", [
    (_Three, "operator returns 3 arrays, expected 2"),
    (_Misnamed, "KeyError: \"u['c']: not a component of this system ('a', 'b')\""),
])
def test_a_systems_mistakes_are_one_line(cls, message):
    fields = {"name": "pair", "initial_condition": "waves", "lengths": (2 * math.pi,) * 2}
    _Pair.from_config(fields)  # the parent passes: only the mistake fails
    with pytest.raises(ConfigError) as err:
        cls.from_config(fields)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_scalar_method_refuses_a_system():
    with pytest.raises(ConfigError, match=r"method='tdvp_rk4': runs scalar equations, and wave is a system"):
        make_config("equation=wave", "method=tdvp_rk4")


@pytest.mark.slow  # 55–100 s with its estimate: the default suite's margin
def test_wave_run_against_standing_waves(cache_dir):
    """Two TENG-RK4 steps of the wave system: the whole state's error is the root of the
    components' squared errors, weighted by their norms; the energy's drift is logged; the
    final field gives every component at spatial points; the transport's estimate (which
    never sees the exact solution) within 10 % of the error at both steps (measured 1.040, 1.038)."""
    from teng_eq.run.simulation import run_simulation

    cfg = make_config("equation=wave", "method=teng_rk4", "grid=32", "eval_grid=32", "t_final=0.02",
                      "dt=0.01", *CHEAP_FIT)
    result = run_simulation(cfg, cache_dir=cache_dir)
    ratio = result.est_rel_l2[1:] / result.rel_l2[1:]
    assert result.estimate == "transport" and np.all((ratio > 0.95) & (ratio < 1.1)), ratio
    per = {k: v for k, v in result.metrics.items() if "/" in k}
    assert set(per) == {"rel_l2/u", "rel_l2/v", "drift/energy"}
    u, v = per["rel_l2/u"][-1], per["rel_l2/v"][-1]
    eq = cfg.equation
    points, values = result.field.on_grid(32)
    assert points.shape == (32 * 32, 2) and values.shape == (32 * 32, 2)
    exact = np.stack(eq.solution(points.T, 0.02), axis=1)
    su, sv = np.sum(exact**2, axis=0)
    assert result.rel_l2[-1] == pytest.approx(math.sqrt((u**2 * su + v**2 * sv) / (su + sv)), rel=1e-9)
    assert (np.sqrt(np.sum((values - exact) ** 2) / np.sum(exact**2))
            == pytest.approx(result.rel_l2[-1], rel=1e-9))
    assert result.rel_l2[-1] < 1e-3 and 0 < per["drift/energy"][-1] < 1e-3
    # The drift is the energy's: ∫ v² + c²|∇u|² of the network, against θ₀'s.
    assert per["drift/energy"][0] > 0


@pytest.mark.slow
def test_heun_cannot_follow_the_waves_oscillations_under_dt_auto(cache_dir):
    """TENG-Heun's stability region holds 10⁻³ of the imaginary axis: on the wave's rates up
    to c·16 (32² fit points) its stable step is ~6e-5, and with ``dt_min`` above it the run
    ends at its first step, saying why."""
    from teng_eq.run.simulation import run_simulation

    cfg = make_config("equation=wave", "grid=32", "eval_grid=32", "t_final=0.01", "dt=auto",
                      "controller.dt_min=1e-3", "controller.dt_initial=0.005", *CHEAP_FIT)
    with pytest.raises(Diverged, match=r"the stable step 5\.\d+e-05 .* is below controller\.dt_min=0\.001"):
        run_simulation(cfg, cache_dir=cache_dir)


def test_network_operator_of_a_system_uses_every_component():
    """network_operator: the vector pass and the per-row pass agree."""
    eq = make_equation("wave")
    net = TENGNet(dim=2, features=4, width=6, depth=4, outputs=2, init="paper", key=jax.random.PRNGKey(3))
    space = ParamSpace(net)
    theta = space.flatten(net)
    rows = jnp.asarray(eq.holdout(8, 4).points)
    a = network_operator(eq, space, theta, rows)
    b = eq.operator_rows(lambda p: space.apply(theta, p), rows, 0.0)
    np.testing.assert_allclose(a, b, atol=1e-13)


class _Weighted(Wave):
    fit_weights = (4.0, 1.0)


class _BadWeights(Wave):
    fit_weights = (1.0,)


def test_component_weights_weigh_the_fits_not_the_error():
    """``fit_weights`` scale each component's rows in the fits' (and the held-out check's)
    quadrature; the error norms weigh the components alike; a wrong count is one line."""
    fields = {"name": "wave", "initial_condition": "standing2d", "c": 1.0, "lengths": (2 * math.pi,) * 2}
    eq = _Weighted.from_config(fields)
    cell = (2 * math.pi / 8) ** 2
    np.testing.assert_allclose(eq.quadrature(8).weights, np.repeat([4 * cell, cell], 64), rtol=1e-15)
    np.testing.assert_allclose(eq.holdout(8, 4).weights, np.repeat([4, 1], 16) * (2 * math.pi / 4) ** 2,
                               rtol=1e-15)
    assert eq.evaluation(8).weights == pytest.approx(cell, rel=1e-15)
    with pytest.raises(ConfigError, match=r"fit_weights must be 2 numbers > 0, not \(1.0,\)"):
        _BadWeights.from_config(fields)


@pytest.mark.slow
def test_the_wave_preset_reaches_its_documented_error(tmp_path):
    """``equation=wave`` at its CPU default (TENG-Heun, 32², Δt 0.005, T = 0.25): the guide's
    row (measured 1.77e-4 at T, global 8.8e-5, energy drift 4.0e-6, the v error the larger)."""
    from teng_eq.run.simulation import run_simulation

    result = run_simulation(make_config("equation=wave", "estimate=none"), cache_dir=tmp_path)
    assert result.times[-1] == pytest.approx(0.25)
    assert result.rel_l2[-1] < 3e-4 and result.global_rel_l2 < 1.5e-4
    assert result.metrics["rel_l2/v"][-1] > result.metrics["rel_l2/u"][-1]
    assert np.nanmax(result.metrics["drift/energy"]) < 2e-5


def test_the_wave_to_t1_preset_is_its_documented_route():
    """``experiment=wave_t1`` composes to the route the Systems guide measures: one network per
    component, θ₀ on 64² with the longer stage 2, the paper's parameters drawn, TENG-RK4."""
    run = make_config("experiment=wave_t1")
    o = run.method.options
    assert (run.equation.name, run.method.name, run.dt, run.t_final) == ("wave", "teng_rk4", 0.005, 1.0)
    assert (o.grid, run.eval_grid, o.network.components) == (32, 64, "separate")
    assert (o.subsample_first, o.subsample, o.iters, o.iters_later) == (1536, 1024, 12, 10)
    assert (o.fit.grid, o.fit.stage2_subsample, o.fit.stage2_max_iters, o.fit.stage2_polish_iters) == (
        64, 2048, 1000, 200)


@pytest.mark.slow
@pytest.mark.manual  # about 17 minutes on 2 cores, θ₀ included
def test_the_wave_to_t1_preset_reaches_its_documented_error(tmp_path):
    """``experiment=wave_t1``: the Systems guide's row (measured θ₀ 1.7e-7, 1.53e-5 at T = 1, global
    1.08e-5, energy drift ≤ 4.7e-8; stable through t ≈ 0.63, where the shared trunk diverges)."""
    from teng_eq.run.simulation import run_simulation

    result = run_simulation(make_config("experiment=wave_t1", "estimate=none"), cache_dir=tmp_path)
    assert result.times[-1] == pytest.approx(1.0)
    assert result.rel_l2[0] < 3e-7
    assert result.rel_l2[-1] < 3e-5 and result.global_rel_l2 < 2e-5
    assert np.nanmax(result.metrics["drift/energy"]) < 1e-6


def test_the_energy_form_is_the_same_waves():
    """``wave_energy``: (p, q) = (v, c∇u) of ``wave``'s exact solution, whose time derivative is
    the energy form's operator, and whose L² norm (the energy) is constant."""
    wave, energy = make_equation("wave", "equation.c=1.5"), make_equation("wave_energy", "equation.c=1.5")
    x = np.asarray(energy.spatial(8).points).T
    h = 1e-5
    for t in (0.0, 0.3):
        p, q1, q2 = energy.solution(x, t)
        dx = [(wave.solution(x + h * e[:, None], t)[0] - wave.solution(x - h * e[:, None], t)[0]) / (2 * h)
              for e in np.eye(2)]
        np.testing.assert_allclose(p, wave.solution(x, t)[1], atol=1e-13)
        np.testing.assert_allclose(np.stack([q1, q2]), 1.5 * np.stack(dx), atol=1e-8)
        rows = jnp.asarray(energy.quadrature(8).points)
        fn = jax.vmap(functools.partial(energy.exact, t=t))
        du = (np.concatenate(energy.solution(x, t + h)) - np.concatenate(energy.solution(x, t - h))) / (2 * h)
        np.testing.assert_allclose(energy.operator_rows(fn, rows, t), du, atol=1e-8)
    energies = [sum(np.sum(c**2) for c in energy.solution(x, t)) for t in (0.0, 0.7)]
    assert energies[1] == pytest.approx(energies[0], rel=1e-13)


def test_the_exact_fourier_reference_of_a_linear_system_is_the_standing_waves():
    """ExactFourier on a system: each mode carried by the matrix exponential of the wave's
    symbol [[0, 1], [−c²|k|², 0]] (a Jordan block at k = 0) gives the standing waves."""
    from teng_eq.reference import ExactFourier

    eq = make_equation("wave", "equation.c=1.5")
    sol = ExactFourier(n=16).solution(eq, np.array([0.0, 0.4, 1.3]))
    x = np.asarray(eq.spatial(24).points).T
    for k, t in enumerate((0.0, 0.4, 1.3)):
        exact = np.concatenate(eq.solution(x, t))
        np.testing.assert_allclose(sol.values(k, 24), exact, rtol=0, atol=1e-13)
    np.testing.assert_allclose(sol.values_at(0.7, 24), np.concatenate(eq.solution(x, 0.7)), rtol=0,
                               atol=1e-13)


def test_a_component_whose_reference_is_zero_is_measured_against_the_whole_state():
    """``rel_l2/<c>`` divides by the component's own reference norm, or, where that reference is
    0 everywhere (a v₀ = 0), by the whole state's: a finite number, not 0/0."""
    import types

    from teng_eq.run.loop import Meter

    space = types.SimpleNamespace
    meter = space(cfg=space(equation=space(components=("u", "v"))), weights=0.5,
                  program=space(invariants=None))
    ref = np.array([3.0, 4.0, 0.0, 0.0])  # u's reference (3, 4), v's 0
    u = np.array([3.0, 4.3, 0.1, -0.2])
    out = Meter.per_component(meter, u, ref, None)
    assert out["rel_l2/u"] == pytest.approx(0.3 / 5.0, rel=1e-14)
    assert out["rel_l2/v"] == pytest.approx(math.sqrt(0.05) / 5.0, rel=1e-14)
