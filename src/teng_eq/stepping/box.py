"""The implicit stages' solve on a box with sides (:class:`BoxSolve`): ``u − hF[u] = r`` on the
box's interior nodes with each side's condition at the stage's time, for F linear with
constant coefficients and no mixed derivatives,

    F u = c u + Σ_d (b_d ∂_d u + a_d ∂²_d u),

and the polynomial interpolation of nodal values (:meth:`BoxSolve.interpolate`).

**The method: Legendre–Gauss collocation bordered by the side rows, per axis, made d-D by
fast diagonalisation.** Along a bounded axis [a, b] with the fits' n Gauss–Legendre nodes
x₁ … x_n, u is the polynomial of degree n + 1 through its values at the n + 2 points
(a, x₁, …, x_n, b); D is its differentiation matrix there (barycentric). The two side rows
αu + β∂ₙu = g at a (∂ₙ = −∂_x) and at b (∂ₙ = ∂_x) give the end values from the interior
ones and the data, u_b = M_bb⁻¹(g − M_bI u_I), so that on the interior nodes

    (b_d D + a_d D²) u = A_d u_I + K_d g,   A_d = E_II − E_Ib M_bb⁻¹ M_bI,   K_d = E_Ib M_bb⁻¹

(E = b_d D + a_d D²): an n × n matrix and a lift from the two sides' data. Along a periodic
axis A_d is the Fourier multiplier b_d ik − a_d k² (no lift). On a box's point at
(x_i, y_j) the x-derivatives need u only on the x-line through it and its two ends, which
are the side points (a, y_j), (b, y_j) the fits already have (no corner is ever needed), so
F is the Kronecker sum ``c + A₁ ⊕ A₂ ⊕ A₃`` plus the lifts, and with each A_d = V_d Λ_d V_d⁻¹

    u_I = V (1 / (1 − h(c + λ₁ ⊕ λ₂ ⊕ λ₃))) V⁻¹ (r + h Σ_d K_d g_d),

V = V₁ ⊗ V₂ ⊗ V₃ applied one axis at a time: a stage costs 2d small matrix products
(n × n against the n^d values) and a division; the eigendecompositions do not depend on h
or Δt and are made once, on the host, when the step is built (so ``dt: auto``'s changing
steps cost nothing more).

**Why this one.** Collocation at the fits' own nodes makes u⁺ a value on exactly the points
the stage then fits (no transfer between grids), with the side rows of the same conditions
the fits hold; it converges spectrally for smooth solutions (checked against a manufactured
solution to 1e-10 in the suite). A Legendre–Galerkin (Shen) basis would give symmetric banded
1-D matrices, but its values live on other points (Gauss–Lobatto) and need a transfer to the
fits' nodes; a Chebyshev tau likewise. Dense d-D factorisations would cost O(n^{3d}) once per
h, which ``dt: auto`` changes every step. The Dirichlet and Neumann A_d have real, negative
(Neumann: one zero) eigenvalues; a general one's may be complex, so V and Λ are held
complex and the result's real part taken.

**Interpolation** to other points (the held-out check): along a bounded axis the barycentric
Lagrange formula (second kind) on the n Gauss–Legendre nodes, along a periodic one the
trigonometric interpolant, one axis at a time (m · n work per axis, no m × n^d matrix).
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.domains.bounded import BoxDomain


def barycentric_weights(x: np.ndarray) -> np.ndarray:
    """wⱼ = 1/Π_{k≠j}(xⱼ − x_k) of the points x, scaled to max |wⱼ| = 1 (they enter as ratios)."""
    diff = x[:, None] - x[None, :]
    np.fill_diagonal(diff, 1.0)
    w = 1.0 / np.prod(diff, axis=1)
    return w / np.max(np.abs(w))


def differentiation(x: np.ndarray) -> np.ndarray:
    """The differentiation matrix of the polynomial interpolant on the points x:
    D_ij = (wⱼ/wᵢ)/(xᵢ − xⱼ) off the diagonal, D_ii = −Σ_{j≠i} D_ij (rows of a constant sum to 0)."""
    w = barycentric_weights(x)
    diff = x[:, None] - x[None, :]
    np.fill_diagonal(diff, 1.0)
    D = (w[None, :] / w[:, None]) / diff
    np.fill_diagonal(D, 0.0)
    np.fill_diagonal(D, -D.sum(axis=1))
    return D


def bounded_axis(n: int, length: float, first: float, second: float,
                 ends: tuple[tuple[float, float], tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """``(A, K)`` of a bounded axis of ``length`` with n Gauss–Legendre nodes: on the interior
    nodes ``first·∂ + second·∂² = A u_I + K g`` (module docstring), ``ends`` the (α, β) of its
    sides at a and at b, g their data."""
    xi = np.polynomial.legendre.leggauss(n)[0]
    D = differentiation(np.concatenate([[-1.0], xi, [1.0]])) * (2.0 / length)
    E = second * D @ D + first * D
    (alpha0, beta0), (alpha1, beta1) = ends
    rows = np.stack([-beta0 * D[0], beta1 * D[-1]])  # β∂ₙ: the outward normal is −x at a, +x at b
    rows[0, 0] += alpha0
    rows[1, -1] += alpha1
    inner, edge = np.arange(1, n + 1), np.array([0, n + 1])
    ends_inverse = np.linalg.inv(rows[:, edge])
    K = E[np.ix_(inner, edge)] @ ends_inverse
    return E[np.ix_(inner, inner)] - K @ rows[:, inner], K


def _as_jax(values) -> tuple:
    return tuple(None if v is None else jnp.asarray(v) for v in values)


def along(matrix: Array, values: Array, axis: int) -> Array:
    """``matrix`` applied along ``axis`` of the tensor ``values``."""
    return jnp.moveaxis(jnp.tensordot(matrix, values, axes=(1, axis)), 0, axis)


class BoxSolve(eqx.Module):
    """``u − hF[u] = r`` on a :class:`~teng_eq.domains.bounded.BoxDomain`'s n-node interior
    grid with its sides' conditions (module docstring): per axis the eigenvectors ``V``, their
    inverse and eigenvalues of A_d, A_d itself (to apply F), the lift ``K`` (None on a periodic
    axis), and how the fit quadrature's side rows (after the interior ones) hold each side's
    data: ``sides`` (axis, end, first row) in the quadrature's order."""

    shape: tuple[int, ...] = eqx.field(static=True)
    reaction: float = eqx.field(static=True)
    sides: tuple[tuple[int, int, int], ...] = eqx.field(static=True)
    periodic: tuple[bool, ...] = eqx.field(static=True)
    origin: tuple[float, ...] = eqx.field(static=True)
    lengths: tuple[float, ...] = eqx.field(static=True)
    V: tuple[Array, ...]
    V_inverse: tuple[Array, ...]
    matrices: tuple[Array, ...]
    lifts: tuple[Array | None, ...]
    eigenvalues: Array  # c + λ₁ ⊕ λ₂ ⊕ …, on the grid's shape (complex)
    nodes: tuple[Array, ...]
    weights: tuple[Array, ...]  # barycentric on a bounded axis; the DFT matrix on a periodic one

    def __init__(self, domain: BoxDomain, n: int, reaction: float, first, second):
        """F = ``reaction`` + Σ_d (``first``[d] ∂_d + ``second``[d] ∂²_d) on ``domain``'s n-node grid."""
        dim = domain.dim
        self.shape, self.reaction = (n,) * dim, float(reaction)
        self.periodic = tuple(domain.periodic(d) for d in range(dim))
        self.origin, self.lengths = tuple(map(float, domain.origin)), tuple(map(float, domain.lengths))
        per_side = n ** (dim - 1)
        self.sides = tuple((axis, end, i * per_side) for i, (axis, end, _) in enumerate(domain.sides()))
        parts = {(axis, end): part for axis, end, part in domain.sides()}
        V, V_inverse, matrices, lifts, lams, nodes, weights = ([] for _ in range(7))
        for d, length in enumerate(self.lengths):
            if self.periodic[d]:
                k = 2 * np.pi / length * np.fft.fftfreq(n, 1.0 / n)
                odd = np.where(np.abs(np.fft.fftfreq(n, 1.0 / n)) == n / 2, 0.0, k)
                lam = first[d] * 1j * odd - second[d] * k**2
                dft = np.fft.fft(np.eye(n), axis=0)
                vectors, inverse = np.conj(dft.T) / n, dft
                matrix, lift = (vectors @ np.diag(lam) @ inverse).real, None
                nodes.append(self.origin[d] + np.arange(n) * (length / n))
                weights.append(dft)
            else:
                ends = tuple(parts[(d, end)].coefficients for end in (0, 1))
                matrix, lift = bounded_axis(n, length, first[d], second[d], ends)
                lam, vectors = np.linalg.eig(matrix)
                inverse = np.linalg.inv(vectors)
                xi = np.polynomial.legendre.leggauss(n)[0]
                nodes.append(self.origin[d] + 0.5 * length * (xi + 1.0))
                weights.append(barycentric_weights(xi))
            for bucket, value in zip((V, V_inverse, matrices, lifts, lams),
                                     (vectors, inverse, matrix, lift, lam)):
                bucket.append(value)
        total = self.reaction + sum(np.reshape(lam, [n if i == d else 1 for i in range(dim)])
                                    for d, lam in enumerate(lams))
        self.V = tuple(jnp.asarray(np.asarray(v, complex)) for v in V)
        self.V_inverse = tuple(jnp.asarray(np.asarray(v, complex)) for v in V_inverse)
        self.matrices, self.lifts = _as_jax(matrices), _as_jax(lifts)
        self.eigenvalues = jnp.asarray(np.broadcast_to(total, self.shape).astype(complex))
        self.nodes, self.weights = _as_jax(nodes), _as_jax(weights)

    @property
    def size(self) -> int:
        """The interior nodes' count n^d (the fit quadrature's first rows)."""
        return int(np.prod(self.shape))

    def lift(self, data: Float[Array, " sides"]) -> Float[Array, "*shape"]:
        """Σ_d K_d g_d on the grid, g_d the data of axis d's two sides (their rows of ``data``,
        the fit quadrature's side rows in order)."""
        per_side, out = self.size // self.shape[0], jnp.zeros(self.shape, data.dtype)
        others = self.shape[1:]
        ends = {(axis, end): data[start : start + per_side].reshape(others)
                for axis, end, start in self.sides}
        for d, K in enumerate(self.lifts):
            if K is not None:
                g = jnp.stack([ends[(d, 0)], ends[(d, 1)]])  # (2, the other axes' nodes)
                out = out + jnp.moveaxis(jnp.tensordot(K, g, axes=(1, 0)), 0, d)
        return out

    def apply(self, u: Float[Array, " n"], data: Float[Array, " sides"]) -> Float[Array, " n"]:
        """F[u] on the interior nodes: u their values, ``data`` the sides' (module docstring)."""
        U = u.reshape(self.shape)
        out = self.reaction * U + self.lift(data)
        for d, A in enumerate(self.matrices):
            out = out + along(A, U, d)
        return out.ravel()

    def solve(self, h, r: Float[Array, " n"], data: Float[Array, " sides"]) -> Float[Array, " n"]:
        """u with ``u − hF[u] = r`` on the interior nodes, the sides' conditions holding ``data``."""
        U = (r.reshape(self.shape) + h * self.lift(data)).astype(self.eigenvalues.dtype)
        for d, Vi in enumerate(self.V_inverse):
            U = along(Vi, U, d)
        U = U / (1.0 - h * self.eigenvalues)
        for d, V in enumerate(self.V):
            U = along(V, U, d)
        return U.real.ravel()

    def interpolate(self, u: Float[Array, " n"], points: Float[Array, "m dim"]) -> Float[Array, " m"]:
        """The interpolant of the nodal values u at ``points`` (module docstring)."""
        out = None
        for d in range(len(self.shape)):
            x = points[:, d]
            if self.periodic[d]:
                k = 2 * jnp.pi / self.lengths[d] * jnp.fft.fftfreq(self.shape[d], 1.0 / self.shape[d])
                P = jnp.exp(1j * (x - self.origin[d])[:, None] * k[None, :]) @ self.weights[d] / self.shape[d]
            else:
                xi = 2.0 * (x - self.origin[d]) / self.lengths[d] - 1.0
                ref = 2.0 * (self.nodes[d] - self.origin[d]) / self.lengths[d] - 1.0
                diff = xi[:, None] - ref[None, :]
                hit = diff == 0.0
                c = self.weights[d][None, :] / jnp.where(hit, 1.0, diff)
                P = jnp.where(jnp.any(hit, axis=1, keepdims=True), hit.astype(c.dtype),
                              c / jnp.sum(c, axis=1, keepdims=True))
            out = (jnp.einsum("a...,ma->m...", u.reshape(self.shape), P) if out is None
                   else jnp.einsum("ma...,ma->m...", out, P))
        return out.real
