"""Heat on the periodic cube: ``∂ₜu = ν Δu`` on ``[0, 2π)³`` (paper §5.1: ν = 1/10, T = 8),
from the paper's sum of products of sines and cosines (App. "Additional Initial
Conditions and Benchmarks", Table ``tab:coefs``)."""

from __future__ import annotations

import itertools
from typing import ClassVar

import numpy as np
from jaxtyping import Array, Float

from teng_eq.equations.base import array_module
from teng_eq.equations.heat import Heat
from teng_eq.reference.fourier import ExactFourier

#: A_000 of the paper's 3-D initial condition.
A000 = 0.043
#: A_{k₁k₂k₃} and B_{k₁k₂k₃}, k ∈ {1, 2}³, indexed [k₁−1, k₂−1, k₃−1] (paper Table tab:coefs).
A = np.array([[[0.047, -0.021], [-0.021, -0.041]],
              [[0.034, 0.024], [-0.02, 0.0]]])
B = np.array([[[-0.075, 0.074], [-0.056, -0.007]],
              [[-0.027, 0.032], [-0.008, 0.0]]])


def paper3d_initial_condition(x: Float[Array, " 3"]) -> Float[Array, ""]:
    """``u₀ = A₀₀₀ + Σ_{k ∈ {1,2}³} (A_k Πᵢ cos(kᵢxᵢ) + B_k Πᵢ sin(kᵢxᵢ))`` (NumPy or JAX,
    coordinate first)."""
    xp = array_module(x)
    u = A000
    for k in itertools.product((1, 2), repeat=3):
        index = tuple(v - 1 for v in k)
        cos = xp.cos(k[0] * x[0]) * xp.cos(k[1] * x[1]) * xp.cos(k[2] * x[2])
        sin = xp.sin(k[0] * x[0]) * xp.sin(k[1] * x[1]) * xp.sin(k[2] * x[2])
        u = u + A[index] * cos + B[index] * sin
    return u


class Heat3D(Heat):
    """Heat ``∂ₜu = ν Δu`` on the periodic cube.

    Reference: exact decay of every Fourier mode. u₀ has wavenumbers |kᵢ| ≤ 2, so the
    DFT on an 8³ grid gives its coefficients exactly (no aliasing below the Nyquist
    mode 4), and the solution is ``A₀₀₀ + Σ e^{−ν|k|²t}(…)``, to round-off.
    """

    dim = 3
    initial_conditions: ClassVar[dict] = {"paper3d": paper3d_initial_condition}

    def reference_scheme(self) -> ExactFourier:
        return ExactFourier(n=8)
