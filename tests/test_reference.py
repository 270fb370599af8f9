"""Reference solutions: interpolation, exact heat, ETDRK4 self-convergence, cache, script."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import make_equation
from helpers.numerics import (
    EPS,
    FFT_LEVEL,
    fft_levels,
    fft_roundoff,
    pointwise_roundoff,
    rel_l2,
    self_convergence,
)
from helpers.processes import run_script

from teng_eq.domains.quadrature import grid_axes
from teng_eq.equations.periodic import SQUARE_INITIAL_CONDITIONS, paper_initial_condition
from teng_eq.reference import (
    ExactFourier,
    Pseudospectral,
    SpectralSolution,
    etdrk4,
    etdrk4_coefficients,
    reference_solution,
    save_npz,
)

TWO_PI = 2.0 * math.pi


def heat_exact(eq, times, n_modes=64):
    return ExactFourier(n_modes).solution(eq, np.asarray(times, dtype=np.float64))


#: ETDRK4 on the heat equation (degree 1), to check it against the exact solution.
HEAT_ETDRK4 = Pseudospectral(degree=1, resolution=((math.inf, 64, 1e-2),))


def mesh(m, lengths=(TWO_PI, TWO_PI)):
    return np.meshgrid(*grid_axes(m, lengths), indexing="ij")


# --- interpolation ---------------------------------------------------------------------


def band_limited(x, y):
    # cos(8x), cos(8y)cos(x) sit on the Nyquist modes of the 16-point grid.
    return (np.cos(3 * x) * np.sin(2 * y) + 0.3 * np.cos(8 * x)
            + 0.2 * np.cos(8 * y) * np.cos(x) + 0.1)


#: Operations of :func:`band_limited` per point, and the sum of its terms' amplitudes
#: (a bound on |u| and on every term's size): its round-off is ≤ pointwise_roundoff(16, 1.6).
BAND_LIMITED_OPS, BAND_LIMITED_SCALE = 16, 1.6


def interpolation_bound(n, m, values, ops, scale):
    """Round-off of sampling on the m-grid the interpolant of a field given on the
    n-grid (an rfft2 of n² points, an irfft2 of m²), against ``values`` (the field on
    the m-grid) evaluated in closed form in ``ops`` operations of size ``scale``."""
    return fft_roundoff(fft_levels(n * n, m * m), np.linalg.norm(values)) + pointwise_roundoff(ops, scale)


def band_limited_solution(n=16) -> SpectralSolution:
    x, y = mesh(n)
    coef = np.fft.rfft2(band_limited(x, y))[None]
    return SpectralSolution(np.array([0.0]), coef, (TWO_PI, TWO_PI))


def test_at_same_size_is_irfft2():
    sol = band_limited_solution()
    # scipy's FFT and NumPy's may differ in the last bits: each within the FFT bound
    # (measured: 0 on this machine).
    ifft = np.fft.irfft2(sol.coef[0], s=(16, 16))
    bound = 2 * fft_roundoff(fft_levels(16 * 16), np.linalg.norm(ifft))
    np.testing.assert_allclose(sol.at(0, 16), ifft, rtol=0, atol=bound)


@pytest.mark.parametrize("m", [32, 37, 64])
def test_at_interpolates_band_limited_exactly(m):
    """Exact but for round-off: measured ≤ 5.0e-15 (m = 64) against a bound of 8.0e-13."""
    x, y = mesh(m)
    u = band_limited(x, y)
    bound = interpolation_bound(16, m, u, BAND_LIMITED_OPS, BAND_LIMITED_SCALE)
    np.testing.assert_allclose(band_limited_solution().at(0, m), u, rtol=0, atol=bound)


@pytest.mark.parametrize("m", [8, 12])
def test_at_coarser_samples_exactly(m):
    """m < N aliases (folds) the spectrum, which samples the interpolant exactly (to
    round-off: measured 2.7e-15 at m = 12 against a bound of 1.3e-13, the tightest, 47×)."""
    x, y = mesh(m)
    u = band_limited(x, y)
    bound = interpolation_bound(16, m, u, BAND_LIMITED_OPS, BAND_LIMITED_SCALE)
    np.testing.assert_allclose(band_limited_solution().at(0, m), u, rtol=0, atol=bound)


def test_at_non_square_domain():
    lengths = (2.0, 3.0)
    x, y = mesh(12, lengths)

    def f(x, y):
        return np.sin(2 * math.pi * 2 * x / 2.0) * np.cos(2 * math.pi * 3 * y / 3.0)

    sol = SpectralSolution(np.array([0.0]), np.fft.rfft2(f(x, y))[None], lengths)
    xm, ym = mesh(40, lengths)
    u = f(xm, ym)
    np.testing.assert_allclose(sol.at(0, 40), u, rtol=0, atol=interpolation_bound(12, 40, u, 12, 1.0))


# --- ETDRK4 weights, step sizes ---------------------------------------------------------


def test_etdrk4_coefficients_limits_and_closed_forms():
    z = np.array([-1e-9, -0.3, -1.0, -2.0, -50.0, -1e3])
    _, e, q, f1, f2, f3 = etdrk4_coefficients(z)
    np.testing.assert_allclose(e, np.exp(z), rtol=1e-15, atol=0)
    # z → 0: Q → 1/2, f₁, f₂, f₃ → 1/6 (to O(z)).
    np.testing.assert_allclose([q[0], f1[0], f2[0], f3[0]], [0.5, 1 / 6, 1 / 6, 1 / 6], rtol=1e-8, atol=0)
    # |z| large: the closed forms have no cancellation.
    zz = z[-2:]
    ez = np.exp(zz)
    np.testing.assert_allclose(q[-2:], (np.exp(zz / 2) - 1) / zz, rtol=1e-13, atol=0)
    np.testing.assert_allclose(f1[-2:], (-4 - zz + ez * (4 - 3 * zz + zz**2)) / zz**3, rtol=1e-13, atol=0)
    np.testing.assert_allclose(f2[-2:], (2 + zz + ez * (zz - 2)) / zz**3, rtol=1e-13, atol=0)
    np.testing.assert_allclose(f3[-2:], (-4 - 3 * zz - zz**2 + ez * (4 - zz)) / zz**3, rtol=1e-13, atol=0)
    # Taylor series (from f₁ = φ₁ − 3φ₂ + 4φ₃, f₂ = φ₂ − 2φ₃, f₃ = −φ₂ + 4φ₃,
    # φ_j = Σ zᵏ/(k+j)!) at z = −10⁻⁹, −0.3, −1, −2, where the closed forms cancel.
    for i in (0, 1, 2, 3):
        zs = z[i]
        t1 = sum((k + 1) ** 2 * zs**k / math.factorial(k + 3) for k in range(40))
        t2 = sum((k + 1) * zs**k / math.factorial(k + 3) for k in range(40))
        t3 = sum((1 - k) * zs**k / math.factorial(k + 3) for k in range(40))
        tq = sum(zs**k / (2 ** (k + 1) * math.factorial(k + 1)) for k in range(40))
        np.testing.assert_allclose([f1[i], f2[i], f3[i], q[i]], [t1, t2, t3, tq], rtol=1e-13, atol=0)


def test_step_sizes_hit_every_time():
    plan = etdrk4._step_sizes(np.array([0.0, 0.5, 1.0, 1.25, 1.25]), 0.2)
    assert [s for _, s in plan] == [0, 3, 3, 2, 0]
    np.testing.assert_allclose([h * s for h, s in plan], [0, 0.5, 0.5, 0.25, 0], rtol=1e-15, atol=0)
    assert all(h <= 0.2 for h, _ in plan)


# --- heat ------------------------------------------------------------------------------


def test_heat_exact_initial_condition():
    """64 modes resolve the paper's u₀ to round-off, on any grid."""
    eq = make_equation("heat")
    sol = heat_exact(eq, [0.0])
    x, y = mesh(96)
    u0 = paper_initial_condition(np.stack([x, y]))
    assert np.abs(sol.at(0, 96) - u0).max() < 1e-15 * 10 * np.abs(u0).max()


def test_heat_exact_single_mode():
    """û(t) = e^{−ν|k|²t} û(0): check on the coefficient of the largest mode directly."""
    eq = make_equation("heat")
    sol = heat_exact(eq, [0.0, 1.0, 4.0])
    coef = np.stack([sol.spectrum(k) for k in range(3)])
    i, j = np.unravel_index(np.argmax(np.abs(coef[0])), coef[0].shape)
    m1 = np.fft.fftfreq(sol.n, 1.0 / sol.n)[i]
    decay = np.exp(-eq.nu * (m1**2 + j**2) * np.array([0.0, 1.0, 4.0]))
    np.testing.assert_allclose(coef[:, i, j], decay * coef[0, i, j], rtol=1e-14, atol=0)


def two_modes(x):
    xp = jnp if isinstance(x, jax.Array) else np  # an initial condition runs traced too
    return xp.sin(x[0]) * xp.sin(x[1]) + 0.5 * xp.cos(2 * x[0] + x[1])


def test_other_initial_condition_heat_analytic(monkeypatch):
    """u = e^{−2νt} sin x sin y + ½ e^{−5νt} cos(2x + y), from a registered u₀."""
    monkeypatch.setitem(SQUARE_INITIAL_CONDITIONS, "two_modes", two_modes)
    eq = make_equation("heat", "equation.initial_condition=two_modes")
    nu, t = eq.nu, 1.5
    x, y = mesh(24)
    exact = (np.exp(-2 * nu * t) * np.sin(x) * np.sin(y)
             + 0.5 * np.exp(-5 * nu * t) * np.cos(2 * x + y))
    # The closed form: ~20 operations on terms of size ≤ 1.5; the spectral solutions:
    # u₀'s rfft2 on 16², the decay (one exp and product per mode: its relative round-off,
    # 2ε, is inside the FFT bound's margin) and irfft2 on 24². ETDRK4 (15 steps of 0.1)
    # adds per step and mode its combination of four stages: ≤ 20 operations on
    # coefficients whose inverse transform is ≤ 1.5. Measured: 1.0e-15, 1.2e-15.
    closed_form = interpolation_bound(16, 24, exact, 20, 1.5)
    sol = heat_exact(eq, [t], n_modes=16)
    np.testing.assert_allclose(sol.at(0, 24), exact, rtol=0, atol=closed_form)
    num = HEAT_ETDRK4.solution(eq, [t], n=16, dt=0.1, cache_dir=False)
    np.testing.assert_allclose(num.at(0, 24), exact, rtol=0,
                               atol=closed_form + pointwise_roundoff(15 * 20, 1.5))


def test_heat_spectral_solve_matches_exact():
    eq = make_equation("heat")
    times = [1.0, 4.0]
    exact = heat_exact(eq, times)
    num = HEAT_ETDRK4.solution(eq, times, n=64, dt=0.01, cache_dir=False)
    for k, t in enumerate(times):
        # ETDRK4 is exact on a linear equation but for round-off: per step and mode ≤ 20
        # operations (relative ≤ 20ε each), then the transforms to the 128² grid
        # (relative ≤ levels·η). Measured 3.3e-15 (T = 1) and 1.2e-14 (T = 4); bounds 4.7e-13
        # and 1.8e-12.
        steps = round(t / 0.01)
        bound = 20 * steps * EPS + fft_levels(64 * 64, 128 * 128) * FFT_LEVEL
        assert rel_l2(num.at(k, 128), exact.at(k, 128)) < bound


# --- Allen–Cahn, Burgers: self-convergence ----------------------------------------------


@pytest.mark.parametrize("name", ["allen_cahn", pytest.param("burgers", marks=pytest.mark.slow)])
def test_self_convergence_t1_defaults(name):
    d_modes, d_steps = self_convergence(name, 1.0, *make_equation(name).reference_scheme().default(1.0))
    assert d_modes < 1e-10 and d_steps < 1e-10, (d_modes, d_steps)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["allen_cahn", pytest.param("burgers", marks=pytest.mark.manual)])
def test_self_convergence_t4_defaults(name):
    """Burgers' is `manual` (about 25 minutes alone on 2 cores: too long for CI, README)."""
    d_modes, d_steps = self_convergence(name, 4.0, *make_equation(name).reference_scheme().default(4.0))
    assert d_modes < 1e-10 and d_steps < 1e-10, (d_modes, d_steps)


def test_default_resolution_by_horizon_and_viscosity():
    scheme = make_equation("burgers").reference_scheme()
    assert scheme.default(0.5) == scheme.default(1.0)
    assert scheme.default(4.0)[0] > scheme.default(1.0)[0]
    assert scheme.default(10.0) == scheme.default(4.0)
    # Smaller ν, steeper fronts: more modes at every horizon.
    thin = make_equation("burgers", "equation.nu=0.003").reference_scheme()
    assert all(thin.default(t)[0] > scheme.default(t)[0] for t in (1.0, 4.0))
    assert make_equation("heat").reference_scheme() == ExactFourier(64)


def test_spectral_solve_outputs_requested_times():
    eq = make_equation("burgers")
    sol = reference_solution(eq, [0.0, 0.01, 0.025], n=32, dt=0.004, cache_dir=False)
    np.testing.assert_array_equal(sol.times, [0.0, 0.01, 0.025])
    x, y = mesh(32)
    # The state keeps |m| < 16: u₀ on the grid less its Nyquist modes (3.4e-12 here: the
    # paper's u₀ is not band-limited), to FFT round-off.
    u0 = paper_initial_condition(np.stack([x, y]))
    spectrum = np.fft.rfft2(u0)
    nyquist = np.zeros_like(spectrum)
    nyquist[16, :], nyquist[:, 16] = spectrum[16, :], spectrum[:, 16]
    expected = u0 - np.fft.irfft2(nyquist, s=(32, 32))
    bound = 2 * fft_roundoff(fft_levels(32 * 32, 32 * 32), np.linalg.norm(u0))
    np.testing.assert_allclose(sol.at(0, 32), expected, rtol=0, atol=bound)
    # Stopping at 0.01 changes the steps (3 of 1/300 + 4 of 0.00375, not 7 of 0.025/7),
    # not the answer beyond the O(h⁴) step error.
    direct = reference_solution(eq, [0.025], n=32, dt=0.004, cache_dir=False)
    assert rel_l2(sol.at(2, 32), direct.at(0, 32)) < 1e-12


# --- cache, output ---------------------------------------------------------------------


def test_reference_solution_cache(tmp_path, monkeypatch):
    eq = make_equation("allen_cahn")
    times = np.array([0.0, 0.05, 0.1])
    first = reference_solution(eq, times, cache_dir=tmp_path, n=32, dt=0.01)
    files = list(tmp_path.glob("reference-*.npz"))
    assert len(files) == 1 and not list(tmp_path.glob(".reference-*"))

    def fail(*args, **kwargs):
        raise AssertionError("recomputed despite the cache")

    monkeypatch.setattr(etdrk4, "solve", fail)
    second = reference_solution(eq, times, cache_dir=tmp_path, n=32, dt=0.01)
    for k in range(3):
        np.testing.assert_array_equal(second.spectrum(k), first.spectrum(k))
    np.testing.assert_array_equal(second.times, first.times)
    assert second.lengths == first.lengths
    # Another key (here: the times, the initial condition, ν) is another file.
    monkeypatch.undo()
    reference_solution(eq, times[:2], cache_dir=tmp_path, n=32, dt=0.01)
    monkeypatch.setitem(SQUARE_INITIAL_CONDITIONS, "two_modes", two_modes)
    other = reference_solution(make_equation("allen_cahn", "equation.initial_condition=two_modes"), times,
                               cache_dir=tmp_path, n=32, dt=0.01)
    reference_solution(make_equation("allen_cahn", "equation.nu=0.01"), times, cache_dir=tmp_path, n=32,
                       dt=0.01)
    assert len(list(tmp_path.glob("reference-*.npz"))) == 4
    assert not np.allclose(other.spectrum(0), first.spectrum(0))


def test_exact_references_are_not_cached(tmp_path, monkeypatch):
    """The exact scheme costs less than reading a file: nothing is written, not even
    to $TENG_EQ_CACHE; an ETDRK4 one goes there by default."""
    monkeypatch.setenv("TENG_EQ_CACHE", str(tmp_path / "env"))
    reference_solution(make_equation("heat"), [0.5])
    assert not (tmp_path / "env").exists()
    eq = make_equation("burgers")
    reference_solution(eq, [0.01], n=16, dt=0.01, cache_dir=False)
    assert not (tmp_path / "env").exists()
    reference_solution(eq, [0.01], n=16, dt=0.01)
    assert len(list((tmp_path / "env").glob("reference-*.npz"))) == 1


def test_save_npz(tmp_path):
    """``u[k, i, j] = u(x_i, y_j, t_k)`` on the grid, ``x`` the points; at t = 0 u₀."""
    eq = make_equation("heat")
    sol = heat_exact(eq, [0.0, 1.0])
    path = save_npz(tmp_path / "ref.data", eq, sol, 48)
    assert path == tmp_path / "ref.data"
    with np.load(path) as data:
        np.testing.assert_array_equal(data["t"], [0.0, 1.0])
        assert data["u"].shape == (2, 48, 48) and data["u"].dtype == np.float64
        np.testing.assert_array_equal(data["x"], np.asarray(eq.evaluation(48).points))
        x, y = mesh(48)
        u0 = paper_initial_condition(np.stack([x, y]))
        # u₀ through the 64-mode spectrum to the 48² grid: its truncation is far below
        # round-off (module docstring of teng_eq.equations.heat); measured 7.2e-16.
        bound = interpolation_bound(64, 48, u0, 20, np.abs(u0).max())
        np.testing.assert_allclose(data["u"][0], u0, rtol=0, atol=bound)


# --- pipeline/reference.py -------------------------------------------------------------


def test_script_writes_npz(tmp_path):
    proc = run_script("reference.py", "equation=allen_cahn", "t_final=0.1", "save_times=[0.05,0.1]",
                      "grid=64", "out=ref.npz", "n=32", f"cache_dir={tmp_path / 'cache'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "ref.npz") as data:
        np.testing.assert_array_equal(data["t"], [0.05, 0.1])
        assert data["u"].shape == (2, 64, 64)
        expected = reference_solution(make_equation("allen_cahn"), [0.05, 0.1], n=32, cache_dir=False)
        np.testing.assert_allclose(data["u"], [expected.at(k, 64) for k in range(2)], rtol=0, atol=1e-15)
    # No Hydra output folders or logs beside the result.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "ref.npz"]


def test_script_rejects_save_times_outside_horizon(tmp_path):
    proc = run_script("reference.py", "t_final=0.1", "save_times=[0.05,0.2]", "cache_dir=false", cwd=tmp_path)
    assert proc.returncode != 0
    assert "save_times" in proc.stderr and "0.2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_script_rejects_a_bad_equation_value(tmp_path):
    proc = run_script("reference.py", "equation.nu=-1", "cache_dir=false", cwd=tmp_path)
    assert proc.returncode != 0
    assert "equation.nu=-1" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
