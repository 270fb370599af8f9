"""Implicit and IMEX TENG as a :class:`~teng_eq.methods.base.Method`: each time step an
:class:`teng_eq.stepping.implicit.ImplicitTENGStep`, every implicit stage solved in function space
and fitted by TENG's stage solver (:class:`teng_eq.stepping.implicit.ImplicitStage`). Per-step
metrics as TENG's, and ``newton_residual``: the last implicit stage's relative residual
‖u_θ − hF[u_θ] − r‖/‖r‖ before its last fit."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from teng_eq.config.options import at_least
from teng_eq.domains.bounded import BoxDomain
from teng_eq.equations import Equation
from teng_eq.errors import bad
from teng_eq.estimate.transport import SystemTransport, Transport
from teng_eq.methods.base import Problem
from teng_eq.methods.teng import TENG
from teng_eq.stepping.implicit import BoxStage, ImplicitStage, ImplicitTENGStep, box_solve, constant_symbol
from teng_eq.stepping.tableau import DIRK_TABLEAUS, Tableau


class ImplicitTENG(TENG):
    """TENG with a diagonally implicit (``beuler``, ``cn``, ``sdirk2``, ``sdirk3``, ``sdirk4``) or IMEX
    (``imex_euler``, ``ars222``) ``integrator`` (:data:`teng_eq.stepping.tableau.DIRK_TABLEAUS`), on a
    scalar equation or a periodic system (its stages solved per wave vector for all components)."""

    systems = True  # a periodic system's stages: an m × m symbol per wave vector (ImplicitStage)

    @dataclasses.dataclass(frozen=True)
    class Options(TENG.Options):
        """TENG's settings (``stopping``: ``fixed`` or ``adaptive``: the implicit stages read no
        expected local error) and the implicit stages' ``newton`` passes (each a
        function-space Newton correction and a fit; used where F is not linear with
        constant coefficients)."""

        newton: int

        FAMILY: ClassVar[dict[str, Tableau]] = DIRK_TABLEAUS

        def validate(self, prefix: str) -> None:
            TENG.Options.validate(self, prefix)
            at_least(prefix, self, 1, "newton")

        def local_error_stopping(self) -> bool:
            return False

    @classmethod
    def check(cls, options, problem: Problem, name: str) -> None:
        TENG.check(options, problem, name)
        eq = problem.equation
        box = isinstance(eq.domain, BoxDomain)
        if eq.periods is None and not box:
            raise bad("equation", eq.name, f"method {name} solves its stages on a periodic grid "
                      "or a box's nodes, which it has not")
        if eq.domain.fresh:
            raise bad("equation", eq.name,
                      f"method {name} solves its stages on a grid, and it draws moving points")
        if options.FAMILY[options.integrator].imex is not None and not _has_stiff_part(eq):
            raise bad("equation", eq.name, f"method {name} is IMEX and it declares no stiff(u, t) part "
                      "(the short form's νΔu is one; an operator of its own form must declare it)")
        if box and eq.components:
            raise bad("equation", eq.name, f"method {name} solves a system's stages on a periodic grid, "
                      "and it is a system on a box with sides")
        if box:
            imex = options.FAMILY[options.integrator].imex is not None
            try:
                box_solve(eq, imex, 2)
            except ValueError as reason:
                part = "S" if imex else "L"
                raise bad("equation", eq.name, f"method {name} solves its stages on a box for F = {part} "
                          f"linear with constant coefficients, and {reason}") from None

    @classmethod
    def make_step(cls, options, problem, solver, quadrature, shared: dict) -> ImplicitTENGStep:
        eq, tableau = problem.equation, shared["tableau"]
        imex = tableau.imex is not None
        if isinstance(eq.domain, BoxDomain):
            stage = BoxStage(solver, eq, box_solve(eq, imex, quadrature.grid_shape[0]), imex=imex)
            return ImplicitTENGStep(stage=stage, **shared)
        transport = (SystemTransport(eq.periods, quadrature.grid_shape, eq.order, len(eq.components))
                     if eq.components else Transport(eq.periods, quadrature.grid_shape, eq.order))
        stage = ImplicitStage(solver, eq, transport, options.newton, imex=imex,
                              symbol=constant_symbol(eq, imex, transport, quadrature.points))
        return ImplicitTENGStep(stage=stage, **shared)


def _has_stiff_part(eq) -> bool:
    if eq.components:
        return eq.has_stiff
    return type(eq).stiff is not Equation.stiff or type(eq).operator is Equation.operator
