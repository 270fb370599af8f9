"""The error carried through L′[û] on a box with sides (:class:`BoxTransport`), in the box's
own basis: per axis the eigenfunctions of ∂ₓ² under the homogeneous form of its sides'
conditions (:func:`axis_basis`), a tensor product of them on the held-out grid.

The error e = û − u obeys ∂ₜe = L′[û] e + δ inside and, on each side, the homogeneous
condition αe + β∂ₙe = 0 up to the fit's own boundary residual (αû + β∂ₙû − data: the
data cancel, moving or not), so the eigenfunctions of the homogeneous conditions are e's
natural modes: sines for Dirichlet sides, cosines for Neumann ones, their Robin
counterparts, Fourier waves along a periodic axis. Along a bounded axis of length L with
the condition (α₀, β₀) at x = a and (α₁, β₁) at x = b they are found as the Legendre–
Galerkin eigenfunctions of ∂ₓ²: the polynomials of degree ≤ N + 1 that meet both
homogeneous conditions (a null space of two rows), with the mass matrix M = ∫φᵢφⱼ and
A = ∫φᵢ φⱼ'' (symmetric, since both meet the conditions: [φⱼ'φᵢ − φⱼφᵢ']ₐᵇ = 0) exact by
Gauss–Legendre quadrature, and A v = λ M v solved for λ ≤ 0 — for Dirichlet and Neumann
sides λ ≈ −(jπ/L)², spectrally accurate on the low modes. The held-out grid's n nodes
per axis and the first n eigenfunctions there make a square matrix Φ: e on the nodes is
its combination Φ⁻¹e of the modes (exact, no projection error), the diagonal part

    Λ(j) = ⟨a₀⟩ + Σᵢ ⟨a_{2eᵢ}⟩ λᵢ(jᵢ)

of L′[û] = Σ_α a_α(x) ∂^α (⟨·⟩ the quadrature mean) acts on each mode, and the rest
R = L′ − Λ (a variable reaction, advection, cross derivatives) is applied on the nodes by
the basis's derivative matrices Φ^{(k)}Φ⁻¹. A step then does the periodic transport's
exponential Euler rule on the mode coefficients (:mod:`teng_eq.estimate.transport`).

The stable step (:meth:`BoxTransport.radius`): the rates of the modes a fit on n nodes per
axis can hold, n per axis as on a periodic grid: wave numbers k ≤ πn/L (the n-th sine
nπx/L of a bounded axis, the Nyquist wave of a periodic one; the periodic transport's
rule), on an ellipse of them. TENG-RK4 on the 24-node Dirichlet square grew its error
100-fold in one step of 0.0163 under a cap of 0.0218 from k ≤ 2n/L; the rule πn/L caps it
at 0.0088.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float
from numpy.polynomial import legendre

from teng_eq.equations import Equation
from teng_eq.estimate.transport import linear_coefficients, phi1


@dataclasses.dataclass(frozen=True)
class AxisBasis:
    """The modes of one axis at its ``nodes``: ``values[k]`` the k-th derivative of every
    mode at every node (``(order + 1, nodes, modes)``; mode j's column j), ``eigenvalues``
    their λ under ∂ₓ², ``inverse`` Φ⁻¹ (``values[0]``'s inverse)."""

    nodes: np.ndarray
    values: np.ndarray
    eigenvalues: np.ndarray
    inverse: np.ndarray

    def derivative(self, k: int) -> np.ndarray:
        """The matrix of ∂ₓ^k on the nodes, Φ^{(k)} Φ⁻¹ (the identity for k = 0)."""
        return np.eye(len(self.nodes)) if k == 0 else self.values[k] @ self.inverse


def galerkin_modes(lower: float, length: float, ends, modes: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``modes`` Legendre–Galerkin eigenfunctions of ∂ₓ² on [lower, lower + length]
    (module docstring) under the homogeneous conditions ``ends`` = ((α₀, β₀), (α₁, β₁)) at
    x = a and b (∂ₙ outward: −∂ₓ at a): ``(λ, C)``, λ ascending in |λ|, C the Legendre
    coefficients (in s = 2(x − a)/L − 1) of each M-orthonormal eigenfunction (columns)."""
    size = modes + 2  # Legendre P₀ … P_{modes+1}, two conditions: ``modes`` functions
    k = np.arange(size)
    scale = 2.0 / length  # d/dx = scale · d/ds
    (a0, b0), (a1, b1) = ends
    rows = np.stack([a0 * (-1.0) ** k - b0 * scale * (-1.0) ** (k + 1) * k * (k + 1) / 2,
                     a1 * np.ones(size) + b1 * scale * k * (k + 1) / 2])
    null = np.linalg.svd(rows)[2][2:].T  # (size, modes): coefficients meeting both conditions
    s, w = legendre.leggauss(size + 2)
    phi = legendre.legval(s, null).T
    second = legendre.legval(s, legendre.legder(null, 2, scl=scale, axis=0)).T
    half = length / 2
    mass = half * phi.T @ (w[:, None] * phi)
    stiff = half * phi.T @ (w[:, None] * second)
    stiff = (stiff + stiff.T) / 2
    # M = R Rᵀ: the symmetric problem R⁻¹ A R⁻ᵀ y = λ y, v = R⁻ᵀ y (M-orthonormal).
    chol = np.linalg.cholesky(mass)
    inv = np.linalg.inv(chol)
    lam, y = np.linalg.eigh(inv @ stiff @ inv.T)
    order = np.argsort(-lam)  # λ ≤ 0: slowest first
    return lam[order], null @ (inv.T @ y[:, order])


def axis_basis(nodes, lower: float, length: float, ends, order: int) -> AxisBasis:
    """The :class:`AxisBasis` of a bounded axis (``ends`` its sides' (α, β) at a and b) or,
    ``ends`` None, a periodic one (the real Fourier waves), at ``nodes``, with derivatives up
    to ``order``."""
    nodes = np.asarray(nodes, np.float64)
    n = len(nodes)
    if ends is None:
        # 1, then cos and sin of each wave j = 1 … (n − 1)/2, then (n even) the Nyquist cosine.
        pairs = (n - 1) // 2
        j = np.concatenate([[0], np.repeat(np.arange(1, pairs + 1), 2), [n // 2] if n % 2 == 0 else []])
        sine = np.concatenate([[0], np.tile([0, 1], pairs), [0] if n % 2 == 0 else []])
        wave = 2 * np.pi * j / length
        phase = wave[None, :] * (nodes[:, None] - lower) - sine[None, :] * np.pi / 2
        values = np.stack([wave[None, :] ** d * np.cos(phase + d * np.pi / 2) for d in range(order + 1)])
        eigenvalues = -wave**2
    else:
        eigenvalues, coefficients = galerkin_modes(lower, length, ends, n)
        s = 2 * (nodes - lower) / length - 1
        values = np.stack([legendre.legval(s, legendre.legder(coefficients, d, scl=2 / length, axis=0)).T
                           for d in range(order + 1)])
    return AxisBasis(nodes, values, eigenvalues, np.linalg.inv(values[0]))


def top_wave(length: float, n: int) -> float:
    """The largest wave number a fit on ``n`` nodes of an axis of ``length`` resolves
    (module docstring): πn/L, the n-th sine jπ/L of a bounded axis, the Nyquist wave of a
    periodic one."""
    return np.pi * n / length


def resolved_eigenvalues(lower: float, length: float, ends, n: int) -> np.ndarray:
    """λ of the modes a fit on ``n`` nodes of the axis resolves (module docstring), k = √−λ ≤
    πn/L: on a bounded axis Galerkin eigenvalues of a basis of 2n + 8 (accurate to about
    its 0.64-th part, beyond n), on a periodic one (``ends`` None) the waves; as ``k / k_max``
    too, for the ellipse."""
    top = top_wave(length, n)
    if ends is None:
        k = 2 * np.pi * np.fft.fftfreq(n, 1.0 / n) / length
    else:
        k = np.sqrt(np.maximum(-galerkin_modes(lower, length, ends, 2 * n + 8)[0], 0.0))
        k = k[k <= top * (1 + 1e-9)]
    return np.stack([-k**2, k / top])


class BoxTransport(eqx.Module):
    """The error's transport on a box's held-out tensor grid of ``shape`` (module docstring):
    one :class:`AxisBasis` per axis (``bases``), the multi-indices ``alphas`` of L′[û], which
    of them the diagonal holds (``diagonal``: α = 0 and α = 2eᵢ), the held-out ``weights``
    for the means, the ``resolving`` rates per axis of :meth:`radius` and its ``region``."""

    alphas: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    shape: tuple[int, ...] = eqx.field(static=True)
    bases: tuple[AxisBasis, ...]
    weights: np.ndarray
    diagonal: np.ndarray  # (alphas,) bool
    lam: np.ndarray  # (dim, modes): each axis's λ on the grid's modes, ravelled per axis
    resolving: tuple[np.ndarray, ...]  # per axis: λ and k / k_max of the resolved modes
    kept: np.ndarray  # (modes,) bool: the grid's modes within the resolved ellipse
    region: Callable | None = eqx.field(static=True)

    #: As :attr:`~teng_eq.estimate.transport.Transport.RESOLUTION`.
    RESOLUTION: ClassVar[float] = 1e-3

    def __init__(self, domain, points, weights, order: int, resolved: tuple[int, ...] | None = None,
                 region: Callable | None = None):
        points = np.asarray(points, np.float64)
        dim = points.shape[1]
        axes = [np.unique(points[:, d]) for d in range(dim)]
        self.shape = tuple(len(a) for a in axes)
        grid = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=1)
        if grid.shape != points.shape or not np.array_equal(grid, points):
            raise ValueError("the box transport needs the held-out points as a tensor grid in 'ij' order")
        ends = [None if domain.periodic(d) else (domain.parts[2 * d].coefficients,
                                                 domain.parts[2 * d + 1].coefficients) for d in range(dim)]
        lower, lengths = [float(a) for a in domain.origin], [float(v) for v in domain.lengths]
        self.alphas = tuple(a for a in np.ndindex(*(order + 1,) * dim) if sum(a) <= order)
        self.bases = tuple(axis_basis(axes[d], lower[d], lengths[d], ends[d], order) for d in range(dim))
        self.weights = np.asarray(weights, np.float64)
        self.diagonal = np.array([sum(a) == 0 or (sum(a) == 2 and max(a) == 2) for a in self.alphas])
        self.lam = np.zeros((dim, *self.shape))
        for d, basis in enumerate(self.bases):
            self.lam[d] = np.expand_dims(basis.eigenvalues, [i for i in range(dim) if i != d])
        resolved = self.shape if resolved is None else tuple(resolved)
        self.resolving = tuple(resolved_eigenvalues(lower[d], lengths[d], ends[d], resolved[d])
                               for d in range(dim))
        self.region = region
        waves = [np.sqrt(np.maximum(-b.eigenvalues, 0.0)) / top_wave(lengths[d], resolved[d])
                 for d, b in enumerate(self.bases)]
        self.kept = (sum(m**2 for m in np.meshgrid(*waves, indexing="ij")) <= 1.0 + 1e-9).ravel()

    def coefficients(self, equation: Equation, u_fn: Callable, points, t) -> Float[Array, "alphas n"]:
        """a_α(x) of L′[û] at the points (:func:`~teng_eq.estimate.transport.linear_coefficients`)."""
        return linear_coefficients(equation, u_fn, points, t, self.alphas)

    def _parts(self, a, xp=np):
        """The diagonal's coefficients (the α = 0 mean, each axis's ∂ᵢ² mean: 0 below second
        order) and the rest a_α − (its diagonal part)."""
        a = xp.asarray(a)
        weights = xp.asarray(self.weights)
        mean = a @ weights / xp.sum(weights)
        rest = a - xp.where(xp.asarray(self.diagonal)[:, None], mean[:, None], 0.0)
        dim = len(self.shape)
        unit = [tuple(2 * (i == d) for i in range(dim)) for d in range(dim)]
        second = [mean[self.alphas.index(u)] if u in self.alphas else 0.0 for u in unit]
        return mean[self.alphas.index((0,) * dim)], second, rest

    def symbol(self, a, xp=np):
        """Λ on the grid's modes (shape ``shape``) and the rest's coefficients."""
        zero, second, rest = self._parts(a, xp)
        return zero + sum(c * xp.asarray(lam) for c, lam in zip(second, self.lam)), rest

    def growth(self, a: Float[Array, "alphas n"]) -> Float[Array, ""]:
        """max Λ over the grid's modes: what ``growth_rate`` logs (traced for JAX ``a``)."""
        xp = jnp if isinstance(a, jax.Array) else np
        return xp.max(self.symbol(a, xp)[0])

    def rates(self, a: np.ndarray) -> np.ndarray:
        """Λ on the modes a fit resolves (:func:`resolved_eigenvalues`, on their ellipse)."""
        zero, second, _ = self._parts(np.asarray(a, np.float64))
        lam = np.meshgrid(*[r[0] for r in self.resolving], indexing="ij")
        fraction = sum(m**2 for m in np.meshgrid(*[r[1] for r in self.resolving], indexing="ij"))
        rates = zero + sum(c * m for c, m in zip(second, lam))
        return rates[fraction <= 1.0 + 1e-9].ravel()

    def radius(self, a: np.ndarray) -> float:
        """ρ of :meth:`~teng_eq.estimate.transport.Transport.radius` on :meth:`rates`."""
        rates = self.rates(a)
        rho = max(0.0, float(np.max(-rates.real)))
        if self.region is None:
            return rho
        through = self.region(rates.astype(complex))
        return through if through > rho * (1 + self.RESOLUTION) else rho

    def _along(self, matrices, v: np.ndarray) -> np.ndarray:
        """``v`` on the grid with one matrix applied along each axis."""
        out = np.reshape(v, self.shape)
        for d, m in enumerate(matrices):
            out = np.moveaxis(np.tensordot(m, out, axes=(1, d)), 0, d)
        return out.ravel()

    def derivative(self, alpha: tuple[int, ...], v: np.ndarray) -> np.ndarray:
        """∂^α v on the grid, by the basis's derivative matrices."""
        return self._along([b.derivative(k) for b, k in zip(self.bases, alpha)], v)

    def resolved(self, v: np.ndarray) -> np.ndarray:
        """``v`` on the grid with its modes beyond those a fit resolves (:attr:`kept`) removed."""
        inverse, values = [b.inverse for b in self.bases], [b.values[0] for b in self.bases]
        return self._along(values, np.where(self.kept, self._along(inverse, v), 0.0))

    def apply(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """L′[û] v = Σ_α a_α ∂^α v on the grid, of v's modes that a fit resolves
        (:meth:`resolved`): the modes beyond them carry a fit's noise, which the Galerkin
        basis's top eigenvalues (O(n⁴), not the wave numbers' k²) would amplify in a power
        of L′ (the first step's ‖∂ₜ^q u‖ under ``dt_initial: auto``)."""
        v = self.resolved(np.asarray(v, np.float64))
        return sum(np.asarray(c) * self.derivative(alpha, v) for c, alpha in zip(a, self.alphas))

    def propagate(self, e: np.ndarray, defect: np.ndarray, a: np.ndarray, h: float) -> np.ndarray:
        """e at the step's end from e at its start, the step's ``defect`` ∫δ and the
        coefficients ``a`` over the step: the exponential Euler rule on the mode coefficients."""
        lam, rest = self.symbol(np.asarray(a, np.float64))
        z = h * lam.ravel()
        forcing = np.zeros_like(e)
        for c, alpha in zip(rest, self.alphas):
            if np.any(c):  # the diagonal's own terms where L′ has constant coefficients: none left
                forcing = forcing + c * self.derivative(alpha, e)
        inverse = [b.inverse for b in self.bases]
        new = np.exp(z) * self._along(inverse, e) + phi1(z) * self._along(inverse, h * forcing + defect)
        return self._along([b.values[0] for b in self.bases], new)
