"""TDVP-RK4 with sparse updates (paper §TDVP; Berman & Peherstorfer's randomized
sparse Neural Galerkin): the Dirac–Frenkel projection of ∂ₜu = L[u] onto the
tangent space of the network, integrated in θ by classical RK4.

At a parameter vector θ the velocity θ̇ solves the least squares

    θ̇_S = argmin ‖J_S θ̇_S − L[û_θ]‖²_{L²},   J_S = ∂û_θ(xₙ)/∂θ_S,

on the quadrature grid, for a random subset S of the parameters (θ̇ is zero
outside S); each RK stage draws a fresh S. With the RK4 tableau ``(A, b)``

    k_j = θ̇(θ_t + Δt Σ_{i<j} A_{ji} k_i),   θ_{t+Δt} = θ_t + Δt Σ_j b_j k_j.

Unlike TENG there is one projection per stage and no iteration towards a
target: the ODE in θ is integrated as it stands, so the tangent-space error of
a finite Δt is never corrected (paper §TDVP, "Limitations").
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from teng_eq.config import bad
from teng_eq.equations import Equation, operator
from teng_eq.integrators import RK4, Integrator
from teng_eq.methods.base import Method, StepInfo, require_periodic_domain
from teng_eq.model import ParamSpace
from teng_eq.stepper import Stepper, random_subset, residual


class TDVP(Method):
    """Sparse-update TDVP integrated by an explicit RK scheme (classical RK4).

    Per step it reports, for each stage j, ``lsq[j, 0] = ρ_j = w‖J_S θ̇_S − L[û]‖²``
    (the squared L² residual of that stage's projection) and
    ``losses[j, 0] = Δt² ρ_j``, the squared L² distance between the tangent update
    of length Δt and the PDE's own update (to first order in Δt): the quantity
    TENG drives to zero within a step (paper, Observation in §TENG). The step's
    ``step_loss`` is ``Δt² Σ_j b_j ρ_j``.
    """

    @dataclasses.dataclass(frozen=True)
    class Options:
        subsample: int  # parameters drawn at each RK stage (paper: 2560)

        def validate(self, prefix: str) -> None:
            if self.subsample < 1:
                bad(f"{prefix}.subsample", self.subsample, "must be an integer >= 1")

    #: Cholesky solves redone by QR (the solver event TENG counts too).
    events = ("fallbacks",)

    space: ParamSpace
    stepper: Stepper
    equation: Equation
    integrator: Integrator
    dt: float = eqx.field(static=True)
    subsample: int = eqx.field(static=True)

    @classmethod
    def check(cls, cfg) -> None:
        require_periodic_domain(cfg)
        n = cfg.n_params
        if cfg.method.options.subsample > n:
            bad("method.subsample", cfg.method.options.subsample,
                f"must be at most the parameter count {n}")

    @classmethod
    def build(cls, cfg, problem) -> TDVP:
        stepper = Stepper(problem.space, problem.quadrature.points, problem.quadrature.weights,
                          cfg.solver, cfg.damping)
        return cls(steps=cfg.n_steps, space=problem.space, stepper=stepper, equation=problem.equation,
                   integrator=RK4, dt=cfg.dt, subsample=cfg.method.options.subsample)

    def velocity(
        self, theta: Float[Array, " params"], key: PRNGKeyArray
    ) -> tuple[Float[Array, " params"], Float[Array, ""], Bool[Array, ""]]:
        """``(θ̇, ρ, fallback)``: the sparse Dirac–Frenkel velocity at θ on a random
        subset, its squared L² residual ``ρ = w‖J_S θ̇_S − L[û_θ]‖²``, and whether a
        Cholesky solve fell back to QR."""
        subset = random_subset(key, self.space.size, self.subsample)
        _, rows = self.stepper.jacobian_rows(theta, subset)
        rhs = operator(self.equation, lambda p: self.space.apply(theta, p), self.stepper.points)
        x, fallback = self.stepper.solve(rows, rhs)
        r = residual(rows, x, rhs)
        return jnp.zeros_like(theta).at[subset].set(x), self.stepper.weight * jnp.sum(r * r), fallback

    def init(self, theta0: Float[Array, " params"]) -> Float[Array, " params"]:
        return theta0

    def step(
        self, state: Float[Array, " params"], key: PRNGKeyArray
    ) -> tuple[Float[Array, " params"], StepInfo]:
        theta = state
        keys = jax.random.split(key, self.integrator.stages)
        slopes, rho, fallbacks = [], [], jnp.zeros((), jnp.int32)
        for j in range(self.integrator.stages):
            coeffs = self.integrator.a[j - 1] if j > 0 else ()
            stage = theta + self.dt * sum((c * k for c, k in zip(coeffs, slopes) if c != 0.0),
                                          jnp.zeros_like(theta))
            k, r, fallback = self.velocity(stage, keys[j])
            slopes.append(k)
            rho.append(r)
            fallbacks = fallbacks + fallback
        theta = theta + self.dt * sum(b * k for b, k in zip(self.integrator.b, slopes))
        rho = jnp.stack(rho)
        info = StepInfo(
            losses=(self.dt**2 * rho)[:, None],
            lsq=rho[:, None],
            scalars={"step_loss": self.dt**2 * jnp.dot(jnp.asarray(self.integrator.b), rho),
                     "fallbacks": fallbacks},
        )
        return theta, info

    def values(self, state, points, t=None):
        return self.space.apply(state, points)

    def network(self, state):
        return self.space.network(state)
