"""Equations on a periodic box ``[a₁, a₁ + L₁) × … × [a_d, a_d + L_d)``, and the paper's 2-D initial
conditions on the square ``[0, 2π)²``."""

from __future__ import annotations

import equinox as eqx
from jaxtyping import Array, Float

from teng_eq.domains.box import Box
from teng_eq.equations.base import Equation, array_module
from teng_eq.errors import bad


class PeriodicBox(Equation):
    """An equation on the periodic box ``[a₁, a₁ + L₁) × … × [a_d, a_d + L_d)`` (``origin``,
    None for 0, and ``lengths``; in yaml also ``lengths: [[a₁, b₁], …]``, one ``[a, b)`` per
    axis): its domain is the :class:`~teng_eq.domains.box.Box` of those (uniform grids
    from the origin, the periodic embedding with periods ``lengths``)."""

    lengths: tuple[float, ...] = eqx.field(static=True)
    origin: tuple[float, ...] | None = eqx.field(static=True, default=None, kw_only=True)

    def validate(self, prefix: str) -> None:
        super().validate(prefix)
        if len(self.lengths) != self.dim or not all(v > 0 for v in self.lengths):
            raise bad(f"{prefix}.lengths", list(self.lengths),
                      f"must be {self.dim} numbers > 0, one per dimension")
        if self.origin is not None and len(self.origin) != self.dim:
            raise bad(f"{prefix}.origin", list(self.origin), f"must be {self.dim} numbers, one per dimension")

    @property
    def domain(self) -> Box:
        return Box(self.lengths, self.origin)


def paper_initial_condition(x: Float[Array, " 2"]) -> Float[Array, ""]:
    """The paper's 2-D initial condition (eq. ``initial_condition``)::

        u₀ = (e^{3 sin x₁ + sin x₂} + e^{−3 sin x₁ + sin x₂}
              − e^{3 sin x₁ − sin x₂} − e^{−3 sin x₁ − sin x₂}) / 100
           = 4 cosh(3 sin x₁) sinh(sin x₂) / 100.

    Works on NumPy or JAX arrays whose first axis is the coordinate.
    """
    xp = array_module(x)
    s1, s2 = xp.sin(x[0]), xp.sin(x[1])
    return (
        xp.exp(3 * s1 + s2) + xp.exp(-3 * s1 + s2) - xp.exp(3 * s1 - s2) - xp.exp(-3 * s1 - s2)
    ) / 100.0


def sines_initial_condition(x: Float[Array, " 2"]) -> Float[Array, ""]:
    """``u₀ = sin x₁ sin x₂ + ½ cos(2x₁ + x₂)``: two Fourier modes (|k|² = 2, 5).

    Not from the paper: a band-limited condition that a coarse grid resolves
    exactly, for fast tests (convergence orders) and smoke runs.
    """
    xp = array_module(x)
    return xp.sin(x[0]) * xp.sin(x[1]) + 0.5 * xp.cos(2 * x[0] + x[1])


#: The initial conditions of the 2-D equations on ``[0, 2π)²`` (heat, Allen–Cahn, Burgers).
SQUARE_INITIAL_CONDITIONS = {
    "paper2d": paper_initial_condition,
    "sines2d": sines_initial_condition,
}
