"""TENG as a :class:`~teng_eq.methods.base.Method`: each time step is a TENG
integrator step (:class:`teng_eq.integrators.TENGStep`), every stage a fit by
repeated projected least squares (:class:`teng_eq.stepper.Stepper`)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from teng_eq.config import bad
from teng_eq.integrators import INTEGRATORS, TENGStep
from teng_eq.methods.base import Method, StepInfo, stack_rows
from teng_eq.model import ParamSpace
from teng_eq.stepper import Stepper


class TENG(Method):
    """TENG-Euler, -Heun or -RK4 (``method.integrator``), paper Algorithms
    ``TENG_Euler`` / ``TENG_Heun`` and the RK4 tableau of :mod:`teng_eq.integrators`."""

    @dataclasses.dataclass(frozen=True)
    class Options:
        integrator: str

        def validate(self, prefix: str) -> None:
            if self.integrator not in INTEGRATORS:
                bad(f"{prefix}.integrator", self.integrator, f"unknown, choose one of {sorted(INTEGRATORS)}")

    space: ParamSpace
    step_fn: TENGStep

    @classmethod
    def build(cls, cfg, problem) -> TENG:
        stepper = Stepper(problem.space, problem.quadrature.points, problem.quadrature.weights,
                          cfg.solver, cfg.damping)
        step_fn = TENGStep(
            integrator=INTEGRATORS[cfg.method.options.integrator], stepper=stepper,
            equation=problem.equation, dt=cfg.dt, iters=cfg.iters, iters_later=cfg.iters_later,
            subsample_first=cfg.subsample_first, subsample=cfg.subsample,
            boundary=problem.quadrature.boundary,
        )
        return cls(steps=cfg.n_steps, space=problem.space, step_fn=step_fn)

    def init(self, theta0: Float[Array, " params"]) -> Float[Array, " params"]:
        return theta0

    def step(self, state: Float[Array, " params"], key: PRNGKeyArray) -> tuple[Float[Array, " params"], StepInfo]:
        theta, logs = self.step_fn(state, key)
        width = max(log.loss.shape[0] for log in logs)
        lsq = [jnp.concatenate([log.lsq, jnp.full(1, jnp.nan)]) for log in logs]
        info = StepInfo(
            losses=stack_rows([log.loss for log in logs], width),
            lsq=stack_rows(lsq, width),
            scalars={"step_loss": logs[-1].loss[-1]},
        )
        return theta, info

    def values(self, state, points, t=None):
        return self.space.apply(state, points)

    def network(self, state):
        return self.space.network(state)
