import jax.numpy as jnp
import numpy as np
import pytest
from helpers.numerics import sum_roundoff

from teng_eq.fit.lstsq import SOLVERS, gram, least_squares, least_squares_rows, row_blocks
from teng_eq.fit.results import RESULTS


@pytest.mark.parametrize("solver", SOLVERS)
def test_well_conditioned_matches_numpy(solver):
    rng = np.random.default_rng(0)
    A, b = rng.normal(size=(300, 40)), rng.normal(size=300)
    x_ref = np.linalg.lstsq(A, b, rcond=None)[0]
    x = np.asarray(least_squares(A, b, solver, damping=1e-10))
    np.testing.assert_allclose(x, x_ref, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("solver", SOLVERS)
def test_rank_deficient_stays_finite_and_optimal(solver):
    # Columns 30…39 repeat columns 0…9: exactly rank 30. An unpivoted,
    # undamped QR divides by zero here.
    rng = np.random.default_rng(1)
    B = rng.normal(size=(200, 30))
    A = np.concatenate([B, B[:, :10]], axis=1)
    b = rng.normal(size=200)
    x = np.asarray(least_squares(A, b, solver, damping=1e-8))
    assert np.all(np.isfinite(x))
    best = np.linalg.norm(A @ np.linalg.lstsq(A, b, rcond=None)[0] - b)
    assert np.linalg.norm(A @ x - b) <= best * (1 + 1e-8)
    assert np.linalg.norm(x) < 10 * np.linalg.norm(np.linalg.pinv(A) @ b)


def test_unknown_solver():
    with pytest.raises(ValueError, match="unknown solver 'lu'"):
        least_squares(np.eye(3), np.ones(3), "lu", 1e-8)


def test_gram_of_row_blocks_is_exact_and_symmetric():
    A = np.random.default_rng(2).standard_normal((300, 257))
    blocks = [jnp.asarray(A.T[a:b]) for a, b in row_blocks(257)]
    assert len(blocks) == 2 and sum(B.shape[0] for B in blocks) == 257
    G = np.asarray(gram(blocks))
    # Each entry is a dot product of 300 terms, Σ|aᵢbᵢ| ≤ ‖a‖‖b‖ ≤ max Gᵢᵢ (Cauchy–Schwarz):
    # its round-off ≤ 300ε·max Gᵢᵢ in any summation order. Exactly symmetric on current
    # XLA; older jaxlib (the 0.4.38 floor) rounds the mirrored blocks differently, by an
    # ulp or two; numpy's A.T @ A sums in its own order.
    bound = 2 * sum_roundoff(300, float(np.diag(G).max()))
    np.testing.assert_allclose(G, G.T, rtol=0, atol=bound)
    np.testing.assert_allclose(G, A.T @ A, rtol=0, atol=bound)


@pytest.mark.parametrize("solver", SOLVERS)
def test_row_blocks_give_the_same_solution(solver):
    rng = np.random.default_rng(3)
    A, b = rng.standard_normal((400, 300)), rng.standard_normal(400)
    blocks = [jnp.asarray(A.T[a:c]) for a, c in row_blocks(300, block=64)]
    assert len(blocks) == 5
    x_rows, result = least_squares_rows(blocks, b, solver, damping=1e-10)
    assert bool(result == RESULTS.successful)
    x = np.asarray(least_squares(A, b, solver, damping=1e-10))
    np.testing.assert_allclose(np.asarray(x_rows), x, rtol=1e-9, atol=1e-9 * np.abs(x).max())


def test_cholesky_breakdown_falls_back_to_qr_and_says_so():
    """An exactly zero column with no damping: the Cholesky meets a zero pivot and
    returns non-finite values, QR redoes the solve; a well-posed problem does not
    fall back."""
    rng = np.random.default_rng(4)
    A = rng.standard_normal((50, 6))
    A[:, 2] = 0.0
    b = rng.standard_normal(50)
    x, result = least_squares_rows((jnp.asarray(A.T),), jnp.asarray(b), "cholesky", 0.0)
    assert bool(result == RESULTS.cholesky_fallback)
    x_qr, qr_result = least_squares_rows((jnp.asarray(A.T),), jnp.asarray(b), "qr", 0.0)
    assert bool(qr_result == RESULTS.successful)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(x_qr))
    _, result = least_squares_rows((jnp.asarray(A.T),), jnp.asarray(b), "cholesky", 1e-6)
    assert bool(result == RESULTS.successful)
