"""The estimate advanced step by step on the host (:class:`ErrorEstimate`), from its compiled
pieces (:class:`CompiledEstimate`: the fields of a state, a step's local terms, θ₀'s error)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import numpy as np
from jax.sharding import NamedSharding
from jaxtyping import PyTree

from teng_eq.estimate.box import BoxTransport
from teng_eq.estimate.defect import Defect, Fields
from teng_eq.estimate.transport import Transport, oscillatory


@dataclasses.dataclass(frozen=True)
class ErrorEstimate:
    """``E_n`` (module docstring), advanced on the host step by step: ``vector`` (the
    estimated error on the points, for the kinds that sum defects as vectors) and
    ``error`` (its norm, or the running triangle sum), what a checkpoint keeps; and
    ``fields``, the :class:`Fields` of step n's end, the next step's start (a resume
    computes them again from the checkpoint's state)."""

    kind: str
    weights: np.ndarray
    vector: np.ndarray
    error: float
    fields: Fields | None = None
    transport: Transport | BoxTransport | None = None

    @classmethod
    def start(cls, kind: str, weights, e0,
              transport: Transport | BoxTransport | None = None) -> ErrorEstimate:
        """From θ₀'s error ``e0`` on the points (``weights``: their quadrature)."""
        weights, e0 = np.asarray(weights, np.float64), np.asarray(e0, np.float64)
        return cls(kind, weights, e0, float(np.sqrt(np.sum(weights * e0 * e0))), transport=transport)

    @property
    def vectorial(self) -> bool:
        return self.kind in ("transport", "hermite", "trapezoid")

    def advance(self, dt: float, scalars: dict[str, float], defect: np.ndarray,
                ends: tuple[Fields, Fields] | None) -> ErrorEstimate:
        """``E_{n+1}`` from the step's ``scalars`` (the method's metrics and
        :class:`Defect`'s), its ``defect`` vector and the :class:`Fields` of its ``ends``."""
        growth = math.exp(scalars["growth_rate"] * dt)
        vector, error = self.vector, self.error
        if self.kind == "transport":
            a = (np.asarray(ends[0].coefficients) + np.asarray(ends[1].coefficients)) / 2
            vector = self.transport.propagate(self.vector, np.asarray(defect, np.float64), a, dt)
            error = float(np.sqrt(np.sum(self.weights * vector**2)))
        elif self.vectorial:
            vector = growth * self.vector + np.asarray(defect, np.float64)
            error = float(np.sqrt(np.sum(self.weights * vector**2)))
        elif self.kind == "hermite_triangle":
            error = growth * self.error + scalars["defect_l2"]
        else:  # embedded: the integrator's estimate, plus the projection error on held-out points
            error = (growth * self.error + scalars["local_error"]
                     + math.sqrt(max(scalars["holdout_loss"], 0.0)))
        return dataclasses.replace(self, vector=vector, error=error, fields=None if ends is None else ends[1])


def placed(shapes: PyTree, compiled, state: PyTree) -> PyTree:
    """``shapes`` (of ``compiled``'s outputs) on the devices ``compiled`` puts them on, where
    ``state`` is on a mesh of devices (a run split over them, :mod:`teng_eq.fit.mesh`): a program
    compiled from them then takes those outputs. On one device the shapes as they are."""
    if not isinstance(getattr(jax.tree_util.tree_leaves(state)[0], "sharding", None), NamedSharding):
        return shapes
    return jax.tree_util.tree_map(lambda s, where: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=where),
                                  shapes, compiled.output_shardings)


class CompiledEstimate:
    """A run's :class:`Defect`, compiled once from the method's state (``parameters``:
    its θ): the :class:`Fields` of a state (derivatives up to fourth order), the local
    terms of a step from the fields at both ends, and θ₀'s error against u₀. ``kind``:
    the estimate the run computes (``hermite`` asked of an operator above second order
    of another form than the short one computes ``trapezoid``)."""

    def __init__(self, defect: Defect, kind: str, parameters: Callable, state: PyTree):
        self.kind = defect.kind if kind == "transport" else (
            "trapezoid" if kind.startswith("hermite") and not defect.hermite else kind)
        self.weights, self.transport = np.asarray(defect.weights), defect.transport
        self.initial = jax.jit(lambda s: defect.initial(parameters(s))).lower(state).compile()
        if defect.short:  # autonomous, the fields hold all L[p(½)] needs: no t, no θ
            fields = jax.jit(lambda s: defect.fields(parameters(s))).lower(state).compile()
            shapes = placed(jax.eval_shape(lambda s: defect.fields(parameters(s)), state), fields, state)
            combine = jax.jit(lambda a, b, dt: defect.combine(a, b, dt)).lower(shapes, shapes, 0.0).compile()
            self.fields = lambda s, t: fields(s)
            self.combine = lambda a, b, s0, s1, dt, t: combine(a, b, dt)
            return
        self.fields = jax.jit(lambda s, t: defect.fields(parameters(s), t)).lower(state, 0.0).compile()
        shapes = jax.eval_shape(lambda s: defect.fields(parameters(s), 0.0), state)
        shapes = placed(shapes, self.fields, state)
        self.combine = jax.jit(lambda a, b, s0, s1, dt, t: defect.combine(
            a, b, dt, (parameters(s0), parameters(s1)), t)
        ).lower(shapes, shapes, state, state, 0.0, 0.0).compile()

    def start(self, state) -> tuple[ErrorEstimate, float]:
        """The estimate at t = 0, from θ₀'s error (exact: u₀ is known), with the fields of θ₀
        (the first step's start), and ‖û₀‖²."""
        e0, norm0 = jax.device_get(self.initial(state))
        estimate = ErrorEstimate.start(self.kind, self.weights, e0, self.transport)
        return dataclasses.replace(estimate, fields=self.fields(state, 0.0)), float(norm0) ** 2

    def radius(self, estimate: ErrorEstimate) -> float | None:
        """ρ of the latest fields' L′[û] (:meth:`Transport.radius`); None without the transport."""
        if self.transport is None or estimate.fields is None:
            return None
        return self.transport.radius(estimate.fields.coefficients)

    def oscillatory(self, estimate: ErrorEstimate) -> bool:
        """Whether :meth:`radius` is that of rates off the real axis
        (:func:`~teng_eq.estimate.transport.oscillatory`); False without the transport."""
        if self.transport is None or estimate.fields is None:
            return False
        return oscillatory(self.transport, estimate.fields.coefficients)

    def derivative(self, estimate: ErrorEstimate, q: int) -> float | None:
        """‖∂ₜ^q u‖ at t = 0 on the points, as (L′[û₀])^{q−1} L[û₀] (:meth:`Transport.apply`;
        exact for a linear equation, its linearisation's otherwise); None without the transport."""
        if self.transport is None or estimate.fields is None:
            return None
        a, v = np.asarray(estimate.fields.coefficients), np.asarray(estimate.fields.f)
        for _ in range(q - 1):
            v = self.transport.apply(a, v)
        return float(np.sqrt(np.sum(self.weights * v * v)))

    def local(self, start: Fields | None, previous, state, dt: float,
              t: float) -> tuple[dict[str, np.ndarray], dict[str, float], tuple[Fields, Fields]]:
        """The local terms of the step from ``previous`` at t to ``state``
        (:meth:`Defect.combine`), from the ``start`` fields (None: computed from
        ``previous``), and the fields of both ends."""
        start = self.fields(previous, t) if start is None else start
        end = self.fields(state, t + dt)
        vectors, scalars = jax.device_get(self.combine(start, end, previous, state, dt, t))
        return vectors, {k: float(v) for k, v in scalars.items()}, (start, end)
