"""Error metrics against a reference (paper eqs. ``rel_err`` and ``g_rel_err``).

On a uniform periodic grid every quadrature weight is the same, so it cancels in
the ratios below.
"""

from __future__ import annotations

import numpy as np


def squared_norms(pred, ref) -> tuple[float, float]:
    """``(Σ (û − u)², Σ u²)`` over a grid: the pieces of both metrics."""
    pred, ref = np.asarray(pred, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    diff = pred - ref
    return float(diff @ diff), float(ref @ ref)


def relative_l2(pred, ref) -> float:
    """``ε(t) = ‖û(·, t) − u(·, t)‖_{L²(X)} / ‖u(·, t)‖_{L²(X)}``."""
    err, norm = squared_norms(pred, ref)
    return float(np.sqrt(err / norm))


def global_relative_l2(err_sq, ref_sq, times) -> float:
    """``ε_g = ‖û − u‖_{L²(X×T)} / ‖u‖_{L²(X×T)}`` from per-time squared norms.

    The time integral is the trapezoid rule over the (possibly non-uniform)
    ``times``; with a single time it reduces to the relative L² error there.
    """
    err_sq, ref_sq, times = (np.asarray(v, np.float64) for v in (err_sq, ref_sq, times))
    if times.size == 1:
        return float(np.sqrt(err_sq[0] / ref_sq[0]))
    return float(np.sqrt(np.trapezoid(err_sq, times) / np.trapezoid(ref_sq, times)))
