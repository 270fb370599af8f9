"""Relative errors and convergence orders, as the tests measure them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from teng_eq.analysis import fit_power_law


def rel_l2(a, b) -> float:
    """‖a − b‖ / ‖b‖ over all entries (the Frobenius norm of a 2-D array)."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def convergence_order(dt: Sequence[float], err: Sequence[float]) -> float:
    """The slope of log ``err`` against log ``dt``, by the analysis's own least-squares fit
    (:func:`teng_eq.analysis.fit_power_law`) with every point in it: where the fit would
    leave a non-finite or non-positive error out, the test fails instead."""
    err = np.asarray(err, dtype=float)
    assert np.all(np.isfinite(err) & (err > 0)), err
    return fit_power_law(dt, err).slope
