"""Heat, ``∂ₜu = ν Δu``: the operator on any domain (:class:`LinearHeat`), and on the periodic
square ``[0, 2π)²`` (:class:`Heat`; paper §5.1: ν = 1/10)."""

from __future__ import annotations

from teng_eq.equations.base import Equation
from teng_eq.equations.periodic import SQUARE_INITIAL_CONDITIONS, PeriodicBox
from teng_eq.reference.fourier import ExactFourier


class LinearHeat(Equation):
    """``∂ₜu = ν Δu`` on whatever domain the equation has: the short form with N ≡ 0. A heat
    equation lists it after the base that makes its domain from its keys
    (``Heat(PeriodicBox, LinearHeat)``): the domain's keys then stay its fields."""

    linear = True

    def nonlinear(self, u, grad_u):
        return 0.0 * u

    def growth_rate(self, u, grad_u):
        """0: ⟨νΔe, e⟩ = −ν‖∇e‖² ≤ 0 on a periodic domain, or for e = 0 on the boundary
        (contractive: errors add), or for ∂ₙe = 0 there. Where the network meets its side
        condition only approximately (``boundary_error``), that error is no part of this bound."""
        return 0.0


class Heat(PeriodicBox, LinearHeat):
    """Heat on the periodic square.

    Reference: exact, ``û_k(t) = e^{−ν|k|²t} û_k(0)`` with ``û(0)`` the DFT of u₀ on a
    64² grid. The paper's u₀ = 4 cosh(3 sin x₁) sinh(sin x₂)/100 is entire; its
    coefficients are products of modified Bessel functions, I_{m₁}(3) I_{m₂}(1), and
    fall below 10⁻¹⁶ of the largest one for |m₁| ≥ 21 (I₂₁(3)/I₀(3) = 2·10⁻¹⁷) or
    |m₂| ≥ 15, so 64 modes already give them to round-off (the DFT's aliasing error is
    at most I₃₂(3)/I₀(3) = 4·10⁻³¹); the paper's 2048² grid is not needed.
    """

    dim = 2
    initial_conditions = SQUARE_INITIAL_CONDITIONS

    def reference_scheme(self) -> ExactFourier:
        return ExactFourier(n=64)
