"""conf/ as Hydra composes it, and the small problems the tests run.

Every test builds its configuration from conf/ (the one source of defaults) with
overrides; the lists below are the overrides of the problems several tests share."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from teng_eq.equations import Equation
from teng_eq.jobs.preflight import key_namer
from teng_eq.run.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


def compose_conf(overrides: Iterable[str] = (), config_name: str = "config") -> DictConfig:
    """conf/<config_name>.yaml with ``overrides`` (e.g. ``["dt=0.01"]``), as Hydra builds it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


def make_config(*overrides: str) -> RunConfig:
    """The validated :class:`RunConfig` of conf/ with ``overrides``, as a job builds it."""
    cfg = compose_conf(overrides)
    return RunConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True), rename=key_namer(cfg))


def make_equation(name: str, *overrides: str) -> Equation:
    """The equation of ``conf/equation/<name>.yaml`` (with overrides), as a run builds it."""
    return make_config(f"equation={name}", *overrides).equation


# --- the small problems ----------------------------------------------------------------

#: The band-limited initial condition ``sines2d`` (two Fourier modes), which a 32² grid
#: resolves exactly, so that θ₀ fits in seconds (the paper's condition needs a
#: minutes-long fit); errors on a 64² grid.
SINES32 = ["equation.initial_condition=sines2d", "grid=32", "eval_grid=64"]


#: A θ₀ fit of seconds instead of a minute (100 + 20 iterations, 5 polishing, tolerance
#: 1e-6): for tests about something else than θ₀'s accuracy, whose bounds allow it.
CHEAP_FIT = ["fit.stage1_max_iters=100", "fit.stage2_max_iters=20", "fit.stage2_polish_iters=5",
             "fit.stage2_tol=1e-6"]


def small(*overrides: str) -> RunConfig:
    """The run of :data:`SINES32` (the default equation and method) with ``overrides``."""
    return make_config(*SINES32, *overrides)


#: A sweep job small enough for the suite: :data:`SINES32`, 4 steps at dt=0.02, no
#: progress bars; its θ₀ is conftest's ``warm_cache``.
TINY_SWEEP = [*SINES32, "t_final=0.08", "progress=false"]

#: :data:`TINY_SWEEP` for a method without a quadrature grid (the fake methods, the PINNs).
TINY_SWEEP_NO_GRID = [o for o in TINY_SWEEP if not o.startswith("grid=")]

#: TENG-Heun under ``dt: auto``, at the size of :data:`TINY_SWEEP` (errors on the 32²
#: grid): to t=0.06 through three outputs, a first try of Δt=0.05 (which is rejected),
#: rtol 1e-5, the trapezoid estimate.
TINY_ADAPTIVE = ["equation.initial_condition=sines2d", "grid=32", "eval_grid=32", "dt=auto", "t_final=0.06",
                 "controller.dt_initial=0.05", "controller.rtol=1e-5", "controller.outputs=3",
                 "estimate=trapezoid"]
