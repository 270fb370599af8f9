"""Equations on the periodic cube ``[0, L)^d`` of any dimension d, discretised by sampled
points instead of grids (a grid of 64 points per axis holds 10¹⁸ points in 10-D), and three
with exact solutions for d = 4 to 10 (docs/guides/dimensions.md):

* :class:`HeatCube`: ``uₜ = νΔu`` from ``u₀ = ∏ᵢ (1 + ε cos xᵢ)``, exact
  ``u = ∏ᵢ (1 + ε e^{−νt} cos xᵢ)``;
* :class:`AdvectionDiffusionCube`: ``uₜ = νΔu − a·∇u`` (aᵢ = ``velocity`` for every i):
  the heat solution moved by a t;
* :class:`KPZCube`: ``uₜ = νΔu + (λ/2)|∇u|²`` from ``u₀ = (2ν/λ) Σᵢ log(1 + ε cos xᵢ)``:
  by Cole–Hopf (u = (2ν/λ) log w, wₜ = νΔw) exact ``u = (2ν/λ) Σᵢ log(1 + ε e^{−νt} cos xᵢ)``.

On a :class:`SampledBox` the config's ``grid`` and ``eval_grid`` count points, not points
per dimension: the fits' N points are a scrambled Sobol set (or uniform ones, ``sampler``),
drawn afresh each step when ``fresh`` (:meth:`teng_eq.domains.sampled.SampledCube.move`); the
error is measured on an independent uniform sample, with its Monte Carlo standard error.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax.numpy as jnp

from teng_eq.config.options import one_of
from teng_eq.domains.sampled import SAMPLERS, SampledCube
from teng_eq.equations.base import Equation, array_module
from teng_eq.equations.heat import LinearHeat
from teng_eq.errors import bad
from teng_eq.reference import ClosedForm


class SampledBox(Equation):
    """An equation on the periodic cube ``[0, length)^dim`` with sampled quadratures: its
    domain is the :class:`~teng_eq.domains.sampled.SampledCube` of ``sampler`` (``sobol``
    or ``uniform``) and ``fresh`` (the fits' points moved by a random shift each step, or kept)."""

    dim: int = eqx.field(static=True)
    length: float = eqx.field(static=True)
    sampler: str = eqx.field(static=True)
    fresh: bool = eqx.field(static=True)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not (isinstance(self.dim, int) and 1 <= self.dim <= 64):
            raise bad(f"{prefix}.dim", self.dim, "must be an integer in [1, 64]")
        if not self.length > 0:
            raise bad(f"{prefix}.length", self.length, "must be > 0")
        one_of(f"{prefix}.sampler", self.sampler, SAMPLERS)

    @property
    def domain(self) -> SampledCube:
        return SampledCube(self.dim, self.length, self.sampler, self.fresh)

    def reference_scheme(self) -> ClosedForm:
        return ClosedForm()


def _product(equation, x, decay):
    """``∏ᵢ (1 + ε·decay·cos xᵢ)`` at the points x (coordinate first)."""
    xp = array_module(x)
    return xp.prod(1 + equation.eps * decay * xp.cos(x), axis=0)


def _cosine_product(equation, x):
    return _product(equation, x, 1.0)


def _log_sum(equation, x, decay=1.0):
    xp = array_module(x)
    return 2 * equation.nu / equation.lam * xp.sum(xp.log(1 + equation.eps * decay * xp.cos(x)), axis=0)


class HeatCube(SampledBox, LinearHeat):
    """``uₜ = νΔu`` from ``∏ᵢ (1 + ε cos xᵢ)`` (``eps``); exact."""

    initial_conditions = {"cosine_product": _cosine_product}
    eps: float = eqx.field(static=True)

    def solution(self, x, t):
        return _product(self, x, math.exp(-self.nu * t))


class AdvectionDiffusionCube(HeatCube):
    """``uₜ = νΔu − a·∇u``, aᵢ = ``velocity``; exact: the heat solution at x − a t."""

    velocity: float = eqx.field(static=True)

    def nonlinear(self, u, grad_u):
        return -self.velocity * jnp.sum(grad_u, axis=0)

    def growth_rate(self, u, grad_u):
        """0: a constant advection is skew (⟨a·∇e, e⟩ = 0 on the periodic cube)."""
        return 0.0

    def solution(self, x, t):
        return _product(self, x - self.velocity * t, math.exp(-self.nu * t))


class KPZCube(SampledBox):
    """``uₜ = νΔu + (λ/2)|∇u|²`` (``lam``) from ``(2ν/λ) Σᵢ log(1 + ε cos xᵢ)``; exact by
    Cole–Hopf (module docstring)."""

    initial_conditions = {"cole_hopf": _log_sum}
    lam: float = eqx.field(static=True)
    eps: float = eqx.field(static=True)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if not 0 < self.eps < 1:
            raise bad(f"{prefix}.eps", self.eps, "must be in (0, 1) (1 + ε cos x must stay positive)")
        if self.lam == 0:
            raise bad(f"{prefix}.lam", self.lam, "must not be 0")

    def nonlinear(self, u, grad_u):
        return 0.5 * self.lam * jnp.sum(grad_u * grad_u, axis=0)

    def solution(self, x, t):
        return _log_sum(self, x, math.exp(-self.nu * t))
