import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from teng_eq import ParamSpace, TENGNet
from conftest import make_config


@pytest.fixture(scope="module")
def net():
    return TENGNet(key=jax.random.PRNGKey(0))


def test_parameter_count_matches_paper_architecture(net):
    # 7 layers in all, width 40, 20 embedding features per input dimension.
    assert ParamSpace(net).size == 8361
    assert make_config().n_params == 8361


def test_network_is_periodic(net):
    x = jax.random.uniform(jax.random.PRNGKey(1), (20, 2), maxval=2 * math.pi)
    shift = jnp.array([2 * math.pi, -4 * math.pi])
    u, v = jax.vmap(net)(x), jax.vmap(net)(x + shift)
    np.testing.assert_allclose(u, v, rtol=0, atol=1e-13)


def test_flat_round_trip(net):
    space = ParamSpace(net)
    theta = space.flatten(net)
    x = jax.random.uniform(jax.random.PRNGKey(2), (10, 2), maxval=6.0)
    np.testing.assert_array_equal(space.apply(theta, x), jax.vmap(net)(x))


def test_factored_jacobian_equals_autodiff(net):
    space = ParamSpace(net)
    theta = space.flatten(net)
    x = jax.random.uniform(jax.random.PRNGKey(3), (64, 2), maxval=2 * math.pi)
    u, G, H = net.jacobian_factors(x)
    gcol, hcol = net.factor_columns()
    J = G[:, gcol] * H[:, hcol]
    J_ref = jax.vmap(jax.grad(lambda th, p: space.network(th)(p)), (None, 0))(theta, x)
    np.testing.assert_allclose(u, space.apply(theta, x), rtol=0, atol=1e-14)
    np.testing.assert_allclose(J, J_ref, rtol=0, atol=1e-13 * float(jnp.abs(J_ref).max()))
