"""The paper presets of the other benchmarks compose to the paper's settings."""

from __future__ import annotations

import pytest
from helpers.configs import make_config


@pytest.mark.parametrize(
    "preset, equation, nu, dt, t_final, grid",
    [
        ("paper_heat3d", "heat3d", 0.1, 0.005, 8.0, 64),
        ("paper_heat_disk", "heat_disk", 0.1, 0.001, 4.0, 512),  # Δt: see equation/heat_disk.yaml
        ("paper_burgers_nu0003", "burgers", 0.003, 0.001, 4.0, 512),
        ("paper_burgers_rect", "burgers_rect", 0.01, 0.001, 4.0, 512),
    ],
)
def test_paper_presets_of_the_other_benchmarks(preset, equation, nu, dt, t_final, grid):
    run = make_config(f"experiment={preset}")
    o = run.method.options
    assert (run.equation.name, run.equation.nu, run.method.name) == (equation, nu, "teng_heun")
    assert (run.dt, run.t_final, o.grid, run.eval_grid) == (dt, t_final, grid, grid)
    assert (o.subsample_first, o.subsample, o.iters, o.iters_later) == (1536, 1024, 7, 5)
