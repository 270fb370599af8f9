"""A reference from the equation's own closed-form solution (:meth:`Equation.solution`:
an exact solution, or a manufactured one whose forcing the equation carries), at any t.
"""

from __future__ import annotations

import dataclasses

import numpy as np


class ClosedFormSolution:
    """u(·, t) at the evaluation points of ``equation`` (any ``m``, any t)."""

    def __init__(self, equation, times: np.ndarray):
        self.equation, self.times = equation, times
        self._points: dict[int, np.ndarray] = {}

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of ``equation.evaluation(m)``."""
        return self.values_at(self.times[k], m)

    def values_at(self, t: float, m: int) -> np.ndarray:
        """u(·, t) at the points of ``equation.evaluation(m)``."""
        if m not in self._points:
            self._points[m] = np.asarray(self.equation.evaluation(m).points, np.float64).T
        return np.asarray(self.equation.exact(self._points[m], float(t)), np.float64)


@dataclasses.dataclass(frozen=True)
class ClosedForm:
    """The scheme of an equation whose :meth:`solution` is its reference."""

    def solution(self, equation, times, *, cache_dir=None, n=None, dt=None) -> ClosedFormSolution:
        return ClosedFormSolution(equation, np.asarray(times, np.float64))

    def anytime(self, equation, t_final: float, *, cache_dir=None) -> ClosedFormSolution:
        return ClosedFormSolution(equation, np.array([0.0, t_final]))
