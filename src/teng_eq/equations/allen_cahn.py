"""Allen–Cahn on the periodic square: ``∂ₜu = ν Δu + u − u³`` on ``[0, 2π)²`` (paper §5.1:
ν = 1/200)."""

from __future__ import annotations

import math

from teng_eq.equations.periodic import SQUARE_INITIAL_CONDITIONS, PeriodicBox
from teng_eq.reference.etdrk4 import Pseudospectral


class AllenCahn(PeriodicBox):
    """Allen–Cahn: ``∂ₜu = ν Δu + u − u³``.

    Reference: pseudo-spectral ETDRK4 (:class:`~teng_eq.reference.etdrk4.Pseudospectral`),
    cubic nonlinearity. Resolution measured for ν = 1/200 and the paper's u₀ from
    self-convergence (relative L² difference at T of the (n, dt) run to the (2n, dt)
    and the (n, dt/2) runs, on the 2n grid): T = 1, n = 128, dt = 5e-3: 3e-16 and
    2e-12; T = 4, n = 256: 3e-11 and 3e-12 (128 modes miss by 3·10⁻⁶ at T = 4: the
    fronts sharpen, so T ≤ 1 gets its own, cheaper row). The paper used a cut-off of
    128 (n = 256) with RK4 at dt = 2·10⁻⁴.
    """

    dim = 2
    initial_conditions = SQUARE_INITIAL_CONDITIONS

    def nonlinear(self, u, grad_u):
        return u - u * u * u

    def growth_rate(self, u, grad_u):
        """1: the one-sided Lipschitz constant of u − u³, whose derivative 1 − 3u² is at
        most 1 (diffusion only contracts)."""
        return 1.0

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=3, resolution=((1.0, 128, 5e-3), (math.inf, 256, 5e-3)))
