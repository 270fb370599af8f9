"""Run configuration: plain values, checked before any compute starts.

The pipeline (Hydra) composes ``conf/`` and hands the resolved mapping to
:meth:`RunConfig.from_mapping`; every bad value raises :class:`ConfigError` with
a one-line message that names the key and the value. The defaults live in
``conf/`` alone: nothing here has a default value, so a run is always the
composition of ``conf/config.yaml`` and its overrides.

The ``equation`` and ``method`` groups each name the class that implements them
(``impl: module:Class``); that class turns the rest of its group into a
validated object (:meth:`teng_eq.equations.Equation.from_config`,
``Method.Options``), so adding an equation or a method is one module and one
yaml, with no dispatch on names anywhere else.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from teng_eq.lstsq import SOLVERS
from teng_eq.stepper import Stopping

#: Top-level keys that say where results go and how a job is run, not what it
#: computes: left out of a run's ``config_hash`` (so a resumed or re-checkpointed
#: run is the same run) and never an axis of comparison between runs.
BOOKKEEPING = frozenset({"tracking_uri", "experiment_name", "cache_dir", "progress",
                         "checkpoint_every", "resume", "divergence_factor"})


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the key."""


def bad(key: str, value, why: str):
    """Raise the one-line :class:`ConfigError` for ``key=value``."""
    raise ConfigError(f"invalid config: {key}={value!r}: {why}")


def import_impl(path: str, key: str) -> type:
    """The class ``module:Class`` named by config key ``key`` (e.g. ``method.impl``)."""
    if not isinstance(path, str) or ":" not in path:
        bad(key, path, "must name a class as 'package.module:Class'")
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        bad(key, path, f"cannot import it ({type(err).__name__})")


def options_from(cls: type, mapping: Mapping, prefix: str):
    """The frozen dataclass ``cls`` built from ``mapping``: unknown keys, missing
    keys and values of the wrong type are :class:`ConfigError` s named
    ``<prefix>.<key>``; ``cls.validate()`` (if any) checks the values."""
    fields = {f.name: f for f in dataclasses.fields(cls)}

    def named(key: str) -> str:
        return f"{prefix}.{key}" if prefix else key

    for key in mapping:
        if key not in fields:
            bad(named(key), mapping[key], f"unknown key; known: {sorted(fields)}")
    kw = {}
    for name, field in fields.items():
        if name not in mapping:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                bad(named(name), None, "missing")
            continue
        kw[name] = _typed(mapping[name], field.type, named(name))
    obj = cls(**kw)
    if hasattr(obj, "validate"):
        obj.validate(prefix)
    return obj


def _typed(value, annotation, key: str):
    """``value`` checked against a simple annotation (``int``, ``float``, ``bool``,
    ``str``, ``tuple[float, ...]``, optional ``| None``)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    optional = "None" in text
    if value is None:
        if optional:
            return None
        bad(key, value, f"must be {text}")
    base = text.replace("| None", "").strip()
    if base == "bool":
        if not isinstance(value, bool):
            bad(key, value, "must be true or false")
    elif base == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            bad(key, value, "must be an integer")
    elif base == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            bad(key, value, "must be a number")
        value = float(value)
    elif base == "str":
        if not isinstance(value, str):
            bad(key, value, "must be a string")
    elif base.startswith("tuple"):
        if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value
        ):
            bad(key, value, "must be a list of numbers")
        value = tuple(float(v) for v in value)
    return value


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The sequential methods' network (:class:`teng_eq.model.TENGNet`):
    ``embedding_activation`` σ on the periodic embedding (``tanh``: the authors'
    network; ``identity``: the linear one of earlier runs), ``init`` its
    initialisation (``auto`` resolved per problem by
    :func:`teng_eq.initial_fit.resolve_init`)."""

    features: int
    width: int
    depth: int
    embedding_activation: str
    init: str

    def validate(self, prefix: str) -> None:
        from teng_eq.model import EMBEDDING_ACTIVATIONS, INITS

        for key in ("features", "width"):
            if getattr(self, key) < 1:
                bad(f"{prefix}.{key}", getattr(self, key), "must be >= 1")
        if self.depth < 3:
            bad(f"{prefix}.depth", self.depth, "must be >= 3 (embedding, hidden, output)")
        if self.embedding_activation not in EMBEDDING_ACTIVATIONS:
            bad(f"{prefix}.embedding_activation", self.embedding_activation,
                f"unknown, choose one of {list(EMBEDDING_ACTIVATIONS)}")
        if self.init not in ("auto", *INITS):
            bad(f"{prefix}.init", self.init, f"unknown, choose one of {['auto', *INITS]}")


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """θ₀ fit (see :mod:`teng_eq.initial_fit`)."""

    stage1_tol: float
    stage1_subsample: int
    stage1_max_iters: int
    stage2_tol: float
    stage2_subsample: int
    stage2_max_iters: int
    stage2_polish_iters: int
    patience: int

    def validate(self, prefix: str) -> None:
        for key in ("stage1_tol", "stage2_tol"):
            if not getattr(self, key) > 0:
                bad(f"{prefix}.{key}", getattr(self, key), "must be > 0")
        for key in ("stage1_subsample", "stage1_max_iters", "stage2_subsample", "stage2_max_iters", "patience"):
            if getattr(self, key) < 1:
                bad(f"{prefix}.{key}", getattr(self, key), "must be >= 1")
        if self.stage2_polish_iters < 0:
            bad(f"{prefix}.stage2_polish_iters", self.stage2_polish_iters, "must be >= 0")


@dataclasses.dataclass(frozen=True)
class HoldoutConfig:
    """The held-out check of every step (:mod:`teng_eq.integrators`): ``grid``
    points per dimension at cell centres of the quadrature grid (dividing it;
    None: :attr:`AUTO_MAX` or the largest divisor of the quadrature grid below it,
    see :meth:`points`); a run whose held-out loss exceeds its training loss more
    than ``warn`` times is flagged, more than ``fail`` times it fails."""

    grid: int | None
    warn: float
    fail: float

    #: Held-out points per dimension at most, when ``grid`` is None: a few per
    #: feature of the solution, at a cost small beside the fit's grid.
    AUTO_MAX: ClassVar[int] = 32

    def points(self, quadrature_grid: int) -> int:
        """Held-out points per dimension for a quadrature grid of ``quadrature_grid``."""
        if self.grid is not None:
            return self.grid
        return max(d for d in range(1, min(self.AUTO_MAX, quadrature_grid) + 1) if quadrature_grid % d == 0)

    def validate(self, prefix: str) -> None:
        if self.grid is not None and self.grid < 2:
            bad(f"{prefix}.grid", self.grid, "must be an integer >= 2 (or null: automatic)")
        if not 1 < self.warn <= self.fail:
            bad(f"{prefix}.warn", self.warn, f"must be > 1 and <= {prefix}.fail={self.fail}")


@dataclasses.dataclass(frozen=True)
class MethodConfig:
    """The ``method`` group: its ``name`` (e.g. ``teng_heun``), the class that
    implements it, and that class's validated ``Options``."""

    name: str
    impl: str
    options: Any

    @property
    def cls(self) -> type:
        return import_impl(self.impl, "method.impl")


#: Keys of the run config proper (the rest of the top level is bookkeeping or Hydra's).
_NUMERIC = {
    "dt": "float", "t_final": "float", "iters": "int", "iters_later": "int",
    "subsample_first": "int", "subsample": "int", "solver": "str", "damping": "float",
    "grid": "int", "eval_grid": "int", "seed": "int",
}


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One job's numerics: the equation (an :class:`~teng_eq.equations.Equation`),
    the method, time stepping, TENG's least squares, grids, seed, network and θ₀ fit."""

    equation: Any  # teng_eq.equations.Equation (imported lazily: it imports jax)
    method: MethodConfig
    dt: float
    t_final: float
    iters: int
    iters_later: int
    subsample_first: int
    subsample: int
    solver: str
    damping: float
    stopping: Stopping
    holdout: HoldoutConfig
    grid: int
    eval_grid: int
    seed: int
    network: NetworkConfig
    fit: FitConfig

    @property
    def n_steps(self) -> int:
        return int(round(self.t_final / self.dt))

    @property
    def n_params(self) -> int:
        """Parameters of the sequential methods' network (shape evaluation only)."""
        from teng_eq.simulation import parameter_count

        return parameter_count(self)

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> RunConfig:
        """Build from the pipeline's resolved mapping (keys of ``conf/``) and validate."""
        for group in ("equation", "method", "network", "fit", "stopping", "holdout"):
            if not isinstance(cfg.get(group), Mapping):
                bad(group, cfg.get(group), "must be a config group (a mapping)")
        eq = dict(cfg["equation"])
        eq_cls = import_impl(eq.pop("impl", None), "equation.impl")
        equation = eq_cls.from_config(eq)
        m = dict(cfg["method"])
        impl = m.pop("impl", None)
        name = m.pop("name", None)
        if not isinstance(name, str):
            bad("method.name", name, "must be a string")
        method_cls = import_impl(impl, "method.impl")
        method = MethodConfig(name=name, impl=impl, options=options_from(method_cls.Options, m, "method"))
        kw = {}
        for key, kind in _NUMERIC.items():
            if key not in cfg:
                bad(key, None, "missing")
            kw[key] = _typed(cfg[key], kind, key)
        run = cls(
            equation=equation, method=method,
            network=options_from(NetworkConfig, cfg["network"], "network"),
            fit=options_from(FitConfig, cfg["fit"], "fit"),
            stopping=options_from(Stopping, cfg["stopping"], "stopping"),
            holdout=options_from(HoldoutConfig, cfg["holdout"], "holdout"), **kw,
        )
        run.validate()
        return run

    def validate(self) -> None:
        """Cross-key checks; the method's own (``Method.check``) come last."""
        if not self.dt > 0:
            bad("dt", self.dt, "must be > 0")
        if not self.t_final >= self.dt:
            bad("t_final", self.t_final, f"must be >= dt={self.dt}")
        if abs(self.n_steps * self.dt - self.t_final) > 1e-9 * self.t_final:
            bad("t_final", self.t_final, f"must be a whole number of steps of dt={self.dt}")
        for key in ("iters", "iters_later"):
            if getattr(self, key) < 1:
                bad(key, getattr(self, key), "must be an integer >= 1")
        if self.solver not in SOLVERS:
            bad("solver", self.solver, f"unknown, choose one of {list(SOLVERS)}")
        if not 0 <= self.damping < 1:
            bad("damping", self.damping, "must be in [0, 1)")
        for key in ("grid", "eval_grid"):
            if getattr(self, key) < 8:
                bad(key, getattr(self, key), "must be an integer >= 8")
        if self.holdout.grid is not None and self.grid % self.holdout.grid:
            bad("holdout.grid", self.holdout.grid, f"must divide grid={self.grid}")
        if self.stopping.min_iters > min(self.iters, self.iters_later):
            bad("stopping.min_iters", self.stopping.min_iters,
                f"must be <= min(iters, iters_later)={min(self.iters, self.iters_later)}")
        if self.seed < 0:
            bad("seed", self.seed, "must be an integer >= 0")
        n_params = self.n_params
        for key in ("subsample_first", "subsample"):
            value = getattr(self, key)
            if not 1 <= value <= n_params:
                bad(key, value, f"must be an integer in [1, {n_params}] (the parameter count)")
        self.method.cls.check(self)


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """The :data:`BOOKKEEPING` keys: where a job's results go and how it is run.

    ``checkpoint_every``: steps between checkpoints (one is also written at the
    end); ``resume``: continue this configuration's unfinished run, skip it when
    finished (else start a new run); ``divergence_factor``: a step whose loss
    exceeds this many times the median loss of the steps before it ends the
    run as diverged (as does any non-finite value).
    """

    tracking_uri: str | None
    experiment_name: str
    cache_dir: str | None
    progress: bool
    checkpoint_every: int
    resume: bool
    divergence_factor: float

    def validate(self, prefix: str) -> None:
        if not self.experiment_name.strip():
            bad("experiment_name", self.experiment_name, "must be a non-empty name")
        if self.checkpoint_every < 1:
            bad("checkpoint_every", self.checkpoint_every, "must be an integer >= 1 (steps)")
        if not self.divergence_factor > 1:
            bad("divergence_factor", self.divergence_factor, "must be a number > 1")


@dataclasses.dataclass(frozen=True)
class Job:
    """A validated job: its numerics and its bookkeeping."""

    run: RunConfig
    options: JobOptions
    tracking_uri: str  # resolved: the default store when ``options.tracking_uri`` is null


def _check_writable_folder(key: str, path) -> None:
    """``path`` is, or can be created as, a folder this process may write to
    (checked without creating anything)."""
    import os
    from pathlib import Path

    probe = Path(path).expanduser().absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        bad(key, str(path), f"{probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        bad(key, str(path), f"folder {probe} is not writable")


def validate_job(cfg: Mapping, *, root) -> Job:
    """Every check of a job's resolved config (``conf/`` composed), before any
    compute and before any MLflow run: unknown top-level keys, the numerics
    (:meth:`RunConfig.from_mapping`), the bookkeeping keys (:class:`JobOptions`),
    the MLflow store (malformed, unreachable; default: ``<root>/mlflow.db``) and
    the cache folder (writable). Raises a one-line :class:`ConfigError`."""
    from teng_eq.cache import cache_dir
    from teng_eq.tracking.store import check_store, default_tracking_uri

    known = {"equation", "method", "network", "fit", "stopping", "holdout", *_NUMERIC, *BOOKKEEPING}
    for key in cfg:
        if key not in known:
            bad(key, cfg[key], "unknown key")
    options = options_from(JobOptions, {k: cfg[k] for k in BOOKKEEPING if k in cfg}, "")
    run = RunConfig.from_mapping(cfg)
    uri = options.tracking_uri or default_tracking_uri(root)
    try:
        check_store(uri)
    except ValueError as err:
        raise ConfigError(f"invalid config: {err}") from None
    _check_writable_folder("cache_dir", cache_dir(options.cache_dir))
    return Job(run=run, options=options, tracking_uri=uri)


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
