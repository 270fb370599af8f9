"""``devices``: TENG's fits split over local devices (teng_eq.fit.mesh).

The refusals run here (one line each, before any compute); the split itself in a process
whose CPU is forced into 2 devices (helpers/sharded.py): θ₀, θ after 10 steps and every
per-step metric of heat 2-D (TENG-Heun) and of the wave system against the one-device run,
and the compiled stage's collectives (slow: each compiles the programs twice)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, ROOT, SINES32, compose_conf, make_config
from helpers.processes import job_env
from omegaconf import OmegaConf

from teng_eq.errors import ConfigError
from teng_eq.fit.mesh import check_devices, point_mesh
from teng_eq.jobs.job import config_hash

#: The agreement asked of a split run with the one-device run (relative, in the norm of the
#: whole vector, of û): the sums over points run in another order, so last bits differ.
AGREE = 1e-12


@pytest.mark.parametrize("value", [0, -1, "two", 1.5, True])
def test_devices_must_be_a_positive_integer_or_all(value):
    with pytest.raises(ConfigError, match=r"devices=.*must be a positive integer or 'all'"):
        check_devices(value)
    assert check_devices("all") == "all" and check_devices(3) == 3


def test_more_devices_than_the_process_has_is_one_line():
    # This process has one CPU device (the suite forces none).
    assert point_mesh(1) is None and point_mesh("all") is None
    with pytest.raises(ConfigError, match=r"devices=2: more than the 1 local device\(s\)"):
        point_mesh(2)


@pytest.mark.parametrize(("overrides", "match"), [
    (["method=tdvp_rk4"], r"devices=2: method tdvp_rk4 runs on one device"),
    (["solver=svd"], r"config: solver='svd': devices=2 needs cholesky"),
    (["fit.solver=qr"], r"config: fit.solver='qr': devices=2 needs cholesky"),
])
def test_what_cannot_be_split_is_refused(overrides, match):
    with pytest.raises(ConfigError, match=match):
        make_config(*SINES32, "devices=2", *overrides)


def test_one_device_keeps_the_config_hash():
    resolved = OmegaConf.to_container(compose_conf(SINES32), resolve=True)
    assert resolved["devices"] == 1
    without = {k: v for k, v in resolved.items() if k != "devices"}
    assert config_hash(resolved) == config_hash(without)
    assert config_hash({**resolved, "devices": 2}) != config_hash(resolved)
    assert make_config(*SINES32).problem.devices == 1


def split_run(tmp_path, case: str, *overrides: str) -> dict:
    """helpers/sharded.py's ``case`` in a process of 2 CPU devices: its JSON summary."""
    out = tmp_path / f"{case}.json"
    env = job_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    proc = subprocess.run([sys.executable, "-m", "helpers.sharded", case, str(out), *overrides],
                          cwd=ROOT / "tests", env=env, capture_output=True, text=True, timeout=1800,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def relative(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


@pytest.mark.slow
def test_the_compiled_stage_splits_rows_and_sums_once_per_iteration(tmp_path):
    s = split_run(tmp_path, "hlo")
    assert s["devices"] == 2 and s["points"] == 256
    # Points split along their rows, the Jacobian factors along their columns (points).
    shardings = set(s["lowered_shardings"])
    assert shardings & {'[{"points"}, {}]', "{devices=[2,1]<=[2]}"}, shardings
    assert shardings & {'[{}, {"points"}]', "{devices=[1,2]<=[2]}"}, shardings
    # The stage's iterations: the one while body with collectives. In it one all-reduce of the
    # k × (k+1) normal equations [JᵀJ | Jᵀr] (k = 30 drawn), one of the two scalar losses.
    loops = {b: shapes for b, shapes in s["while_all_reduces"].items() if shapes}
    assert len(loops) == 1, loops
    (shapes,) = loops.values()
    assert sorted(shapes) == sorted(["f64[30,31]{0,1}", "(f64[], f64[])"]), shapes
    assert "devices=2: does not divide the 257 points of grid=test" in s["refused"]


def bounds(metrics: dict, tol: float) -> dict:
    """How far each per-step metric may move when the fields move by ``tol``·‖û‖ in L² (what the
    other order of the sums does): a norm of a field by that (``u_l2`` the scale), a squared
    one (a loss, ``L = ‖r‖²``) by 2√L times it, a ratio of losses by the sum of their relative
    moves, a relative error (``rel_l2``) and what counts (iterations, events) by ``tol`` itself."""
    u = np.asarray(metrics["u_l2"], np.float64)
    out = {name: tol * np.maximum(np.abs(np.asarray(v, np.float64)), 1.0) for name, v in metrics.items()}
    for name in ("u_l2", "local_error", "defect_l2", "trapezoid_l2"):
        if name in metrics:
            out[name] = tol * u
    for name in ("step_loss", "holdout_loss"):
        out[name] = 2 * np.sqrt(np.asarray(metrics[name], np.float64)) * tol * u
    ratio, held, loss = (np.asarray(metrics[k], np.float64)
                         for k in ("holdout_ratio", "holdout_loss", "step_loss"))
    out["holdout_ratio"] = ratio * (out["holdout_loss"] / held + out["step_loss"] / loss)
    return out


def assert_agrees(s: dict, theta_tol: float) -> None:
    """The split run against the one-device run, both from one θ₀: û on the error grid within
    :data:`AGREE` (relative), every per-step metric within its :func:`bounds`, θ within
    ``theta_tol``; θ₀ fitted split against θ₀ fitted on one device likewise."""
    one, two = s["1"], s["2"]
    assert relative(one["u"], two["u"]) < AGREE
    assert relative(one["theta"], two["theta"]) < theta_tol
    assert one["metrics"].keys() == two["metrics"].keys() and "step_loss" in one["metrics"]
    allowed = bounds(one["metrics"], AGREE)
    for name, values in one["metrics"].items():
        a, b = np.asarray(values, np.float64), np.asarray(two["metrics"][name], np.float64)
        assert a.shape == (10,) and np.array_equal(np.isnan(a), np.isnan(b)), name
        finite = ~np.isnan(a)
        assert np.all(np.abs(a - b)[finite] <= allowed[name][finite]), (name, a, b)
    theta0 = s["theta0"]
    assert relative(theta0["1"]["u"], theta0["2"]["u"]) < AGREE
    assert relative(theta0["1"]["theta"], theta0["2"]["theta"]) < theta_tol


#: Damping of every least squares in the comparisons: at the default (1e-7, θ₀'s 1e-8) the
#: damped normal matrix has a condition number up to ~1e14, and the sums' other order
#: (round-off, 1e-16) moves θ along its near-null directions by up to 1e-2 of an update
#: (one iteration: θ 3e-7, û 2e-8 apart); at 1e-4 the same split agrees to round-off.
CONDITIONED = ["damping=1e-4", "fit.damping=1e-4"]
#: θ's agreement there: θ moves by cond·ε along the directions û barely sees (measured: heat
#: 5.0e-12 after 10 steps while û agrees to 6e-15; wave 3.7e-11; θ₀ 4.6e-11 and 2.4e-11).
THETA = 1e-10


@pytest.mark.slow
def test_heat_split_over_two_devices_agrees_with_one(tmp_path):
    s = split_run(tmp_path, "runs", *SINES32, *CHEAP_FIT, *CONDITIONED, "method=teng_heun", "dt=0.005",
                  "t_final=0.05")
    assert_agrees(s, THETA)
    assert max(s["1"]["rel_l2"]) < 1e-3  # a run that solved heat, not two equal failures


@pytest.mark.slow
def test_wave_system_split_over_two_devices_agrees_with_one(tmp_path):
    s = split_run(tmp_path, "runs", "equation=wave", *CHEAP_FIT, *CONDITIONED, "eval_grid=32", "dt=0.005",
                  "t_final=0.05")
    assert_agrees(s, THETA)
    assert max(s["1"]["rel_l2"]) < 1e-2
