"""Heat on the periodic cube: the paper's coefficients, the exact reference against the
PDE and the initial condition, the 3-D periodic network."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.fft as sfft
from helpers.configs import make_config, make_equation
from helpers.figures import assert_saved, keep_figures
from helpers.numerics import pointwise_roundoff
from helpers.processes import run_script

from teng_eq.domains.quadrature import grid_points
from teng_eq.equations.heat3d import A000, A, B
from teng_eq.network.paper import parameter_count
from teng_eq.reference import save_npz

# --- 3-D heat ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def heat3d():
    return make_equation("heat3d")


#: Round-off of u₀ (or the exact solution) evaluated two ways as A₀₀₀ plus 16 terms (each
#: ≤ 8 operations: three cos/sin, their product, the decay, the weight), summed: ≤
#: (8 + 17)·ε·(|A₀₀₀| + Σ|A| + Σ|B|) each; twice that for their gap.
U0_ROUNDOFF = 2 * pointwise_roundoff(8 + 17, abs(A000) + float(np.abs(A).sum() + np.abs(B).sum()))


def closed_form_3d(x, t, nu):
    """A₀₀₀ + Σ e^{−ν|k|²t}(A_k Π cos kᵢxᵢ + B_k Π sin kᵢxᵢ), straight from the tables."""
    u = A000 + 0.0 * x[0]
    for k in itertools.product((1, 2), repeat=3):
        i = tuple(v - 1 for v in k)
        decay = math.exp(-nu * sum(v * v for v in k) * t)
        u = u + decay * (A[i] * np.prod([np.cos(k[d] * x[d]) for d in range(3)], axis=0)
                         + B[i] * np.prod([np.sin(k[d] * x[d]) for d in range(3)], axis=0))
    return u


def test_heat3d_table_entries(heat3d):
    """The initial condition carries the paper's coefficients: each product of cosines
    (sines) projects out A_k (B_k) on a grid that resolves it."""
    n = 8
    x = np.asarray(grid_points(n, heat3d.lengths)).T
    u0 = heat3d.u0(x)
    assert np.mean(u0) == pytest.approx(0.043, abs=1e-15)
    for k in itertools.product((1, 2), repeat=3):
        cos = np.prod([np.cos(k[d] * x[d]) for d in range(3)], axis=0)
        sin = np.prod([np.sin(k[d] * x[d]) for d in range(3)], axis=0)
        i = tuple(v - 1 for v in k)
        assert 8 * np.mean(u0 * cos) == pytest.approx(A[i], abs=1e-15)
        assert 8 * np.mean(u0 * sin) == pytest.approx(B[i], abs=1e-15)
    assert (A[0, 0, 0], A[1, 1, 0], B[0, 0, 0], B[0, 0, 1]) == (0.047, -0.02, -0.075, 0.074)


def test_heat3d_reference_is_initial_condition_at_zero(heat3d):
    ref = heat3d.reference([0.0, 1.0])
    x = np.asarray(heat3d.evaluation(12).points).T
    np.testing.assert_allclose(ref.values(0, 12), heat3d.u0(x), rtol=0, atol=U0_ROUNDOFF)
    np.testing.assert_allclose(ref.values(1, 12), closed_form_3d(x, 1.0, heat3d.nu), rtol=0, atol=U0_ROUNDOFF)


def test_heat3d_reference_satisfies_the_pde(heat3d):
    """Spectral residual ∂ₜu − νΔu: Δ by FFT of the reference's grid values at t, ∂ₜ by a
    4th-order central difference of the reference in time (error ~h⁴|ν|k|²|⁵ + ε/h)."""
    t, h, m = 0.7, 1e-3, 12
    ref = heat3d.reference([t - 2 * h, t - h, t, t + h, t + 2 * h])
    u = [ref.values(k, m).reshape((m,) * 3) for k in range(5)]
    dudt = (u[0] - 8 * u[1] + 8 * u[3] - u[4]) / (12 * h)
    k = [np.fft.fftfreq(m, 1.0 / m).reshape(s) for s in ((m, 1, 1), (1, m, 1), (1, 1, m))]
    lap = sfft.ifftn(-(k[0] ** 2 + k[1] ** 2 + k[2] ** 2) * sfft.fftn(u[2])).real
    assert np.abs(dudt - heat3d.nu * lap).max() <= 1e-10
    assert np.abs(dudt).max() > 1e-3  # a residual that could fail


def test_heat3d_network_is_periodic_in_three_dimensions(heat3d):
    cfg = make_config("equation=heat3d")
    net = cfg.method.cls.network_template(cfg.method.options, cfg.problem)
    x = jax.random.uniform(jax.random.PRNGKey(1), (20, 3), maxval=2 * math.pi)
    shift = jnp.array([2 * math.pi, -4 * math.pi, 2 * math.pi])
    np.testing.assert_allclose(jax.vmap(net)(x), jax.vmap(net)(x + shift), rtol=0, atol=1e-13)
    assert net.embedding.a.shape == (3, cfg.method.options.network.features)


def test_heat3d_cpu_default_is_a_coarse_grid():
    """``equation=heat3d`` alone sizes the run for a CPU (its yaml's ``cpu`` block, read by
    conf/config.yaml), while the command line still wins, and other equations keep the
    base grids."""
    cfg = make_config("equation=heat3d")
    o = cfg.method.options
    assert (o.grid, cfg.eval_grid, parameter_count(o.network, 3, cfg.equation.periods)) == (16, 32, 9221)
    assert make_config("equation=heat3d", "grid=20").method.options.grid == 20
    assert make_config().method.options.grid == 64


def test_heat3d_save_npz_and_script(tmp_path, heat3d):
    sol = heat3d.reference([0.0, 1.0])
    save_npz(tmp_path / "a.npz", heat3d, sol, 6)
    with np.load(tmp_path / "a.npz") as data:
        assert data["u"].shape == (2, 6, 6, 6)
        # Measured 1.5e-16 (bound U0_ROUNDOFF, 5.9e-15).
        np.testing.assert_allclose(data["u"][0].ravel(), heat3d.u0(data["x"].T), rtol=0, atol=U0_ROUNDOFF)
    proc = run_script("reference.py", "equation=heat3d", "t_final=0.5", "grid=8", "out=ref.npz",
                      "cache_dir=false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "ref.npz") as data:
        assert data["u"].shape == (1, 8, 8, 8)
        np.testing.assert_allclose(data["u"][0].ravel(), heat3d.reference([0.5]).values(0, 8), rtol=0,
                                   atol=1e-15)


def test_density_plot_of_a_3d_run_is_a_slice(tmp_path, heat3d, monkeypatch):
    """The density figure of a 3-D run draws the mid-plane x₃ = π (it says so in its title):
    each panel's data is that slice of its field (x along the horizontal axis)."""
    from teng_eq.analysis import plots

    figures = keep_figures(monkeypatch)
    ev = heat3d.evaluation(8)
    x = np.asarray(ev.points).T
    u0 = heat3d.u0(x)
    snaps = {n: (u0 + 1e-3 * n, u0) for n in (0, 2)}
    path = plots.density(tmp_path / "d.png", snaps, [0.0, 0.1, 0.2], ev, title="heat3d")
    (fig,) = figures
    assert fig._suptitle.get_text() == "heat3d, x₃ = 3.14"
    mid = u0.reshape(8, 8, 8)[:, :, 4].T
    assert np.asarray(ev.points).reshape(8, 8, 8, 3)[0, 0, 4, 2] == pytest.approx(math.pi, rel=1e-15)
    # Rows reference, TENG, difference; columns steps 0 and 2.
    panels = [np.asarray(ax.images[0].get_array()) for ax in fig.axes if ax.images]
    expected = [mid, mid, mid, mid + 2e-3, 0 * mid, 0 * mid + 2e-3]
    assert len(panels) == 6
    for panel, want in zip(panels, expected, strict=True):
        np.testing.assert_allclose(panel, want, rtol=0, atol=1e-15)
    assert_saved(path, fig, dpi=90)
