"""The error estimate of a system: L′[û]'s coupling read off the operator, its transport
exact on a linear system's modes (the wave's k = 0 mode, which has no eigenbasis, too), the
integrator's stability region on complex rates (the estimate against a wave run's error:
``test_systems.py``)."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_equation
from scipy.integrate import solve_ivp

from teng_eq.estimate.transport import SystemTransport
from teng_eq.stepping.tableau import BS3, HEUN, RK4


def _transport(eq, n=16):
    held = eq.holdout(n, n)
    return SystemTransport(eq.periods, held.grid_shape, eq.order, len(eq.components)), held


def test_the_linearised_brusselator_is_its_jacobian_and_diffusion():
    """a_{ijα} of L′[û] at every point: the reaction's Jacobian at û for α = 0
    ([[2uv − (b + 1), u²], [b − 2uv, −u²]]), νᵢ on component i's second derivatives, 0 elsewhere."""
    eq = make_equation("brusselator")
    transport, held = _transport(eq)
    x = np.asarray(held.points[: 16 * 16, :2])

    def state(p):
        return jnp.stack([1 + 0.3 * jnp.sin(p[:, 0]), 3 + 0.2 * jnp.cos(p[:, 0] + p[:, 1])], axis=1)

    a = np.asarray(transport.coefficients(eq, state, held.points, 0.0))
    assert a.shape == (2, 2, len(transport.alphas), 16 * 16)
    u, v = np.asarray(state(jnp.asarray(x))).T
    jacobian = [[2 * u * v - (eq.b + 1), u * u], [eq.b - 2 * u * v, -u * u]]
    for i in range(2):
        for j in range(2):
            for k, alpha in enumerate(transport.alphas):
                want = jacobian[i][j] if alpha == (0, 0) else (
                    eq.nu[i] if i == j and alpha in ((2, 0), (0, 2)) else 0.0)
                np.testing.assert_allclose(a[i, j, k], want, rtol=0, atol=1e-13, err_msg=f"{i}{j}{alpha}")


def test_the_transport_of_the_wave_is_its_exact_evolution():
    """On uₜ = v, vₜ = c²Δu the transport over h of an error in one mode (and in the constant
    mode, where Λ(0) = [[0, 1], [0, 0]] has no eigenbasis: u grows by h·v) with a defect d
    spread over the step is the mode's own evolution under the forcing d/h (solve_ivp)."""
    eq = make_equation("wave", "equation.c=1.5")
    transport, held = _transport(eq)
    a = np.asarray(transport.coefficients(eq, lambda p: jnp.stack([jnp.sin(p[:, 0]), jnp.cos(p[:, 1])], 1),
                                          held.points, 0.0))
    x, y = np.asarray(held.points[: 16 * 16, :2]).T
    profile, h, omega2 = np.cos(2 * x + y), 0.03, 1.5**2 * 5
    e0, d = np.array([0.8, -0.5]), np.array([0.02, 0.07])  # (u, v) amplitudes of the mode
    const0, const_d = np.array([0.3, 0.2]), np.array([-0.01, 0.04])
    e = np.concatenate([e0[0] * profile + const0[0], e0[1] * profile + const0[1]])
    defect = np.concatenate([d[0] * profile + const_d[0], d[1] * profile + const_d[1]])
    got = transport.propagate(e, defect, a, h).reshape(2, -1)

    def evolve(w2, start, forcing):
        sol = solve_ivp(lambda t, z: [z[1] + forcing[0] / h, -w2 * z[0] + forcing[1] / h], (0, h), start,
                        rtol=1e-13, atol=1e-15)
        return sol.y[:, -1]

    mode, const = evolve(omega2, e0, d), evolve(0.0, const0, const_d)
    for c in range(2):
        np.testing.assert_allclose(got[c], mode[c] * profile + const[c], rtol=0, atol=1e-11)


@pytest.mark.parametrize("tableau, extent", [(RK4, 2 * math.sqrt(2)), (BS3, math.sqrt(3)), (HEUN, 1e-3)],
                         ids=lambda v: getattr(v, "name", ""))
def test_the_stable_step_on_imaginary_rates_is_the_regions_extent(tableau, extent):
    """Rates ±iω (the wave's, Schrödinger's) allow Δt with Δt ω the stability region's extent
    along the imaginary axis (RK4 2√2, Bogacki–Shampine √3; Heun's |R(iy)|² = 1 + y⁴/4 leaves
    it 10⁻³, the grid's first step), |R(iΔtω)| ≤ 1 there; real negative rates give ρ = max |λ|
    (the scalar transport's radius), growing ones (Re λ > 0: the equation's own) none."""
    omega = 16.0
    step = tableau.stability_limit / tableau.equivalent_radius(np.array([1j * omega, -1j * omega]))
    assert step * omega == pytest.approx(extent, abs=1e-3)
    assert abs(tableau.stability_polynomial(1j * step * omega)) <= 1 + 1e-12
    assert tableau.equivalent_radius(np.array([-5.0, -3.0 + 0j])) == pytest.approx(5.0, rel=1e-12)
    assert tableau.equivalent_radius(np.array([0.5 + 0.8j, 2.0])) == 0.0
