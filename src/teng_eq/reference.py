"""Reference solutions on the periodic box ``[0, L₁) × [0, L₂)`` (paper, App. "Details on
Obtaining Reference Solutions"), in float64 NumPy.

Every solution is a truncated Fourier series

    u(x, t) = (1/N²) Σ_k û_k(t) e^{i k·x},   k = (2π m₁/L₁, 2π m₂/L₂),  m ∈ ℤ², |mᵢ| ≤ N/2,

stored as the ``rfft2`` half spectrum ``û`` of the N×N grid values (so ``irfft2(û)`` *is*
the grid), and evaluated on any other grid by exact trigonometric interpolation.

* Heat, ``∂ₜu = ν Δu``: exact, ``û_k(t) = e^{−ν|k|² t} û_k(0)``, with ``û(0)`` the DFT of
  the initial condition. The paper's u₀ = 4 cosh(3 sin x₁) sinh(sin x₂)/100 is entire;
  its coefficients are products of modified Bessel functions, I_{m₁}(3) I_{m₂}(1), and
  fall below 10⁻¹⁶ of the largest one for |m₁| ≥ 21 (I₂₁(3)/I₀(3) = 2·10⁻¹⁷) or |m₂| ≥ 15,
  so a 64² grid already gives them to round-off (the DFT's aliasing error is at most
  I₃₂(3)/I₀(3) = 4·10⁻³¹); the paper's 2048² grid is not needed.
* Allen–Cahn, Burgers (and heat, as a check): ``∂ₜû = L̂ û + N̂(û)`` with the diagonal
  linear part ``L̂ = −ν|k|²`` integrated exactly and the nonlinear part
  ``N = equation.nonlinear(u, ∇u)`` evaluated pointwise in physical space on a padded
  grid (``∇u`` by spectral differentiation), by ETDRK4 (Cox & Matthews 2002, with the
  φ-function coefficients of Kassam & Trefethen 2005 computed as means over a circle
  in the complex plane, which avoids the cancellation in their closed forms near 0).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.fft as sfft

from teng_eq.cache import cache_dir as cache_dir_of
from teng_eq.cache import digest, load_arrays, store_arrays
from teng_eq.equations import INITIAL_CONDITIONS, Equation
from teng_eq.grid import grid_axes

#: Bumped whenever the numerics change, so stale cache files are never read.
CACHE_VERSION = "reference-v1"

#: Polynomial degree of ``N(u, ∇u)`` in (u, ∇u): it sets the padding that removes
#: aliasing from the products (a degree-p product of N-mode fields has (p·N)/2 modes).
_NONLINEAR_DEGREE = {"heat": 1, "allen_cahn": 3, "burgers": 2}

#: Default (modes per axis, largest time step) by equation and horizon: rows
#: (t_max, n, dt), the first row with max(times) ≤ t_max applies. Fronts sharpen in time,
#: so T ≤ 1 needs fewer modes than T = 4; beyond 4 the T = 4 row is used, unmeasured.
#: Measurements behind them: :func:`reference_solution`.
DEFAULTS: dict[str, tuple[tuple[float, int, float | None], ...]] = {
    "heat": ((math.inf, 64, None),),
    "allen_cahn": ((1.0, 128, 5e-3), (math.inf, 256, 5e-3)),
    "burgers": ((1.0, 192, 2e-3), (math.inf, 384, 2e-3)),
}
#: For an equation without a row: the most demanding one above.
_FALLBACK = (384, 2e-3)

_WORKERS = min(os.cpu_count() or 1, 8)


# ---------------------------------------------------------------------------------------
# The solution object
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _fold_matrix(n: int, m: int) -> np.ndarray:
    """(m, n) map from an n-point DFT axis to an m-point one that samples the same
    trigonometric interpolant at the m-point grid.

    Mode j of the n-point DFT is the wavenumber j (j < n/2) or j − n (j > n/2); for even
    n the Nyquist mode is the real interpolant's ``cos(n x/2)``, i.e. half at +n/2 and
    half at −n/2. On the m-point grid wavenumber q is indistinguishable from q mod m, so
    each one is added there: zero padding for m ≥ n, exact aliasing (not truncation,
    which would change the values) for m < n.
    """
    p = np.zeros((m, n))
    for j in range(n):
        q = j if 2 * j < n else j - n
        if 2 * j == n:
            p[(n // 2) % m, j] += 0.5
            p[(-n // 2) % m, j] += 0.5
        else:
            p[q % m, j] += 1.0
    return p


@dataclass(frozen=True)
class SpectralSolution:
    """``u(·, t_k)`` as rfft2 spectra: ``irfft2(coef[k])`` is u on the N×N grid
    ``x_i = L i / N``.

    Attributes: ``times`` (n_t,), ``coef`` (n_t, N, N//2+1) complex128, ``lengths`` (L₁, L₂).
    """

    times: np.ndarray
    coef: np.ndarray
    lengths: tuple[float, float]

    @property
    def n(self) -> int:
        return self.coef.shape[-2]

    def at(self, k: int, m: int) -> np.ndarray:
        """u(x_i, y_j, t_k) on the m×m grid x_i = L₁ i/m, y_j = L₂ j/m, shape (m, m).

        Exact values of the N-mode trigonometric interpolant, for any m (see
        :func:`_fold_matrix`); m == N returns ``irfft2(coef[k])`` itself.
        """
        n = self.n
        if m == n:
            return sfft.irfft2(self.coef[k], s=(n, n), workers=_WORKERS)
        # Through the full spectrum: irfft2 first fixes the meaning of the
        # self-conjugate entries (imaginary parts dropped), exactly as at m == N.
        full = sfft.fft2(sfft.irfft2(self.coef[k], s=(n, n), workers=_WORKERS), workers=_WORKERS)
        p = _fold_matrix(n, m)
        folded = p @ full @ p.T
        # The DFT's 1/size normalisation changes from 1/N² to 1/m².
        return sfft.ifft2(folded, workers=_WORKERS).real * (m / n) ** 2

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of ``Equation.evaluation(m)`` (the m×m grid in
        'ij' order), flattened."""
        return self.at(k, m).ravel()

    def on_grid(self, m: int) -> np.ndarray:
        """u at every stored time on the m×m grid, shape (n_t, m, m); see :meth:`at`."""
        out = np.empty((len(self.times), m, m))
        for k in range(len(self.times)):
            out[k] = self.at(k, m)
        return out


# ---------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------


def _wavenumbers(n: int, lengths) -> tuple[np.ndarray, np.ndarray]:
    """k₁ (n, 1) and k₂ (1, n//2+1) of the rfft2 layout, ``k = 2π m / L``."""
    m1 = sfft.fftfreq(n, 1.0 / n)
    m2 = sfft.rfftfreq(n, 1.0 / n)
    k1 = (2.0 * math.pi / float(lengths[0])) * m1[:, None]
    k2 = (2.0 * math.pi / float(lengths[1])) * m2[None, :]
    return k1, k2


def _initial_spectrum(equation: Equation, n: int, initial_condition: str) -> np.ndarray:
    """rfft2 of u₀ = ``INITIAL_CONDITIONS[initial_condition]`` sampled on the n×n grid."""
    if equation.dim != 2:
        raise ValueError(f"reference solutions are 2-D only, got lengths={equation.lengths}")
    try:
        u0_fn = INITIAL_CONDITIONS[initial_condition]
    except KeyError:
        raise ValueError(
            f"unknown initial condition {initial_condition!r}; known: {sorted(INITIAL_CONDITIONS)}"
        ) from None
    x1, x2 = np.meshgrid(*grid_axes(n, equation.lengths), indexing="ij")
    u0 = np.asarray(u0_fn(np.stack([x1, x2])), dtype=np.float64)
    return sfft.rfft2(u0, workers=_WORKERS)


def default_resolution(name: str, t_max: float) -> tuple[int, float | None]:
    """(n, dt) of :data:`DEFAULTS` for equation ``name`` up to time ``t_max``."""
    for bound, n, dt in DEFAULTS.get(name, ((math.inf, *_FALLBACK),)):
        if t_max <= bound:
            return n, dt
    raise AssertionError("unreachable: the last row of DEFAULTS is unbounded")


def _check_times(times) -> np.ndarray:
    times = np.atleast_1d(np.asarray(times, dtype=np.float64))
    if times.ndim != 1 or times.size == 0:
        raise ValueError("times must be a non-empty 1-D sequence")
    if times[0] < 0 or np.any(np.diff(times) < 0):
        raise ValueError(f"times must be ≥ 0 and non-decreasing, got {times}")
    return times


# ---------------------------------------------------------------------------------------
# Heat: exact
# ---------------------------------------------------------------------------------------


def heat_exact(
    equation: Equation, times, n_modes: int = 64, initial_condition: str = "paper2d"
) -> SpectralSolution:
    """Exact heat solution ``û_k(t) = e^{−ν|k|²t} û_k(0)`` with û(0) the DFT of u₀ on the
    ``n_modes²`` grid (its Nyquist modes, ≤ 4·10⁻³¹ relative at 64, dropped as in
    :func:`spectral_solve`).

    The default 64 already resolves u₀ to round-off (module docstring); larger values
    only add zeros.
    """
    times = _check_times(times)
    if n_modes % 2:
        raise ValueError(f"n_modes must be even, got {n_modes}")
    u0_hat = _initial_spectrum(equation, n_modes, initial_condition)
    u0_hat[n_modes // 2, :] = 0.0
    u0_hat[:, n_modes // 2] = 0.0
    k1, k2 = _wavenumbers(n_modes, equation.lengths)
    lam = -equation.nu * (k1**2 + k2**2)
    coef = np.exp(lam[None] * times[:, None, None]) * u0_hat[None]
    return SpectralSolution(times=times, coef=coef, lengths=tuple(equation.lengths))


# ---------------------------------------------------------------------------------------
# ETDRK4 pseudo-spectral solver
# ---------------------------------------------------------------------------------------


def etdrk4_coefficients(z: np.ndarray, n_contour: int = 64) -> tuple[np.ndarray, ...]:
    """ETDRK4 weights for ``z = h L̂`` (elementwise), without the factor h:

        e^{z/2},  e^z,
        Q  = (e^{z/2} − 1)/z,
        f₁ = (−4 − z + e^z (4 − 3z + z²))/z³,
        f₂ = (2 + z + e^z (z − 2))/z³,
        f₃ = (−4 − 3z − z² + e^z (4 − z))/z³.

    The closed forms lose all digits as z → 0 (f₁ → 1/6 from O(1) terms cancelling), so
    each function, analytic in z, is replaced by its mean over a circle around z
    (Cauchy's integral formula); the trapezoid rule on a circle converges geometrically
    for analytic functions. Kassam & Trefethen's unit circle passes within π/n_contour
    of 0 when |z| ≈ 1, and the cancellation there costs ~10⁻¹² (measured against 50-digit
    mpmath); a radius of 1 + |z| for |z| < 2 (else 1) keeps every point at distance ≥ 1
    from 0, and all four weights come out within 3·10⁻¹⁴ relative for z ∈ [−10³, −10⁻¹⁰].
    For real z (our diagonal L̂ ≤ 0) the mean is real.
    """
    z = np.asarray(z, dtype=np.float64)
    # L̂ = −ν|k|² takes few distinct values (|m|² is an integer): evaluate each once.
    z_unique, inverse = np.unique(z, return_inverse=True)
    weights = _etdrk4_unique(z_unique, n_contour)
    return tuple(w[inverse].reshape(z.shape) for w in weights)


def _etdrk4_unique(z: np.ndarray, n_contour: int) -> tuple[np.ndarray, ...]:
    radius = np.where(np.abs(z) < 2.0, 1.0 + np.abs(z), 1.0)
    r = np.exp(2j * math.pi * (np.arange(n_contour) + 0.5) / n_contour)
    w = z[..., None] + radius[..., None] * r
    ew = np.exp(w)
    w3 = w**3
    q = np.mean((np.exp(w / 2) - 1.0) / w, axis=-1).real
    f1 = np.mean((-4.0 - w + ew * (4.0 - 3.0 * w + w * w)) / w3, axis=-1).real
    f2 = np.mean((2.0 + w + ew * (w - 2.0)) / w3, axis=-1).real
    f3 = np.mean((-4.0 - 3.0 * w - w * w + ew * (4.0 - w)) / w3, axis=-1).real
    return np.exp(z / 2), np.exp(z), q, f1, f2, f3


def _uses_gradient(equation: Equation) -> bool:
    """Whether ``N(u, ∇u)`` depends on ∇u, probed at random points (N is pointwise).

    Allen–Cahn and heat do not; skipping their two derivative transforms halves the cost.
    """
    rng = np.random.default_rng(0)
    u = rng.standard_normal(8)
    g1, g2 = rng.standard_normal((2, equation.dim, 8))
    n1 = np.asarray(equation.nonlinear(u, g1), dtype=np.float64)
    n2 = np.asarray(equation.nonlinear(u, g2), dtype=np.float64)
    return not np.array_equal(n1, n2)


class _Pseudospectral:
    """``N̂(û)``: u and its spectral gradient on a padded K×K grid, ``equation.nonlinear``
    there, back to the N-mode spectrum.

    The state keeps the modes |mᵢ| < N/2 (Nyquist dropped: its derivative is not real).
    A degree-p polynomial in fields with |m| < N/2 has |m| < pN/2; evaluating it on
    K ≥ (p+1)N/2 points aliases only onto modes ≥ N/2, which are then discarded, so the
    kept modes are exact (the 3/2 rule for Burgers, 2 for the cubic Allen–Cahn term).
    """

    def __init__(self, equation: Equation, n: int):
        self.equation = equation
        self.n = n
        self.uses_gradient = _uses_gradient(equation)
        degree = _NONLINEAR_DEGREE.get(equation.name, 3)
        k = math.ceil((degree + 1) * n / 2)
        self.k_pad = k + (k % 2)
        k1, k2 = _wavenumbers(n, equation.lengths)
        self.keep = (np.abs(sfft.fftfreq(n, 1.0 / n))[:, None] < n / 2) & (
            sfft.rfftfreq(n, 1.0 / n)[None, :] < n / 2
        )
        self.ik1 = 1j * k1 * self.keep
        self.ik2 = 1j * k2 * self.keep
        self.lin = -equation.nu * (k1**2 + k2**2)
        self._buf = np.zeros((self.k_pad, self.k_pad // 2 + 1), dtype=np.complex128)

    def _to_grid(self, v: np.ndarray) -> np.ndarray:
        """The K×K grid values of the N-mode spectrum ``v``."""
        n, k, h = self.n, self.k_pad, self.n // 2
        # One persistent zero-padded buffer: only the kept blocks are ever written, so
        # the rest stays zero, and no K-sized array is allocated per call (allocation
        # churn of MB-sized arrays alone doubled the run time).
        buf, scale = self._buf, (k / n) ** 2
        np.multiply(v[:h, :h], scale, out=buf[:h, :h])
        np.multiply(v[n - h + 1 :, :h], scale, out=buf[k - h + 1 :, :h])
        return sfft.irfft2(buf, s=(k, k), workers=_WORKERS)

    def _from_grid(self, f: np.ndarray) -> np.ndarray:
        """The N-mode spectrum (|mᵢ| < N/2) of the K×K grid values ``f``."""
        n, k, h = self.n, self.k_pad, self.n // 2
        w = sfft.rfft2(f, workers=_WORKERS, overwrite_x=True)
        out = np.zeros((n, n // 2 + 1), dtype=np.complex128)
        out[:h, :h] = w[:h, :h]
        out[n - h + 1 :, :h] = w[k - h + 1 :, :h]
        return out * (n / k) ** 2

    def __call__(self, v: np.ndarray) -> np.ndarray:
        u = self._to_grid(v)
        if self.uses_gradient:
            grad_u = np.stack([self._to_grid(self.ik1 * v), self._to_grid(self.ik2 * v)])
        else:
            grad_u = np.broadcast_to(0.0, (2, *u.shape))
        nl = np.asarray(self.equation.nonlinear(u, grad_u), dtype=np.float64)
        return self._from_grid(np.broadcast_to(nl, u.shape).copy() if nl.shape != u.shape else nl)


def _step_sizes(times: np.ndarray, dt: float) -> list[tuple[float, int]]:
    """(h, steps) per interval [t_{k−1}, t_k] (t₋₁ = 0): the largest h ≤ dt that lands on
    t_k exactly, ``steps = ⌈Δ/dt⌉``, ``h = Δ/steps``."""
    out, t_prev = [], 0.0
    for t in times:
        delta = float(t) - t_prev
        # The 1e-12 keeps round-off in Δ (e.g. times from arange) from adding a step.
        steps = math.ceil(delta / dt * (1 - 1e-12)) if delta > 0 else 0
        out.append((delta / steps if steps else 0.0, steps))
        t_prev = float(t)
    return out


def spectral_solve(
    equation: Equation,
    times,
    n: int | None = None,
    dt: float | None = None,
    initial_condition: str = "paper2d",
) -> SpectralSolution:
    """ETDRK4 pseudo-spectral solution of ``∂ₜu = ν Δu + N(u, ∇u)`` from u₀ =
    ``INITIAL_CONDITIONS[initial_condition]`` (default: the paper's).

    In Fourier space ``∂ₜû = L̂û + N̂(û)``, ``L̂ = −ν|k|²``; one step of size h (Cox &
    Matthews' ETDRK4, weights from :func:`etdrk4_coefficients`)::

        a = e^{hL̂/2} û + h Q N̂(û)
        b = e^{hL̂/2} û + h Q N̂(a)
        c = e^{hL̂/2} a + h Q (2N̂(b) − N̂(û))
        û ← e^{hL̂} û + h (f₁ N̂(û) + 2 f₂ (N̂(a) + N̂(b)) + f₃ N̂(c))

    ``n`` modes per axis (even), steps of at most ``dt``, shortened so that each of
    ``times`` is reached exactly (:func:`_step_sizes`). Defaults:
    :func:`default_resolution` (for heat, whose weights make ETDRK4 exact, dt = 0.01).
    """
    times = _check_times(times)
    n_default, dt_default = default_resolution(equation.name, float(times[-1]))
    n = int(n if n is not None else n_default)
    dt = float(dt if dt is not None else (dt_default or 1e-2))
    if n % 2 or n < 4:
        raise ValueError(f"n must be even and ≥ 4, got {n}")
    if not dt > 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    nhat = _Pseudospectral(equation, n)
    v = _initial_spectrum(equation, n, initial_condition) * nhat.keep
    coef = np.empty((len(times), n, n // 2 + 1), dtype=np.complex128)
    h_now, weights = None, None
    for idx, (h, steps) in enumerate(_step_sizes(times, dt)):
        if steps:
            # Intervals that are equal but for round-off (times = arange(k)·Δ: up to
            # 3e-13 relative at k = 4000) reuse the weights, which cost ~0.1 s each; the
            # time reached is then off by that same round-off, far below the step error.
            if h_now is None or abs(h - h_now) > 1e-9 * h_now:
                e2, e, q, f1, f2, f3 = etdrk4_coefficients(h * nhat.lin)
                h_now, weights = h, (e2, e, h * q, h * f1, h * f2, h * f3)
            e2, e, hq, hf1, hf2, hf3 = weights
            for _ in range(steps):
                nv = nhat(v)
                a = e2 * v + hq * nv
                na = nhat(a)
                b = e2 * v + hq * na
                nb = nhat(b)
                c = e2 * a + hq * (2.0 * nb - nv)
                nc = nhat(c)
                v = e * v + hf1 * nv + 2.0 * hf2 * (na + nb) + hf3 * nc
        coef[idx] = v
    return SpectralSolution(times=times, coef=coef, lengths=tuple(equation.lengths))


# ---------------------------------------------------------------------------------------
# Dispatch, cache, output
# ---------------------------------------------------------------------------------------


def _cache_key(
    equation: Equation, times: np.ndarray, n: int, dt: float | None, initial_condition: str
) -> str:
    return digest(
        {
            "version": CACHE_VERSION,
            "equation": equation.name,
            "nu": repr(float(equation.nu)),
            "lengths": [repr(float(v)) for v in equation.lengths],
            "initial_condition": initial_condition,
            "n": int(n),
            "dt": None if dt is None else repr(float(dt)),
        },
        times.astype("<f8").tobytes(),
    )


def reference_solution(
    equation: Equation,
    times,
    *,
    cache_dir=None,
    n: int | None = None,
    dt: float | None = None,
    initial_condition: str = "paper2d",
) -> SpectralSolution:
    """Reference u(·, t) at ``times`` from u₀ = ``INITIAL_CONDITIONS[initial_condition]``:
    :func:`heat_exact` for heat, :func:`spectral_solve` otherwise; cached on disk.

    Cache: ``<cache_dir>/reference-<sha256>.npz``, keyed by equation, ν, lengths, initial
    condition, n, dt, the exact bytes of ``times`` and :data:`CACHE_VERSION`; written to a
    temporary file and renamed, so concurrent writers never leave a partial file.
    ``cache_dir=None`` → :func:`teng_eq.cache.cache_dir`; ``False`` → no cache.

    Defaults (:func:`default_resolution`), measured for the paper's parameters (L = 2π,
    u₀ paper2d; other initial conditions use them unmeasured), from self-convergence:
    relative L² difference at T of the (n, dt) run to the (2n, dt) run and to the
    (n, dt/2) run, on the 2n grid; wall time of the (n, dt) solve on 2 busy CPU cores
    (load ≈ 4–5, so roughly twice the time on an idle machine):

    ==========  =====  ===  ===  ====  =======  =======  =====
    equation    ν      T    n    dt    vs 2n    vs dt/2  wall
    ==========  =====  ===  ===  ====  =======  =======  =====
    allen_cahn  1/200  1    128  5e-3  3e-16    2e-12    1 s
    allen_cahn  1/200  4    256  5e-3  3e-11    3e-12    21 s
    burgers     1/100  1    192  2e-3  2e-15    2e-12    8 s
    burgers     1/100  4    384  2e-3  6e-13    3e-11    160 s
    ==========  =====  ===  ===  ====  =======  =======  =====

    Fewer modes miss by far more at T = 4 (Allen–Cahn 128 vs 256: 3·10⁻⁶; Burgers 192 vs
    256: 3·10⁻⁷, 256 vs 384: 4·10⁻⁹): the fronts steepen, so T ≤ 1 gets its own, cheaper
    row. Heat is exact (64 modes resolve u₀ to round-off, see :func:`heat_exact`);
    ETDRK4 on it agrees to 3·10⁻¹⁵ (T = 1) and 1·10⁻¹⁴ (T = 4). The paper used
    cut-offs 128 / 192 (n = 256 / 384) with RK4 at dt = 2·10⁻⁴ / 10⁻⁴.
    """
    times = _check_times(times)
    is_heat = equation.name == "heat"
    n_default, dt_default = default_resolution(equation.name, float(times[-1]))
    n = int(n if n is not None else n_default)
    # Resolved before hashing, so that explicit defaults and None share one cache file.
    dt = None if is_heat else float(dt if dt is not None else dt_default)

    def compute() -> SpectralSolution:
        if is_heat:
            return heat_exact(equation, times, n_modes=n, initial_condition=initial_condition)
        return spectral_solve(equation, times, n=n, dt=dt, initial_condition=initial_condition)

    if cache_dir is False:
        return compute()
    key = _cache_key(equation, times, n, dt, initial_condition)
    path = cache_dir_of(cache_dir) / f"reference-{key}.npz"
    cached = load_arrays(path, {"reference": key})  # self-checking: None when missing, damaged or stale
    if cached is not None:
        return SpectralSolution(
            times=cached["times"], coef=cached["coef"], lengths=tuple(cached["lengths"].tolist())
        )
    solution = compute()
    store_arrays(
        path,
        {"times": solution.times, "coef": solution.coef,
         "lengths": np.asarray(solution.lengths, dtype=np.float64)},
        {"reference": key},
    )
    return solution


def save_npz(path, solution: SpectralSolution, m: int) -> Path:
    """Write ``t`` (n_t,) and ``u`` (n_t, m, m), ``u[k, i, j] = u(x_i, y_j, t_k)`` with
    ``x_i = L₁ i/m``, ``y_j = L₂ j/m``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Through a file object, so that np.savez does not append ".npz" to other names.
    with open(path, "wb") as fh:
        np.savez(fh, t=np.asarray(solution.times, dtype=np.float64), u=solution.on_grid(m))
    return path
