import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_config
from helpers.numerics import EPS

from teng_eq.domains.quadrature import grid_points
from teng_eq.network.paper import TENGNet, parameter_count
from teng_eq.network.space import ParamSpace


@pytest.fixture(scope="module")
def net():
    return TENGNet(key=jax.random.PRNGKey(0))


def test_parameter_count_matches_paper_architecture(net):
    # 7 layers in all, width 40, 20 embedding features per input dimension.
    assert ParamSpace(net).size == 8361
    assert parameter_count(make_config().method.options.network, 2, (2 * math.pi,) * 2) == 8361


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
    u, Gt, Ht = net.jacobian_factors_t(x)
    G, H = Gt.T, Ht.T
    gcol, hcol = net.factor_columns()
    J = G[:, gcol] * H[:, hcol]
    J_ref = jax.vmap(jax.grad(lambda th, p: space.network(th)(p)), (None, 0))(theta, x)
    np.testing.assert_allclose(u, space.apply(theta, x), rtol=0, atol=1e-14)
    np.testing.assert_allclose(J, J_ref, rtol=0, atol=1e-13 * float(jnp.abs(J_ref).max()))


def test_factored_jacobian_equals_autodiff_linear_embedding():
    net = TENGNet(key=jax.random.PRNGKey(0), embedding_activation="identity")
    space = ParamSpace(net)
    x = jax.random.uniform(jax.random.PRNGKey(3), (64, 2), maxval=2 * math.pi)
    _, Gt, Ht = net.jacobian_factors_t(x)
    G, H = Gt.T, Ht.T
    gcol, hcol = net.factor_columns()
    J_ref = jax.vmap(jax.grad(lambda th, p: space.network(th)(p)), (None, 0))(space.flatten(net), x)
    np.testing.assert_allclose(G[:, gcol] * H[:, hcol], J_ref, rtol=0,
                               atol=1e-13 * float(jnp.abs(J_ref).max()))


def _first_layer_preactivations(net, points):
    return jax.vmap(lambda x: net.hidden[0](net.features(x)))(points)


@pytest.mark.parametrize("activation, collapsed", [("tanh", False), ("identity", True)])
def test_embedding_features_are_not_linearly_collapsible(activation, collapsed):
    """The first layer's pre-activations z₁(x) = W₁ σ(e(x)) + b₁. With the linear
    embedding every one lies in span{1, cos x₁, sin x₁, cos x₂, sin x₂}; with tanh
    they must not."""
    net = TENGNet(key=jax.random.PRNGKey(1), embedding_activation=activation)
    pts = grid_points(32, (2 * math.pi, 2 * math.pi))
    z = np.asarray(_first_layer_preactivations(net, pts))  # (1024, width)
    x1, x2 = np.asarray(pts).T
    basis = np.stack([np.ones_like(x1), np.cos(x1), np.sin(x1), np.cos(x2), np.sin(x2)], axis=1)
    coef = np.linalg.lstsq(basis, z, rcond=None)[0]
    outside = np.linalg.norm(z - basis @ coef, axis=0) / np.linalg.norm(z - z.mean(0), axis=0)
    if collapsed:
        assert outside.max() < 1e-12, outside.max()
    else:
        assert outside.min() > 1e-2, outside.min()


@pytest.mark.parametrize("seed", [0, 1])
def test_jacobian_has_no_structural_null_directions(seed):
    """A small network of the same shape (4 features, width 8, 4 layers: 177
    parameters) on 1024 points: with tanh on the embedding J has full column rank;
    with the linear one the embedding, W₁ and b₁ (96 parameters) act through
    width·(2·dim + 1) = 40 combinations, so exactly 56 singular values vanish."""
    pts = grid_points(32, (2 * math.pi, 2 * math.pi))
    sv = {}
    for activation in ("tanh", "identity"):
        net = TENGNet(features=4, width=8, depth=4, key=jax.random.PRNGKey(seed),
                      embedding_activation=activation)
        _, Gt, Ht = net.jacobian_factors_t(pts)
        G, H = Gt.T, Ht.T
        gcol, hcol = net.factor_columns()
        s = np.linalg.svd(np.asarray(G[:, gcol] * H[:, hcol]), compute_uv=False)
        sv[activation] = s / s[0]
    # A singular value zero in exact arithmetic computes to ≤ p·ε·σ₁ (J's entries and the
    # SVD backward stable: |σ̂ − σ| ≤ ‖δJ‖₂), with p = 177 the column count: 3.9e-14
    # relative. Measured: the 56 null ones ≤ 2.0e-16 (195× below); tanh's smallest
    # 8e-11 here (8e-13 … 2e-12 with other jax versions: ≥ 20× above).
    zero = 177 * EPS
    assert sv["tanh"].size == 177
    assert sv["tanh"][-1] > 10 * zero, sv["tanh"][-5:]
    assert np.sum(sv["identity"] > zero) == 177 - 56
    assert sv["identity"][121] < zero / 10, sv["identity"][119:123]


def test_unknown_embedding_activation():
    with pytest.raises(ValueError, match="embedding_activation"):
        TENGNet(key=jax.random.PRNGKey(0), embedding_activation="relu")
