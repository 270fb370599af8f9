"""A complex field as a system: the nonlinear Schrödinger equation in its real and imaginary
parts, its ETDRK4 reference whose linear part couples them (exact on the linear equation,
convergent on the nonlinear one), its operator against complex arithmetic, the projection onto its
invariants, and a short run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from helpers.bands import EVERY_STEP, TRANSPORT
from helpers.configs import CHEAP_FIT, make_config, make_equation
from helpers.numerics import rel_l2, self_convergence

from teng_eq.equations.schrodinger import PLANE_WAVES
from teng_eq.errors import ConfigError
from teng_eq.network.paper import NetworkConfig, build_network
from teng_eq.network.space import ParamSpace
from teng_eq.reference import ClosedForm, reference_solution
from teng_eq.reference.etdrk4 import Pseudospectral, coupled_coefficients
from teng_eq.stepping.explicit import project


def test_coupled_weights_are_the_matrix_functions():
    """For a matrix A (here with complex eigenvalues, as the Schrödinger symbol's), the weights
    are e^{A/2}, e^A, (e^{A/2} − I)A⁻¹ and the three f's as matrix functions (closed forms,
    safe at |z| ≈ 1)."""
    a = np.array([[[-0.3, 1.2], [-0.9, -0.5]], [[0.0, 0.8], [-0.8, 0.0]]])
    e2, e, q, f1, f2, f3 = coupled_coefficients(a)
    eye = np.eye(2)
    for i, m in enumerate(a):
        ea, inv = scipy.linalg.expm(m), np.linalg.inv(m)
        inv3 = inv @ inv @ inv
        np.testing.assert_allclose(e2[i], scipy.linalg.expm(m / 2), atol=1e-14)
        np.testing.assert_allclose(e[i], ea, atol=1e-14)
        np.testing.assert_allclose(q[i], (scipy.linalg.expm(m / 2) - eye) @ inv, atol=1e-13)
        np.testing.assert_allclose(f1[i], inv3 @ (-4 * eye - m + ea @ (4 * eye - 3 * m + m @ m)), atol=1e-12)
        np.testing.assert_allclose(f2[i], inv3 @ (2 * eye + m + ea @ (m - 2 * eye)), atol=1e-12)
        np.testing.assert_allclose(f3[i], inv3 @ (-4 * eye - 3 * m - m @ m + ea @ (4 * eye - m)), atol=1e-12)


def test_coupled_etdrk4_is_exact_on_the_linear_equation():
    """g = 0: ETDRK4 with the coupled symbol integrates the linear part exactly, whatever Δt
    (0.05 here): the plane waves to round-off (measured 1.1e-15 at t = 1)."""
    eq = make_equation("schrodinger_linear")
    assert isinstance(eq.reference_scheme(), ClosedForm)
    sol = Pseudospectral(degree=3, resolution=((9.0, 32, 0.05),)).solution(eq, [0.5, 1.0], cache_dir=False)
    x = np.asarray(eq.spatial(32).points).T
    for k, t in enumerate((0.5, 1.0)):
        assert rel_l2(sol.at(k, 32), np.stack(eq.solution(x, t)).reshape(2, 32, 32)) < 1e-14


def test_the_schrodinger_reference_converges_and_keeps_its_mass():
    """g = 1 at the resolution table's first row (48 modes, Δt 2.5e-3) to T = 1: within 1e-9 of
    96 modes and of Δt/2; the mass ∫|ψ|² kept to 1e-9 relative."""
    modes, steps = self_convergence("schrodinger", 1.0, 48, 2.5e-3)
    assert modes < 1e-9 and steps < 1e-9
    eq = make_equation("schrodinger")
    sol = reference_solution(eq, [0.0, 1.0], cache_dir=False)
    mass = [np.sum(sol.at(k, 64) ** 2) for k in (0, 1)]
    assert abs(mass[1] - mass[0]) < 1e-9 * mass[0]


def test_the_operator_is_the_complex_equation():
    """L at the rows (x, c) is (Re, Im) of ψₜ = i(½Δψ − g|ψ|²ψ), here on the plane waves
    (Δψ mode by mode)."""
    eq = make_equation("schrodinger", "equation.g=0.7")
    rows = jnp.asarray(eq.quadrature(8).points)
    got = np.asarray(eq.operator_rows(jax.vmap(eq.u0), rows, 0.0))
    x = np.asarray(rows[:64, :2]).T
    waves = [a * np.exp(1j * (k1 * x[0] + k2 * x[1] + phi)) for k1, k2, phi, a in PLANE_WAVES]
    psi = sum(waves)
    lap = sum(-(k1 * k1 + k2 * k2) * w for (k1, k2, _, _), w in zip(PLANE_WAVES, waves))
    dpsi = 1j * (0.5 * lap - 0.7 * np.abs(psi) ** 2 * psi)
    np.testing.assert_allclose(got, np.concatenate([dpsi.real, dpsi.imag]), atol=1e-12)


def test_the_projection_keeps_mass_and_energy_with_the_least_change():
    """``project`` takes a network whose mass and energy are 1e-5 off to their values: to
    round-off in two Newton iterations, by a change of θ within 1 % of the least one (the
    linearised problem's minimum-norm solution Jᵀ(JJᵀ)⁻¹ r)."""
    eq = make_equation("schrodinger")
    options = NetworkConfig(features=3, width=6, depth=4, embedding_activation="tanh", init="paper",
                            components="shared")
    net = build_network(options, 2, eq.periods, seed=0, outputs=2)
    space = ParamSpace(net)
    theta = space.flatten(net)

    def integrals(th):
        values = eq.integrals(space.network(th).vector, 8)
        return jnp.stack([values[name] for name in sorted(values)])

    start = integrals(theta)
    wanted = start * jnp.array([1 + 1e-5, 1 - 1e-5])
    projected = project(integrals, theta, wanted)
    np.testing.assert_allclose(integrals(projected), wanted, rtol=1e-13)
    jac = jax.jacrev(integrals)(theta)
    least = jac.T @ jnp.linalg.solve(jac @ jac.T, wanted - start)
    assert float(jnp.linalg.norm(projected - theta)) == pytest.approx(float(jnp.linalg.norm(least)), rel=1e-2)


def test_conserve_needs_an_equation_with_invariants():
    with pytest.raises(ConfigError, match=r"method.conserve=True: heat declares no invariants to keep"):
        make_config("method.conserve=true")


@pytest.mark.slow
def test_a_linear_schrodinger_run_follows_its_plane_waves(tmp_path):
    """Five TENG-RK4 steps (Δt 0.002) of the linear equation against its exact solution,
    each projected onto the mass and energy of its start (``method.conserve``): the error,
    the drifts (to the quadratures' difference) and the fits' gap before the projection logged per step; the
    estimate within the transport's band of the error at every step (five steps: none after the
    fifth; tests/helpers/bands.py) (its held-out points, one per fit cell, sit where the fit is
    worst: the cell centres)."""
    from teng_eq.run.simulation import run_simulation

    cfg = make_config("equation=schrodinger_linear", "method=teng_rk4", "grid=32", "eval_grid=64",
                      "t_final=0.01", "dt=0.002", "method.conserve=true", *CHEAP_FIT)
    result = run_simulation(cfg, cache_dir=tmp_path)
    assert {k for k in result.metrics if "/" in k} == {"rel_l2/re", "rel_l2/im", "drift/mass", "drift/energy"}
    # measured 3.0e-6 (θ₀ 2.7e-6: 32² fit points do not pin the waves between them)
    assert result.rel_l2[-1] < 6e-6
    # Measured 3.7e-11 (mass), 4.1e-10 (energy): the projection integrates by the 32² fit grid's
    # rule, the log by the 64² one, which sees the network between the nodes.
    assert max(result.metrics["drift/mass"].max(), result.metrics["drift/energy"].max()) < 1e-9
    assert np.all(result.metrics["invariant_gap"] > 1e-12)
    TRANSPORT.check(result.est_rel_l2, result.rel_l2, first=EVERY_STEP, min_steps=5)  # measured 1.42–1.57
