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
``damping · σ_max`` (‖A‖_F ≥ σ_max, so both cut at about the same relative level). The damping only
biases a single Gauss–Newton step; the next TENG iteration corrects it, so the converged loss is unaffected.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import lineax as lx
from jaxtyping import Array, Float

from teng_eq.fit.mesh import PointMesh
from teng_eq.fit.results import RESULTS

SOLVERS = ("qr", "svd", "cholesky")


def least_squares(
    A: Float[Array, "rows cols"], b: Float[Array, " rows"], solver: str, damping: float
) -> Float[Array, " cols"]:
    """Regularised ``argmin_x ‖A x − b‖₂`` (see the module docstring for each solver)."""
    return least_squares_rows((A.T,), b, solver, damping)[0]


def row_blocks(cols: int, block: int = 128, max_blocks: int = 8) -> tuple[tuple[int, int], ...]:
    """``[start, stop)`` ranges splitting ``cols`` unknowns into about ``block``-sized
    blocks, at most ``max_blocks`` of them (see :func:`gram`)."""
    b = max(1, min(max_blocks, round(cols / block)))
    edges = [round(i * cols / b) for i in range(b + 1)]
    return tuple(itertools.pairwise(edges))


def least_squares_rows(blocks: Sequence[Float[Array, "_ rows"]], b: Float[Array, " rows"], solver: str,
        damping: float, mesh: PointMesh | None = None) -> tuple[Float[Array, " cols"], RESULTS]:
    """:func:`least_squares` given ``Aᵀ`` as a stack of row blocks, the layout the
    stage solver builds: the normal equations then need no copy of ``A`` at all
    (:func:`gram` works block by block); QR and SVD stack the blocks into ``A``.

    **Returns** ``(x, result)``: the solution, and ``RESULTS.cholesky_fallback``
    where ``cholesky`` broke down (a non-finite solution: damping too small for
    cond(AᵀA)) so that QR redid the solve. ``x`` itself may still be non-finite
    (QR of an exactly singular undamped matrix); the caller decides what to do
    with it.

    With a ``mesh`` (the rows split over devices, :mod:`teng_eq.fit.mesh`) the normal
    equations' sums run on each device's rows and one all-reduce adds them; only
    ``cholesky`` is offered there (the configuration refuses the others).
    """
    if solver == "cholesky":
        x = normal_equations(blocks, b, damping, mesh)
        broke = ~jnp.all(jnp.isfinite(x))
        # lax.cond runs only the branch it takes: the QR costs nothing when unused.
        x = jax.lax.cond(broke, lambda: _dense(blocks, b, "qr", damping), lambda: x)
        return x, RESULTS.where(broke, RESULTS.cholesky_fallback, RESULTS.successful)
    return _dense(blocks, b, solver, damping), RESULTS.successful


def _dense(blocks, b, solver: str, damping: float) -> Float[Array, " cols"]:
    A = jnp.concatenate(blocks).T
    if solver == "svd":
        return lx.linear_solve(lx.MatrixLinearOperator(A), b, lx.SVD(rcond=damping), throw=False).value
    if solver == "qr":
        n = A.shape[1]
        lam = damping**2 * jnp.sum(A * A)
        stacked = jnp.concatenate([A, jnp.sqrt(lam) * jnp.eye(n, dtype=A.dtype)])
        rhs = jnp.concatenate([b, jnp.zeros(n, b.dtype)])
        return lx.linear_solve(lx.MatrixLinearOperator(stacked), rhs, lx.QR(), throw=False).value
    raise ValueError(f"unknown solver {solver!r}; known: {SOLVERS}")


def gram(blocks: Sequence[Float[Array, "_ rows"]]) -> Float[Array, "cols cols"]:
    """``AᵀA`` for ``Aᵀ`` given as row blocks ``B₁, …, B_b``: only the blocks
    ``BᵢBⱼᵀ``, ``j ≤ i``, are multiplied and the rest mirrored, so the result is
    exactly symmetric and costs ``(b+1)/(2b)`` of the full GEMM's flops (XLA
    has no SYRK)."""
    lower = {(i, j): blocks[i] @ blocks[j].T for i in range(len(blocks)) for j in range(i + 1)}
    n = len(blocks)
    return jnp.block([[lower[i, j] if j <= i else lower[j, i].T for j in range(n)] for i in range(n)])


def normal_equations(
    blocks: Sequence[Float[Array, "_ rows"]], b: Float[Array, " rows"], damping: float,
    mesh: PointMesh | None = None,
) -> Float[Array, " cols"]:
    """``(AᵀA + λI) x = Aᵀb`` by Cholesky, ``λ = damping²·tr(AᵀA)`` (= damping²‖A‖²_F),
    ``Aᵀ`` given as row blocks.

    Non-finite where the factorisation breaks down. The gram is the only
    O(rows·cols²) work, everything else O(cols³) or less. With a ``mesh``, ``AᵀA`` and
    ``Aᵀb`` are summed over the devices' rows (:meth:`~teng_eq.fit.mesh.PointMesh.gram_and_rhs`)
    and the factorisation is replicated.
    """
    G, rhs = (gram(blocks), None) if mesh is None else mesh.gram_and_rhs(blocks, b, gram)
    n = G.shape[0]
    lam = damping**2 * jnp.trace(G)
    L = jax.lax.linalg.cholesky(G + lam * jnp.eye(n, dtype=G.dtype), symmetrize_input=False)
    rhs = jnp.concatenate([B @ b for B in blocks])[:, None] if rhs is None else rhs[:, None]
    y = jax.lax.linalg.triangular_solve(L, rhs, left_side=True, lower=True)
    x = jax.lax.linalg.triangular_solve(L, y, left_side=True, lower=True, transpose_a=True)
    return x[:, 0]
