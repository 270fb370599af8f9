"""Caches keyed by content: the ETDRK4 reference by the equation's class and every
field and by u₀'s values on its grid; θ₀ by what its fit reads — u₀'s values and
gradients on the fit points, the domain, the network — and not by the equation's
fields. A user who edits u₀'s formula under the same name gets a new θ₀ and reference,
a changed coefficient a new reference but the θ₀ it had (θ₀ fits u₀ alone); an
unchanged equation still meets its own entries."""

import dataclasses
import importlib
import math
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import SINES32, make_config
from helpers.user_files import SINES, write_user_module

from teng_eq import reference as ref
from teng_eq.cache.files import content_description
from teng_eq.config.options import import_impl
from teng_eq.fit import theta0 as initial_fit
from teng_eq.fit.theta0 import FitReport
from teng_eq.run.simulation import build_method

FIELDS = {"name": "mine", "nu": 0.1, "a": 1.0, "lengths": [2 * math.pi, 2 * math.pi],
          "initial_condition": "waves", "origin": None}


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """``tmp_path`` on the path, with no bytecode (an edited file rewritten within the
    same second must not be read from a stale .pyc); ``my_pdes`` forgotten after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    yield tmp_path
    sys.modules.pop("my_pdes", None)


def user_equation(folder, u0: str = SINES, **fields):
    """The user's file written with u₀ ``u0`` and imported afresh; its equation of ``fields``."""
    write_user_module(folder, u0=u0)
    sys.modules.pop("my_pdes", None)
    importlib.invalidate_caches()
    return import_impl("my_pdes:Mine", "equation.impl").from_config({**FIELDS, **fields})


@pytest.fixture
def fits(monkeypatch):
    """θ₀'s fit replaced by a stand-in that counts its calls (θ = call number · [0..4])."""
    calls = []

    def fit(net, u0, quadrature, *, key, fit, log=None, move=None):
        calls.append(1)
        return jnp.arange(5.0) * len(calls), FitReport(stage1_loss=1e-8, stage2_loss=1e-14,
                                                       stage2_rel_loss=1e-15, converged=True, stage1_s=1.0,
                                                       stage2_s=2.0, stage2_damping=1e-8)

    monkeypatch.setattr(initial_fit, "initial_parameters", fit)
    return calls


def theta0(eq, cache):
    """θ₀ of the small TENG run of ``eq``, through the method's own call to the cache."""
    cfg = dataclasses.replace(make_config(*SINES32), equation=eq)
    method = build_method(cfg, cache_dir=cache)
    return np.asarray(method.theta0), method.report.cached


def test_every_field_and_the_class_enter_the_description(user_folder):
    eq = user_equation(user_folder)
    described = content_description(eq)
    assert described["class"] == "my_pdes:Mine"
    assert described["fields"] == FIELDS
    assert eq.fit_description() == {"domain_fields": content_description(eq.domain)}  # θ₀'s: the domain
    assert content_description(user_equation(user_folder, a=1.5))["fields"]["a"] == 1.5


def test_an_edited_u0_under_the_same_name_gets_a_new_theta0(user_folder, fits):
    cache = user_folder / "cache"
    first, cached = theta0(user_equation(user_folder), cache)
    assert (cached, len(fits)) == (False, 1)
    assert theta0(user_equation(user_folder), cache)[1] is True and len(fits) == 1  # unchanged: its own entry
    # Same initial_condition name ("waves"), another formula: fitted anew, not the old θ₀.
    edited, cached = theta0(user_equation(user_folder, u0="xp.sin(x[0]) * xp.cos(x[1])"), cache)
    assert (cached, len(fits)) == (False, 2)
    np.testing.assert_array_equal(edited, 2 * np.arange(5.0))
    assert len(list((cache / "theta0").glob("*.npz"))) == 2
    # Back to the first formula: the first entry again.
    again, cached = theta0(user_equation(user_folder), cache)
    assert cached is True and len(fits) == 2
    np.testing.assert_array_equal(again, first)


def test_a_coefficient_that_leaves_u0_shares_theta0_and_one_that_changes_it_does_not(user_folder, fits):
    """θ₀ fits u₀ only: a changed reaction rate or ν (u₀ the same) meets the first θ₀ file
    (before, every field was in the key: a changed coefficient refitted heat's θ₀ for 20
    minutes); another initial condition, or other lengths, is a new θ₀."""
    cache = user_folder / "cache"
    first, _ = theta0(user_equation(user_folder), cache)
    for fields in ({"a": 2.0}, {"nu": 0.3}, {"a": 3.0, "nu": 0.01}):
        shared, cached = theta0(user_equation(user_folder, **fields), cache)
        assert cached is True and len(fits) == 1, fields
        np.testing.assert_array_equal(shared, first)
    assert len(list((cache / "theta0").glob("*.npz"))) == 1
    assert theta0(user_equation(user_folder, lengths=[2 * math.pi, math.pi]), cache)[1] is False
    assert len(fits) == 2
    # heat's sines2d is the user's formula on the same square: the same θ₀, whatever the class or ν.
    heat = make_config(*SINES32).equation
    assert theta0(heat, cache)[1] is True and theta0(dataclasses.replace(heat, nu=0.5), cache)[1] is True
    assert theta0(dataclasses.replace(heat, initial_condition="paper2d"), cache)[1] is False
    assert len(fits) == 3


def test_a_changed_coefficient_or_u0_gets_a_new_reference(user_folder):
    times = np.array([0.0, 0.05, 0.1])

    def reference(eq):
        return ref.reference_solution(eq, times, cache_dir=user_folder / "cache", n=16, dt=0.05)

    def files():
        return sorted((user_folder / "cache").glob("reference-*.npz"))

    slow = reference(user_equation(user_folder, a=1.0))
    assert len(files()) == 1
    fast = reference(user_equation(user_folder, a=3.0))
    assert len(files()) == 2
    # The new coefficient's reference is computed, not the old one read: its growth differs.
    assert not np.allclose(fast.spectrum(2), slow.spectrum(2))
    uncached = ref.reference_solution(user_equation(user_folder, a=3.0), times, cache_dir=False, n=16,
                                      dt=0.05)
    np.testing.assert_array_equal(fast.spectrum(2), uncached.spectrum(2))
    # u₀ edited under the same name: a new reference too.
    reference(user_equation(user_folder, u0="xp.sin(x[0]) * xp.cos(x[1])", a=1.0))
    assert len(files()) == 3
    # The unchanged equation meets its entry (no new file).
    again = reference(user_equation(user_folder, a=1.0))
    assert len(files()) == 3
    np.testing.assert_array_equal(again.spectrum(2), slow.spectrum(2))
