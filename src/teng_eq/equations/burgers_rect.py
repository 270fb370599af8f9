"""Viscous Burgers on the rectangle ``[0, 2) × [0, 2π)`` (paper, App. "Additional Initial
Conditions and Benchmarks"): ``∂ₜu = ν Δu − u (∂₁u + ∂₂u)``, ν = 1/100, periodic, from
``u₀ = (1/50) exp(cos(πx₁ − 2) + sin(x₂ − 1))²``."""

from __future__ import annotations

import math
from typing import ClassVar

from jaxtyping import Array, Float

from teng_eq.equations.base import array_module
from teng_eq.equations.burgers import Burgers
from teng_eq.reference.etdrk4 import Pseudospectral


def rect_initial_condition(x: Float[Array, " 2"]) -> Float[Array, ""]:
    """``u₀ = exp(cos(πx₁ − 2) + sin(x₂ − 1))² / 50`` (NumPy or JAX, coordinate first):
    periodic with periods 2 and 2π."""
    xp = array_module(x)
    return xp.exp(xp.cos(math.pi * x[0] - 2.0) + xp.sin(x[1] - 1.0)) ** 2 / 50.0


class BurgersRect(Burgers):
    """Burgers on ``[0, 2) × [0, 2π)`` (``lengths``): the periodic embedding and the
    spectral reference take one period per dimension.

    Reference: pseudo-spectral ETDRK4 on n₁ × n₂ modes, measured from self-convergence
    (relative L² difference at T of the run to the one with twice the modes on both
    axes and to the one with half the step, on the finer grid): see :data:`RESOLUTION`.
    """

    initial_conditions: ClassVar[dict] = {"paper_rect": rect_initial_condition}

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=2, resolution=RESOLUTION)


#: Rows (t_max, (n₁, n₂), dt); measured in :class:`BurgersRect`.
RESOLUTION = ((1.0, (512, 256), 2e-3), (math.inf, (768, 384), 2e-3))
