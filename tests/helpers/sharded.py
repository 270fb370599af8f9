"""Runs for tests/test_sharding.py in a process of its own, whose CPU is split into devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=2``, set before JAX is imported: the
flag is read once, when the backend starts). ``python -m helpers.sharded CASE OUT [overrides]``
writes a JSON summary to OUT:

* ``hlo``: one TENG stage of a tiny network on a 16² grid split over 2 devices, lowered and
  compiled: the sharding annotations of the lowered program and, per ``while`` body of the
  compiled one, the result shapes of its all-reduces (the stage's iterations run in one);
* ``runs``: the run of the overrides with ``devices=1`` and with ``devices=2`` (each its own
  θ₀ fit, in one fresh cache): θ₀, the final θ, every per-step metric of both.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import functools  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

from helpers.configs import make_config  # noqa: E402
from teng_eq.errors import ConfigError  # noqa: E402
from teng_eq.fit.mesh import point_mesh  # noqa: E402
from teng_eq.fit.stage import StageSolver  # noqa: E402
from teng_eq.network.space import ParamSpace  # noqa: E402
from teng_eq.run import simulation  # noqa: E402
from teng_eq.run.simulation import build_method, run_simulation  # noqa: E402

#: The tiny stage of the ``hlo`` case: 105 parameters, 40 then 30 drawn, 3 iterations.
TINY_NET = ["equation.initial_condition=sines2d", "grid=16", "eval_grid=16", "network.width=8",
            "network.depth=3", "network.features=4", "subsample_first=40", "subsample=30"]


def computations(text: str) -> dict[str, list[str]]:
    """The compiled HLO module's computations by name, each its instruction lines."""
    out, name = {}, None
    for line in text.splitlines():
        if m := re.match(r"^(?:ENTRY )?(%\S+) .*\{$", line):
            name = m.group(1)
            out[name] = []
        elif line.startswith("}"):
            name = None
        elif name is not None:
            out[name].append(line)
    return out


def all_reduces(lines: list[str]) -> list[str]:
    """The result shapes of the all-reduce instructions among ``lines``."""
    return [m.group(1) for line in lines if (m := re.search(r"= (\([^)]*\)|\S+) all-reduce\(", line))]


def hlo_case() -> dict:
    cfg = make_config(*TINY_NET)
    net = cfg.method.cls.network_template(cfg.method.options, cfg.problem)
    space, mesh, quadrature = ParamSpace(net), point_mesh(2), cfg.equation.quadrature(16)
    solver = StageSolver(space, quadrature, "cholesky", 1e-7, mesh=mesh)
    theta = mesh.replicated(space.flatten(net))
    lowered = jax.jit(lambda th, target, key: solver.stage(th, target, key, 3, 40, 30)).lower(
        theta, jnp.sin(quadrature.points[:, 0]), jax.random.PRNGKey(0))
    compiled = lowered.compile().as_text()
    comps = computations(compiled)
    bodies = sorted(set(re.findall(r"body=(%[\w.\-]+)", compiled)))
    try:
        mesh.check_points(257, "grid=test")
        refused = ""
    except ConfigError as err:
        refused = str(err)
    text = lowered.as_text()  # Shardy's annotations (jax's default), or GSPMD's where it is chosen
    shardy = re.findall(r"sdy.sharding_constraint %\S+ <@\w+, (\[[^>]*\])>", text)
    return {"lowered_shardings": sorted(set(shardy + re.findall(r'mhlo.sharding = "([^"]*)"', text))),
            "while_all_reduces": {b: all_reduces(comps[b]) for b in bodies},
            "points": int(quadrature.points.shape[0]), "params": space.size, "refused": refused,
            "devices": len(jax.devices())}


def runs_case(overrides: list[str]) -> dict:
    """The run with ``devices=1`` and ``=2``, both from the θ₀ fitted on one device (so that the
    steps alone are compared), and θ₀ fitted on 2 devices against it."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        one = make_config(*overrides, "devices=1")
        first = build_method(one, cache_dir=cache)
        theta0 = first.theta0
        for devices in (1, 2):
            cfg = make_config(*overrides, f"devices={devices}")
            simulation.build_method = functools.partial(from_theta0, theta0=theta0)
            try:
                result = run_simulation(cfg, cache_dir=cache)
            finally:
                simulation.build_method = build_method
            net = result.network
            space = ParamSpace(net)
            points = cfg.equation.evaluation(cfg.eval_grid).points
            out[devices] = {"theta": np.asarray(ravel_pytree(net)[0]).tolist(),
                            "u": np.asarray(space.apply(space.flatten(net), points)).tolist(),
                            "metrics": {k: np.asarray(v).tolist() for k, v in result.metrics.items()},
                            "rel_l2": None if result.rel_l2 is None else np.asarray(result.rel_l2).tolist()}
        fitted = build_method(make_config(*overrides, "devices=2"), cache_dir=cache)
        space = ParamSpace(fitted.space.static_network())
        points = one.equation.evaluation(one.eval_grid).points
        out["theta0"] = {devices: {
            "theta": np.asarray(m.theta0).tolist(), "u": np.asarray(space.apply(m.theta0, points)).tolist(),
            "loss": m.report.stage2_loss} for devices, m in (("1", first), ("2", fitted))}
    return out


def from_theta0(cfg, *, theta0, **kw):
    """The run's method, started from ``theta0`` (fitted once on one device)."""
    method = build_method(cfg, **kw)
    return eqx.tree_at(lambda m: m.theta0, method, theta0)


def main(argv: list[str]) -> int:
    jax.config.update("jax_enable_x64", True)
    case, out, overrides = argv[0], argv[1], argv[2:]
    summary = hlo_case() if case == "hlo" else runs_case(overrides)
    with open(out, "w") as fh:
        json.dump(summary, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
