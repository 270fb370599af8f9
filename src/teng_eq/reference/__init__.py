"""Reference solutions: each equation names its scheme (:meth:`Equation.reference_scheme`)
and this package computes it — exact Fourier decay (:mod:`.fourier`), pseudo-spectral
ETDRK4 with bounded memory (:mod:`.etdrk4`), a Bessel series on the disk (:mod:`.bessel`),
the equation's own closed form (:mod:`.closed`) — or there is none (the scheme is None)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from teng_eq.reference.closed import ClosedForm, ClosedFormSolution
from teng_eq.reference.etdrk4 import ETDRK4Solution, Pseudospectral, etdrk4_coefficients
from teng_eq.reference.fourier import DecayingModes, ExactFourier, FourierSolution, SpectralSolution


def reference_solution(equation, times, *, cache_dir=None, n=None, dt: float | None = None):
    """u(·, t) at ``times`` by the equation's scheme; ``values(k, m)`` of the result are
    u(·, times[k]) at the points of ``equation.evaluation(m)``.

    ``n`` (modes per axis), ``dt`` (largest time step): the scheme's resolution where it
    has one, None for its default (an exact scheme ignores ``dt``; the Bessel series
    both). ``cache_dir``: where a scheme that caches (ETDRK4) keeps its files; None →
    :func:`teng_eq.cache.files.cache_dir`, ``False`` → no cache.
    """
    times = np.atleast_1d(np.asarray(times, dtype=np.float64))
    if times.ndim != 1 or times.size == 0 or times[0] < 0 or np.any(np.diff(times) < 0):
        raise ValueError(f"times must be a non-empty, non-decreasing 1-D sequence ≥ 0, got {times}")
    return equation.reference_scheme().solution(equation, times, cache_dir=cache_dir, n=n, dt=dt)


def reference_anytime(equation, t_final: float, *, cache_dir=None):
    """A reference whose ``values_at(t, m)`` give u(·, t) at the points of
    ``equation.evaluation(m)`` for any t in [0, t_final] (a run whose steps the
    controller chooses): the exact schemes at any t, ETDRK4 by a partial step from its
    own step grid."""
    return equation.reference_scheme().anytime(equation, float(t_final), cache_dir=cache_dir)


def save_npz(path, equation, solution, m: int) -> Path:
    """Write ``t`` (n_t,), ``x`` (points, dim) and ``u``: the solution at every time at the
    points of ``equation.evaluation(m)``, shaped (n_t, m, …, m) on a grid
    (``u[k, i, j] = u(x_i, y_j, t_k)``, ``x_i = L₁ i/m``; a system's with its components
    after n_t) and (n_t, points) elsewhere; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    evaluation = equation.evaluation(m)
    points = np.asarray(evaluation.points)
    layout = evaluation.grid_shape or (points.shape[0],)
    if evaluation.components:  # a system's: (n_t, components, m, …, m)
        layout = (len(evaluation.components), *layout)
    u = np.empty((len(solution.times), *layout))
    for k in range(len(solution.times)):
        u[k] = solution.values(k, m).reshape(layout)
    # Through a file object, so that np.savez does not append ".npz" to other names.
    with open(path, "wb") as fh:
        np.savez(fh, t=np.asarray(solution.times, dtype=np.float64), x=points, u=u)
    return path


__all__ = [
    "ClosedForm", "ClosedFormSolution", "DecayingModes", "ETDRK4Solution", "ExactFourier", "FourierSolution",
    "Pseudospectral", "SpectralSolution", "etdrk4_coefficients", "reference_anytime", "reference_solution",
    "save_npz",
]
