"""Dense least squares ``min_x ‖A x − b‖₂`` with lineax, for the TENG update.

Network Jacobians are numerically rank deficient: on a 64² grid at random
initialisation about two thirds of the singular values of a 4096 × 1536 subset
Jacobian are below 1e-12 σ_max. An unpivoted QR then divides by ~0 and returns
inf. Every solver here therefore regularises:

* ``svd``: truncated SVD, minimum-norm solution.
* ``qr``: Tikhonov-damped least squares ``min ‖A x − b‖² + λ‖x‖²`` solved by a QR
  factorisation of the stacked matrix ``[A; √λ I]`` (backward stable).
* ``cholesky``: the same damped problem through the normal equations
  ``(AᵀA + λ I) x = Aᵀb`` (fewest flops, squares the condition number).

``λ = (damping · ‖A‖_F)²``, and ``svd`` drops singular values below
``damping · σ_max`` (‖A‖_F ≥ σ_max, so both cut at about the same relative level). The damping only biases a single Gauss–Newton step; the next TENG
iteration corrects it, so the converged loss is unaffected.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, Float

SOLVERS = ("qr", "svd", "cholesky")

#: Default relative damping for ``qr`` and ``cholesky`` (see module docstring).
DAMPING = 1e-7


def _lambda(A, damping):
    return damping**2 * jnp.sum(A * A)


def least_squares(
    A: Float[Array, "rows cols"],
    b: Float[Array, " rows"],
    solver: str = "qr",
    damping: float = DAMPING,
) -> Float[Array, " cols"]:
    """Regularised ``argmin_x ‖A x − b‖₂`` (see the module docstring for each solver)."""
    if solver == "svd":
        return lx.linear_solve(lx.MatrixLinearOperator(A), b, lx.SVD(rcond=damping), throw=False).value
    if solver == "qr":
        n = A.shape[1]
        lam = _lambda(A, damping)
        stacked = jnp.concatenate([A, jnp.sqrt(lam) * jnp.eye(n, dtype=A.dtype)])
        rhs = jnp.concatenate([b, jnp.zeros(n, b.dtype)])
        return lx.linear_solve(lx.MatrixLinearOperator(stacked), rhs, lx.QR(), throw=False).value
    if solver == "cholesky":
        gram = A.T @ A
        gram = gram + _lambda(A, damping) * jnp.eye(gram.shape[0], dtype=gram.dtype)
        op = lx.MatrixLinearOperator(gram, lx.positive_semidefinite_tag)
        x = lx.linear_solve(op, A.T @ b, lx.Cholesky(), throw=False).value
        # A Cholesky that broke down (damping too small for cond(AᵀA)) is redone
        # by QR; lax.cond runs only the branch it takes.
        return jax.lax.cond(
            jnp.all(jnp.isfinite(x)), lambda: x, lambda: least_squares(A, b, "qr", damping)
        )
    raise ValueError(f"unknown solver {solver!r}; known: {SOLVERS}")
