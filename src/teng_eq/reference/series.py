"""Exact heat on a box with homogeneous sides, by its eigenfunction series.

On ``[a, a + L]`` the eigenfunctions of −∂² under each pair of side conditions are, with
s = x − a (orthonormal in L²(a, a + L)):

* Dirichlet at both ends: ``√(2/L) sin(kπs/L)``, k ≥ 1, λ = (kπ/L)²;
* Neumann at both ends: ``1/√L`` and ``√(2/L) cos(kπs/L)``, k ≥ 1, λ = (kπ/L)²;
* Dirichlet at a, Neumann at a + L: ``√(2/L) sin((k + ½)πs/L)``, k ≥ 0 (and Neumann–Dirichlet
  the cosines), λ = ((k + ½)π/L)²;
* periodic: ``1/√L``, ``√(2/L) cos(2πks/L)``, ``√(2/L) sin(2πks/L)``, λ = (2πk/L)².

On the box the products of one per axis are the eigenfunctions of −Δ, so u₀ = Σ c_k φ_k
evolves under ``∂ₜu = νΔu`` as ``u = Σ c_k e^{−ν λ_k t} φ_k`` (λ_k the sum of the axes').
The coefficients are ``c_k = ∫ u₀ φ_k``, by Gauss–Legendre with twice as many nodes per axis
as modes: spectrally accurate for a u₀ whose reflections across the Dirichlet (odd) and
Neumann (even) sides are smooth, as the presets' are; ``n`` modes per axis is the
resolution of the self-convergence table (docs/references.md).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from teng_eq.domains.quadrature import gauss_legendre


def axis_modes(kinds: tuple[str, str] | None, lower: float, length: float, n: int, x: np.ndarray):
    """``(Φ, λ)``: the first ``n`` orthonormal eigenfunctions of one axis at ``x`` (shape
    (len(x), n)) and their eigenvalues; ``kinds`` the two ends' (None: periodic)."""
    s = (np.asarray(x, np.float64) - lower) / length
    k = np.arange(n)
    if kinds is None:  # 1, cos, sin, cos, sin, … of 2πj s
        freq = 2 * math.pi * ((k + 1) // 2)
        phi = np.where(k % 2 == 1, np.cos(np.outer(s, freq)), np.sin(np.outer(s, freq)))
        phi[:, 0] = 1.0
    else:
        if "robin" in kinds or "periodic" in kinds:
            raise ValueError(f"the eigenfunction series holds Dirichlet and Neumann ends, not {kinds}")
        mixed = kinds[0] != kinds[1]
        freq = math.pi * (k + (0.5 if mixed else float(kinds[0] == "dirichlet")))
        phi = np.sin(np.outer(s, freq)) if kinds[0] == "dirichlet" else np.cos(np.outer(s, freq))
    scale = np.where(freq == 0, 1.0, math.sqrt(2.0))
    return phi * scale / math.sqrt(length), (freq / length) ** 2


class SeriesSolution:
    """u(·, t) at the evaluation points of ``equation`` (any ``m``, any t) from the
    coefficients (computed once) and one table of the eigenfunctions per ``m``."""

    def __init__(self, equation, times: np.ndarray, n: int):
        domain = equation.domain
        self.equation, self.times, self.n = equation, times, n
        ends = [None if domain.periodic(d) else (domain.parts[2 * d].kind, domain.parts[2 * d + 1].kind)
                for d in range(domain.dim)]
        self.axes = [(kinds, float(a), float(length))
                     for kinds, a, length in zip(ends, domain.origin, domain.lengths)]
        rules = [gauss_legendre(2 * n, a, a + length) for _, a, length in self.axes]
        mesh = np.meshgrid(*[r[0] for r in rules], indexing="ij")
        values = np.asarray(equation.u0(np.stack(mesh)), np.float64)
        for (kinds, a, length), (x, w) in zip(self.axes, rules):
            phi, _ = axis_modes(kinds, a, length, n, x)
            values = np.tensordot(values, phi * w[:, None], axes=([0], [0]))  # the axis' sum, now last
        self.coefficients = values
        rates = sum(np.meshgrid(*[axis_modes(kinds, a, length, n, np.zeros(1))[1]
                                  for kinds, a, length in self.axes], indexing="ij"))
        self.rates = -equation.nu * rates
        self._tables: dict[int, list[np.ndarray]] = {}

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of ``equation.evaluation(m)``."""
        return self.values_at(self.times[k], m)

    def values_at(self, t: float, m: int) -> np.ndarray:
        """u(·, t) at the points of ``equation.evaluation(m)``, any t."""
        if m not in self._tables:
            self._tables[m] = self._modes_at(np.asarray(self.equation.evaluation(m).points))
        return self._sum(self._tables[m], t)

    def at(self, points: np.ndarray, t: float) -> np.ndarray:
        """u(·, t) at ``points`` (P, dim): Σ_k c_k e^{−νλ_k t} Π_d φ_{k_d}(x_d)."""
        return self._sum(self._modes_at(points), t)

    def _modes_at(self, points: np.ndarray) -> list[np.ndarray]:
        """Each axis' eigenfunctions at the points' coordinate on it, (P, n) each."""
        return [axis_modes(kinds, a, length, self.n, points[:, d])[0]
                for d, (kinds, a, length) in enumerate(self.axes)]

    def _sum(self, tables: list[np.ndarray], t: float) -> np.ndarray:
        out = self.coefficients * np.exp(self.rates * float(t))
        out = np.einsum("pi,i...->p...", tables[0], out)  # the first axis' modes summed, per point
        for table in tables[1:]:
            out = np.einsum("pi,pi...->p...", table, out)
        return out


@dataclasses.dataclass(frozen=True)
class EigenSeries:
    """Reference scheme: the exact eigenfunction series of ``∂ₜu = νΔu`` on a box whose
    sides are periodic or hold zero Dirichlet or Neumann data (module docstring); ``modes``
    per axis (the ``n`` of :func:`~teng_eq.reference.reference_solution` overrides it)."""

    modes: int = 32

    def solution(self, equation, times, *, cache_dir=None, n=None, dt=None) -> SeriesSolution:
        """Exact in time (``dt`` ignored), ``n`` modes per axis; nothing to cache."""
        return SeriesSolution(equation, np.asarray(times, np.float64), self.modes if n is None else int(n))

    def anytime(self, equation, t_final: float, *, cache_dir=None) -> SeriesSolution:
        """The series, whose ``values_at(t, m)`` hold at every t."""
        return self.solution(equation, [0.0, t_final])
