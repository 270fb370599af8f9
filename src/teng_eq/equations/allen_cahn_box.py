"""Allen–Cahn ``∂ₜu = ν Δu + u − u³`` on a box with a condition on each side
(:class:`AllenCahnBox`), and an initial condition that meets zero Neumann data on every side."""

from __future__ import annotations

import math

from teng_eq.equations.allen_cahn import AllenCahn
from teng_eq.equations.base import array_module
from teng_eq.equations.bounded import BoundedBox
from teng_eq.reference.box_etdrk4 import BoxETDRK4


def neumann_front(equation, x):
    """``u₀ = ½ tanh(2 cos πs₁ + Σ_{d>1} cos 2πs_d)`` (s_d ∈ [0, 1] the scaled coordinates): a
    function of cos πs_d, so ∂ₙu₀ = 0 on every side and its cosine series converges
    exponentially (tanh is analytic in a strip, and the argument stays in it on a complex
    neighbourhood of the box). Its zero set is one wavy front across the box, between plateaus
    of about ±½ that the reaction u − u³ drives towards ±1, steepening the front."""
    xp = array_module(x)
    s = [(x[d] - a) / length for d, (a, length) in enumerate(zip(equation.origin, equation.lengths))]
    arg = 2 * xp.cos(math.pi * s[0]) + sum(xp.cos(2 * math.pi * sd) for sd in s[1:])
    return 0.5 * xp.tanh(arg)


class AllenCahnBox(BoundedBox):
    """Allen–Cahn on a box (:class:`~teng_eq.equations.bounded.BoundedBox`): the periodic
    :class:`~teng_eq.equations.allen_cahn.AllenCahn`'s reaction u − u³ and its growth rate 1.

    Reference: the box's sine/cosine-series ETDRK4 (:class:`~teng_eq.reference.box_etdrk4.BoxETDRK4`)
    where every bounded side holds zero Dirichlet or Neumann data (u − u³ is odd, as a Dirichlet
    side's sine series needs); none otherwise. Resolution measured for the preset
    ``allen_cahn_box_neumann`` (ν = 0.01, unit square) by self-convergence (relative L² on the
    64-node Gauss–Legendre evaluation grid of the (n, dt) run to the (2n, dt) and (n, dt/2) ones,
    docs/guides/reference-solutions.md): n = 32, dt = 5e-3: 7.6e-14 and 1.2e-12 at T = 1,
    1.2e-10 and 8.7e-13 at T = 4 (the fronts sharpen)."""

    initial_conditions = {"neumann_front": neumann_front}
    nonlinear = AllenCahn.nonlinear
    growth_rate = AllenCahn.growth_rate

    def reference_scheme(self) -> BoxETDRK4 | None:
        if not self.homogeneous():
            return None
        return BoxETDRK4(degree=3, resolution=((math.inf, 32, 5e-3),))
