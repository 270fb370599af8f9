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

import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402

from helpers.configs import make_config  # noqa: E402
from teng_eq.errors import ConfigError  # noqa: E402
from teng_eq.fit.mesh import point_mesh  # noqa: E402
from teng_eq.fit.stage import StageSolver  # noqa: E402
from teng_eq.network.space import ParamSpace  # noqa: E402
from teng_eq.run.simulation import run_simulation  # noqa: E402

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
    return {"lowered_shardings": sorted(set(re.findall(r'mhlo.sharding = "([^"]*)"', lowered.as_text()))),
            "while_all_reduces": {b: all_reduces(comps[b]) for b in bodies},
            "points": int(quadrature.points.shape[0]), "params": space.size, "refused": refused,
            "devices": len(jax.devices())}


def runs_case(overrides: list[str]) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        for devices in (1, 2):
            result = run_simulation(make_config(*overrides, f"devices={devices}"), cache_dir=cache)
            method_theta = ravel_pytree(result.network)[0]
            out[devices] = {"theta": np.asarray(method_theta).tolist(),
                            "metrics": {k: np.asarray(v).tolist() for k, v in result.metrics.items()},
                            "fit_loss": result.fit_report.stage2_loss,
                            "rel_l2": None if result.rel_l2 is None else np.asarray(result.rel_l2).tolist()}
            out[devices]["theta0"] = np.asarray(theta0_of(overrides, devices, cache)).tolist()
    return out


def theta0_of(overrides: list[str], devices: int, cache: str):
    """θ₀ of the run (from the cache its run just filled: no second fit)."""
    cfg = make_config(*overrides, f"devices={devices}")
    return cfg.method.cls.build(cfg.method.options, cfg.problem, cache_dir=cache).theta0


def main(argv: list[str]) -> int:
    jax.config.update("jax_enable_x64", True)
    case, out, overrides = argv[0], argv[1], argv[2:]
    summary = hlo_case() if case == "hlo" else runs_case(overrides)
    with open(out, "w") as fh:
        json.dump(summary, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
