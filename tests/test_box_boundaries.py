"""Boxes with sides: the quadratures, the fits' flux rows against autodiff, the eigenfunction
series, the boundary block's checks, and TENG on the square with Dirichlet and Neumann sides."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, make_config, make_equation

from teng_eq import api
from teng_eq.domains.base import BoundaryPart
from teng_eq.domains.bounded import BoxDomain, other_order
from teng_eq.equations import operator
from teng_eq.equations.heat_box import HeatBox
from teng_eq.errors import ConfigError
from teng_eq.fit.stage import StageSolver
from teng_eq.network.imposed import Imposed
from teng_eq.network.paper import TENGNet
from teng_eq.network.space import ParamSpace

#: A 2-D box with one side of each kind (x periodic would make it three): x ∈ [−1, 1], y ∈ [0.5, 2].
MIXED = BoxDomain((-1.0, 0.5), (2.0, 1.5), (
    BoundaryPart("xmin", "dirichlet", 0.0), BoundaryPart("xmax", "neumann", 0.0),
    BoundaryPart("ymin", "robin", 0.0, 2.0, 0.5), BoundaryPart("ymax", "dirichlet", 1.0)), 0.7)


def test_the_box_quadratures_integrate_polynomials_and_their_sides_carry_surface_weights():
    """Inside, n Gauss–Legendre nodes per axis integrate x^a y^b exactly for a, b ≤ 2n − 1; the
    sides' points lie on their sides, weigh boundary_weight × length, Dirichlet ones first and
    the flux rows (Neumann, Robin) last with their outward normals and (α, β)."""
    n = 6
    q = MIXED.quadrature(n)
    inner = ~np.asarray(q.boundary)
    x, y = np.asarray(q.points).T
    w = np.asarray(q.weights)
    for a, b in [(0, 0), (3, 8), (11, 11)]:
        exact = (1 - (-1) ** (a + 1)) / (a + 1) * (2.0 ** (b + 1) - 0.5 ** (b + 1)) / (b + 1)
        assert np.sum(w[inner] * x[inner] ** a * y[inner] ** b) == pytest.approx(exact, rel=1e-13)
    assert inner.sum() == n * n and q.points.shape[0] == MIXED.point_count(n) == n * n + 4 * n
    # Dirichlet xmin, ymax first (n each), then xmax (neumann), ymin (robin): the flux rows.
    edge = np.asarray(q.points)[n * n:]
    np.testing.assert_array_equal(edge[:n, 0], -1.0)
    np.testing.assert_array_equal(edge[n:2 * n, 1], 2.0)
    np.testing.assert_array_equal(edge[2 * n:3 * n, 0], 1.0)
    np.testing.assert_array_equal(edge[3 * n:, 1], 0.5)
    side_weights = [w[n * n:][i * n:(i + 1) * n].sum() for i in range(4)]
    np.testing.assert_allclose(side_weights, 0.7 * np.array([1.5, 2, 1.5, 2]), rtol=1e-14)
    normals, alpha, beta = (np.asarray(v) for v in q.flux)
    np.testing.assert_array_equal(normals, [[1.0, 0.0]] * n + [[0.0, -1.0]] * n)
    np.testing.assert_array_equal(np.stack([alpha, beta], 1), [[0.0, 1.0]] * n + [[2.0, 0.5]] * n)
    assert MIXED.embedding_periods == (4.0, 3.0) and MIXED.periods is None


def test_held_out_and_boundary_points_are_none_of_the_fits_nodes():
    """The held-out grid's nodes and the boundary metric's side points miss every fit node."""
    for n, m in [(8, 8), (9, 3), (16, 8), (7, 7)]:
        fit = np.asarray(MIXED.quadrature(n).points)
        for other in (np.asarray(MIXED.holdout(n, m).points), np.asarray(MIXED.boundary_points(m).points)):
            gaps = np.min(np.max(np.abs(other[:, None, :] - fit[None, :, :]), axis=2), axis=1)
            assert gaps.min() > 1e-6 or other_order(n, m) == n, (n, m)


def test_boundary_data_is_each_sides_own():
    """The data of the side a point is on: 1 on ymax, 0 elsewhere; a function of (x, t) as given."""
    q = MIXED.quadrature(5)
    data = np.asarray(MIXED.boundary_data(q.points, 0.3))
    on_top = np.asarray(q.points)[:, 1] == 2.0
    np.testing.assert_array_equal(data, np.where(on_top, 1.0, 0.0))
    moving = BoxDomain((0.0,), (1.0,), (BoundaryPart("xmin", "dirichlet", lambda x, t: jnp.sin(t) + 0 * x[0]),
                                         BoundaryPart("xmax", "neumann", 2.0)), 1.0)
    q1 = moving.quadrature(4)
    np.testing.assert_allclose(np.asarray(moving.boundary_data(q1.points, 0.5))[-2:], [np.sin(0.5), 2.0])


def test_flux_rows_are_the_parameter_derivatives_of_alpha_u_plus_beta_du_dn():
    """The stage solver's factored rows and values on the flux rows equal autodiff's
    ∂(αû + β∂ₙû)/∂θ and αû + β∂ₙû (value rows: ∂û/∂θ and û), on a small network."""
    net = TENGNet(dim=2, features=2, width=5, depth=3, lengths=MIXED.embedding_periods,
                  key=jax.random.PRNGKey(3))
    space = ParamSpace(net)
    q = MIXED.quadrature(3)
    solver = StageSolver(space, q, "cholesky", 1e-7, flux=True)
    theta = space.flatten(net) + 0.1 * jax.random.normal(jax.random.PRNGKey(4), (space.size,))
    k = q.flux.normals.shape[0]

    def observed(th):
        u = space.apply(th, q.points)
        du = jax.jvp(lambda p: space.apply(th, p), (q.points[-k:],), (q.flux.normals,))[1]
        return u.at[-k:].set(q.flux.alpha * u[-k:] + q.flux.beta * du)

    subset = jnp.arange(0, space.size, 3)
    f = solver.factors(theta)
    rows = jnp.concatenate(solver.rows(f, subset))
    np.testing.assert_allclose(f.u, observed(theta), rtol=0, atol=1e-13)
    np.testing.assert_allclose(rows, jax.jacfwd(observed)(theta)[:, subset].T, rtol=0, atol=1e-12)
    values_only = jax.jacfwd(space.apply)(theta, q.points)[-k:, subset].T
    assert float(jnp.max(jnp.abs(rows[:, -k:] - values_only))) > 1e-3


@pytest.mark.parametrize("name", ["heat_box_dirichlet", "heat_box_neumann"])
def test_the_eigenfunction_series_converges_and_solves_heat_with_its_sides(name):
    """The series of 16 and 32 modes per axis agree with u₀ to 1e-12 at t = 0 (spectral
    convergence; 8 modes do not); at t = 0.3 the series satisfies ∂ₜu = νΔu inside and its side
    condition on the sides (by finite differences of the series itself, to their error)."""
    eq = make_equation(name)
    points = np.asarray(eq.evaluation(20).points)
    u0 = np.asarray(eq.u0(points.T))
    coarse, fine = (eq.reference([0.0, 0.3], n=n) for n in (8, 32))
    assert np.max(np.abs(fine.values(0, 20) - u0)) <= 1e-12 * np.max(np.abs(u0))
    assert np.max(np.abs(coarse.values(0, 20) - u0)) > 1e-9
    series, t, h = eq.reference([0.0], n=32), 0.3, 1e-4
    inside = points[np.all((points > 0.1) & (points < 0.9), axis=1)]
    u_t = (series.at(inside, t + h) - series.at(inside, t - h)) / (2 * h)
    lap = sum((series.at(inside + e, t) - 2 * series.at(inside, t) + series.at(inside - e, t)) / h**2
              for e in np.eye(2) * h)
    np.testing.assert_allclose(u_t, eq.nu * lap, rtol=0, atol=2e-5 * np.max(np.abs(u_t)))
    side = np.stack([np.zeros(9), np.linspace(0.05, 0.95, 9)], 1)
    if name.endswith("dirichlet"):
        assert np.max(np.abs(series.at(side, t))) <= 1e-12
    else:
        # ∂ₙu by the one-sided second-order difference (error ≈ h²/3 |u'''| ≈ 1e-8).
        u0, u1, u2 = (series.at(side + [j * h, 0], t) for j in range(3))
        du = (-3 * u0 + 4 * u1 - u2) / (2 * h)
        assert np.max(np.abs(du)) <= 1e-6 * np.max(np.abs(series.at(side, t)))


@pytest.mark.parametrize(("override", "says"), [
    ("equation.boundary.xmin.kind=wall", "unknown, choose one of"),
    ("~equation.boundary.ymax", "equation.boundary.ymax"),
    ("+equation.boundary.zmin={kind: dirichlet}", "equation.boundary.zmin"),
    ("equation.boundary.xmin.kind=periodic", "periodic on both of its sides or on neither"),
    ("equation.boundary.xmax.kind=robin", "missing: robin is"),
    ("equation.boundary.xmin.value=wall", "has no method wall(self, x, t)"),
    ("equation.boundary.ymin.value=0.5", "differs from u₀ on side ymin at t = 0 by up to 0.5"),
    ("equation.origin=[0.0]", "equation.origin"),
    ("equation.enforce=both", "must be one of rows, exact"),
    (("equation.enforce=exact",
      *[f"equation.boundary.{side}.kind=neumann" for side in ("xmin", "xmax", "ymin", "ymax")]),
     "needs Dirichlet sides whose data are one constant (here no Dirichlet side)"),
])
def test_a_bad_boundary_block_is_one_line_before_any_compute(override, says):
    """Each mistake in a boundary block is one ConfigError line naming the key."""
    with pytest.raises(ConfigError) as err:
        overrides = override if isinstance(override, tuple) else (override,)
        make_config("equation=heat_box_dirichlet", *overrides)
    assert says in str(err.value) and "\n" not in str(err.value)


class HostData(HeatBox):
    """Side data that leave JAX (a Python float of a traced value): not traceable."""

    def wall(self, x, t):
        return float(x[0][0]) * 0.0 + 0.0 * x[0]


def test_side_data_that_do_not_trace_are_one_line_naming_the_method():
    """A data function that cannot run under ``jax.jit`` is refused before θ₀, in one line."""
    with pytest.raises(ConfigError) as err:
        make_config("equation=heat_box_dirichlet", "equation.impl=test_box_boundaries:HostData",
                    "equation.boundary.xmin.value=wall")
    assert "equation.boundary.xmin.value='wall'" in str(err.value) and "traced" in str(err.value)
    assert "\n" not in str(err.value)


def test_the_steps_that_need_a_periodic_grid_refuse_a_box_in_one_line():
    """The baselines say in one line that they need a periodic domain (implicit TENG runs on a
    box: tests/test_box_implicit.py)."""
    with pytest.raises(ConfigError) as err:
        make_config("equation=heat_box_dirichlet", "method=pinn_bfgs")
    assert "periodic" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("name", "grid", "bound"), [  # 25–45 s each: slow (the default suite's 15 minutes)
    pytest.param("heat_box_dirichlet", 24, 1e-5, marks=pytest.mark.slow),
    pytest.param("heat_box_moving", 24, 1e-5, marks=pytest.mark.slow),
    pytest.param("heat_box_neumann", 32, 1e-4, marks=pytest.mark.slow)])
def test_teng_follows_heat_on_the_square_with_its_sides(name, grid, bound, cache_dir):
    """TENG-RK4 on a small square (a cheap θ₀, 5 steps of 0.005, 256/192 parameters drawn): the
    error against the exact reference stays below ``bound`` and the side condition's residual
    (``boundary_error``) below ``bound`` × max |u| at every step. Measured (2026-12-02): Dirichlet
    1.5e-6 and 5.1e-6 (24 nodes), moving Dirichlet data 2.7e-7 and 2.4e-6 (24), Neumann 8.0e-6
    and 5.4e-5 (32 nodes; at 24 with these settings its steps diverge, at 48 and the presets'
    settings it ends at 3.6e-7 at T = 1: docs/guides/boundaries.md)."""
    records = []
    result = api.run(name, f"grid={grid}", "eval_grid=24", "dt=0.005", "t_final=0.025", "method=teng_rk4",
                     "subsample_first=256", "subsample=192", "progress=false", *CHEAP_FIT,
                     cache_dir=cache_dir, on_step=records.append)
    err = np.asarray(result.rel_l2)
    assert len(err) == 6 and np.all(err <= bound)
    scale = np.max(np.abs(make_equation(name).reference([0.025]).values(0, 24)))
    boundary = np.array([r.metrics["boundary_error"] for r in records])
    assert boundary.shape == (6,) and np.all(boundary <= bound * scale)  # the start and 5 steps


def test_the_series_reference_of_a_box_operator_matches_the_operator():
    """The equation's operator on u₀ is νΔu₀ (the short form on the box's points)."""
    eq = make_equation("heat_box_dirichlet")
    pts = jnp.asarray(eq.evaluation(6).points)
    lap = jax.vmap(lambda p: jnp.trace(jax.hessian(lambda q: eq.u0(q))(p)))(pts)
    np.testing.assert_allclose(operator(eq, jax.vmap(eq.u0), pts), eq.nu * lap, rtol=1e-12, atol=1e-12)


@pytest.mark.slow  # the squares on 48² nodes: minutes each (docs/claims.md), by hand
@pytest.mark.parametrize(("name", "grid"), [pytest.param("heat_box_dirichlet", 48, marks=pytest.mark.manual),
                                            pytest.param("heat_box_neumann", 48, marks=pytest.mark.manual),
                                            pytest.param("heat_box_moving", 48, marks=pytest.mark.manual),
                                            ("heat_line_robin", 32)])
def test_heat_with_sides_reaches_1e_6_at_t_1(name, grid, cache_dir):
    """The acceptance runs (docs/guides/boundaries.md, "Measured"): TENG-RK4 at the presets' Δt, to T = 1:
    global relative L² error ≤ 1e-6 against the exact series or closed form, and the side
    condition's residual ≤ 1e-6 of max |u(T)| at every step."""
    records = []
    result = api.run(name, f"grid={grid}", "eval_grid=64", "method=teng_rk4", "progress=false",
                     cache_dir=cache_dir, on_step=records.append)
    scale = np.max(np.abs(make_equation(name).reference([1.0]).values(0, 64)))  # max |u| decays: at T
    assert result.times[-1] == pytest.approx(1.0) and result.global_rel_l2 <= 1e-6
    assert max(r.metrics["boundary_error"] for r in records) <= 1e-6 * scale


def test_the_imposed_ansatz_holds_its_data_and_keeps_the_factored_jacobian():
    """u = c + φN on MIXED's sides with the data 1 on both Dirichlet ones (xmin, ymax): exactly c
    on those sides, ∂φ/∂n = 0 on the opposite Neumann/Robin sides, and the factored Jacobian rows
    (φ Gᵀ ∘ Hᵀ) equal autodiff's ∂u/∂θ."""
    parts = (BoundaryPart("xmin", "dirichlet", 1.0), *MIXED.parts[1:3],
             BoundaryPart("ymax", "dirichlet", 1.0))
    box = BoxDomain(MIXED.origin, MIXED.lengths, parts, 0.7, exact=True)
    net = TENGNet(dim=2, features=2, width=5, depth=3, lengths=box.embedding_periods,
                  key=jax.random.PRNGKey(1))
    imposed = Imposed(net, *box.imposition())
    assert imposed.value == 1.0 and imposed.axes == ((-1.0, 2.0, True, False), (0.5, 1.5, False, True))
    edge = jnp.array([[-1.0, 0.7], [0.3, 2.0], [-1.0, 2.0]])
    np.testing.assert_array_equal(imposed(edge), 1.0)
    grad = jax.vmap(jax.grad(imposed.factor))(jnp.array([[1.0, 0.9], [0.2, 0.5]]))
    np.testing.assert_allclose([grad[0, 0], grad[1, 1]], 0.0, atol=1e-15)  # ∂ₓφ at xmax, ∂ᵧφ at ymin
    space = ParamSpace(imposed)
    pts = jnp.asarray(box.quadrature(3).points)
    u, Gt, Ht = imposed.jacobian_factors_t(pts)
    gcol, hcol = imposed.factor_columns()
    np.testing.assert_allclose(u, space.apply(space.flatten(imposed), pts), atol=1e-14)
    np.testing.assert_allclose((Gt[gcol] * Ht[hcol]).T, jax.jacfwd(space.apply)(space.flatten(imposed), pts),
                               atol=1e-13)


def test_the_density_plot_draws_each_side_and_the_fields_at_their_nodes(tmp_path, monkeypatch):
    """On a box's Gauss–Legendre grid each panel is a colour mesh on the nodes themselves (an
    image would place them evenly), holding its field; every panel draws the four sides, in
    the style of their kind, and the legend names the kinds once."""
    from helpers.figures import assert_saved, keep_figures

    from teng_eq.analysis import plots

    figures = keep_figures(monkeypatch)
    ev = MIXED.evaluation(12)
    x, y = np.asarray(ev.points).T
    u = np.sin(x) * y
    snaps = {n: (u * (1 + 1e-3 * n), u) for n in (0, 1)}
    path = plots.density(tmp_path / "d.png", snaps, [0.0, 0.1], ev, title="box", edges=MIXED.edges())
    (fig,) = figures
    panels = fig.axes[:6]  # rows reference, TENG, difference; columns steps 0 and 1 (then the colour bars)
    expected = [u, u, u, u * 1.001, 0 * u, 1e-3 * u]
    for ax, want in zip(panels, expected, strict=True):
        mesh = ax.collections[0]
        np.testing.assert_allclose(np.asarray(mesh.get_array()).ravel(), want.reshape(12, 12).T.ravel(),
                                   rtol=0, atol=1e-15)
        lines = {(tuple(np.round(line.get_xdata(), 12)), tuple(np.round(line.get_ydata(), 12))):
                 line.get_linestyle() for line in ax.lines}
        assert lines == {((-1.0, -1.0), (0.5, 2.0)): "-", ((1.0, 1.0), (0.5, 2.0)): "--",
                         ((-1.0, 1.0), (0.5, 0.5)): "-.", ((-1.0, 1.0), (2.0, 2.0)): "-"}
    # The mesh's cells are centred on the nodes (nearest shading): its corners bracket them.
    corners = panels[0].collections[0].get_coordinates()
    nodes = np.unique(x)
    np.testing.assert_array_less(corners[0, :-1, 0], nodes)
    np.testing.assert_array_less(nodes, corners[0, 1:, 0])
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == ["dirichlet", "neumann", "robin"]
    assert_saved(path, fig, dpi=90)
