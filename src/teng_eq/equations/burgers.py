"""Viscous Burgers on the periodic square: ``∂ₜu = ν Δu − u (∂₁u + ∂₂u)`` on ``[0, 2π)²``
(paper §5.1: ν = 1/100; appendix: also ν = 3/1000)."""

from __future__ import annotations

import math

import jax.numpy as jnp

from teng_eq.equations.base import Equation
from teng_eq.equations.periodic import SQUARE_INITIAL_CONDITIONS, PeriodicBox
from teng_eq.reference.etdrk4 import Pseudospectral

#: Reference resolution rows ``(t_max, n, dt)`` by viscosity: the rows of the first
#: entry with ``ν ≥ nu_min`` apply (below the last ``nu_min``: its rows, unmeasured).
#: Measurements: :class:`Burgers`.
RESOLUTION: tuple[tuple[float, tuple[tuple[float, int, float], ...]], ...] = (
    (0.01, ((1.0, 192, 2e-3), (math.inf, 384, 2e-3))),
    (0.003, ((1.0, 256, 2e-3), (math.inf, 1024, 2e-3))),
)


class BurgersFlow(Equation):
    """``∂ₜu = ν Δu − u Σᵢ ∂ᵢu`` on whatever domain the equation has: the short form with
    N = −u Σᵢ∂ᵢu (an equation lists it after the base that makes its domain, as
    :class:`Burgers` does)."""

    def nonlinear(self, u, grad_u):
        return -u * sum(grad_u[i] for i in range(len(grad_u)))

    def growth_rate(self, u, grad_u):
        """``½ max(0, max_x −(∂₁ + ∂₂)u)`` on the grid. With D = Σᵢ∂ᵢ and e = v − w on
        the periodic box (or with e = 0 on the boundary), ⟨vDv − wDw, e⟩ = ⟨vDe + eDv − eDe, e⟩
        = ½∫e² Dv (the first term is −½∫e²Dv by parts, the last ∫D(e³)/3 = 0), so
        ``⟨L[v] − L[w], e⟩ ≤ −ν‖∇e‖² − ½∫e² Dv ≤ ½ max(−Dv) ‖e‖²``: exact, with Dv
        measured on the grid."""
        return jnp.maximum(0.0, -0.5 * jnp.min(sum(grad_u[i] for i in range(len(grad_u)))))


class Burgers(PeriodicBox, BurgersFlow):
    """Viscous Burgers on the periodic square (:class:`BurgersFlow`).

    Reference: pseudo-spectral ETDRK4, quadratic nonlinearity, resolution by ν and
    horizon (:data:`RESOLUTION`), measured for the paper's u₀ from self-convergence
    (relative L² difference at T of the (n, dt) run to the (2n, dt) and the (n, dt/2)
    runs, on the 2n grid): ν = 1/100, T = 1, n = 192, dt = 2e-3: 2e-15 and 2e-12;
    T = 4, n = 384: 6e-13 and 3e-11 (192 vs 256 modes at T = 4: 3·10⁻⁷, 256 vs 384:
    4·10⁻⁹). The paper used a cut-off of 192 (n = 384) with RK4 at dt = 10⁻⁴.
    """

    dim = 2
    initial_conditions = SQUARE_INITIAL_CONDITIONS

    def reference_scheme(self) -> Pseudospectral:
        rows = next((rows for nu_min, rows in RESOLUTION if self.nu >= nu_min), RESOLUTION[-1][1])
        return Pseudospectral(degree=2, resolution=rows)
