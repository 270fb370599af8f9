"""Optimization-based time integration (paper §OBTI): OBTI-Adam and OBTI-L-BFGS.

Each time step fits the network to the explicit Euler target by a standard
optimiser on θ:

    θ_{t+Δt} = argmin_θ L(θ),   L(θ) = ‖û_θ − u_target‖²_{L²} ≈ Σₙ wₙ (û_θ(xₙ) − u_target(xₙ))²,
    u_target = û_{θ_t} + Δt L[û_{θ_t}],

on the quadrature grid, starting from θ_t: the same loss and target as
TENG-Euler (paper §Baselines); only the optimiser differs. Each step runs a
fixed number of iterations of a fresh optimiser (the paper restarts the
learning-rate schedule every step), all inside one compiled ``lax.scan``.

Both optimisers come from optax. L-BFGS is ``optax.lbfgs`` rather than
``optimistix.LBFGS``: it runs as a plain per-iteration update inside the scan,
so every iteration's loss is logged and the count is exactly the paper's 150,
and its zoom line search enforces the strong Wolfe conditions that keep the
L-BFGS curvature pairs positive (optimistix's L-BFGS backtracks on Armijo alone
and stops on its own tolerances).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jaxtyping import Array, Float, PRNGKeyArray

from teng_eq.config.options import at_least
from teng_eq.domains.quadrature import norm2
from teng_eq.equations import Equation, network_operator
from teng_eq.errors import bad
from teng_eq.fit.results import StepRecord
from teng_eq.methods.base import Problem, StepInputs, ThetaMethod, ThetaOptions, require_periodic_domain


class OBTI(ThetaMethod):
    """Euler OBTI with the optimiser of :meth:`optimizer` (a subclass's choice).

    Per step: ``losses[0, i]`` is the loss before iteration i and ``losses[0, -1]``
    the loss after the last one (``step_loss``); ``inner[0, i]`` is ``‖∇L‖₂``
    before iteration i.
    """

    inner_measure = "grad_norm"
    #: Whether the optimiser's state carries the loss and gradient at the current
    #: iterate (a line search computed them), so that they need not be recomputed.
    reuses_line_search: ClassVar[bool] = False

    points: Float[Array, "n dim"]
    equation: Equation
    weights: Float[Array, ""] | Float[Array, " n"]
    dt: float = eqx.field(static=True)
    options: object = eqx.field(static=True)  # the subclass's Options

    @classmethod
    def check(cls, options, problem: Problem, name: str) -> None:
        require_periodic_domain(problem, name)

    @classmethod
    def parts(cls, options, problem, space, quadrature) -> dict:
        return {"points": quadrature.points, "equation": problem.equation,
                "weights": jnp.asarray(quadrature.weights), "dt": problem.dt, "options": options}

    def optimizer(self) -> optax.GradientTransformationExtraArgs:
        raise NotImplementedError

    def target(self, theta: Float[Array, " params"], t=0.0) -> Float[Array, " n"]:
        """``û_θ + Δt L[û_θ]`` on the grid (L at t)."""
        u = self.space.apply(theta, self.points)
        return u + self.dt * network_operator(self.equation, self.space, theta, self.points, t)

    def fit(
        self, theta: Float[Array, " params"], target: Float[Array, " n"]
    ) -> tuple[Float[Array, " params"], Float[Array, " iters+1"], Float[Array, " iters"]]:
        """``options.iterations`` optimiser iterations on ``L`` from θ: the final θ, the loss
        before each iteration and after the last, and ``‖∇L‖₂`` before each."""

        def loss(th):
            return norm2(self.space.apply(th, self.points) - target, self.weights)

        opt = optax.with_extra_args_support(self.optimizer())
        value_and_grad = (optax.value_and_grad_from_state(loss) if self.reuses_line_search
                          else lambda th, state: jax.value_and_grad(loss)(th))

        def body(carry, _):
            th, state = carry
            value, grad = value_and_grad(th, state=state)
            updates, state = opt.update(grad, state, th, value=value, grad=grad, value_fn=loss)
            return (optax.apply_updates(th, updates), state), (value, jnp.linalg.norm(grad))

        (theta, _), (values, gnorms) = jax.lax.scan(body, (theta, opt.init(theta)),
                                                    length=self.options.iterations)
        return theta, jnp.concatenate([values, loss(theta)[None]]), gnorms

    def step(
        self, state: Float[Array, " params"], key: PRNGKeyArray, inputs: StepInputs
    ) -> tuple[Float[Array, " params"], StepRecord]:
        theta, losses, gnorms = self.fit(state, self.target(state, inputs.start))
        return theta, StepRecord(losses=losses[None],
                                 inner=jnp.concatenate([gnorms, jnp.full(1, jnp.nan)])[None],
                                 metrics={"step_loss": losses[-1]})


class OBTIAdam(OBTI):
    """OBTI-Adam: Adam with a learning rate decaying exponentially from
    ``learning_rate`` by the factor ``decay`` over the step's ``iterations``
    (paper: 300 iterations, 1e-5, decay ½), ``lr_i = learning_rate · decay^(i/iterations)``."""

    @dataclasses.dataclass(frozen=True)
    class Options(ThetaOptions):
        iterations: int  # Adam iterations per time step (paper: 300)
        learning_rate: float  # initial learning rate (paper: 1e-5)
        decay: float  # factor by which the learning rate decays over a step (paper: 0.5)

        def validate(self, prefix: str) -> None:
            ThetaOptions.validate(self, prefix)
            at_least(prefix, self, 1, "iterations")
            if not self.learning_rate > 0:
                raise bad(f"{prefix}.learning_rate", self.learning_rate, "must be > 0")
            if not 0 < self.decay <= 1:
                raise bad(f"{prefix}.decay", self.decay, "must be in (0, 1]")

    def optimizer(self):
        opts = self.options
        schedule = optax.exponential_decay(opts.learning_rate, transition_steps=opts.iterations,
                                           decay_rate=opts.decay)
        return optax.adam(schedule)


class OBTILBFGS(OBTI):
    """OBTI-L-BFGS: ``optax.lbfgs`` with ``memory`` curvature pairs and a zoom
    (strong Wolfe) line search (paper: 150 iterations per step)."""

    reuses_line_search = True

    @dataclasses.dataclass(frozen=True)
    class Options(ThetaOptions):
        iterations: int  # L-BFGS iterations per time step (paper: 150)
        memory: int  # curvature pairs kept

        def validate(self, prefix: str) -> None:
            ThetaOptions.validate(self, prefix)
            at_least(prefix, self, 1, "iterations", "memory")

    def optimizer(self):
        return optax.lbfgs(memory_size=self.options.memory)
