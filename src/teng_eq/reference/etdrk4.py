"""Pseudo-spectral ETDRK4 reference for ``∂ₜu = ν Δu + N(u, ∇u)`` on a periodic box of any dimension
(or another linear part, :meth:`~teng_eq.equations.Equation.linear_symbol`: diagonal, one per
component of a system, or a matrix per wave vector where it couples them, :func:`coupled_coefficients`)
(paper, App. "Details on Obtaining Reference Solutions"), in float64 NumPy, with memory
bounded independently of the number of output times.

In Fourier space ``∂ₜû = L̂ û + N̂(û)`` with the diagonal linear part ``L̂ = −ν|k|²``
integrated exactly and ``N = equation.nonlinear(u, ∇u)`` evaluated pointwise in
physical space on a padded grid (``∇u`` by spectral differentiation), by ETDRK4 (Cox &
Matthews 2002, with the φ-function coefficients of Kassam & Trefethen 2005 computed as
means over a circle in the complex plane, which avoids the cancellation in their
closed forms near 0).

Memory: a run asks for the reference at every time step (the paper's Burgers preset:
4001 times of a 384² spectrum, 4.7 GB). :class:`ETDRK4Solution` keeps only every
``stride``-th spectrum (a checkpoint; ``stride`` chosen so that the checkpoints fit in
:attr:`Pseudospectral.memory`) and re-integrates from the nearest checkpoint, with the
same steps and weights as the first pass, when another time is asked for. The values
are therefore bit-for-bit those of a run that kept every spectrum; read in time order
(as a run does) each interval is re-integrated once.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import scipy.fft as sfft

from teng_eq.cache.files import array_digest, content_description, digest, load_arrays, store_or_warn
from teng_eq.cache.files import cache_dir as cache_dir_of
from teng_eq.reference.fourier import (
    _WORKERS,
    FourierSolution,
    distinct_symbols,
    initial_spectrum,
    wavenumbers,
)

#: Bumped whenever the numerics, the key or the file layout change, so stale cache files are
#: never read (v3: the key holds every field of the equation and u₀ on the solver's grid).
CACHE_VERSION = "reference-v3"


# ---------------------------------------------------------------------------------------
# ETDRK4 weights, the nonlinear term, the step plan
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
    """The weights at each z (real: real weights; complex: complex ones)."""
    radius = np.where(np.abs(z) < 2.0, 1.0 + np.abs(z), 1.0)
    r = np.exp(2j * math.pi * (np.arange(n_contour) + 0.5) / n_contour)
    w = z[..., None] + radius[..., None] * r
    ew = np.exp(w)
    w3 = w**3
    part = (lambda v: v) if np.iscomplexobj(z) else (lambda v: v.real)
    q = part(np.mean((np.exp(w / 2) - 1.0) / w, axis=-1))
    f1 = part(np.mean((-4.0 - w + ew * (4.0 - 3.0 * w + w * w)) / w3, axis=-1))
    f2 = part(np.mean((2.0 + w + ew * (w - 2.0)) / w3, axis=-1))
    f3 = part(np.mean((-4.0 - 3.0 * w - w * w + ew * (4.0 - w)) / w3, axis=-1))
    return np.exp(z / 2), np.exp(z), q, f1, f2, f3


def coupled_coefficients(symbol: np.ndarray, n_contour: int = 64) -> tuple[np.ndarray, ...]:
    """The ETDRK4 weights of :func:`etdrk4_coefficients` for a linear part that couples
    the components: ``symbol`` (…, m, m) holds hL̂ per wave vector, each diagonalisable
    (``hL̂ = V Z V⁻¹``), and each weight is ``V φ(Z) V⁻¹`` (real: L̂ is real, its
    eigenvalues conjugate in pairs). E.g. the Schrödinger equation's ±i|k|²/2 in the real
    and imaginary parts."""
    z, v = np.linalg.eig(symbol)
    inverse = np.linalg.inv(v)
    unique, index = np.unique(z.ravel(), return_inverse=True)
    weights = _etdrk4_unique(unique.astype(np.complex128), n_contour)
    return tuple(np.einsum("...ij,...j,...jk->...ik", v, w[index].reshape(z.shape), inverse).real
                 for w in weights)


def _uses_gradient(equation) -> bool:
    """Whether ``N(u, ∇u)`` depends on ∇u, probed at random points (N is pointwise; a
    system's N takes and returns one array per component).

    Allen–Cahn and heat do not; skipping their two derivative transforms halves the cost.
    """
    rng = np.random.default_rng(0)
    m = len(equation.components)
    u = rng.standard_normal((m, 8) if m else 8)
    g1, g2 = rng.standard_normal((2, m, equation.dim, 8) if m else (2, equation.dim, 8))
    if m:
        u, g1, g2 = list(u), list(g1), list(g2)
    n1 = np.asarray(equation.nonlinear(u, g1), dtype=np.float64)
    n2 = np.asarray(equation.nonlinear(u, g2), dtype=np.float64)
    return not np.array_equal(n1, n2)


class _Pseudospectral:
    """``N̂(û)``: u and its spectral gradient on a padded K₁×…×K_d grid, ``equation.nonlinear``
    there, back to the n₁×…×n_d-mode spectrum (rfftn layout: the last axis halved).

    The state keeps the modes |m_d| < n_d/2 (Nyquist dropped: its derivative is not
    real). A degree-p polynomial in fields with |m| < n/2 has |m| < pn/2; evaluating it
    on K ≥ (p+1)n/2 points aliases only onto modes ≥ n/2, which are then discarded, so
    the kept modes are exact (the 3/2 rule for Burgers, 2 for the cubic Allen–Cahn term).

    A system's spectrum has the component first, (m, n₁, …): each component goes to
    the grid, ``equation.nonlinear`` takes and returns one array per component, and
    ``linear_symbol`` gives one symbol per component, (m, n₁, …).
    """

    def __init__(self, equation, shape: tuple[int, ...], degree: int):
        if equation.dim != len(shape):
            raise ValueError(f"modes {shape} for a {equation.dim}-D equation")
        self.equation = equation
        self.shape = tuple(shape)
        self.uses_gradient = _uses_gradient(equation)
        pads = [math.ceil((degree + 1) * n / 2) for n in shape]
        self.pad = tuple(k + (k % 2) for k in pads)
        ks = wavenumbers(shape, equation.lengths)
        self.keep = np.ones([1] * len(shape), bool)
        for axis, n in enumerate(shape):
            m = sfft.rfftfreq(n, 1.0 / n) if axis == len(shape) - 1 else np.abs(sfft.fftfreq(n, 1.0 / n))
            self.keep = self.keep & (m < n / 2).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        self.ik = [1j * k * self.keep for k in ks]
        self.lin = equation.linear_symbol(sum(k**2 for k in ks))
        # A symbol per wave vector that couples the components: (m, m, n₁, …), its distinct matrices.
        self.coupled = self.lin.ndim == len(shape) + 2
        self.distinct, self.index = distinct_symbols(self.lin) if self.coupled else (None, None)
        self._buf = np.zeros((*self.pad[:-1], self.pad[-1] // 2 + 1), dtype=np.complex128)
        # The kept blocks: the low and the high (negative) modes along every axis but the
        # last (halved: low modes only), as (index in the n-spectrum, index in the K-one).
        h = [n // 2 for n in shape]
        sides = [((slice(0, hd), slice(0, hd)), (slice(n - hd + 1, n), slice(k - hd + 1, k)))
                 for n, k, hd in zip(shape[:-1], self.pad[:-1], h[:-1])]
        self.blocks = [(tuple(b[0] for b in c) + (slice(0, h[-1]),),
                        tuple(b[1] for b in c) + (slice(0, h[-1]),))
                       for c in itertools.product(*sides)]

    def weights(self, h: float) -> tuple[np.ndarray, ...]:
        """``(e^{hL̂/2}, e^{hL̂}, hQ, hf₁, hf₂, hf₃)`` of :func:`etdrk4_coefficients` (a
        coupled symbol's: matrices, :func:`coupled_coefficients`), each applied by :meth:`apply`."""
        if not self.coupled:
            e2, e, q, f1, f2, f3 = etdrk4_coefficients(h * self.lin)
            return e2, e, h * q, h * f1, h * f2, h * f3
        m, spectrum = self.lin.shape[0], self.lin.shape[2:]
        e2, e, q, f1, f2, f3 = (np.moveaxis(w[self.index].reshape(*spectrum, m, m), (-2, -1), (0, 1))
                                for w in coupled_coefficients(h * self.distinct))
        return e2, e, h * q, h * f1, h * f2, h * f3

    def apply(self, w: np.ndarray, v: np.ndarray) -> np.ndarray:
        """A weight of :meth:`weights` applied to a spectrum (a coupled one: per wave vector)."""
        return np.einsum("ij...,j...->i...", w, v) if self.coupled else w * v

    def _to_grid(self, v: np.ndarray) -> np.ndarray:
        """The K grid values of the n-mode spectrum ``v``."""
        # One persistent zero-padded buffer: only the kept blocks are ever written, so
        # the rest stays zero, and no K-sized array is allocated per call (allocation
        # churn of MB-sized arrays alone doubled the run time).
        buf, scale = self._buf, math.prod(k / n for k, n in zip(self.pad, self.shape))
        for src, dst in self.blocks:
            np.multiply(v[src], scale, out=buf[dst])
        return sfft.irfftn(buf, s=self.pad, workers=_WORKERS)

    def _from_grid(self, f: np.ndarray) -> np.ndarray:
        """The n-mode spectrum (|m_d| < n_d/2) of the K grid values ``f``."""
        w = sfft.rfftn(f, workers=_WORKERS, overwrite_x=True)
        out = np.zeros((*self.shape[:-1], self.shape[-1] // 2 + 1), dtype=np.complex128)
        for src, dst in self.blocks:
            out[src] = w[dst]
        return out * math.prod(n / k for k, n in zip(self.pad, self.shape))

    def __call__(self, v: np.ndarray) -> np.ndarray:
        if v.ndim > len(self.shape):
            return self._system(v)
        u = self._to_grid(v)
        if self.uses_gradient:
            grad_u = np.stack([self._to_grid(ik * v) for ik in self.ik])
        else:
            grad_u = np.broadcast_to(0.0, (len(self.shape), *u.shape))
        nl = np.asarray(self.equation.nonlinear(u, grad_u), dtype=np.float64)
        return self._from_grid(np.broadcast_to(nl, u.shape).copy() if nl.shape != u.shape else nl)

    def _system(self, v: np.ndarray) -> np.ndarray:
        u = [self._to_grid(c) for c in v]
        if self.uses_gradient:
            grad_u = [np.stack([self._to_grid(ik * c) for ik in self.ik]) for c in v]
        else:
            grad_u = [np.broadcast_to(0.0, (len(self.shape), *u[0].shape))] * len(u)
        nl = self.equation.nonlinear(u, grad_u)
        # Copies: _from_grid transforms in place, and N may return one of the u's itself.
        return np.stack([
            self._from_grid(np.array(np.broadcast_to(np.asarray(n, dtype=np.float64), u[0].shape)))
            for n in nl])


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


def _step_plan(times: np.ndarray, dt: float) -> list[tuple[float, int]]:
    """(h used, steps) per interval: :func:`_step_sizes`, except that intervals equal
    but for round-off (times = arange(k)·Δ: up to 3e-13 relative at k = 4000) take the
    h of the first of them, so that its weights (costly to compute) are reused;
    the time reached is then off by that same round-off, far below the step error."""
    plan, h_now = [], None
    for h, steps in _step_sizes(times, dt):
        if steps and (h_now is None or abs(h - h_now) > 1e-9 * h_now):
            h_now = h
        plan.append((h_now if steps else 0.0, steps))
    return plan


def _check_times(times) -> np.ndarray:
    times = np.atleast_1d(np.asarray(times, dtype=np.float64))
    if times.ndim != 1 or times.size == 0:
        raise ValueError("times must be a non-empty 1-D sequence")
    if times[0] < 0 or np.any(np.diff(times) < 0):
        raise ValueError(f"times must be ≥ 0 and non-decreasing, got {times}")
    return times


# ---------------------------------------------------------------------------------------
# The solution: checkpoints and exact re-integration
# ---------------------------------------------------------------------------------------


class ETDRK4Solution(FourierSolution):
    """ETDRK4 solution at ``times``: the spectrum of every ``stride``-th time is kept
    (``checkpoints[j]`` at ``times[j·stride]``), any other one re-integrated from the
    last checkpoint (or from the last time asked for, when that is closer) by the steps
    of the first pass.

    Memory: the checkpoints, plus one spectrum (the last one asked for) and the
    solver's work arrays; not the number of times or of steps.
    """

    def __init__(self, equation, times: np.ndarray, shape: tuple[int, ...], dt: float, degree: int,
                 stride: int, checkpoints: np.ndarray, cursor: tuple[int, np.ndarray] | None = None):
        self.equation = equation
        self.times = times
        self.shape = tuple(shape)
        self.lengths = tuple(equation.lengths)
        self.dt = float(dt)
        self.degree = int(degree)
        self.stride = int(stride)
        self.checkpoints = checkpoints
        self._plan = _step_plan(times, dt)
        self._cursor = cursor
        self._op: _Pseudospectral | None = None
        self._weights: tuple[float, tuple] | None = None

    def spectrum(self, k: int) -> np.ndarray:
        if not 0 <= k < len(self.times):
            raise IndexError(f"time index {k} out of range(0, {len(self.times)})")
        base = (k // self.stride) * self.stride
        if k == base:
            return self.checkpoints[k // self.stride]
        if self._cursor is not None and base <= self._cursor[0] <= k:
            start, v = self._cursor
        else:
            start, v = base, self.checkpoints[k // self.stride]
        for j in range(start + 1, k + 1):
            v = self._advance(v, j)
        self._cursor = (k, v)
        return v

    def spectrum_at(self, t: float) -> np.ndarray:
        """The spectrum at any t in [0, times[-1]]: that of the last of ``times`` at or
        before t (:meth:`spectrum`), carried to t by ⌈(t − t_k)/dt⌉ equal ETDRK4 steps —
        the "exact final partial step" of a run that ends at t, so the value is a
        function of t alone, to the scheme's own accuracy (a run of the reference ending
        at t reaches t by other steps). A t within round-off of one of ``times`` is
        that time."""
        times = self.times
        if not -1e-12 * max(1.0, times[-1]) <= t <= times[-1] * (1 + 1e-12):
            raise ValueError(f"t={t} is outside the reference's times [0, {times[-1]}]")
        k = int(np.searchsorted(times, t, side="right")) - 1
        if k + 1 < len(times) and times[k + 1] - t <= 1e-12 * max(1.0, abs(t)):
            k += 1
        k = max(k, 0)
        delta = t - float(times[k])
        v = self.spectrum(k)
        if delta <= 1e-12 * max(1.0, abs(t)):
            return v
        steps = math.ceil(delta / self.dt * (1 - 1e-12))
        h = delta / steps
        # Fresh weights, not the cached set of the plan's h (which the next spectrum() reuses).
        return self._steps(v, steps, self.operator.weights(h))

    def _advance(self, v: np.ndarray, j: int) -> np.ndarray:
        """The spectrum at ``times[j]`` from the one at ``times[j−1]`` (t₋₁ = 0).

        One step of size h (Cox & Matthews' ETDRK4, weights from
        :func:`etdrk4_coefficients`)::

            a = e^{hL̂/2} û + h Q N̂(û)
            b = e^{hL̂/2} û + h Q N̂(a)
            c = e^{hL̂/2} a + h Q (2N̂(b) − N̂(û))
            û ← e^{hL̂} û + h (f₁ N̂(û) + 2 f₂ (N̂(a) + N̂(b)) + f₃ N̂(c))
        """
        h, steps = self._plan[j]
        if not steps:
            return v
        return self._steps(v, steps, self._weights_at(h))

    def _steps(self, v: np.ndarray, steps: int, weights: tuple) -> np.ndarray:
        """``steps`` ETDRK4 steps from ``v`` with ``weights`` (:meth:`_weights_at`)."""
        nhat = self.operator
        e2, e, hq, hf1, hf2, hf3 = weights
        w = nhat.apply
        for _ in range(steps):
            nv = nhat(v)
            a = w(e2, v) + w(hq, nv)
            na = nhat(a)
            b = w(e2, v) + w(hq, na)
            nb = nhat(b)
            c = w(e2, a) + w(hq, 2.0 * nb - nv)
            nc = nhat(c)
            v = w(e, v) + w(hf1, nv) + w(2.0 * hf2, na + nb) + w(hf3, nc)
        return v

    @property
    def operator(self) -> _Pseudospectral:
        if self._op is None:
            self._op = _Pseudospectral(self.equation, self.shape, self.degree)
        return self._op

    def _weights_at(self, h: float) -> tuple:
        # One set kept: a plan reuses one h over long runs of intervals.
        if self._weights is None or self._weights[0] != h:
            self._weights = (h, self.operator.weights(h))
        return self._weights[1]


def spectrum_bytes(shape, components: int = 1) -> int:
    """Bytes of one complex128 rfftn spectrum of the ``shape`` grid (of each of ``components``)."""
    return 16 * components * math.prod(shape[:-1]) * (shape[-1] // 2 + 1)


def solve(equation, times, shape: tuple[int, ...], dt: float, degree: int, memory: int) -> ETDRK4Solution:
    """Integrate from u₀ through every one of ``times``, keeping checkpoints that fit in
    ``memory`` bytes (every spectrum when they all do)."""
    times = _check_times(times)
    if any(n % 2 or n < 4 for n in shape):
        raise ValueError(f"modes must be even and ≥ 4, got {shape}")
    if not dt > 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    m = len(equation.components)
    stride = max(1, math.ceil(len(times) * spectrum_bytes(shape, max(m, 1)) / memory))
    n_keep = -(-len(times) // stride)
    checkpoints = np.empty((n_keep, *((m,) if m else ()), *shape[:-1], shape[-1] // 2 + 1),
                           dtype=np.complex128)
    solution = ETDRK4Solution(equation, times, shape, dt, degree, stride, checkpoints)
    v = initial_spectrum(equation, shape) * solution.operator.keep
    for j in range(len(times)):
        v = solution._advance(v, j)
        if j % stride == 0:
            checkpoints[j // stride] = v
    solution._cursor = (len(times) - 1, v)
    return solution


# ---------------------------------------------------------------------------------------
# The scheme an equation declares
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pseudospectral:
    """Reference scheme: ETDRK4 pseudo-spectral solution, cached on disk.

    ``degree``: polynomial degree of ``N(u, ∇u)`` in (u, ∇u) (it sets the padding that
    removes aliasing from the products). ``resolution``: rows ``(t_max, n, dt)``, the
    first with ``max(times) ≤ t_max`` gives the default modes per axis ``n`` (an even
    int, or one per axis) and largest step ``dt``. ``memory``: bytes of spectra kept
    (:class:`ETDRK4Solution`).
    """

    degree: int
    resolution: tuple[tuple[float, int | tuple[int, ...], float], ...]
    memory: int = 512 * 2**20

    def default(self, t_max: float) -> tuple[int | tuple[int, ...], float]:
        """(n, dt) of the first row of :attr:`resolution` that covers ``t_max``."""
        for bound, n, dt in self.resolution:
            if t_max <= bound:
                return n, dt
        return self.resolution[-1][1:]

    def _resolve(self, equation, times, n, dt) -> tuple[np.ndarray, tuple[int, ...], float]:
        """(times, modes per axis, dt) with None resolved to :meth:`default`."""
        times = _check_times(times)
        n_default, dt_default = self.default(float(times[-1]))
        n = n_default if n is None else n
        shape = tuple(int(v) for v in n) if isinstance(n, (tuple, list)) else (int(n),) * equation.dim
        return times, shape, float(dt_default if dt is None else dt)

    def solution(self, equation, times, *, cache_dir=None, n=None, dt: float | None = None) -> ETDRK4Solution:
        """The ETDRK4 solution at ``times``: steps of at most ``dt``, shortened so that each
        of ``times`` is reached exactly (:func:`_step_sizes`); ``n``, ``dt``: None for
        :meth:`default`. Cached as ``<cache_dir>/reference-<sha256>.npz`` (the checkpoints
        only), keyed by the equation (class and every field), u₀ on the ``n`` grid, the
        resolution, the exact bytes of ``times`` and :data:`CACHE_VERSION`; a
        self-checking entry (:func:`teng_eq.cache.files.store_arrays`): a damaged or stale
        file is recomputed, and concurrent writers never leave a partial one; a cache
        that cannot be written costs a warning, not the solution.
        ``cache_dir=None`` → :func:`teng_eq.cache.files.cache_dir`; ``False`` → no cache."""
        # Resolved before hashing, so that explicit defaults and None share one cache file.
        times, shape, dt = self._resolve(equation, times, n, dt)
        if cache_dir is False:
            return solve(equation, times, shape, dt, self.degree, self.memory)
        # The equation by its class and every field, u₀ by its values on the solver's
        # grid (an edited formula under the same name is a new reference).
        key = digest({"version": CACHE_VERSION, "equation": content_description(equation),
                      "u0": array_digest(initial_spectrum(equation, shape)), "n": list(shape), "dt": repr(dt),
                      "degree": self.degree}, times.astype("<f8").tobytes())
        path = cache_dir_of(cache_dir) / f"reference-{key}.npz"
        cached = load_arrays(path, {"reference": key})  # self-checking: None when missing, damaged or stale
        if cached is not None:
            return ETDRK4Solution(equation, times, shape, dt, self.degree, int(cached["stride"]),
                                  cached["checkpoints"])
        solution = solve(equation, times, shape, dt, self.degree, self.memory)
        store_or_warn(path, {"times": times, "stride": np.asarray(solution.stride),
                             "checkpoints": solution.checkpoints}, {"reference": key}, "reference solution")
        return solution

    def anytime(self, equation, t_final: float, *, cache_dir=None) -> ETDRK4Solution:
        """The solution on its own step grid ``t_j = j·h`` up to ``t_final`` (h ≤ its
        default dt), whose ``values_at(t, m)`` give u at any t in between by one partial
        step (:meth:`ETDRK4Solution.spectrum_at`): what a run with steps the controller
        chooses asks for."""
        _, dt = self.default(float(t_final))
        n = max(1, math.ceil(t_final / dt * (1 - 1e-12)))
        return self.solution(equation, np.linspace(0.0, t_final, n + 1), cache_dir=cache_dir)
