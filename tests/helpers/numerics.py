"""Relative errors, convergence orders, a reference's self-convergence and round-off bounds,
as the tests measure them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from helpers.configs import make_equation
from teng_eq.analysis.compare import fit_power_law
from teng_eq.reference import reference_solution


def rel_l2(a, b) -> float:
    """‖a − b‖ / ‖b‖ over all entries (the Frobenius norm of a 2-D array)."""
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def self_convergence(name: str, t: float, n: int, dt: float, *overrides: str) -> tuple[float, float]:
    """The relative L² differences at ``t`` of the equation config ``name``'s ETDRK4 reference
    at (n modes, dt) from itself at 2n modes and at dt/2, on the 2n grid: (modes, steps)."""
    eq = make_equation(name, *overrides)
    base = reference_solution(eq, [t], n=n, dt=dt, cache_dir=False).at(0, 2 * n)
    fine_n = reference_solution(eq, [t], n=2 * n, dt=dt, cache_dir=False).at(0, 2 * n)
    fine_dt = reference_solution(eq, [t], n=n, dt=dt / 2, cache_dir=False).at(0, 2 * n)
    return rel_l2(base, fine_n), rel_l2(base, fine_dt)


def convergence_order(dt: Sequence[float], err: Sequence[float]) -> float:
    """The slope of log ``err`` against log ``dt``, by the analysis's own least-squares fit
    (:func:`teng_eq.analysis.compare.fit_power_law`) with every point in it: where the fit would
    leave a non-finite or non-positive error out, the test fails instead."""
    err = np.asarray(err, dtype=float)
    assert np.all(np.isfinite(err) & (err > 0)), err
    return fit_power_law(dt, err).slope


# --- round-off bounds ------------------------------------------------------------------
#
# A test that compares two computations equal in exact arithmetic bounds their gap by the
# round-off the computations can make, derived here from ε, the norms involved and the
# operation count (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed.):
# never by the value one machine happened to print. Each helper states its model.

#: Machine epsilon of float64, 2⁻⁵² (the unit round-off u is ε/2).
EPS = float(np.finfo(np.float64).eps)

#: Relative error of one FFT level (butterfly stage), η = μ + γ₄(√2 + μ) with μ the
#: twiddle factors' error (≤ a few u in pocketfft/numpy): η ≤ 5ε (Higham Thm 24.2).
FFT_LEVEL = 5 * EPS


def fft_levels(*sizes: int) -> float:
    """The butterfly levels of FFTs over grids of ``sizes`` points each (log₂ n per
    transform, rounded up; a length that is not a product of small primes goes through
    Bluestein's three transforms of twice its length: counted as 3·log₂(2n))."""
    levels = 0.0
    for n in sizes:
        m = n
        for p in (2, 3, 5, 7, 11):
            while m % p == 0:
                m //= p
        levels += math.ceil(math.log2(n)) if m == 1 else 3 * math.ceil(math.log2(2 * n))
    return levels


def fft_roundoff(levels: float, l2: float) -> float:
    """A bound on the pointwise gap of a field computed through FFTs of ``levels``
    butterfly levels in all (:func:`fft_levels`) to the same field in exact arithmetic:
    ‖δu‖_∞ ≤ ‖δu‖₂ ≤ levels·η·‖u‖₂ (Higham Thm 24.2, to first order), ``l2`` the
    Euclidean norm of the field's values on the grid where it is compared."""
    return levels * FFT_LEVEL * l2


def sum_roundoff(n_terms: int, abs_sum: float) -> float:
    """A bound on a floating-point sum (or dot product) of ``n_terms`` terms whose
    absolute values add up to ``abs_sum``: γ_n·Σ|xᵢ| ≤ 1.01·n·u·Σ|xᵢ| (Higham §3.1, any
    order of summation; ``n·ε``, twice that, to cover each term's own rounding)."""
    return n_terms * EPS * abs_sum


def pointwise_roundoff(ops: int, scale: float) -> float:
    """A bound on a closed-form expression evaluated in ``ops`` operations on values of
    size ``scale``: ops·ε·scale (each operation, libm's sin/cos/exp included, rounds
    within 1 ulp ≤ ε relative: γ_ops with u doubled)."""
    return ops * EPS * scale
