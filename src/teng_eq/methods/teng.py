"""TENG as a :class:`~teng_eq.methods.base.Method`: each time step is a TENG
integrator step (:class:`teng_eq.integrators.TENGStep`), every stage a fit by
repeated projected least squares (:class:`teng_eq.stepper.Stepper`).

Per-step scalars: ``step_loss`` (the final fit's loss on the quadrature nodes),
``holdout_loss`` and ``holdout_ratio`` (the same fit on held-out points, see
:mod:`teng_eq.integrators`), ``iterations`` (all stages), and the solver events
``fallbacks`` and ``zero_steps``."""

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

    #: Solver events, per step and summed over the run: Cholesky solves redone by
    #: QR, and non-finite updates replaced by no update.
    events = ("fallbacks", "zero_steps")

    space: ParamSpace
    step_fn: TENGStep

    @classmethod
    def build(cls, cfg, problem) -> TENG:
        stepper = Stepper(problem.space, problem.quadrature.points, problem.quadrature.weights,
                          cfg.solver, cfg.damping, cfg.stopping)
        step_fn = TENGStep(
            integrator=INTEGRATORS[cfg.method.options.integrator], stepper=stepper,
            equation=problem.equation, dt=cfg.dt, iters=cfg.iters, iters_later=cfg.iters_later,
            subsample_first=cfg.subsample_first, subsample=cfg.subsample,
            holdout=problem.holdout.points, holdout_weight=problem.holdout.weights,
            boundary=problem.quadrature.boundary, holdout_boundary=problem.holdout.boundary,
        )
        return cls(steps=cfg.n_steps, space=problem.space, step_fn=step_fn)

    def init(self, theta0: Float[Array, " params"]) -> Float[Array, " params"]:
        return theta0

    def step(self, state: Float[Array, " params"], key: PRNGKeyArray) -> tuple[Float[Array, " params"], StepInfo]:
        theta, log = self.step_fn(state, key)
        width = max(stage.loss.shape[0] for stage in log.stages)
        lsq = [jnp.concatenate([stage.lsq, jnp.full(1, jnp.nan)]) for stage in log.stages]
        info = StepInfo(
            losses=stack_rows([stage.loss for stage in log.stages], width),
            lsq=stack_rows(lsq, width),
            scalars={"step_loss": log.loss, "holdout_loss": log.holdout_loss,
                     "holdout_ratio": log.holdout_ratio, "iterations": log.iterations,
                     "fallbacks": log.fallbacks, "zero_steps": log.zero_steps},
        )
        return theta, info

    def values(self, state, points, t=None):
        return self.space.apply(state, points)

    def network(self, state):
        return self.space.network(state)
