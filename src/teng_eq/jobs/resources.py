"""Resource preflight: the memory a job's largest arrays need, against the
machine's, before any compute (:func:`check_memory`, called by
:func:`teng_eq.jobs.preflight.validate_job`). A size the machine cannot hold is bad
input like any other: one line naming the key, not a traceback after the θ₀ fit.

The estimate counts arrays a job surely holds at once, in float64 — lower bounds,
not a profile, so that it refuses only what cannot fit:

* ``eval_grid``: the m^d evaluation points (m on sampled points; d coordinates each), û and the
  reference there, and the reference's complex spectra on that grid (two);
* ``t_final`` (with ``dt``): the row the run loop keeps of every step — time, error
  norms, wall time, the step's metrics and its loss table (:class:`~teng_eq.run.result.Row`):
  :data:`STEP_BYTES` per step at least;
* the method's own (:meth:`~teng_eq.methods.base.Method.memory`): for the θ
  methods the largest Jacobian on the quadrature ``grid`` (θ₀'s fit, a step's
  least squares).

"The machine's memory" is its physical memory, or the container's limit
(cgroup) when lower. On a GPU the method's arrays live in device memory; this
check is against the host's (the preflight runs before any device is touched).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from pathlib import Path

from teng_eq.errors import bad
from teng_eq.run.config import RunConfig

#: Bytes the driver keeps per time step at the least: time, squared error and
#: reference norms, boundary value, wall time, one metric (8 bytes each), and the
#: step's loss table (a NumPy array of at least one row of 4: 112 bytes of object
#: and 32 of data) in a list (8).
STEP_BYTES = 6 * 8 + 112 + 32 + 8


@dataclasses.dataclass(frozen=True)
class Need:
    """``nbytes`` that the config key ``key`` (= ``value``) makes a job hold, and why."""

    key: str
    value: object
    nbytes: int
    what: str


def needs(cfg: RunConfig) -> list[Need]:
    """What a job of ``cfg`` holds at once, largest first (see the module docstring)."""
    eq = cfg.equation
    points = eq.point_count(cfg.eval_grid)
    # dt: auto grows its record as it steps: at least t_final/dt_max steps, surely held.
    steps = cfg.n_steps if not cfg.adaptive else math.ceil(cfg.t_final / cfg.controller.dt_max)
    dt = f"dt={cfg.dt:g}" if not cfg.adaptive else f"dt<={cfg.controller.dt_max:g}"
    out = [
        Need("eval_grid", cfg.eval_grid, points * (8 * eq.dim + 8 + 8 + 2 * 16),
             f"the error evaluation on {points:,} points"),
        Need("t_final", cfg.t_final, (steps + 1) * STEP_BYTES,
             f"the per-step record of {steps:,} steps of {dt}"),
    ]
    options = cfg.method.options
    for key, (nbytes, what) in cfg.method.cls.memory(options, cfg.problem).items():
        value = getattr(options, key.removeprefix("method."), None)
        out.append(Need(key, value, nbytes, what))
    return sorted(out, key=lambda need: -need.nbytes)


def machine_memory() -> int:
    """Bytes of memory this process may use: physical memory, or the cgroup's
    (container's) limit where it is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for limit in (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")):
        try:
            text = limit.read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def size(nbytes: float) -> str:
    """``nbytes`` in binary units, e.g. ``74.5 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if nbytes < 1024 or unit == "PiB":
            return f"{nbytes:.3g} {unit}" if unit != "B" else f"{nbytes:.0f} B"
        nbytes /= 1024
    raise AssertionError


def check_memory(cfg: RunConfig, available: int | None = None,
                 rename: Callable[[str], str] | None = None) -> None:
    """Refuse ``cfg`` (one-line :class:`~teng_eq.errors.ConfigError`) when what it
    holds at once exceeds ``available`` bytes (default :func:`machine_memory`),
    naming the key of the largest array; ``rename`` names a method key as typed."""
    available = machine_memory() if available is None else available
    found = needs(cfg)
    total = sum(need.nbytes for need in found)
    if total <= available:
        return
    top = found[0]
    also = f" (≈ {size(total)} with the rest)" if total > 1.05 * top.nbytes else ""
    key = rename(top.key) if rename is not None else top.key
    raise bad(key, top.value, f"{top.what} needs ≈ {size(top.nbytes)}{also}, more than this machine's "
                        f"{size(available)} of memory")
