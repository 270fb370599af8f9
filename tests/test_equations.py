"""Equations: each conf/equation/*.yaml builds its class and declares what the rest of the
code asks of it; operators by autodiff against calculus; initial conditions."""

from __future__ import annotations

import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import CONF, make_config, make_equation
from scipy.spatial import cKDTree

from teng_eq.equations import build_equation, operator
from teng_eq.equations.periodic import paper_initial_condition
from teng_eq.errors import ConfigError

EQUATIONS = sorted(p.stem for p in (CONF / "equation").glob("*.yaml"))


def f(x):
    return jnp.sin(x[:, 0]) * jnp.cos(2 * x[:, 1]) + 0.5


def f_exact(x):
    """(u, ∂₁u, ∂₂u, Δu) of ``f``."""
    s1, c1, c2, s2 = np.sin(x[:, 0]), np.cos(x[:, 0]), np.cos(2 * x[:, 1]), np.sin(2 * x[:, 1])
    u = s1 * c2 + 0.5
    return u, c1 * c2, -2 * s1 * s2, -5 * s1 * c2


@pytest.mark.parametrize(
    "name, nonlinear",
    [
        ("heat", lambda u, g1, g2: 0 * u),
        ("allen_cahn", lambda u, g1, g2: u - u**3),
        ("burgers", lambda u, g1, g2: -u * (g1 + g2)),
    ],
)
def test_operator_by_autodiff_matches_calculus(name, nonlinear):
    eq = make_equation(name)
    x = np.random.default_rng(0).uniform(0, 2 * math.pi, (50, 2))
    got = operator(eq, f, jnp.asarray(x))
    u, g1, g2, lap = f_exact(x)
    assert got.shape == (50,)
    np.testing.assert_allclose(got, eq.nu * lap + nonlinear(u, g1, g2), rtol=0, atol=1e-13)


def test_paper_initial_condition_closed_form():
    # The four exponentials of the paper's u₀ are 4 cosh(3 sin x₁) sinh(sin x₂) / 100.
    x = np.random.default_rng(1).uniform(0, 2 * math.pi, (2, 100))
    expected = 4 * np.cosh(3 * np.sin(x[0])) * np.sinh(np.sin(x[1])) / 100
    np.testing.assert_allclose(paper_initial_condition(x), expected, rtol=1e-13, atol=0)
    np.testing.assert_allclose(paper_initial_condition(jnp.asarray(x)), expected, rtol=1e-13, atol=0)


@pytest.mark.parametrize("name", EQUATIONS)
def test_every_equation_declares_its_pieces(name):
    """What the driver asks of an equation, for every yaml: its class builds from the
    group; u₀ takes NumPy and JAX alike; the quadratures have the declared dimension,
    positive weights that sum to the domain's measure, and held-out points apart from
    the fit's; the evaluation points are where the reference gives its values."""
    eq = make_equation(name)
    assert eq.name == name
    fit, held, ev = eq.quadrature(16), eq.holdout(16, 8), eq.evaluation(16)
    for q in (fit, held, ev):  # a system's rows: (x, c), every point once per component
        assert q.points.shape[1] == eq.dim + (1 if eq.components else 0) and q.components == eq.components
        w = np.broadcast_to(np.asarray(q.weights), (q.points.shape[0],))
        assert np.all(w > 0)
    lengths = eq.periods or getattr(eq.domain, "lengths", None)  # a box with sides: its lengths; the disk: π
    measure = (math.prod(lengths) if lengths is not None else math.pi) * eq.outputs
    for q in (fit, held, ev):
        w = np.broadcast_to(np.asarray(q.weights), (q.points.shape[0],))
        inside = w if q.boundary is None else w[~np.asarray(q.boundary)]
        assert inside.sum() == pytest.approx(measure, rel=1e-12)
    gap, _ = cKDTree(np.asarray(fit.points)).query(np.asarray(held.points))
    assert gap.min() > 1e-3
    x = np.asarray(ev.points[:7]).T
    np.testing.assert_allclose(np.asarray(jax.vmap(eq.u0)(jnp.asarray(x.T))), eq.u0(x), rtol=1e-13,
                               atol=1e-15)
    ref = eq.reference([0.0], cache_dir=False)
    np.testing.assert_allclose(ref.values(0, 16)[:7], eq.u0(x), rtol=0, atol=1e-10)


def test_no_equation_is_named_anywhere_else():
    """Adding an equation is its module and its yaml: no module outside the equations
    package (the library's package files and the pipeline's scripts included) names
    one of them (a dispatch on names) or imports an equation module."""
    root = Path(__file__).resolve().parents[1]
    src = root / "src" / "teng_eq"
    names = [f'"{n}"' for n in EQUATIONS] + [f"'{n}'" for n in EQUATIONS] + ["EQUATIONS", "make_equation"]
    modules = [p for p in src.rglob("*.py") if "equations" not in p.relative_to(src).parts]
    modules += sorted((root / "pipeline").glob("*.py"))
    assert src / "__init__.py" in modules and len(modules) > 30
    for path in modules:
        text = path.read_text()
        hits = [n for n in names if n in text]
        assert not hits, f"{path.relative_to(root)} names {hits}"
        assert not re.search(r"(from|import) teng_eq\.equations\.", text), \
            f"{path.relative_to(root)} imports an equation module"


@pytest.mark.parametrize(
    "override, key",
    [
        ("equation.nu=-1", "equation.nu=-1"),
        ("equation.initial_condition=nope", "equation.initial_condition='nope'"),
        ("equation.lengths=[1.0]", "equation.lengths=[1.0]"),
        ("+equation.speed=2", "equation.speed=2"),
        ("equation.impl=teng_eq.equations.heat:Nope", "equation.impl="),
    ],
)
def test_bad_equation_values_name_the_key(override, key):
    with pytest.raises(ConfigError) as err:
        make_config(override)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_build_equation_from_a_group():
    eq = build_equation({"impl": "teng_eq.equations.burgers:Burgers", "name": "burgers", "nu": 0.003,
                         "lengths": [2 * math.pi, 2 * math.pi], "initial_condition": "paper2d"})
    assert (eq.name, eq.nu, eq.dim) == ("burgers", 0.003, 2)
    with pytest.raises(ConfigError, match="equation.impl"):
        build_equation({"name": "burgers"})


def test_an_equations_functions_are_checked_once_per_value(monkeypatch):
    """The same equation built again is not checked again (the check compiles its functions);
    another value of a field is."""
    from teng_eq.equations.burgers import Burgers

    checked = []
    monkeypatch.setattr(Burgers, "check_functions", lambda self, *a: checked.append(self.nu))
    group = {"impl": "teng_eq.equations.burgers:Burgers", "name": "burgers", "nu": 0.00731,
             "lengths": [2 * math.pi, 2 * math.pi], "initial_condition": "paper2d"}
    for nu in (0.00731, 0.00731, 0.00732, 0.00731):
        assert build_equation({**group, "nu": nu}).nu == nu
    assert checked == [0.00731, 0.00732]
