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
from jaxtyping import Array, Float, PRNGKeyArray

from teng_eq.equations import Equation, network_operator
from teng_eq.fit.results import RESULTS, StepRecord, event_counts
from teng_eq.fit.stage import StageSolver, random_subset
from teng_eq.fit.theta0 import check_least_squares
from teng_eq.methods.base import Problem, StepInputs, ThetaMethod, ThetaOptions, require_periodic_domain
from teng_eq.stepping.explicit import combine, rk_slopes
from teng_eq.stepping.tableau import RK4, Tableau


class TDVP(ThetaMethod):
    """Sparse-update TDVP integrated by an explicit RK scheme (classical RK4).

    Per step it reports, for each stage j, ``lsq[j, 0] = ρ_j = ‖J_S θ̇_S − L[û]‖²_{L²}``
    (the squared residual of that stage's projection) and ``losses[j, 0] = Δt² ρ_j``,
    the squared L² distance between the tangent update of length Δt and the PDE's
    own update (to first order in Δt): the quantity TENG drives to zero within a
    step (paper, Observation in §TENG). The step's ``step_loss`` is ``Δt² Σ_j b_j ρ_j``.
    """

    @dataclasses.dataclass(frozen=True)
    class Options(ThetaOptions):
        subsample: int  # parameters drawn at each RK stage (paper: 2560)
        solver: str
        damping: float

        def validate(self, prefix: str) -> None:
            ThetaOptions.validate(self, prefix)
            check_least_squares(prefix, self.solver, self.damping)

    solver: StageSolver
    equation: Equation
    tableau: Tableau
    dt: float = eqx.field(static=True)
    subsample: int = eqx.field(static=True)

    @classmethod
    def check(cls, options: Options, problem: Problem, name: str) -> None:
        require_periodic_domain(problem, name)
        cls.check_subsample("method.subsample", options.subsample, options, problem)

    @classmethod
    def step_jacobians(cls, options: Options, problem: Problem) -> dict[str, int]:
        return {"a stage's projection": options.subsample}

    @classmethod
    def parts(cls, options: Options, problem, space, quadrature) -> dict:
        return {"solver": StageSolver(space, quadrature, options.solver, options.damping),
                "equation": problem.equation, "tableau": RK4, "dt": problem.dt,
                "subsample": options.subsample}

    def velocity(
        self, theta: Float[Array, " params"], key: PRNGKeyArray, t=0.0
    ) -> tuple[Float[Array, " params"], Float[Array, ""], tuple[RESULTS, RESULTS]]:
        """``(θ̇, ρ, results)``: the sparse Dirac–Frenkel velocity at θ on a random
        subset, its squared residual ``ρ = ‖J_S θ̇_S − L[û_θ]‖²_{L²}`` (the stage
        solver's weighted projection), and what the solve ran into."""
        subset = random_subset(key, self.space.size, self.subsample)
        rows = self.solver.rows(self.solver.factors(theta), subset)
        rhs = network_operator(self.equation, self.space, theta, self.solver.points, t)
        x, rho, results = self.solver.project(rows, rhs)
        return jnp.zeros_like(theta).at[subset].set(x), rho, results

    def step(self, state: Float[Array, " params"], key: PRNGKeyArray,
             inputs: StepInputs) -> tuple[Float[Array, " params"], StepRecord]:
        keys = jax.random.split(key, self.tableau.stages)
        nodes = [0.0] + [sum(row) for row in self.tableau.lower]  # slope j at t + cⱼΔt
        t = inputs.start

        def slope(j, theta, measured):
            k, r, results = self.velocity(theta, keys[j], t + nodes[j] * self.dt)
            return k, (*measured, (r, event_counts(*results)))

        k1, measured = slope(0, state, ())
        slopes, measured = rk_slopes(self.tableau, self.dt, state, k1, slope, measured)
        theta = combine(state, self.dt, self.tableau.b, slopes)
        rho = jnp.stack([r for r, _ in measured])
        return theta, StepRecord(
            losses=(self.dt**2 * rho)[:, None], inner=rho[:, None],
            metrics={"step_loss": self.dt**2 * jnp.dot(jnp.asarray(self.tableau.b), rho),
                     **jax.tree_util.tree_map(lambda *c: sum(c), *(e for _, e in measured))},
        )
