"""Solutions on a periodic box as truncated Fourier series, and the exact heat solution.

A solution at time t_k is the ``rfftn`` half spectrum ``û`` of its values on the
``n₁ × … × n_d`` grid ``x_i = L i / n`` (so ``irfftn(û)`` *is* that grid)::

    u(x, t_k) = (1/Πn_d) Σ_m û_m e^{i k·x},   k_d = 2π m_d / L_d,

evaluated on any other grid by exact trigonometric interpolation
(:meth:`FourierSolution.at`). Subclasses say where ``û`` comes from: stored
(:class:`SpectralSolution`), an exact formula (:class:`DecayingModes`) or a
re-integration from a checkpoint (:class:`teng_eq.reference.etdrk4.ETDRK4Solution`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os

import numpy as np
import scipy.fft as sfft
import scipy.linalg

from teng_eq.domains.quadrature import grid_axes

_WORKERS = min(os.cpu_count() or 1, 8)


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


class FourierSolution:
    """u(·, t_k) on the periodic box ``[0, L₁) × …`` from the spectra :meth:`spectrum` (k).

    Attributes: ``times`` (n_t,), ``shape`` (n₁, …, n_d), ``lengths`` (L₁, …, L_d).
    """

    times: np.ndarray
    shape: tuple[int, ...]
    lengths: tuple[float, ...]

    def spectrum(self, k: int) -> np.ndarray:
        """``rfftn`` of u(·, t_k) on the ``shape`` grid (complex, last axis halved)."""
        raise NotImplementedError

    def spectrum_at(self, t: float) -> np.ndarray:
        """The spectrum at any time t ≥ 0 (not only one of ``times``), where the
        solution can give it."""
        raise NotImplementedError

    @property
    def n(self) -> int:
        """Modes along the first axis."""
        return self.shape[0]

    def at(self, k: int, m: int) -> np.ndarray:
        """u(x, t_k) on the ``m^d`` grid ``x_i = L_d i / m``, shape (m, …, m) (a system's:
        (components, m, …, m)).

        Exact values of the trigonometric interpolant, for any m (see
        :func:`_fold_matrix`); m equal to every n_d returns ``irfftn`` of the spectrum.
        """
        return self._on_grid(self.spectrum(k), m)

    def _on_grid(self, coef: np.ndarray, m: int) -> np.ndarray:
        shape = self.shape
        if coef.ndim > len(shape):  # a system's: one spectrum per component, component first
            return np.stack([self._on_grid(c, m) for c in coef])
        if all(s == m for s in shape):
            return sfft.irfftn(coef, s=shape, workers=_WORKERS)
        # Through the full spectrum: irfftn first fixes the meaning of the
        # self-conjugate entries (imaginary parts dropped), exactly as at m == n.
        full = sfft.fftn(sfft.irfftn(coef, s=shape, workers=_WORKERS), workers=_WORKERS)
        if len(shape) == 2:
            folded = _fold_matrix(shape[0], m) @ full @ _fold_matrix(shape[1], m).T
        else:
            folded = full
            for axis, size in enumerate(shape):
                folded = np.moveaxis(np.tensordot(_fold_matrix(size, m), folded, axes=(1, axis)), 0, axis)
        # The DFT's 1/size normalisation changes from 1/Πn_d to 1/m^d.
        return sfft.ifftn(folded, workers=_WORKERS).real * math.prod((m / s) for s in shape)

    def values(self, k: int, m: int) -> np.ndarray:
        """u(·, t_k) at the points of the equation's ``evaluation(m)`` (the m^d grid in
        'ij' order; a system's: each component's in turn), flattened."""
        return self.at(k, m).ravel()

    def values_at(self, t: float, m: int) -> np.ndarray:
        """u(·, t) at any time t (:meth:`spectrum_at`), as :meth:`values`."""
        return self._on_grid(self.spectrum_at(t), m).ravel()


@dataclasses.dataclass(frozen=True, eq=False)
class SpectralSolution(FourierSolution):
    """Stored spectra: ``coef[k]`` is the spectrum at ``times[k]``, ``coef`` of shape
    (n_t, n₁, …, n_d//2+1) complex128."""

    times: np.ndarray
    coef: np.ndarray
    lengths: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        *lead, last = self.coef.shape[1:]
        # The last axis holds n//2+1 of n modes; n is even for every grid we build.
        return (*lead, 2 * (last - 1))

    def spectrum(self, k: int) -> np.ndarray:
        return self.coef[k]

    def spectrum_at(self, t: float) -> np.ndarray:
        """Only at the stored times."""
        hit = np.flatnonzero(self.times == t)
        if not hit.size:
            raise ValueError(f"no stored spectrum at t={t}")
        return self.coef[hit[0]]


@dataclasses.dataclass(frozen=True, eq=False)
class DecayingModes(FourierSolution):
    """``û_m(t) = e^{λ_m t} û_m(0)``: every mode decays on its own (the heat equation,
    ``λ = −ν|k|²``). Memory: one spectrum, whatever the number of times."""

    times: np.ndarray
    initial: np.ndarray
    rates: np.ndarray
    lengths: tuple[float, ...]
    shape: tuple[int, ...]

    def spectrum(self, k: int) -> np.ndarray:
        return self.spectrum_at(self.times[k])

    def spectrum_at(self, t: float) -> np.ndarray:
        return np.exp(self.rates * t) * self.initial


@dataclasses.dataclass(frozen=True, eq=False)
class CoupledModes(FourierSolution):
    """``û(k, t) = e^{t L̂(k)} û(k, 0)``: a linear constant-coefficient system, its symbol
    L̂(k) an (m, m) matrix per wave vector (a small matrix exponential each, at every t).
    ``initial`` (m, n₁, …) the components' spectra; ``symbols`` (distinct, m, m) and
    ``index`` (one per wave vector, flattened) the symbol of each. Memory: one spectrum."""

    times: np.ndarray
    initial: np.ndarray
    symbols: np.ndarray
    index: np.ndarray
    lengths: tuple[float, ...]
    shape: tuple[int, ...]

    def spectrum(self, k: int) -> np.ndarray:
        return self.spectrum_at(self.times[k])

    def spectrum_at(self, t: float) -> np.ndarray:
        m = self.initial.shape[0]
        flow = scipy.linalg.expm(t * self.symbols)[self.index].reshape(*self.initial.shape[1:], m, m)
        return np.einsum("...ij,j...->i...", flow, self.initial)


def distinct_symbols(symbol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A system's symbol (m, m, n₁, …), one matrix per wave vector, as its distinct
    matrices (U, m, m) and the index of each wave vector's among them (flattened 'ij'):
    |k|² takes few values, so a matrix function is computed once per value."""
    m = symbol.shape[0]
    distinct, index = np.unique(np.moveaxis(symbol, (0, 1), (-2, -1)).reshape(-1, m, m), axis=0,
                                return_inverse=True)
    return distinct, index.ravel()


def wavenumbers(shape, lengths) -> list[np.ndarray]:
    """``k_d = 2π m_d / L_d`` of the rfftn layout, one array per axis, broadcastable
    (the last axis holds m ≥ 0 only)."""
    d = len(shape)
    out = []
    for axis, (n, length) in enumerate(zip(shape, lengths)):
        m = sfft.rfftfreq(n, 1.0 / n) if axis == d - 1 else sfft.fftfreq(n, 1.0 / n)
        view = [1] * d
        view[axis] = m.size
        out.append((2.0 * math.pi / float(length)) * m.reshape(view))
    return out


def initial_spectrum(equation, shape) -> np.ndarray:
    """``rfftn`` of ``equation.u0`` sampled on the ``shape`` grid of its box from its origin
    (a system's: of each component, component first)."""
    origin = getattr(equation, "origin", None) or (0.0,) * len(shape)
    axes = (a + grid_axes(n, [length])[0] for n, length, a in zip(shape, equation.lengths, origin))
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"))
    if equation.components:
        u0 = np.stack([np.broadcast_to(np.asarray(c, dtype=np.float64), mesh.shape[1:])
                       for c in equation.initial_state(mesh)])
        return sfft.rfftn(u0, axes=tuple(range(1, u0.ndim)), workers=_WORKERS)
    u0 = np.asarray(equation.u0(mesh), dtype=np.float64)
    return sfft.rfftn(u0, workers=_WORKERS)


def drop_nyquist(coef: np.ndarray, shape) -> np.ndarray:
    """``coef`` with every mode |m_d| = n_d/2 zeroed (in place; returned)."""
    for axis, n in enumerate(shape):
        index = [slice(None)] * coef.ndim
        index[axis] = n // 2
        coef[tuple(index)] = 0.0
    return coef


@dataclasses.dataclass(frozen=True)
class ExactFourier:
    """Reference scheme: exact decay of every Fourier mode of u₀, for ``∂ₜu = ν Δu`` on
    a periodic box; for a linear constant-coefficient system, every mode's matrix
    exponential of the system's ``linear_symbol`` (:class:`CoupledModes`). ``n`` modes per axis by
    default (even); u₀ must be resolved by them (its coefficients beyond n/2 negligible), which the
    equation's choice of ``n`` states.

    The Nyquist modes of the DFT are dropped (as in the ETDRK4 solver): their
    derivative is not real.
    """

    n: int

    def solution(self, equation, times, *, cache_dir=None, n: int | None = None,
                 dt: float | None = None) -> DecayingModes:
        """The exact solution at ``times``; ``dt`` does not apply (ignored), nothing is
        cached (the DFT of u₀ costs less than reading a file)."""
        n = int(self.n if n is None else n)
        if n % 2 or n < 2:
            raise ValueError(f"n must be even, got {n}")
        shape = (n,) * equation.dim
        if equation.components:
            return self._system(equation, times, shape)
        u0_hat = drop_nyquist(initial_spectrum(equation, shape), shape)
        rates = sum(k**2 for k in wavenumbers(shape, equation.lengths))
        return DecayingModes(times=times, initial=u0_hat, rates=-equation.nu * rates,
                             lengths=tuple(equation.lengths), shape=shape)

    @staticmethod
    def _system(equation, times, shape) -> CoupledModes:
        """A system's: its ``linear_symbol`` one (m, m) matrix per wave vector (or one
        diagonal entry per component), each mode carried by its matrix exponential."""
        u0_hat = initial_spectrum(equation, shape)
        for component in u0_hat:
            drop_nyquist(component, shape)
        m = u0_hat.shape[0]
        symbol = np.asarray(equation.linear_symbol(sum(k**2 for k in wavenumbers(shape, equation.lengths))))
        if symbol.ndim == len(shape) + 1:  # diagonal: one symbol per component
            symbol = np.einsum("i...,ij->ij...", symbol, np.eye(m))
        distinct, index = distinct_symbols(symbol)
        return CoupledModes(times=times, initial=u0_hat, symbols=distinct, index=index,
                            lengths=tuple(equation.lengths), shape=shape)

    def anytime(self, equation, t_final: float, *, cache_dir=None) -> FourierSolution:
        """The exact solution, whose ``values_at(t, m)`` hold at every t."""
        return self.solution(equation, [0.0, t_final])
