"""One-dimensional periodic equations: the benchmarks of the randomized sparse neural
Galerkin method (RSNG; Berman & Peherstorfer, NeurIPS 2023, their Allen–Cahn and Burgers
setups) and heat on a line (exact, for tests).

* :class:`AllenCahnLine`: ``uₜ = ν u_xx + u − u³`` on ``[0, 2π)`` (RSNG: ν = 5·10⁻³);
* :class:`BurgersLine`: ``uₜ = ν u_xx − u u_x`` (RSNG: ν = 10⁻³ on ``[−1, 1)``, here
  on ``[0, 2)``: the same problem moved by 1, its initial condition moved with it, so
  that every error — the Frobenius one over all steps included — is theirs);
* :class:`HeatLine`: ``uₜ = ν u_xx``, exact from any initial condition (Fourier).
"""

from __future__ import annotations

import math

from teng_eq.equations.allen_cahn import AllenCahn
from teng_eq.equations.base import array_module
from teng_eq.equations.burgers import Burgers
from teng_eq.equations.heat import Heat
from teng_eq.reference.etdrk4 import Pseudospectral


def rsng_allen_cahn(x):
    """RSNG's Allen–Cahn u₀ on [0, 2π): ⅓ tanh(2 sin x) − e^{−23.5(x − π/2)²}
    + e^{−27(x − 4.2)²} + e^{−38(x − 5.4)²} (its bumps are 1e-10 small at the ends: the
    periodic extension is smooth to round-off)."""
    xp, s = array_module(x), x[0]
    return (xp.tanh(2 * xp.sin(s)) / 3 - xp.exp(-23.5 * (s - math.pi / 2) ** 2)
            + xp.exp(-27 * (s - 4.2) ** 2) + xp.exp(-38 * (s - 5.4) ** 2))


def rsng_burgers(x):
    """RSNG's Burgers u₀ = (1 − y²) e^{−30 (y + ½)²} at y = x − 1 ∈ [−1, 1) (x ∈ [0, 2)):
    zero to 1e-30 at the ends, so periodic."""
    xp, y = array_module(x), x[0] - 1.0
    return (1 - y**2) * xp.exp(-30 * (y + 0.5) ** 2)


def two_waves(x):
    """``sin x + ½ cos 3x``: band-limited, for tests on [0, 2π)."""
    xp = array_module(x)
    return xp.sin(x[0]) + 0.5 * xp.cos(3 * x[0])


class HeatLine(Heat):
    """``uₜ = ν u_xx`` on ``[0, L)``; exact (each Fourier mode decays at ν k²)."""

    dim = 1
    initial_conditions = {"two_waves": two_waves, "rsng_allen_cahn": rsng_allen_cahn}


class AllenCahnLine(AllenCahn):
    """``uₜ = ν u_xx + u − u³`` on ``[0, L)``. Reference: pseudo-spectral ETDRK4 at n = 512,
    Δt = 10⁻³ (self-convergence for RSNG's u₀, ν = 5·10⁻³, T = 4: docs/guides/dimensions.md)."""

    dim = 1
    initial_conditions = {"rsng": rsng_allen_cahn, "two_waves": two_waves}

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=3, resolution=((math.inf, 512, 1e-3),))


class BurgersLine(Burgers):
    """``uₜ = ν u_xx − u u_x`` on ``[0, L)``. Reference: pseudo-spectral ETDRK4 at n = 4096,
    Δt = 2.5·10⁻⁴ (self-convergence for RSNG's u₀, ν = 10⁻³, T = 4: the front, a few 10⁻³
    wide, needs the points: docs/guides/dimensions.md)."""

    dim = 1
    initial_conditions = {"rsng": rsng_burgers, "two_waves": two_waves}

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=2, resolution=((math.inf, 4096, 2.5e-4),))
