"""Viscous Burgers on a box with a condition on each side (:class:`BurgersBox`), and the
benchmark of the physics-informed networks' literature: ``u₀ = −sin πx`` on [−1, 1] with
u(±1, t) = 0, ν = 0.01/π, t ∈ [0, 1] (Raissi, Perdikaris & Karniadakis 2019)."""

from __future__ import annotations

import math

from teng_eq.equations.base import array_module
from teng_eq.equations.bounded import BoundedBox
from teng_eq.equations.burgers import BurgersFlow
from teng_eq.reference.cole_hopf import ColeHopf


def raissi(x):
    """``u₀ = −sin πx``: zero at x = ±1, odd and 2-periodic."""
    return -array_module(x).sin(math.pi * x[0])


class BurgersBox(BoundedBox, BurgersFlow):
    """Burgers (:class:`~teng_eq.equations.burgers.BurgersFlow`) on a box
    (:class:`~teng_eq.equations.bounded.BoundedBox`). Reference: the Cole–Hopf integral
    (:class:`~teng_eq.reference.cole_hopf.ColeHopf`) for Raissi's problem — the line [−1, 1],
    u₀ = :func:`raissi`, zero Dirichlet data at both ends, any ν —; none otherwise."""

    initial_conditions = {"raissi": raissi}

    def reference_scheme(self):
        sides = self.domain.parts
        raissi_problem = (tuple(self.origin) == (-1.0,) and tuple(self.lengths) == (2.0,)
                          and self.initial_condition == "raissi"
                          and all(p.kind == "dirichlet" and not callable(p.value) and p.value == 0.0
                                  for p in sides))
        return ColeHopf() if raissi_problem else None
