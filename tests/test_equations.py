import math

import jax.numpy as jnp
import numpy as np
import pytest

from teng_eq import make_equation, operator, paper_initial_condition


def f(x):
    return jnp.sin(x[:, 0]) * jnp.cos(2 * x[:, 1]) + 0.5


def f_exact(x):
    """(u, ∂₁u, ∂₂u, Δu) of ``f``."""
    s1, c1, c2, s2 = np.sin(x[:, 0]), np.cos(x[:, 0]), np.cos(2 * x[:, 1]), np.sin(2 * x[:, 1])
    u = s1 * c2 + 0.5
    return u, c1 * c2, -2 * s1 * s2, -5 * s1 * c2


@pytest.mark.parametrize(
    "name, nu, nonlinear",
    [
        ("heat", 0.1, lambda u, g1, g2: 0 * u),
        ("allen_cahn", 0.005, lambda u, g1, g2: u - u**3),
        ("burgers", 0.01, lambda u, g1, g2: -u * (g1 + g2)),
    ],
)
def test_operator_by_autodiff_matches_calculus(name, nu, nonlinear):
    x = np.random.default_rng(0).uniform(0, 2 * math.pi, (50, 2))
    got = operator(make_equation(name, nu), f, jnp.asarray(x))
    u, g1, g2, lap = f_exact(x)
    assert got.shape == (50,)
    np.testing.assert_allclose(got, nu * lap + nonlinear(u, g1, g2), rtol=0, atol=1e-13)


def test_paper_initial_condition_closed_form():
    # The four exponentials of the paper's u₀ are 4 cosh(3 sin x₁) sinh(sin x₂) / 100.
    x = np.random.default_rng(1).uniform(0, 2 * math.pi, (2, 100))
    expected = 4 * np.cosh(3 * np.sin(x[0])) * np.sinh(np.sin(x[1])) / 100
    np.testing.assert_allclose(paper_initial_condition(x), expected, rtol=1e-13)
    np.testing.assert_allclose(paper_initial_condition(jnp.asarray(x)), expected, rtol=1e-13)


def test_unknown_equation_is_rejected():
    with pytest.raises(ValueError, match="unknown equation 'wave'"):
        make_equation("wave", 1.0)
