"""Error metrics against a reference (paper eqs. ``rel_err`` and ``g_rel_err``).

The L² norms are quadrature sums; on a uniform periodic grid every weight is
the same and cancels in the ratios below.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import trapezoid


def squared_norms(pred, ref, weights=1.0) -> tuple[float, float]:
    """``(Σ w (û − u)², Σ w u²)`` over quadrature points: the pieces of both metrics,
    ``ε(t) = ‖û − u‖_{L²(X)} / ‖u‖_{L²(X)}`` their ratio's square root (a uniform
    ``weights`` cancels in it). On the host, in NumPy: the error evaluation is not
    part of the compiled step."""
    pred, ref = np.asarray(pred, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    w = np.broadcast_to(np.asarray(weights, np.float64), ref.shape)
    diff = pred - ref
    return float(np.sum(w * diff * diff)), float(np.sum(w * ref * ref))


def global_relative_l2(err_sq, ref_sq, times) -> float:
    """``ε_g = ‖û − u‖_{L²(X×T)} / ‖u‖_{L²(X×T)}`` from per-time squared norms.

    The time integral is the trapezoid rule over the (possibly non-uniform)
    ``times``; with a single time it reduces to the relative L² error there.
    """
    err_sq, ref_sq, times = (np.asarray(v, np.float64) for v in (err_sq, ref_sq, times))
    if times.size == 1:
        return float(np.sqrt(err_sq[0] / ref_sq[0]))
    return float(np.sqrt(trapezoid(err_sq, times) / trapezoid(ref_sq, times)))


def frobenius_relative_l2(err_sq, ref_sq) -> float:
    """``‖Û − U‖_F / ‖U‖_F`` over every output time (t = 0 included) from the per-time
    squared norms: the sequential-in-time literature's error (RSNG, Berman & Peherstorfer
    2023), each time weighted alike where ``global_relative_l2`` integrates in time; on
    equispaced points and steps the two differ only by the end points' half weights."""
    return float(np.sqrt(np.sum(np.asarray(err_sq, np.float64)) / np.sum(np.asarray(ref_sq, np.float64))))


def monte_carlo_se(pred, ref) -> float:
    """The standard error of ε = ‖û − u‖/‖u‖ estimated from n i.i.d. uniform points: with
    aᵢ = (ûᵢ − uᵢ)², bᵢ = uᵢ² and R = ā/b̄ = ε², the delta method gives
    Var R ≈ (Var a − 2R Cov(a, b) + R² Var b)/(n b̄²), and SE(ε) = SE(R)/(2ε)."""
    pred, ref = np.asarray(pred, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    a, b = (pred - ref) ** 2, ref**2
    n, r = a.size, a.mean() / b.mean()
    if r == 0:
        return 0.0
    cov = np.cov(a, b)
    var_r = (cov[0, 0] - 2 * r * cov[0, 1] + r * r * cov[1, 1]) / (n * b.mean() ** 2)
    return float(np.sqrt(max(var_r, 0.0)) / (2 * np.sqrt(r)))
