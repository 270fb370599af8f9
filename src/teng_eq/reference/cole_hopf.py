"""Viscous Burgers ``uₜ = ν u_xx − u u_x`` from ``u₀ = −sin πx`` on ``[−1, 1]`` with
``u(±1, t) = 0`` (Raissi, Perdikaris & Karniadakis 2019, their benchmark), exact by the
Cole–Hopf integral.

With φ₀ = exp(−(1/2ν)∫₀ˣ u₀) ∝ f(x) = exp(−cos(πx)/(2πν)), u = −2ν ∂ₓ log φ for φ the heat
flow of φ₀ on the line; φ₀ is 2-periodic and even, so u is odd and 2-periodic and vanishes at
x = ±1 (the Dirichlet problem and the periodic one on [−1, 1) have one solution). By parts,

    u(x, t) = −∫ sin(π(x − η)) f(x − η) e^{−η²/4νt} dη / ∫ f(x − η) e^{−η²/4νt} dη,

whose integrands stay bounded as t → 0. With η = √(4νt) z both integrals are of
e^{−z²} times a smooth function of z: the trapezoid rule on [−Z, Z] converges faster than
any power of its spacing (the integrand and its derivatives vanish at ±Z to e^{−Z²}). The
exponent ``−cos/(2πν) − z²`` reaches ±1/(2πν) = ±50 at ν = 0.01/π: its largest value over z
is taken out of both integrals before the exponential (it cancels in the ratio).
The narrowest feature of f, at x − η = ±1, is √(2ν/π) wide (0.045 at ν = 0.01/π, √(2ν/π)/√(4νt)
≥ 0.4 in z): ``nodes`` = 2,001 on Z = 10 (spacing 0.01) resolve it for t ≤ 1 far below round-off
(the self-convergence against 4,001 nodes is tested).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


def cole_hopf(x: np.ndarray, t: float, nu: float, nodes: int = 2001, span: float = 10.0,
              chunk: int = 512) -> np.ndarray:
    """u(x, t) of the module docstring at the points ``x`` (any shape), by the trapezoid rule
    on ``nodes`` points of [−span, span] in z (``chunk`` points of x at a time: memory)."""
    x = np.asarray(x, np.float64)
    if t == 0.0:
        return -np.sin(np.pi * x)
    z = np.linspace(-span, span, nodes)
    s = math.sqrt(4.0 * nu * t)
    flat, out = x.ravel(), np.empty(x.size)
    for start in range(0, flat.size, chunk):
        y = flat[start:start + chunk, None] - s * z[None, :]  # x − η on the nodes
        exponent = -np.cos(np.pi * y) / (2 * np.pi * nu) - z[None, :] ** 2
        weight = np.exp(exponent - exponent.max(axis=1, keepdims=True))
        out[start:start + chunk] = -(np.sin(np.pi * y) * weight).sum(axis=1) / weight.sum(axis=1)
    return out.reshape(x.shape)


class ColeHopfSolution:
    """u(·, t) at the evaluation points of ``equation`` (any ``m``, any t)."""

    def __init__(self, equation, times: np.ndarray, nodes: int):
        self.equation, self.times, self.nodes = equation, times, nodes
        self._points: dict[int, np.ndarray] = {}

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of ``equation.evaluation(m)``."""
        return self.values_at(self.times[k], m)

    def values_at(self, t: float, m: int) -> np.ndarray:
        """u(·, t) at the points of ``equation.evaluation(m)``."""
        if m not in self._points:
            self._points[m] = np.asarray(self.equation.evaluation(m).points, np.float64)[:, 0]
        return cole_hopf(self._points[m], float(t), self.equation.nu, self.nodes)


@dataclasses.dataclass(frozen=True)
class ColeHopf:
    """Reference scheme: the Cole–Hopf integral (module docstring) on ``nodes`` trapezoid
    points (the ``n`` of :func:`~teng_eq.reference.reference_solution` overrides it); exact
    in time, nothing to cache."""

    nodes: int = 2001

    def solution(self, equation, times, *, cache_dir=None, n=None, dt=None) -> ColeHopfSolution:
        return ColeHopfSolution(equation, np.asarray(times, np.float64), self.nodes if n is None else int(n))

    def anytime(self, equation, t_final: float, *, cache_dir=None) -> ColeHopfSolution:
        return self.solution(equation, [0.0, t_final])
