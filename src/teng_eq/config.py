"""Run configuration: plain values, checked before any compute starts.

The pipeline (Hydra) hands a nested mapping to :meth:`RunConfig.from_mapping`;
every bad value raises :class:`ConfigError` with a one-line message that names
the key and the value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from teng_eq.equations import EQUATIONS, INITIAL_CONDITIONS
from teng_eq.integrators import INTEGRATORS
from teng_eq.lstsq import SOLVERS
from teng_eq.model import EMBEDDING_ACTIVATIONS, INITS
from teng_eq.stepper import DEFAULTS, POLICIES

#: Top-level keys that say where results go, not what is computed: left out of a
#: run's ``config_hash`` and never an axis of comparison between runs.
BOOKKEEPING = frozenset({"tracking_uri", "experiment_name", "cache_dir", "progress"})


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    features: int = 20
    width: int = 40
    depth: int = 7
    embedding_activation: str = "tanh"  # "identity": the linear embedding of earlier runs
    init: str = "auto"  # "odd" | "paper" (the authors') | "legacy"; see teng_eq.model, initial_fit.resolve_init


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """θ₀ fit (see :mod:`teng_eq.initial_fit`)."""

    stage1_tol: float = 1e-7
    stage1_subsample: int = 512
    stage1_max_iters: int = 2000
    stage2_tol: float = 2e-14  # relative: loss / ‖u₀‖² (θ₀'s relative L² error ≈ 1.4e-7)
    stage2_subsample: int = 1024
    stage2_max_iters: int = 2000
    stage2_polish_iters: int = 100
    patience: int = 3


@dataclasses.dataclass(frozen=True)
class RunConfig:
    equation: str = "heat"
    nu: float = 0.1
    lengths: tuple[float, ...] = (2 * math.pi, 2 * math.pi)
    initial_condition: str = "paper2d"
    integrator: str = "heun"
    dt: float = 0.005
    t_final: float = 0.2
    iters: int = 7
    iters_later: int = 5
    subsample_first: int = 512
    subsample: int = 384
    solver: str = DEFAULTS.solver
    damping: float = DEFAULTS.damping
    stopping: str = DEFAULTS.policy
    min_iters: int = DEFAULTS.min_iters
    stop_rtol: float = DEFAULTS.rtol
    stop_patience: int = DEFAULTS.patience
    stop_floor: float = DEFAULTS.floor
    holdout_grid: int = 32
    holdout_warn: float = 100.0
    holdout_fail: float = 1e4
    grid: int = 64
    eval_grid: int = 256
    seed: int = 0
    network: NetworkConfig = NetworkConfig()
    fit: FitConfig = FitConfig()

    @property
    def n_steps(self) -> int:
        return int(round(self.t_final / self.dt))

    @property
    def n_params(self) -> int:
        f, w, d = self.network.features, self.network.width, self.network.depth
        dim = len(self.lengths)
        return 3 * dim * f + (dim * f + 1) * w + (d - 3) * (w + 1) * w + w + 1

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> RunConfig:
        """Build from the pipeline's mapping (keys of ``conf/``) and validate."""
        eq, method = cfg["equation"], cfg["method"]
        kw = dict(
            equation=eq["name"],
            nu=eq["nu"],
            lengths=tuple(eq.get("lengths", (2 * math.pi, 2 * math.pi))),
            initial_condition=eq.get("initial_condition", "paper2d"),
            integrator=method["integrator"],
        )
        for f in dataclasses.fields(cls):
            if f.name in cfg and f.name not in kw and f.name not in ("network", "fit"):
                kw[f.name] = cfg[f.name]
        if "network" in cfg:
            kw["network"] = NetworkConfig(**dict(cfg["network"]))
        if "fit" in cfg:
            kw["fit"] = FitConfig(**dict(cfg["fit"]))
        run = cls(**kw)
        run.validate()
        return run

    def validate(self) -> None:
        def bad(key, value, why):
            raise ConfigError(f"invalid config: {key}={value!r}: {why}")

        if self.equation not in EQUATIONS:
            bad("equation", self.equation, f"unknown, choose one of {sorted(EQUATIONS)}")
        if self.integrator not in INTEGRATORS:
            bad("method", self.integrator, f"unknown integrator, choose one of {sorted(INTEGRATORS)}")
        if self.initial_condition not in INITIAL_CONDITIONS:
            bad("equation.initial_condition", self.initial_condition,
                f"unknown, choose one of {sorted(INITIAL_CONDITIONS)}")
        if self.solver not in SOLVERS:
            bad("solver", self.solver, f"unknown, choose one of {list(SOLVERS)}")
        if not self.nu > 0:
            bad("equation.nu", self.nu, "must be > 0")
        if not (isinstance(self.dt, (int, float)) and self.dt > 0):
            bad("dt", self.dt, "must be > 0")
        if not (isinstance(self.t_final, (int, float)) and self.t_final >= self.dt):
            bad("t_final", self.t_final, f"must be >= dt={self.dt}")
        if abs(self.n_steps * self.dt - self.t_final) > 1e-9 * self.t_final:
            bad("t_final", self.t_final, f"must be a whole number of steps of dt={self.dt}")
        for key in ("iters", "iters_later"):
            if not (isinstance(getattr(self, key), int) and getattr(self, key) >= 1):
                bad(key, getattr(self, key), "must be an integer >= 1")
        for key in ("subsample_first", "subsample"):
            value = getattr(self, key)
            if not (isinstance(value, int) and 1 <= value <= self.n_params):
                bad(key, value, f"must be an integer in [1, {self.n_params}] (the parameter count)")
        for key in ("grid", "eval_grid"):
            value = getattr(self, key)
            if not (isinstance(value, int) and value >= 8):
                bad(key, value, "must be an integer >= 8")
        if not 0 <= self.damping < 1:
            bad("damping", self.damping, "must be in [0, 1)")
        if self.stopping not in POLICIES:
            bad("stopping", self.stopping, f"unknown, choose one of {list(POLICIES)}")
        if not (isinstance(self.min_iters, int) and 1 <= self.min_iters <= min(self.iters, self.iters_later)):
            bad("min_iters", self.min_iters, "must be an integer in [1, min(iters, iters_later)]")
        if not 0 < self.stop_rtol < 1:
            bad("stop_rtol", self.stop_rtol, "must be in (0, 1)")
        if not (isinstance(self.stop_patience, int) and self.stop_patience >= 1):
            bad("stop_patience", self.stop_patience, "must be an integer >= 1")
        if not 0 <= self.stop_floor < 1:
            bad("stop_floor", self.stop_floor, "must be in [0, 1)")
        if not (isinstance(self.holdout_grid, int) and self.holdout_grid >= 2 and self.grid % self.holdout_grid == 0):
            bad("holdout_grid", self.holdout_grid, f"must be an integer >= 2 dividing grid={self.grid}")
        if not 1 < self.holdout_warn <= self.holdout_fail:
            bad("holdout_warn", self.holdout_warn, f"must be > 1 and <= holdout_fail={self.holdout_fail}")
        if self.network.embedding_activation not in EMBEDDING_ACTIVATIONS:
            bad("network.embedding_activation", self.network.embedding_activation,
                f"unknown, choose one of {list(EMBEDDING_ACTIVATIONS)}")
        if self.network.init not in ("auto", *INITS):
            bad("network.init", self.network.init, f"unknown, choose one of {['auto', *INITS]}")
        if not isinstance(self.seed, int):
            bad("seed", self.seed, "must be an integer")


def check_group_choices(overrides: list[str], conf_dir) -> None:
    """Reject ``group=name`` overrides naming no ``conf_dir/group/name.yaml``.

    Hydra reports these itself, but over many lines; this gives the one-line
    error every other bad key gets, before Hydra starts.
    """
    from pathlib import Path

    conf_dir = Path(conf_dir)
    for item in overrides:
        if item.startswith("-") or "=" not in item:
            continue
        key, value = item.split("=", 1)
        group = key.lstrip("+~")
        if group not in ("equation", "method", "experiment"):
            continue
        for choice in value.split(","):
            choice = choice.strip()
            if choice and not (conf_dir / group / f"{choice}.yaml").exists():
                known = sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))
                raise ConfigError(f"invalid config: {group}={choice!r}: unknown, choose one of {known}")
