"""The Korteweg–de Vries equation on a periodic line, written as an operator of any form
(:meth:`~teng_eq.equations.Equation.operator`): ``∂ₜu = −6 u ∂ₓu − ∂ₓ³u`` on ``[0, L)``.

Its linear part is dispersive: L′[û] = −6û ∂ₓ − 6(∂ₓû) − ∂ₓ³ has the rates
Λ(k) = i(k³ − 6⟨û⟩k) − 6⟨∂ₓû⟩ on the grid's wave numbers, purely imaginary (on 256
nodes of [0, 50), |k| ≤ 16.1: |Λ| ≈ 4160), so an explicit step is stable only where
Δt|Λ| lies in its stability region on the imaginary axis (RK4: 2.83; Euler and Heun:
none) — what ``dt=auto`` caps a step by (:meth:`~teng_eq.estimate.transport.Transport.radius`).
"""

import equinox as eqx

from teng_eq.equations.base import array_module
from teng_eq.equations.periodic import PeriodicBox


def soliton(eq, x):
    """The soliton at t = 0 (:meth:`KdV.solution`)."""
    return eq.solution(x, 0.0)


class KdV(PeriodicBox):
    """``∂ₜu = −6 u ∂ₓu − ∂ₓ³u`` (``nu`` unused: 0); exact from the soliton of speed ``c``
    centred at ``x0`` (:meth:`solution`)."""

    dim = 1
    order = 3
    initial_conditions = {"soliton": soliton}
    c: float = eqx.field(static=True)
    x0: float = eqx.field(static=True)

    def operator(self, u, t):
        return -6 * u.value * u.grad[0] - u.d(0, 0, 0)

    def growth_rate(self, u, grad_u):
        """``3 max(0, max_x −∂ₓû)``: with e = v − w, v∂ₓv − w∂ₓw = ½∂ₓ((v + w)e) and w = v − e,
        by parts ⟨L[v] − L[w], e⟩ = −3∫e²∂ₓv (the dispersion's ⟨∂ₓ³e, e⟩ and ∫∂ₓ(e³) vanish):
        exact, as Burgers' bound with 6 for 1 (the default transport estimate reads L′[û]
        itself instead)."""
        xp = array_module(grad_u)
        return 3 * xp.maximum(0.0, -xp.min(grad_u[0]))

    def solution(self, x, t):
        """``u = (c/2) sech²(√c/2 (x − ct − x0))``, on the line; on the box its tails at the
        ends are below (c/2)·4e^{−√c·d}, d the distance from the crest to the nearer end
        (c = 1, x0 = 25 on [0, 50) to t = 1: d ≥ 24, 7.6e-11)."""
        xp = array_module(x)
        e = xp.exp(-xp.sqrt(self.c) * xp.abs(x[0] - self.c * t - self.x0))
        return self.c / 2 * 4 * e / (1 + e) ** 2
