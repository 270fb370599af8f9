"""Write a reference solution to an .npz file (``t`` (n_t,), ``x`` (points, dim), ``u``).

    python pipeline/reference.py equation=allen_cahn t_final=4 save_times=[0.5,1,2,4] grid=512 out=ref.npz

The equation is the composed ``equation`` group, built by its ``impl`` class like a
run's; its reference scheme (exact, pseudo-spectral ETDRK4, Bessel series: see
:mod:`teng_eq.reference`) computes the solution. ``u`` holds the values at the points
of the equation's ``evaluation(grid)``: on a periodic box the grid itself,
``u[k, i, j] = u(x_i, y_j, t_k)``, ``x_i = L i / grid``; on the disk one value per point.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from teng_eq.config.options import mark_launch_folder
from teng_eq.equations import build_equation
from teng_eq.errors import ConfigError
from teng_eq.reference import reference_solution, save_npz


def _fail(message: str):
    sys.exit(f"error: {message}")  # message to stderr, exit status 1


@hydra.main(version_base="1.3", config_path="../conf", config_name="reference")
def main(cfg: DictConfig) -> None:
    try:
        t_final = float(cfg.t_final)
    except (TypeError, ValueError):
        t_final = math.nan
    if not t_final > 0:
        _fail(f"t_final={cfg.t_final} must be a number > 0")
    raw = cfg.save_times
    save_times = [t_final] if raw is None else list(raw) if OmegaConf.is_list(raw) else [raw]
    try:
        ok = bool(save_times) and all(0 < float(t) <= t_final for t in save_times)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        _fail(f"save_times={save_times} must be numbers in (0, t_final={t_final}]")
    if not (isinstance(cfg.grid, int) and cfg.grid > 0):
        _fail(f"grid={cfg.grid} must be a positive integer")
    try:
        equation = build_equation(OmegaConf.to_container(cfg.equation, resolve=True))
    except ConfigError as err:
        _fail(str(err))

    times = sorted({float(t) for t in save_times})  # the file's t is sorted, without repeats
    start = time.perf_counter()
    solution = reference_solution(equation, times, cache_dir=cfg.cache_dir, n=cfg.n, dt=cfg.dt)
    out = save_npz(Path(hydra.utils.get_original_cwd()) / cfg.out, equation, solution, cfg.grid)
    print(f"wrote {out}: {equation.name}, t={times}, evaluation({cfg.grid}) points, "
          f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    mark_launch_folder()  # a user's equation module next to where the command runs
    main()
