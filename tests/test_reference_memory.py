"""The ETDRK4 reference keeps checkpoints, not one spectrum per time: its values do not
depend on how many are kept, and its memory grows with the spectra kept, not with the
number of times or of ETDRK4 steps."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from helpers.configs import make_config, make_equation

from teng_eq.reference import Pseudospectral, reference_solution
from teng_eq.reference.etdrk4 import spectrum_bytes

N = 32
SPECTRUM = spectrum_bytes((N, N))  # 32 × 17 complex128 = 8,704 bytes


@pytest.fixture(scope="module")
def burgers():
    return make_equation("burgers")


def scheme(spectra: float) -> Pseudospectral:
    """Burgers' ETDRK4 scheme with room for ``spectra`` spectra of the N² grid."""
    return Pseudospectral(degree=2, resolution=((np.inf, N, 1e-2),), memory=int(spectra * SPECTRUM))


def test_values_do_not_depend_on_the_checkpoints(burgers):
    """Every time's spectrum, bit for bit, whether all are kept or every 7th, read in
    order, backwards or at random (re-integration repeats the first pass's steps)."""
    times = np.arange(60) * 0.004
    everything = scheme(1000).solution(burgers, times, dt=0.003, cache_dir=False)
    sparse = scheme(9).solution(burgers, times, dt=0.003, cache_dir=False)
    assert everything.stride == 1 and sparse.stride == 7 and len(sparse.checkpoints) == 9
    order = list(range(60)) + list(range(59, -1, -1)) + list(np.random.default_rng(0).permutation(60))
    for k in order:
        np.testing.assert_array_equal(sparse.spectrum(k), everything.spectrum(k))
    np.testing.assert_array_equal(sparse.values(37, 48), everything.values(37, 48))


def peak_bytes(burgers, times, spectra, dt) -> int:
    """Peak traced allocation of solving and then reading every time in order."""
    tracemalloc.start()
    try:
        solution = scheme(spectra).solution(burgers, times, dt=dt, cache_dir=False)
        for k in range(len(times)):
            solution.values(k, N)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_peak_memory_grows_with_the_spectra_kept_not_the_steps(burgers):
    times = np.arange(201) * 0.005
    few = peak_bytes(burgers, times, 20, dt=0.005)  # 1 step per interval, 21 spectra kept
    many = peak_bytes(burgers, times, 1000, dt=0.005)  # every one of the 201 kept
    steps = peak_bytes(burgers, times, 20, dt=0.001)  # 5× the ETDRK4 steps, 21 kept
    # The 180 more spectra kept are the difference; the work arrays are the rest.
    assert (many - few) == pytest.approx(180 * SPECTRUM, rel=0.05)
    assert abs(steps - few) < 8 * SPECTRUM


def test_cache_holds_the_checkpoints_only(burgers, tmp_path, monkeypatch):
    times = np.arange(100) * 0.005
    monkeypatch.setattr(type(burgers), "reference_scheme", lambda self: scheme(10))
    first = reference_solution(burgers, times, cache_dir=tmp_path)
    (path,) = tmp_path.glob("reference-*.npz")
    assert first.stride == 10
    assert 10 * SPECTRUM <= path.stat().st_size < 10 * SPECTRUM + 2 * times.nbytes + 4096
    again = reference_solution(burgers, times, cache_dir=tmp_path)
    for k in (99, 3, 50, 51):
        np.testing.assert_array_equal(again.spectrum(k), first.spectrum(k))


def test_paper_burgers_preset_fits_in_two_gigabytes():
    """The design's arithmetic for the paper Burgers preset (Δt = 1e-3, T = 4, 384²): the
    checkpoints kept, hence its cache file, stay under the scheme's memory, far below 2 GB,
    where one spectrum per time would take 4.7 GB (measured once: docs in the report)."""
    cfg = make_config("experiment=paper_burgers")
    times = np.arange(cfg.n_steps + 1) * cfg.dt
    scheme_ = cfg.equation.reference_scheme()
    n, _ = scheme_.default(times[-1])
    one = spectrum_bytes((n, n))
    assert len(times) * one > 4.5e9
    stride = -(-len(times) * one // scheme_.memory)
    assert -(-len(times) // stride) * one <= scheme_.memory < 2e9 - 256 * 2**20
