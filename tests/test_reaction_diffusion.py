"""Short-form systems and their pseudo-spectral ETDRK4 reference: a decoupled pair equals the
scalar solver's solution per component, the Brusselator's reference converges to 1e-9 at its
resolution, its short form is the operator the network steps, and a short TENG run meets it."""

import math
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.bands import TRANSPORT
from helpers.configs import CHEAP_FIT, make_config, make_equation
from helpers.numerics import rel_l2, self_convergence

from teng_eq.equations.allen_cahn import AllenCahn
from teng_eq.equations.periodic import paper_initial_condition, sines_initial_condition
from teng_eq.equations.system import PeriodicSystem
from teng_eq.errors import ConfigError
from teng_eq.reference import reference_solution
from teng_eq.reference.etdrk4 import Pseudospectral

SQUARE = (2 * math.pi,) * 2


class _TwoAllenCahn(PeriodicSystem):
    """Two Allen–Cahn fields that do not interact: each component is the scalar equation."""

    dim = 2
    components = ("p", "q")
    initial_conditions: ClassVar = {"pair": lambda x: (sines_initial_condition(x),
                                                       paper_initial_condition(x))}

    def nonlinear(self, u, grad_u):
        return tuple(v - v * v * v for v in u)

    def reference_scheme(self):
        return Pseudospectral(degree=3, resolution=((math.inf, 32, 0.01),))


def test_a_decoupled_system_is_the_scalar_reference_per_component():
    """ETDRK4 on a system (one spectrum per component, one diffusivity each) reproduces the
    scalar solver on each component, to round-off."""
    pair = _TwoAllenCahn.from_config({"name": "pair", "initial_condition": "pair", "lengths": SQUARE,
                                      "nu": [0.05, 0.01]})
    times = [0.1, 0.5]
    both = reference_solution(pair, times, cache_dir=False)
    for c, (ic, nu) in enumerate((("sines2d", 0.05), ("paper2d", 0.01))):
        one = AllenCahn.from_config({"name": "ac", "initial_condition": ic, "lengths": SQUARE, "nu": nu})
        alone = reference_solution(one, times, n=32, dt=0.01, cache_dir=False)
        for k in range(2):
            np.testing.assert_allclose(both.at(k, 48)[c], alone.at(k, 48), rtol=0, atol=1e-14)
        # values(): every component's grid in turn, the layout of the system's evaluation rows.
        np.testing.assert_array_equal(both.values(1, 16)[c * 256:(c + 1) * 256], both.at(1, 16)[c].ravel())


def test_the_brusselator_reference_converges_at_its_resolution():
    """The resolution table's first row (64 modes, Δt 5e-3) at T = 1: within 1e-9 of 128
    modes and of Δt/2 (measured 2.6e-16 and 9.2e-13)."""
    modes, steps = self_convergence("brusselator", 1.0, 64, 5e-3)
    assert modes < 1e-9 and steps < 1e-9


@pytest.mark.slow
def test_the_brusselator_reference_converges_at_the_preset_horizon():
    """The preset's horizon T = 4, where the spots have formed (96 modes, Δt 5e-3): measured
    5e-14 (modes) and 9e-12 (steps); 64 modes would miss by 7e-10."""
    eq = make_equation("brusselator")
    n, dt = eq.reference_scheme().default(4.0)
    assert (n, dt) == (96, 5e-3)
    modes, steps = self_convergence("brusselator", 4.0, n, dt)
    assert modes < 1e-9 and steps < 1e-9


def test_the_short_form_is_the_operator_the_network_steps():
    """L of the short form at the rows (x, c) is ν_c Δu_c + N_c(u, ∇u), with every
    component's derivatives: checked on u₀ against its spectral derivatives."""
    eq = make_equation("brusselator")
    n = 48
    x = np.asarray(eq.spatial(n).points).T
    u0 = np.stack(eq.initial_state(x))
    k = np.fft.fftfreq(n, 1.0 / n)
    k2 = (k[:, None] ** 2 + k[None, :] ** 2)
    lap = np.stack([np.fft.ifft2(-k2 * np.fft.fft2(c.reshape(n, n))).real.ravel() for c in u0])
    expected = np.stack([nu * lap[c] for c, nu in enumerate(eq.nu)]) + np.stack(eq.nonlinear(list(u0), None))
    rows = jnp.asarray(eq.quadrature(n).points)
    got = eq.operator_rows(jax.vmap(eq.u0), rows, 0.0)
    # u₀'s modes beyond 22 per axis are below 1e-13: the spectral Laplacian is exact to ~1e-10.
    np.testing.assert_allclose(got, expected.ravel(), rtol=0, atol=1e-9)


class _Unary(_TwoAllenCahn):
    def nonlinear(self, u, grad_u):
        return u[0] - u[0] ** 3


@pytest.mark.parametrize("cls, nu, message", [
    (_TwoAllenCahn, [0.1], "equation.nu=[0.1]: must be 2 numbers >= 0, one per component ('p', 'q')"),
    (_TwoAllenCahn, [0.1, -1.0], "must be 2 numbers >= 0"),
    (_Unary, [0.1, 0.1], "_Unary.nonlinear returns one ndarray, expected 2: "
                         "nonlinear(u, grad_u) on NumPy arrays"),
])
def test_a_short_form_systems_mistakes_are_one_line(cls, nu, message):
    with pytest.raises(ConfigError) as err:
        cls.from_config({"name": "pair", "initial_condition": "pair", "lengths": SQUARE, "nu": nu})
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow  # 54 s: CI's slow stage (the default suite's 15 minutes; the system's pieces stay in it)
def test_a_brusselator_run_meets_its_reference(tmp_path):
    """Five TENG-RK4 steps of the Brusselator on 32² against ETDRK4: the whole state's error
    and each species' (measured 8.1e-7 and, for u, 1.5e-6), and the final field is the
    run's error against the reference."""
    from teng_eq.run.simulation import run_simulation

    cfg = make_config("equation=brusselator", "method=teng_rk4", "grid=32", "eval_grid=32", "t_final=0.05",
                      "dt=0.01", "estimate=none", *CHEAP_FIT)
    result = run_simulation(cfg, cache_dir=tmp_path)
    assert {k for k in result.metrics if "/" in k} == {"rel_l2/u", "rel_l2/v"}
    assert result.rel_l2[-1] < 2e-6 and result.metrics["rel_l2/u"][-1] < 4e-6
    _, values = result.field.on_grid(32)
    reference = reference_solution(cfg.equation, [0.05], cache_dir=tmp_path).at(0, 32)
    assert rel_l2(values.T, reference.reshape(2, -1)) == pytest.approx(result.rel_l2[-1], rel=1e-6)


@pytest.mark.slow
@pytest.mark.manual  # 800 steps and θ₀ on 32²: too long beside CI's other slow cases (docs/claims.md)
def test_the_brusselator_preset_reaches_its_documented_error(tmp_path):
    """``equation=brusselator`` at its CPU default (TENG-Heun, 32², Δt 0.005, T = 4, the
    spots formed): the Systems guide's row (measured global 5.7e-6, 1.8e-5 at T, u the
    larger error: 5.2e-5 against v's 1.0e-5), and the estimate within the transport's band
    [0.8, 3] (tests/helpers/bands.py) of the error after step 5 (measured 1.01–1.64)."""
    from teng_eq.run.simulation import run_simulation

    result = run_simulation(make_config("equation=brusselator"), cache_dir=tmp_path)
    assert result.times[-1] == pytest.approx(4.0)
    assert result.global_rel_l2 < 1e-5 and result.rel_l2[-1] < 3e-5
    assert result.metrics["rel_l2/u"][-1] > result.metrics["rel_l2/v"][-1]
    TRANSPORT.check(result.est_rel_l2, result.rel_l2, min_steps=795)  # 800 steps: 6 to 800
