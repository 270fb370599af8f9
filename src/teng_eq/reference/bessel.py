"""Exact heat solution on the unit disk with u = 0 on the boundary, as a series of disk
harmonics (paper, App. "Additional Initial Conditions and Benchmarks").

The Dirichlet eigenfunctions of −Δ on the unit disk are the disk harmonics

    Z_mn(r, θ) = J_m(λ_nm r) cos(mθ),   −Δ Z_mn = λ_nm² Z_mn,   Z_mn(1, θ) = 0,

with λ_nm the n-th positive zero of the Bessel function J_m (and the sin(mθ) ones).
So ``u₀ = Σ c_mn Z_mn`` evolves under ``∂ₜu = ν Δu`` as

    u(r, θ, t) = Σ c_mn e^{−ν λ_nm² t} Z_mn(r, θ),

evaluated here with ``scipy.special.jv`` and ``jn_zeros``.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import scipy.special as sp


@functools.cache
def bessel_zero(m: int, n: int) -> float:
    """λ_nm: the n-th positive zero of J_m (n ≥ 1)."""
    return float(sp.jn_zeros(m, n)[-1])


def disk_harmonics(modes, points) -> np.ndarray:
    """``Z[p, j] = J_m(λ_nm r_p) cos(m θ_p)`` for ``modes[j] = (m, n, ·)`` at the
    Cartesian ``points`` (P, 2); shape (P, len(modes))."""
    points = np.asarray(points, dtype=np.float64)
    r = np.hypot(points[:, 0], points[:, 1])
    theta = np.arctan2(points[:, 1], points[:, 0])
    return np.stack([sp.jv(m, bessel_zero(m, n) * r) * np.cos(m * theta) for m, n, _ in modes], axis=1)


class BesselSolution:
    """u(·, t_k) at the evaluation points of ``equation`` (any ``m``), from the modes'
    values there (computed once per ``m``) and their decay. Memory: one (points ×
    modes) table per ``m`` asked for."""

    def __init__(self, equation, times: np.ndarray, modes):
        self.equation = equation
        self.times = times
        self.modes = tuple(modes)
        self.coefficients = np.array([c for _, _, c in self.modes])
        self.rates = -equation.nu * np.array([bessel_zero(m, n) ** 2 for m, n, _ in self.modes])
        self._tables: dict[int, np.ndarray] = {}

    def amplitudes(self, k: int) -> np.ndarray:
        """``c_mn e^{−ν λ_nm² t_k}``, one per mode."""
        return self.amplitudes_at(self.times[k])

    def amplitudes_at(self, t: float) -> np.ndarray:
        """``c_mn e^{−ν λ_nm² t}``, one per mode, any t."""
        return self.coefficients * np.exp(self.rates * t)

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of ``equation.evaluation(m)``."""
        return self.values_at(self.times[k], m)

    def values_at(self, t: float, m: int) -> np.ndarray:
        """u(·, t) at the points of ``equation.evaluation(m)``, any t."""
        if m not in self._tables:
            self._tables[m] = disk_harmonics(self.modes, self.equation.evaluation(m).points)
        return self._tables[m] @ self.amplitudes_at(t)


@dataclasses.dataclass(frozen=True)
class BesselSeries:
    """Reference scheme: the exact disk-harmonic series of ``∂ₜu = ν Δu`` on the unit
    disk, u = 0 on the boundary, from ``u₀ = Σ c Z_mn``; ``modes`` are ``(m, n, c)``."""

    modes: tuple[tuple[int, int, float], ...]

    def solution(self, equation, times, *, cache_dir=None, n=None, dt=None) -> BesselSolution:
        """Exact: no resolution (``n``, ``dt`` are ignored), nothing to cache."""
        return BesselSolution(equation, np.asarray(times, dtype=np.float64), self.modes)

    def anytime(self, equation, t_final: float, *, cache_dir=None) -> BesselSolution:
        """The exact series, whose ``values_at(t, m)`` hold at every t."""
        return self.solution(equation, [0.0, t_final])
