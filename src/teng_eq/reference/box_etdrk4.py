"""Spectral ETDRK4 reference for ``∂ₜu = ν Δu + N(u)`` on a box whose bounded sides hold
zero Dirichlet or zero Neumann data (periodic axes by FFT), in float64 NumPy.

Along each axis, with s = (x − a)/L ∈ [0, 1], u is a series of the axis' eigenfunctions of −∂²
under its two ends' conditions (those of :mod:`teng_eq.reference.series`), sampled on the
K-point midpoint grid ``s_j = (j + ½)/K`` by the real transform that diagonalises it
(``scipy.fft``, unnormalised):

============================  ========================  =========  ==========================
ends (at s = 0, at s = 1)     modes                     frequency  transform (grid → series)
============================  ========================  =========  ==========================
Neumann, Neumann              ``cos(fπs)``              k          DCT-II (inverse: DCT-III)
Dirichlet, Dirichlet          ``sin(fπs)``              k + 1      DST-II (inverse: DST-III)
Dirichlet, Neumann            ``sin(fπs)``              k + ½      DST-IV (its own inverse)
Neumann, Dirichlet            ``cos(fπs)``              k + ½      DCT-IV (its own inverse)
periodic                      ``e^{2πi m s}``, |m|<n/2  2m         FFT
============================  ========================  =========  ==========================

(k = 0, …, n − 1; eigenvalue ``(fπ/L)²``). In that basis ``∂ₜû = L̂ û + N̂(û)`` with the
diagonal ``L̂ = equation.linear_symbol(λ)`` (−νλ) integrated exactly, and ``N(u)`` evaluated
pointwise on the grid, by the ETDRK4 steps, checkpoints and φ-function contour means of
:mod:`teng_eq.reference.etdrk4` (Cox & Matthews 2002; Kassam & Trefethen 2005).

**Aliasing.** A mode of frequency f ≥ K on the K-point midpoint grid equals ± the mode of
frequency 2K − f there (cos((2K − f)π(j + ½)/K) = −cos(fπ(j + ½)/K), likewise the sines), so
the degree-p product of n-mode fields (frequencies < pn) aliases only onto frequencies
≥ 2K − pn: ``K ≥ (p + 1)n/2`` keeps the n modes exact, the rule of the periodic solver.

**Which N.** The series of N(u) converges spectrally only if N maps the series' symmetric
extension to one of the same symmetry: along an axis with a Dirichlet end u extends oddly
across it, so N must be odd (N(−u) = −N(u), as u − u³ is; N(0) = 0 is needed anyway for the
side's u = 0 to last); a Neumann end's even extension takes any N. The solver checks this
at random values and refuses an N that depends on ∇u (Allen–Cahn's does not).

**At arbitrary points.** The field at the evaluation, held-out or metric points (Gauss–Legendre,
not the transform grid) is the series itself, ``Σ_k û_k Π_d φ_{k_d}(x_d)``: spectrally exact, no
interpolation (:meth:`BoxETDRK4Solution.at`).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import scipy.fft as sfft

from teng_eq.cache.files import array_digest, content_description, digest, load_arrays, store_or_warn
from teng_eq.cache.files import cache_dir as cache_dir_of
from teng_eq.reference.etdrk4 import (
    ETDRK4Solution,
    Pseudospectral,
    _check_times,
    _uses_gradient,
    etdrk4_coefficients,
)

#: Bumped whenever the numerics, the key or the file layout change (stale files are never read).
CACHE_VERSION = "box-reference-v1"

#: (transform type, sine?, frequency offset) of a bounded axis by its ends' kinds (module docstring).
AXIS_KINDS = {
    ("neumann", "neumann"): (2, False, 0.0),
    ("dirichlet", "dirichlet"): (2, True, 1.0),
    ("dirichlet", "neumann"): (4, True, 0.5),
    ("neumann", "dirichlet"): (4, False, 0.5),
}


@dataclasses.dataclass(frozen=True)
class Axis:
    """One axis of the box: ``ends`` the kinds at s = 0 and s = 1 (None: periodic), its lower
    end ``lower`` and length ``length``."""

    ends: tuple[str, str] | None
    lower: float
    length: float

    @property
    def periodic(self) -> bool:
        return self.ends is None

    def frequencies(self, n: int) -> np.ndarray:
        """f of each of the n modes (FFT order on a periodic axis, whose Nyquist mode is 0)."""
        if self.periodic:
            m = sfft.fftfreq(n, 1.0 / n)
            return 2.0 * np.where(np.abs(m) < n / 2, m, 0.0)
        return np.arange(n) + AXIS_KINDS[self.ends][2]

    def eigenvalues(self, n: int) -> np.ndarray:
        """λ = (fπ/L)² of each mode."""
        return (math.pi * self.frequencies(n) / self.length) ** 2

    def modes_at(self, x: np.ndarray, n: int) -> np.ndarray:
        """The n modes at the coordinates ``x``, shape (len(x), n): ``û_k`` times this, summed,
        is u (complex exponentials on a periodic axis)."""
        s = (np.asarray(x, np.float64) - self.lower) / self.length
        f = self.frequencies(n)
        if self.periodic:
            return np.exp(1j * math.pi * np.outer(s, f)) * (f != 0.0) + (np.arange(n) == 0)
        sine = AXIS_KINDS[self.ends][1]
        return np.sin(math.pi * np.outer(s, f)) if sine else np.cos(math.pi * np.outer(s, f))

    def grid(self, k: int) -> np.ndarray:
        """The K-point midpoint grid x_j = a + L (j + ½)/K (a periodic axis: x_j = a + L j/K)."""
        return self.lower + self.length * (np.arange(k) + (0.0 if self.periodic else 0.5)) / k

    def to_grid(self, coef: np.ndarray, axis: int, k: int) -> np.ndarray:
        """The values on the K-point grid of the n-mode series ``coef`` along ``axis``."""
        n = coef.shape[axis]
        if self.periodic:
            full = np.zeros((*coef.shape[:axis], k, *coef.shape[axis + 1:]), coef.dtype)
            h = n // 2
            lead = (slice(None),) * axis
            full[lead + (slice(0, h),)] = coef[lead + (slice(0, h),)]
            full[lead + (slice(k - h + 1, k),)] = coef[lead + (slice(n - h + 1, n),)]
            return sfft.ifft(full, axis=axis) * k
        kind, sine, _ = AXIS_KINDS[self.ends]
        pad = [(0, 0)] * coef.ndim
        pad[axis] = (0, k - n)
        # scipy's inverse types (III for II, IV for IV) with the factors that make the series' own sum.
        scale = np.full(k, 0.5)
        if kind == 2 and not sine:
            scale[0] = 1.0
        padded = np.pad(coef, pad) * _along(scale, axis, coef.ndim)
        return (sfft.dst if sine else sfft.dct)(padded, type=3 if kind == 2 else 4, axis=axis)

    def from_grid(self, values: np.ndarray, axis: int, n: int) -> np.ndarray:
        """The n-mode series (along ``axis``) of the values on the K-point grid (K > n)."""
        k = values.shape[axis]
        if self.periodic:
            full = sfft.fft(values, axis=axis) / k
            out = np.zeros((*values.shape[:axis], n, *values.shape[axis + 1:]), np.complex128)
            h, lead = n // 2, (slice(None),) * axis
            out[lead + (slice(0, h),)] = full[lead + (slice(0, h),)]
            out[lead + (slice(n - h + 1, n),)] = full[lead + (slice(k - h + 1, k),)]
            return out
        kind, sine, _ = AXIS_KINDS[self.ends]
        coef = (sfft.dst if sine else sfft.dct)(values, type=kind, axis=axis) / k
        coef = coef[(slice(None),) * axis + (slice(0, n),)]
        if kind == 2 and not sine:  # the constant mode's DCT-II weight is 2K, not K
            coef[(slice(None),) * axis + (0,)] *= 0.5
        return coef


def _along(v: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``v`` shaped to broadcast along ``axis`` of an ``ndim``-array."""
    return v.reshape([-1 if a == axis else 1 for a in range(ndim)])


def box_axes(equation) -> list[Axis]:
    """The :class:`Axis` of each dimension of the equation's box, its sides' kinds checked:
    every bounded side zero Dirichlet or zero Neumann data (one line otherwise)."""
    domain = equation.domain
    axes = []
    for d in range(domain.dim):
        if domain.periodic(d):
            axes.append(Axis(None, float(domain.origin[d]), float(domain.lengths[d])))
            continue
        lo, hi = domain.parts[2 * d], domain.parts[2 * d + 1]
        for part in (lo, hi):
            if part.kind not in ("dirichlet", "neumann") or callable(part.value) or part.value != 0.0:
                raise ValueError(f"the box ETDRK4 reference takes zero Dirichlet or Neumann sides, not side "
                                 f"{part.tag}: {part.kind} = {getattr(part.value, '__name__', part.value)}")
        axes.append(Axis((lo.kind, hi.kind), float(domain.origin[d]), float(domain.lengths[d])))
    return axes


def _check_nonlinearity(equation, axes: list[Axis]) -> None:
    """N(u) alone (not ∇u), and odd where an axis has a Dirichlet end (module docstring)."""
    if equation.components:
        raise ValueError("the box ETDRK4 reference takes one scalar field, not a system")
    if _uses_gradient(equation):
        raise ValueError(f"{type(equation).__qualname__}.nonlinear depends on ∇u: the box ETDRK4 "
                         "reference takes N(u) alone")
    if any(a.ends is not None and "dirichlet" in a.ends for a in axes):
        u = np.random.default_rng(1).standard_normal(16)
        grad = np.zeros((equation.dim, 16))
        plus = np.asarray(equation.nonlinear(u, grad), np.float64)
        minus = np.asarray(equation.nonlinear(-u, grad), np.float64)
        if not np.allclose(minus, -plus, rtol=1e-13, atol=1e-13 * (1 + np.max(np.abs(plus)))):
            raise ValueError(f"{type(equation).__qualname__}.nonlinear is not odd (N(−u) ≠ −N(u)): a "
                             "Dirichlet side's sine series of N(u) would not converge spectrally")


class _BoxOperator:
    """``N̂(û)``: the series to the padded K₁×…×K_d grid, ``equation.nonlinear`` there, back to the
    n₁×…×n_d modes; with the diagonal linear part's ETDRK4 weights (the periodic solver's
    interface: ``weights``, ``apply``, ``keep``, call)."""

    def __init__(self, equation, axes: list[Axis], shape: tuple[int, ...], degree: int):
        self.equation, self.axes, self.shape = equation, axes, tuple(shape)
        _check_nonlinearity(equation, axes)
        self.pad = tuple(pad_size(n, degree, a.periodic) for n, a in zip(shape, axes))
        self.keep = np.ones([1] * len(shape))
        for d, (a, n) in enumerate(zip(axes, shape)):
            if a.periodic:  # the Nyquist mode is dropped, as in the periodic solver
                m = np.abs(sfft.fftfreq(n, 1.0 / n))
                self.keep = self.keep * _along((m < n / 2).astype(float), d, len(shape))
        lam = sum(_along(a.eigenvalues(n), d, len(shape)) for d, (a, n) in enumerate(zip(axes, shape)))
        self.lin = np.asarray(equation.linear_symbol(lam), np.float64)
        self.complex = any(a.periodic for a in axes)
        self.zero_grad = np.zeros((len(shape), *self.pad))

    def weights(self, h: float) -> tuple[np.ndarray, ...]:
        """``(e^{hL̂/2}, e^{hL̂}, hQ, hf₁, hf₂, hf₃)``
        (:func:`~teng_eq.reference.etdrk4.etdrk4_coefficients`)."""
        e2, e, q, f1, f2, f3 = etdrk4_coefficients(h * self.lin)
        return e2, e, h * q, h * f1, h * f2, h * f3

    @staticmethod
    def apply(w: np.ndarray, v: np.ndarray) -> np.ndarray:
        return w * v

    def to_grid(self, v: np.ndarray) -> np.ndarray:
        """The series ``v`` on the padded grid."""
        for d, a in enumerate(self.axes):
            v = a.to_grid(v, d, self.pad[d])
        return v.real if self.complex else v

    def from_grid(self, f: np.ndarray) -> np.ndarray:
        """The n-mode series of grid values ``f``."""
        for d, a in enumerate(self.axes):
            f = a.from_grid(f, d, self.shape[d])
        return f * self.keep

    def __call__(self, v: np.ndarray) -> np.ndarray:
        u = self.to_grid(v)
        nl = np.asarray(self.equation.nonlinear(u, self.zero_grad), np.float64)
        return self.from_grid(np.broadcast_to(nl, u.shape))

    def initial(self) -> np.ndarray:
        """The series of u₀: its values on the padded grid (at least 2n points per axis) transformed."""
        pad = tuple(max(p, 2 * n) for p, n in zip(self.pad, self.shape))
        mesh = np.stack(np.meshgrid(*[a.grid(k) for a, k in zip(self.axes, pad)], indexing="ij"))
        return self.from_grid(np.broadcast_to(np.asarray(self.equation.u0(mesh), np.float64), pad))


def pad_size(n: int, degree: int, periodic: bool) -> int:
    """K ≥ (degree + 1)n/2 points (module docstring), and > n; even on a periodic axis."""
    k = max(math.ceil((degree + 1) * n / 2), n + 1)
    return k + (k % 2) if periodic else k


class BoxETDRK4Solution(ETDRK4Solution):
    """The box ETDRK4 solution at ``times``: the series (n₁, …, n_d modes) of every ``stride``-th
    time kept, any other re-integrated by the first pass' steps (as
    :class:`~teng_eq.reference.etdrk4.ETDRK4Solution`, whose stepping it shares); its values
    anywhere in the box by summing the series (:meth:`at`)."""

    def __init__(self, equation, times: np.ndarray, shape: tuple[int, ...], dt: float, degree: int,
                 stride: int, checkpoints: np.ndarray, cursor: tuple[int, np.ndarray] | None = None):
        super().__init__(equation, times, shape, dt, degree, stride, checkpoints, cursor)
        self.axes = box_axes(equation)
        self._box_op: _BoxOperator | None = None
        self._tables: dict[int, list[np.ndarray]] = {}

    @property
    def operator(self) -> _BoxOperator:
        if self._box_op is None:
            self._box_op = _BoxOperator(self.equation, self.axes, self.shape, self.degree)
        return self._box_op

    def at(self, points: np.ndarray, t: float) -> np.ndarray:
        """u(·, t) at ``points`` (P, dim), any t in [0, times[-1]]: Σ_k û_k(t) Π_d φ_{k_d}(x_d)."""
        points = np.asarray(points, np.float64)
        return self._sum([a.modes_at(points[:, d], n) for d, (a, n) in enumerate(zip(self.axes, self.shape))],
                         self.spectrum_at(t))

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of ``equation.evaluation(m)``."""
        return self._sum(self._table(m), self.spectrum(k))

    def values_at(self, t: float, m: int) -> np.ndarray:
        """u(·, t) at the points of ``equation.evaluation(m)``, any t in [0, times[-1]]."""
        return self._sum(self._table(m), self.spectrum_at(t))

    def _table(self, m: int) -> list[np.ndarray]:
        """Each axis' modes at the coordinate on it of ``evaluation(m)``'s points, (P, n_d) each."""
        if m not in self._tables:
            points = np.asarray(self.equation.evaluation(m).points, np.float64)
            self._tables[m] = [a.modes_at(points[:, d], n)
                               for d, (a, n) in enumerate(zip(self.axes, self.shape))]
        return self._tables[m]

    def _sum(self, tables: list[np.ndarray], coef: np.ndarray) -> np.ndarray:
        out = np.einsum("pi,i...->p...", tables[0], coef)  # the first axis' modes summed, per point
        for table in tables[1:]:
            out = np.einsum("pi,pi...->p...", table, out)
        return out.real if np.iscomplexobj(out) else out


def solve(equation, times, shape: tuple[int, ...], dt: float, degree: int, memory: int) -> BoxETDRK4Solution:
    """Integrate from u₀'s series through every one of ``times``, keeping checkpoints that fit in
    ``memory`` bytes (every series when they all do)."""
    times = _check_times(times)
    axes = box_axes(equation)
    if any(n < 2 or (a.periodic and n % 2) for n, a in zip(shape, axes)):
        raise ValueError(f"modes must be ≥ 2 per axis (even on a periodic one), got {shape}")
    if not dt > 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    dtype = np.complex128 if any(a.periodic for a in axes) else np.float64
    stride = max(1, math.ceil(len(times) * np.dtype(dtype).itemsize * math.prod(shape) / memory))
    checkpoints = np.empty((-(-len(times) // stride), *shape), dtype=dtype)
    solution = BoxETDRK4Solution(equation, times, shape, dt, degree, stride, checkpoints)
    v = solution.operator.initial()
    for j in range(len(times)):
        v = solution._advance(v, j)
        if j % stride == 0:
            checkpoints[j // stride] = v
    solution._cursor = (len(times) - 1, v)
    return solution


@dataclasses.dataclass(frozen=True)
class BoxETDRK4(Pseudospectral):
    """Reference scheme: the box's sine/cosine (and Fourier) series by ETDRK4, cached on disk.

    As :class:`~teng_eq.reference.etdrk4.Pseudospectral`: ``degree`` of N(u) (the padding),
    ``resolution`` rows ``(t_max, n, dt)`` (n modes per axis, an int or one per axis), ``memory``
    for the kept series."""

    def solution(self, equation, times, *, cache_dir=None, n=None,
                 dt: float | None = None) -> BoxETDRK4Solution:
        """The solution at ``times`` (steps of at most ``dt``, each time reached exactly), cached as
        ``<cache_dir>/reference-<sha256>.npz`` keyed by the equation (class and every field), u₀'s
        series, the resolution, the bytes of ``times`` and :data:`CACHE_VERSION`
        (the rules of :meth:`~teng_eq.reference.etdrk4.Pseudospectral.solution`)."""
        times, shape, dt = self._resolve(equation, times, n, dt)
        if cache_dir is False:
            return solve(equation, times, shape, dt, self.degree, self.memory)
        u0 = _BoxOperator(equation, box_axes(equation), shape, self.degree).initial()
        key = digest({"version": CACHE_VERSION, "equation": content_description(equation),
                      "u0": array_digest(u0), "n": list(shape), "dt": repr(dt), "degree": self.degree},
                     times.astype("<f8").tobytes())
        path = cache_dir_of(cache_dir) / f"reference-{key}.npz"
        cached = load_arrays(path, {"reference": key})  # None when missing, damaged or stale
        if cached is not None:
            return BoxETDRK4Solution(equation, times, shape, dt, self.degree, int(cached["stride"]),
                                     cached["checkpoints"])
        solution = solve(equation, times, shape, dt, self.degree, self.memory)
        store_or_warn(path, {"times": times, "stride": np.asarray(solution.stride),
                             "checkpoints": solution.checkpoints}, {"reference": key}, "reference solution")
        return solution
