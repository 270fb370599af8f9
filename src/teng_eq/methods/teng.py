"""TENG as a :class:`~teng_eq.methods.base.Method`: each time step is a TENG
integrator step (:class:`teng_eq.stepping.explicit.TENGStep`), every stage a fit by
repeated projected least squares (:class:`teng_eq.fit.stage.StageSolver`).

Per-step metrics: ``step_loss`` (the final fit's loss on the quadrature nodes),
``holdout_loss`` and ``holdout_ratio`` (the same fit on held-out points, see
:mod:`teng_eq.stepping.explicit`), ``iterations`` (all stages), and the solver events
``fallbacks`` and ``zero_steps`` (:data:`teng_eq.fit.results.EVENTS`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from teng_eq.config.options import at_least, one_of
from teng_eq.errors import bad
from teng_eq.estimate.defect import Defect
from teng_eq.fit.results import StepRecord
from teng_eq.fit.stage import StageSolver, Stopping
from teng_eq.fit.theta0 import check_least_squares
from teng_eq.methods.base import Problem, StepInputs, ThetaMethod, ThetaOptions
from teng_eq.stepping.base import Holdout, Step
from teng_eq.stepping.explicit import TENGStep
from teng_eq.stepping.tableau import TABLEAUS, Tableau

#: Where a stage's fit starts (:class:`teng_eq.stepping.explicit.TENGStep`).
WARM_STARTS = ("previous", "extrapolate")


class Extrapolating(eqx.Module):
    """TENG's state under ``warm_start: extrapolate``: θ_t and the rate
    ``(θ_t − θ_{t−Δt'})/Δt'`` of the step that reached it (zero at t = 0), from
    which the next step's first fit starts. Checkpoints carry both, so a resumed run
    starts where the uninterrupted one would."""

    theta: Float[Array, " params"]
    rate: Float[Array, " params"]


class TENG(ThetaMethod):
    """TENG-Euler, -Heun or -RK4 (``integrator``), paper Algorithms ``TENG_Euler`` /
    ``TENG_Heun`` and the RK4 tableau of :mod:`teng_eq.stepping.explicit`."""

    @dataclasses.dataclass(frozen=True)
    class Options(ThetaOptions):
        """TENG's settings (``conf/method/teng_*.yaml``; the top-level keys of the same
        names feed them): the ``integrator`` (one of :attr:`FAMILY`), the iteration caps of
        a step's first stage and of the others, the parameters drawn on a step's first
        iteration and on the others, the least squares, the stopping policy, the held-out
        check and where a stage's fit starts (``warm_start``, ``warm_rate``); ``conserve``:
        project each step onto the invariants a system declares
        (:func:`~teng_eq.stepping.explicit.project`)."""

        integrator: str
        iters: int
        iters_later: int
        subsample_first: int
        subsample: int
        solver: str
        damping: float
        stopping: Stopping
        holdout: Holdout
        warm_start: str
        warm_rate: float
        conserve: bool

        #: The tableaux this method's ``integrator`` names.
        FAMILY: ClassVar[dict[str, Tableau]] = TABLEAUS

        def validate(self, prefix: str) -> None:
            ThetaOptions.validate(self, prefix)
            one_of(f"{prefix}.integrator", self.integrator, sorted(self.FAMILY))
            one_of(f"{prefix}.warm_start", self.warm_start, WARM_STARTS)
            if not 0.0 <= self.warm_rate <= 1.0:
                raise bad(f"{prefix}.warm_rate", self.warm_rate, "must be in [0, 1]")
            at_least(prefix, self, 1, "iters", "iters_later")
            check_least_squares(prefix, self.solver, self.damping)
            if self.holdout.grid is not None and self.grid % self.holdout.grid:
                raise bad(f"{prefix}.holdout.grid", self.holdout.grid, f"must divide grid={self.grid}")
            if self.stopping.policy == "local_error" and not self.local_error_stopping():
                raise bad(f"{prefix}.stopping.policy", self.stopping.policy,
                          "needs an explicit integrator with an embedded error estimate, "
                          f"not {self.integrator}")
            if self.stopping.min_iters > min(self.iters, self.iters_later):
                raise bad(f"{prefix}.stopping.min_iters", self.stopping.min_iters,
                          f"must be <= min(iters, iters_later)={min(self.iters, self.iters_later)}")

        def local_error_stopping(self) -> bool:
            """Whether the ``local_error`` stopping policy can run: its stages read the step's
            expected local error, which an explicit step with an embedded estimate has."""
            return bool(self.FAMILY[self.integrator].error_order)

    systems = True  # its fits and steps see a system's rows (x, c) as a scalar's
    shards = True  # its least squares are normal equations, summed over the devices' points

    advance: Step  # explicit here, implicit in ImplicitTENG
    holdout: Holdout = eqx.field(static=True)
    grid_shape: tuple[int, ...] | None = eqx.field(static=True, default=None)  # the fit's grid

    @classmethod
    def error_order(cls, options: Options) -> int:
        return options.FAMILY[options.integrator].error_order

    @classmethod
    def error_constant(cls, options: Options) -> float:
        return options.FAMILY[options.integrator].error_constant

    @classmethod
    def stability_limit(cls, options: Options) -> float | None:
        return options.FAMILY[options.integrator].stability_limit

    @classmethod
    def amplification(cls, options: Options, z: float) -> float | None:
        return float(abs(options.FAMILY[options.integrator].stability(np.array([z]))[0]))

    @classmethod
    def stability_region(cls, options: Options) -> Callable | None:
        return region_of(options.FAMILY[options.integrator])

    def defect(self, kind: str) -> Defect | None:
        """On the held-out points of the step (points no fit uses); the fit's grid bounds
        the wave numbers the step must be stable on, an explicit tableau's stability region
        where their rates are complex (an implicit one is A-stable: no cap)."""
        eq, tableau = self.advance.equation, self.advance.tableau
        return Defect(self.space, eq, self.advance.holdout, kind, resolved=self.grid_shape,
                      region=region_of(tableau), implicit=not tableau.explicit)

    @classmethod
    def check(cls, options: Options, problem: Problem, name: str) -> None:
        for key in ("subsample_first", "subsample"):
            cls.check_subsample(f"method.{key}", getattr(options, key), options, problem)
        if problem.devices != 1:
            for key, solver in (("method.solver", options.solver), ("method.fit.solver", options.fit.solver)):
                if solver != "cholesky":
                    raise bad(key, solver, f"devices={problem.devices!r} needs cholesky: the normal "
                              "equations sum over the devices' points; qr and svd factor the whole Jacobian")
        if options.conserve and not getattr(problem.equation, "conserves", False):
            raise bad("method.conserve", options.conserve,
                      f"{problem.equation.name} declares no invariants to keep (a system's invariants(u))")

    @classmethod
    def step_jacobians(cls, options: Options, problem) -> dict[str, int]:
        return {"a step's least squares": options.subsample_first}

    @classmethod
    def parts(cls, options: Options, problem, space, quadrature) -> dict:
        eq = problem.equation
        solver = StageSolver(space, quadrature, options.solver, options.damping, options.stopping, flux=True,
                             mesh=cls.mesh(options, problem))
        shared = dict(tableau=options.FAMILY[options.integrator], dt=problem.dt, iters=options.iters,
                      iters_later=options.iters_later, subsample_first=options.subsample_first,
                      subsample=options.subsample, warm_start=options.warm_start, warm_rate=options.warm_rate,
                      holdout=eq.holdout(options.grid, eq.holdout_size(options.grid, options.holdout)))
        return {"advance": cls.make_step(options, problem, solver, quadrature, shared),
                "holdout": options.holdout, "grid_shape": quadrature.grid_shape}

    @classmethod
    def make_step(cls, options: Options, problem, solver: StageSolver, quadrature, shared: dict) -> Step:
        """The step on ``solver``, with the settings every TENG step takes (``shared``)."""
        return TENGStep(solver=solver, equation=problem.equation, boundary=quadrature.boundary,
                        moving=problem.equation.domain.fresh,
                        conserve=options.grid if options.conserve else None, **shared)

    def init(self) -> Float[Array, " params"] | Extrapolating:
        """θ₀ (with a zero rate under ``warm_start: extrapolate``), on every device of the fits' mesh."""
        theta = self.theta0
        state = (Extrapolating(theta, jnp.zeros_like(theta)) if self.advance.warm_start == "extrapolate"
                 else theta)
        mesh = self.advance.solver.mesh
        return state if mesh is None else mesh.replicated(state)

    def parameters(self, state) -> Float[Array, " params"]:
        return state.theta if isinstance(state, Extrapolating) else state

    def values(self, state, points, t=None):
        """û on ``points``, split over the fits' devices where they are (:mod:`teng_eq.fit.mesh`)."""
        return self.advance.solver.on_mesh(super().values(state, self.advance.solver.on_mesh(points), t))

    def step(self, state, key: PRNGKeyArray, inputs: StepInputs) -> tuple[object, StepRecord]:
        mesh = self.advance.solver.mesh
        if mesh is None:
            return self._step(state, key, inputs)
        new, record = self._step(state, key, inputs)
        return mesh.everywhere(new), record  # as init() placed it: the next step's input

    def _step(self, state, key: PRNGKeyArray, inputs: StepInputs) -> tuple[object, StepRecord]:
        dt = self.advance.dt if inputs.dt is None else inputs.dt
        if not isinstance(state, Extrapolating):
            return self.advance(state, key, dt, inputs.expected, t=inputs.start)
        theta, record = self.advance(state.theta, key, dt, inputs.expected, rate=state.rate, t=inputs.start)
        # Times 1/Δt, not over Δt: XLA compiles a division by a constant Δt so, and a
        # fixed-Δt run's program has Δt as an argument, which must give the same rate.
        return Extrapolating(theta, (theta - state.theta) * (1.0 / dt)), record

    @property
    def expects_error(self) -> bool:
        return self.advance.solver.stopping.policy == "local_error"

    def holdout_limits(self) -> Holdout:
        return self.holdout


def region_of(tableau: Tableau) -> Callable | None:
    """An explicit tableau's stability region for complex rates
    (:meth:`~teng_eq.stepping.tableau.Tableau.equivalent_radius`); None for an implicit one
    (A-stable: no cap)."""
    return tableau.equivalent_radius if tableau.explicit else None
