"""PINN-ENGD: a PINN (:mod:`teng_eq.methods.pinn`) trained by energy natural gradient
descent (Müller & Zeinhofer 2023), on the heat equation as in the paper.

With the PINN loss written as ``L(θ) = ‖ρ(θ)‖₂²`` (``ρ`` the weighted residual
vector of :meth:`~teng_eq.methods.pinn.PINN.residuals`) and ``J = ∂ρ/∂θ``, the
energy Gram matrix is ``G = JᵀJ`` — for the heat equation, whose residual is
linear in û, it is the Gram matrix of the energy inner product
``⟨(∂ₜ − νΔ)v, (∂ₜ − νΔ)w⟩ + ⟨v(·,0), w(·,0)⟩`` on the tangent vectors — and an
iteration is

    d = G⁺ ∇L = 2 J⁺ρ,   θ ← θ − η* d,   η* = argmin_{η ∈ {2⁻ᵏ : k = 0, …, K−1}} L(θ − η d),

a grid line search over ``K = line_search`` step sizes (the ENGD paper: 31).
``G⁺∇L`` is computed as the least-squares solution of ``J d = 2ρ`` by the
sequential methods' solver (:mod:`teng_eq.fit.lstsq`, ``solver``, ``damping``): with
``cholesky`` that is the damped Gram system ``(G + λI) d = ∇L`` itself, with
``svd`` the pseudo-inverse; ``lsq`` records the residual ``‖J d − 2ρ‖₂²``.

Memory: ``J`` is ``(n + m) × P`` float64 (n collocation points, m initial
points, P parameters) and the Gram ``P × P``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from teng_eq.errors import bad
from teng_eq.fit.lstsq import least_squares
from teng_eq.fit.theta0 import check_least_squares
from teng_eq.methods.base import Problem
from teng_eq.methods.pinn import PINN, PINNState


class PINNENGD(PINN):
    """PINN trained by ENGD; one iteration = one natural-gradient step with its line search."""

    @dataclasses.dataclass(frozen=True)
    class Options(PINN.Options):
        line_search: int  # step sizes 2⁻ᵏ, k = 0 … line_search−1, tried each iteration (paper: 31)
        solver: str  # least squares of G⁺∇L (teng_eq.fit.lstsq)
        damping: float

        def validate(self, prefix: str) -> None:
            PINN.Options.validate(self, prefix)
            if self.line_search < 1:
                raise bad(f"{prefix}.line_search", self.line_search, "must be an integer >= 1")
            check_least_squares(prefix, self.solver, self.damping)

    @classmethod
    def check(cls, options, problem: Problem, name: str) -> None:
        super().check(options, problem, name)
        if not problem.equation.linear:
            raise bad("equation", problem.equation.name,
                f"method {name} runs only linear equations (the paper's heat equations)")

    def direction(self, theta: Float[Array, " params"]) -> tuple[Float[Array, " params"], Float[Array, ""]]:
        """The natural gradient ``d = G⁺∇L`` at θ and the least-squares residual ``‖J d − 2ρ‖₂²``."""
        rho, jac = self.residuals(theta), self.jacobian(theta)
        d = least_squares(jac, 2.0 * rho, self.options.solver, self.options.damping)
        r = jac @ d - 2.0 * rho
        return d, jnp.sum(r * r)

    def iteration(self, state: PINNState) -> tuple[PINNState, Float[Array, ""]]:
        d, lsq = self.direction(state.theta)
        etas = 0.5 ** jnp.arange(self.options.line_search, dtype=d.dtype)
        trial = jax.vmap(lambda eta: self.loss(state.theta - eta * d))(etas)
        best = jnp.argmin(trial)
        theta = state.theta - etas[best] * d
        return PINNState(theta=theta, loss=trial[best], optimizer=None), lsq
