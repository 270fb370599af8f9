"""One-dimensional periodic equations: the benchmarks of the randomized sparse neural
Galerkin method (RSNG; Berman & Peherstorfer, NeurIPS 2023, their Allen–Cahn and Burgers
setups) and heat on a line (exact, for tests).

* :class:`AllenCahnLine`: ``uₜ = ν u_xx + u − u³`` on ``[0, 2π)`` (RSNG: ν = 5·10⁻³);
* :class:`BurgersLine`: ``uₜ = ν u_xx − u u_x`` (RSNG: ν = 10⁻³ on ``[−1, 1)``, here
  on ``[0, 2)``: the same problem moved by 1, its initial condition moved with it, so
  that every error — the Frobenius one over all steps included — is theirs);
* :class:`HeatLine`: ``uₜ = ν u_xx``, exact from any initial condition (Fourier);
* :class:`KuramotoSivashinskyLine`: ``uₜ = −u_xx − u_xxxx − u u_x`` on ``[0, 32π)`` from
  Kassam & Trefethen's u₀ (2005): stiff, for the implicit and IMEX steppers.
"""

from __future__ import annotations

import math

from teng_eq.equations.allen_cahn import AllenCahn
from teng_eq.equations.base import array_module
from teng_eq.equations.burgers import Burgers
from teng_eq.equations.heat import Heat
from teng_eq.equations.periodic import PeriodicBox
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


def raissi_moved(x):
    """Raissi's Burgers u₀ = −sin πy at y = x − 1 (x ∈ [0, 2)): ``sin πx``, the periodic line's
    view of :func:`teng_eq.equations.burgers_box.raissi` (its solution vanishes at x = 0, 1)."""
    return array_module(x).sin(math.pi * x[0])


def two_waves(x):
    """``sin x + ½ cos 3x``: band-limited, for tests on [0, 2π)."""
    xp = array_module(x)
    return xp.sin(x[0]) + 0.5 * xp.cos(3 * x[0])


def kassam_trefethen(x):
    """``cos(x/16)(1 + sin(x/16))`` on [0, 32π) (Kassam & Trefethen 2005, their KS run)."""
    xp, s = array_module(x), x[0]
    return xp.cos(s / 16) * (1 + xp.sin(s / 16))


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
    initial_conditions = {"rsng": rsng_burgers, "two_waves": two_waves, "raissi": raissi_moved}

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=2, resolution=((math.inf, 4096, 2.5e-4),))


class KuramotoSivashinskyLine(PeriodicBox):
    """``uₜ = −u_xx − u_xxxx − u u_x`` on ``[0, L)``: the waves with |k| < 1 grow, the short
    ones decay at k⁴ − k² (on 256 points of [0, 32π), up to 4032: TENG-RK4 is stable only
    below Δt ≈ 7·10⁻⁴). The IMEX steppers take ``stiff`` = −u_xx − u_xxxx implicitly.
    Reference: pseudo-spectral ETDRK4 with the linear part's symbol |k|² − |k|⁴ and
    N = −u u_x, at n = 512, Δt = 10⁻² (self-convergence: docs/guides/dimensions.md)."""

    dim = 1
    order = 4
    initial_conditions = {"kassam_trefethen": kassam_trefethen}

    def operator(self, u, t):
        return -u.lap - u.d(0, 0, 0, 0) - u.value * u.grad[0]

    def stiff(self, u, t):
        return -u.lap - u.d(0, 0, 0, 0)

    def linear_symbol(self, k2):
        return k2 - k2**2

    def nonlinear(self, u, grad_u):
        return -u * grad_u[0]

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=2, resolution=((math.inf, 512, 1e-2),))
