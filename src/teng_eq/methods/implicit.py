"""Implicit and IMEX TENG as a :class:`~teng_eq.methods.base.Method`: each time step an
:class:`teng_eq.implicit.ImplicitTENGStep`, every implicit stage solved in function space
and fitted by TENG's stage solver (:class:`teng_eq.implicit.ImplicitStage`). Per-step
metrics as TENG's, and ``newton_residual``: the last implicit stage's relative residual
‖u_θ − hF[u_θ] − r‖/‖r‖ before its last fit."""

from __future__ import annotations

import dataclasses

from teng_eq.equations import Equation
from teng_eq.errors import bad
from teng_eq.estimate import Transport
from teng_eq.implicit import DIRK_TABLEAUS, ImplicitStage, ImplicitTENGStep, constant_symbol
from teng_eq.methods.base import Problem, ThetaOptions
from teng_eq.methods.teng import TENG, WARM_STARTS
from teng_eq.options import at_least, one_of
from teng_eq.stage import StageSolver


class ImplicitTENG(TENG):
    """TENG with a diagonally implicit (``beuler``, ``cn``, ``sdirk2``, ``sdirk3``, ``sdirk4``) or IMEX
    (``imex_euler``, ``ars222``) ``integrator`` (:data:`teng_eq.implicit.DIRK_TABLEAUS`)."""

    systems = False  # its stages' function-space steps act on one field's Fourier grid

    @dataclasses.dataclass(frozen=True)
    class Options(TENG.Options):
        """TENG's settings (``stopping``: ``fixed`` or ``adaptive``; no ``local_error``) and
        the implicit stages' ``newton`` passes (each a function-space Newton correction and
        a fit; used where F is not linear with constant coefficients)."""

        newton: int

        def validate(self, prefix: str) -> None:
            ThetaOptions.validate(self, prefix)
            one_of(f"{prefix}.integrator", self.integrator, sorted(DIRK_TABLEAUS))
            one_of(f"{prefix}.warm_start", self.warm_start, WARM_STARTS)
            at_least(prefix, self, 1, "iters", "iters_later", "newton")
            if not 0.0 <= self.warm_rate <= 1.0:
                raise bad(f"{prefix}.warm_rate", self.warm_rate, "must be in [0, 1]")
            if self.stopping.policy == "local_error":
                raise bad(f"{prefix}.stopping.policy", self.stopping.policy,
                          f"is not offered for the implicit integrator {self.integrator}")

    @classmethod
    def error_order(cls, options) -> int:
        return DIRK_TABLEAUS[options.integrator].error_order

    @classmethod
    def error_constant(cls, options) -> float:
        return DIRK_TABLEAUS[options.integrator].error_constant

    @classmethod
    def stability_limit(cls, options) -> float | None:
        return None  # A-stable (the tableau checks it): no explicit step bound

    @classmethod
    def check(cls, options, problem: Problem, name: str) -> None:
        TENG.check(options, problem, name)
        eq = problem.equation
        if eq.periods is None:
            raise bad("equation", eq.name, f"method {name} solves its stages on a periodic grid, which it has not")
        if eq.fresh:
            raise bad("equation", eq.name, f"method {name} solves its stages on a grid, and it draws moving points")
        if DIRK_TABLEAUS[options.integrator].explicit is not None and not _has_stiff_part(eq):
            raise bad("equation", eq.name, f"method {name} is IMEX and it declares no stiff(u, t) part (the short "
                      "form's νΔu is one; an operator of its own form must declare it)")

    @classmethod
    def parts(cls, options, problem, space, quadrature) -> dict:
        eq = problem.equation
        tableau = DIRK_TABLEAUS[options.integrator]
        solver = StageSolver(space, quadrature, options.solver, options.damping, options.stopping)
        imex = tableau.explicit is not None
        transport = Transport(eq.periods, quadrature.grid_shape, eq.order)
        stage = ImplicitStage(solver, eq, transport, options.newton, imex=imex,
                              symbol=constant_symbol(eq, imex, transport, quadrature.points))
        advance = ImplicitTENGStep(
            tableau=tableau, stage=stage, dt=problem.dt, iters=options.iters, iters_later=options.iters_later,
            subsample_first=options.subsample_first, subsample=options.subsample,
            holdout=eq.holdout(options.grid, eq.holdout_size(options.grid, options.holdout)),
            warm_start=options.warm_start, warm_rate=options.warm_rate,
        )
        return {"advance": advance, "holdout": options.holdout, "grid_shape": quadrature.grid_shape}

    @property
    def expects_error(self) -> bool:
        return False


def _has_stiff_part(eq) -> bool:
    return type(eq).stiff is not Equation.stiff or type(eq).operator is Equation.operator
