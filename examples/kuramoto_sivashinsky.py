"""Two fourth-order equations on a periodic square, written as operators of any form
(:meth:`~teng_eq.equations.Equation.operator`): the derivatives come from the
:class:`~teng_eq.equations.Field` ``u`` by autodiff.

* :class:`KuramotoSivashinsky`: ``∂ₜu = −a Δu − b Δ²u − ½|∇u|²`` on ``[0, 2π)²``, whose
  long waves (|k|² < a/b) grow and whose short ones decay; no reference: the run's error
  is its own estimate, and its growth rate is measured on the run's fields;
* :class:`KuramotoSivashinskyETDRK4`: the same equation with a reference, its linear part's
  symbol and nonlinear rest declared for the pseudo-spectral ETDRK4 solve;
* :class:`Biharmonic`: ``∂ₜu = −κ Δ²u`` on ``[0, 2π)²``, whose exact solution decays
  each Fourier mode at ``κ|k|⁴``: a fourth-order check of the error and its estimate.
"""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.equations.periodic import PeriodicBox
from teng_eq.reference import Pseudospectral


def _bilaplacian(u):
    return u.d(0, 0, 0, 0) + 2 * u.d(0, 0, 1, 1) + u.d(1, 1, 1, 1)


def _waves(x):
    """``cos x₁ + ½ sin 2x₂ + ¼ cos(x₁ + x₂)``."""
    xp = jnp if isinstance(x, jax.Array) else np
    return xp.cos(x[0]) + 0.5 * xp.sin(2 * x[1]) + 0.25 * xp.cos(x[0] + x[1])


class KuramotoSivashinsky(PeriodicBox):
    """``∂ₜu = −a Δu − b Δ²u − ½|∇u|²`` (``a``, ``b`` > 0). No growth rate declared: the
    estimate measures it (:func:`teng_eq.estimate.defect.measured_growth_rate`); no reference."""

    dim = 2
    order = 4
    initial_conditions = {"waves": _waves}
    a: float = eqx.field(static=True)
    b: float = eqx.field(static=True)

    def operator(self, u, t):
        return -self.a * u.lap - self.b * _bilaplacian(u) - 0.5 * (u.grad[0] ** 2 + u.grad[1] ** 2)

    def stiff(self, u, t):
        """The linear part, taken implicitly by the IMEX steppers (``method=teng_ars222``)."""
        return -self.a * u.lap - self.b * _bilaplacian(u)


class KuramotoSivashinskyETDRK4(KuramotoSivashinsky):
    """:class:`KuramotoSivashinsky` with its reference: ETDRK4 integrates the linear part
    exactly, symbol ``a|k|² − b|k|⁴``, and the rest ``N = −½|∇u|²`` (quadratic: ``degree=2``)
    by its fourth-order rule, on 64² modes with Δt = 10⁻³ (self-convergence in
    docs/guides/methods.md)."""

    def linear_symbol(self, k2):
        return self.a * k2 - self.b * k2**2

    def nonlinear(self, u, grad_u):
        return -0.5 * (grad_u[0] ** 2 + grad_u[1] ** 2)

    def reference_scheme(self) -> Pseudospectral:
        return Pseudospectral(degree=2, resolution=((math.inf, 64, 1e-3),))


def _two_modes(x):
    xp = jnp if isinstance(x, jax.Array) else np
    return xp.sin(x[0]) * xp.sin(x[1]) + 0.5 * xp.cos(2 * x[0] + x[1])


class Biharmonic(PeriodicBox):
    """``∂ₜu = −κ Δ²u`` (``kappa``); exact from the two-mode initial condition."""

    dim = 2
    order = 4
    linear = True
    initial_conditions = {"two_modes": _two_modes}
    kappa: float = eqx.field(static=True)

    def operator(self, u, t):
        return -self.kappa * _bilaplacian(u)

    def growth_rate(self, u, grad_u):
        """0: ``⟨−κΔ²e, e⟩ = −κ‖Δe‖² ≤ 0``."""
        return 0.0

    def solution(self, x, t):
        """``sin x₁ sin x₂ e^{−4κt} + ½ cos(2x₁ + x₂) e^{−25κt}`` (|k|⁴ = 4, 25)."""
        return (np.sin(x[0]) * np.sin(x[1]) * np.exp(-4 * self.kappa * t)
                + 0.5 * np.cos(2 * x[0] + x[1]) * np.exp(-25 * self.kappa * t))
