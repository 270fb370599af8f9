"""Every job of a command line checked before anything runs: :func:`preflight`
composes ``conf/`` for each job (with ``-m``, each point of the sweep, a preset's
own sweep included) and checks it with :func:`validate_job`, so that a bad value
stops the command with one line naming the key, before any compute and before any
MLflow run exists; each job checks itself again when it starts (:mod:`teng_eq.jobs.job`).

A library module that imports Hydra (its public compose and override API; the other
is :mod:`teng_eq.search`, the frontier sweeper on its ``Sweeper`` API); the sweep
callback (:mod:`teng_eq.tracking.sweep`) is written against its protocol."""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import jax.numpy as jnp
import numpy as np
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from teng_eq.cache.files import cache_dir, probe_folder
from teng_eq.config.options import BOOKKEEPING, at_least, options_from
from teng_eq.errors import ConfigError, bad
from teng_eq.estimate.defect import transport_for
from teng_eq.estimate.transport import oscillatory
from teng_eq.jobs.resources import check_memory
from teng_eq.run.config import SHORTHANDS, RunConfig
from teng_eq.run.schedule import Adaptive, below_dt_min
from teng_eq.search.space import SWEEPER_TARGET, Space, check_options, parse_space
from teng_eq.search.study import SERVER_RECIPE, busy, check_storage, default_storage, is_busy, study_name
from teng_eq.tracking.store import check_store, default_tracking_uri

#: ``hydra.sweeper._target_`` of Hydra's basic sweeper (the default): lists and their products.
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"

#: ``${key}`` or ``${key.sub}``: an interpolation of the top-level ``key``.
_INTERPOLATION = re.compile(r"\$\{(\w+)[.}]")


@dataclasses.dataclass(frozen=True)
class Job:
    """A validated job: its numerics and its bookkeeping."""

    run: RunConfig
    options: JobOptions
    tracking_uri: str  # resolved: the default store when ``options.tracking_uri`` is null


def validate_job(cfg: DictConfig, *, root: Path, overrides: Iterable[str] = ()) -> Job:
    """Every check of a job's composed config, before any compute and before any
    MLflow run: unknown top-level keys, ``overrides`` setting a key the method does
    not read (:func:`check_used`), the numerics (:meth:`RunConfig.from_mapping`,
    method keys named as typed: :func:`key_namer`), the memory its largest arrays
    need (:func:`~teng_eq.jobs.resources.check_memory`), the bookkeeping keys, the
    MLflow store (malformed, unreachable; default: ``<root>/mlflow.db``) and the
    cache folder (a file can be written in it). Raises a one-line :class:`~teng_eq.errors.ConfigError`."""
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise ConfigError(f"invalid config: {one_line(err)}") from None
    check_top_level(resolved)
    options = JobOptions.from_mapping(resolved)
    check_used(cfg, overrides)
    rename = key_namer(cfg)
    run = RunConfig.from_mapping(resolved, rename=rename)
    check_memory(run, rename=rename)
    uri = options.tracking_uri or default_tracking_uri(root)
    try:
        check_store(uri)
    except ValueError as err:
        raise ConfigError(f"invalid config: {err}") from None
    _check_writable_folder("cache_dir", cache_dir(options.cache_dir))
    return Job(run=run, options=options, tracking_uri=uri)


#: (ρ, whether the rates are oscillatory) of :func:`initial_spectrum` by (equation, grid,
#: method): a sweep's jobs share it.
_RADII: dict[tuple, tuple[float, bool] | None] = {}

#: A fixed Δt past a real spectrum's stable step is flagged when its fastest mode would grow by
#: more than this over the run (:func:`stability_warning`).
GROWTH_FLAGGED = 10.0


def initial_radius(run: RunConfig) -> float | None:
    """ρ of L′[u₀] on the fit grid's modes (:meth:`~teng_eq.estimate.transport.Transport.radius`,
    through the explicit integrator's stability region on complex rates): the radius
    ``dt: auto`` caps its steps by, from u₀ itself — known before θ₀, which it is fitted
    to. None where there is no cap to compute: an implicit or non-TENG method, a system
    (its coefficients are θ's), a domain without the transport (a disk, sampled points)."""
    spectrum = initial_spectrum(run)
    return None if spectrum is None else spectrum[0]


def initial_spectrum(run: RunConfig) -> tuple[float, bool] | None:
    """:func:`initial_radius`'s ρ, and whether it is the radius of oscillatory rates (waves,
    dispersion, advection: ρ above the fastest real decay) rather than of a real decay."""
    method, options, eq = run.method.cls, run.method.options, run.equation
    grid, holdout = getattr(options, "grid", None), getattr(options, "holdout", None)
    if method.stability_limit(options) is None or grid is None or holdout is None or eq.components:
        return None
    key = (repr(eq), grid, repr(holdout), run.method.impl, repr(method.stability_region(options)))
    if key not in _RADII:  # on the points the run's estimate reads L′[û] on: the held-out ones
        points = eq.holdout(grid, eq.holdout_size(grid, holdout))
        weights = np.broadcast_to(np.asarray(points.weights, np.float64), points.points.shape[:1])
        transport = transport_for(eq, points, weights, "transport", eq.quadrature(grid).grid_shape,
                                  method.stability_region(options))
        if transport is None:
            _RADII[key] = None
        else:
            a = np.asarray(transport.coefficients(eq, lambda p: eq.u0(p.T), jnp.asarray(points.points), 0.0))
            _RADII[key] = transport.radius(a), oscillatory(transport, a)
    return _RADII[key]


def say_stability(run: RunConfig) -> None:
    """:func:`stability_warning`'s line on stderr, where there is one (its refusal raised)."""
    if (line := stability_warning(run)):
        print(line, file=sys.stderr)


def stability_warning(run: RunConfig) -> str | None:
    """Before θ₀, from u₀'s spectrum (:func:`initial_spectrum`): a fixed Δt beyond the
    explicit integrator's stable step x/ρ gets one warning line naming that step and what
    to do — on oscillatory rates always, on a real decay where its fastest mode would grow
    by more than :data:`GROWTH_FLAGGED` over the run, |R(−Δtρ)|^steps; under ``dt: auto`` a
    stable step (the controller's cap,
    :meth:`~teng_eq.run.schedule.Adaptive.stable_step`) below ``controller.dt_min`` is
    refused in one line (Euler and Heun on a dispersive spectrum), which the run would
    otherwise say after θ₀. None where neither holds, or no cap is computed. Not part of
    :func:`validate_job` (it differentiates L[u₀], seconds where the other checks take
    milliseconds): the command line's :func:`preflight` and :func:`teng_eq.api.run` call it."""
    spectrum = initial_spectrum(run)
    if not spectrum or not spectrum[0]:
        return None
    (rho, oscillatory), method, options = spectrum, run.method.cls, run.method.options
    limit, name = method.stability_limit(options), run.method.name
    if run.adaptive:
        cap = Adaptive(run.controller, (run.t_final,), 1, 0.0, limit).stable_step(rho)
        if cap < run.controller.dt_min:
            raise ConfigError(f"invalid config: {below_dt_min(name, 0.0, cap, run.controller.dt_min)}")
        return None
    if run.dt <= limit / rho:
        return None
    # Just past a real decay's bound the fastest mode barely grows (the main job's Δt 0.02:
    # |R| = 1.05 a step, 1.6 over its 10), and a fit carries little of it: not flagged.
    growth = None if oscillatory else method.amplification(options, -run.dt * rho)
    if growth is not None and growth ** run.n_steps <= GROWTH_FLAGGED:
        return None
    stable = limit / rho
    return (f"warning: dt={run.dt:g} is beyond {name}'s stable step {stable:.3g} on the fastest mode of "
            f"L′[u₀] the fit grid resolves (Δt·ρ = {run.dt * rho:.3g} > {limit:.3g}; dt=auto caps its "
            f"steps there): where the fits carry that mode the run blows up; take dt <= {stable:.3g}, "
            "dt=auto, or an implicit method (e.g. method=teng_sdirk2)")


def key_namer(cfg: DictConfig) -> Callable[[str], str]:
    """``key ↦`` the key the user typed for it: the top-level key it is a plain
    interpolation of, through every level (``method.fit.solver`` is
    ``${fit}.solver``, which is ``${solver}``: ``solver``); other keys as they are."""
    raw = OmegaConf.to_container(cfg, resolve=False)

    def name(key: str) -> str:
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            node = raw
            for part in parts[:i]:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, str) and (m := re.fullmatch(r"\$\{([\w.]+)\}", node)):
                return name(".".join([m.group(1), *parts[i:]]))
        return key

    return name


def used_keys(cfg: DictConfig) -> set[str]:
    """The top-level keys the method group reads, through interpolations (and the
    interpolations of those: the ``fit`` group reads ``solver``)."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    seen: set[str] = set()
    todo = [raw["method"]]
    while todo:
        for name in _INTERPOLATION.findall(str(todo.pop())):
            if name in raw and name not in seen:
                seen.add(name)
                todo.append(raw[name])
    return seen


def check_used(cfg: DictConfig, overrides: Iterable[str]) -> None:
    """Refuse an override of a :data:`~teng_eq.run.config.SHORTHANDS` key that the chosen
    method does not read (``iters=5`` with a PINN): silently ignoring it would
    make a sweep over it a sweep over nothing."""
    used = used_keys(cfg)
    for item in overrides:
        key, _, value = item.partition("=")
        top = key.lstrip("+~").split(".")[0]
        if top in SHORTHANDS and top not in used:
            raise bad(key.lstrip("+~"), value, f"method {cfg.method.name} does not use it")


def _check_writable_folder(key: str, path) -> None:
    """``path`` is, or can be made, a folder this process can write files in:
    tried by creating and removing a file (:func:`~teng_eq.cache.files.probe_folder`),
    whoever the user is (as root ``os.access`` passes every folder, ``/proc`` too)."""
    why = probe_folder(path)
    if why is not None:
        raise bad(key, str(path), why)


#: The config groups of ``conf/config.yaml``'s defaults list.
GROUPS = ("equation", "method", "network", "table1_case", "experiment")


def check_group_choices(overrides: list[str], conf_dir: Path, *, config_name: str = "config") -> None:
    """Reject ``group=name`` naming no option of the group, and ``+group=name`` for a
    group already in the defaults list (earlier versions wrote ``+experiment=…``):
    Hydra reports these over many lines; this gives the one line every bad key gets.

    A group's options are those Hydra's own config search finds: ``conf_dir`` and the
    folders of a ``hydra.searchpath=[…]`` override (a user's config folder; the
    preflight turns ``--config-dir`` into one, :func:`with_config_dir`)."""
    searchpath = [o for o in overrides if o.split("=", 1)[0] == "hydra.searchpath"]
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        known_in: dict[str, list[str]] = {}
        for item in overrides:
            if item.startswith("-") or "=" not in item:
                continue
            key, value = item.split("=", 1)
            group = key.lstrip("+~")
            if group not in GROUPS:
                continue
            if key.startswith("+"):
                raise ConfigError(f"invalid config: {item}: {group} is in the defaults list; "
                                  f"write {group}={value}")
            if group not in known_in:
                try:
                    options = loader.get_group_options(group, config_name=config_name, overrides=searchpath)
                except (HydraException, OmegaConfBaseException) as err:
                    raise ConfigError(f"invalid config: {one_line(err)}") from None
                known_in[group] = sorted(o for o in options if not o.rsplit("/", 1)[-1].startswith("_"))
            known = known_in[group]
            for choice in _group_values(item, value):
                if choice.strip() and choice.strip() not in known:
                    raise ConfigError(f"invalid config: {group}={choice.strip()!r}: unknown, "
                                      f"choose one of {known}")


@dataclasses.dataclass(frozen=True)
class CommandLine:
    """What a ``pipeline/sweep.py`` command line asks of Hydra: its overrides, whether
    it is a multirun, the primary config's name (``--config-name``) and a user's
    config folder (``--config-dir``, absolute)."""

    overrides: list[str]
    multirun: bool = False
    config_name: str = "config"
    config_dir: str | None = None


#: Hydra's options that take a value, by every spelling, and the field of :class:`CommandLine` each sets.
_VALUED = {"--config-dir": "config_dir", "-cd": "config_dir",
           "--config-name": "config_name", "-cn": "config_name"}


def parse_command_line(argv: list[str]) -> CommandLine | None:
    """The :class:`CommandLine` of ``argv``; None where it asks Hydra for something
    other than running jobs (``--help``, ``--cfg``, ``--info``, …) or names a
    config folder relative to the script (``--config-path``)."""
    fields: dict = {"overrides": [], "multirun": False}
    args = iter(argv)
    for arg in args:
        name, eq, value = arg.partition("=")
        if arg in ("-m", "--multirun"):
            fields["multirun"] = True
        elif arg in ("-r", "--run"):
            continue
        elif name in _VALUED:
            value = value if eq else next(args, None)
            if value is None:
                raise ConfigError(f"invalid config: {name} needs a value")
            fields[_VALUED[name]] = value
        elif arg.startswith("-"):
            return None
        else:
            fields["overrides"].append(arg)
    if fields.get("config_dir") is not None:
        folder = Path(fields["config_dir"]).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(f"invalid config: --config-dir={fields['config_dir']}: not a folder ({folder})")
        fields["config_dir"] = str(folder)
    return CommandLine(**fields)


def with_config_dir(overrides: list[str], config_dir: str | None) -> list[str]:
    """``overrides`` with ``config_dir`` (``--config-dir``) added to Hydra's search path
    as a ``hydra.searchpath`` override, before the folders one already names: the
    compose API has no ``--config-dir``; Hydra searches the primary config's folder,
    then ``--config-dir``, then ``hydra.searchpath``'s folders."""
    if config_dir is None:
        return overrides
    url = f"file://{config_dir}"
    parser = OverridesParser.create()
    rest, named = [], []
    for item in overrides:
        if item.split("=", 1)[0] != "hydra.searchpath":
            rest.append(item)
            continue
        try:
            value = parser.parse_override(item).value()
        except HydraException as err:
            raise ConfigError(f"invalid config: {one_line(err)}") from None
        named = list(value) if isinstance(value, list) else [value]
    return [*rest, f"hydra.searchpath=[{','.join(str(v) for v in [url, *named])}]"]


def _group_values(item: str, value: str) -> list[str]:
    """The options a group override names: ``a`` or ``a,b`` or ``choice(a, b)`` (a
    search's axis); a glob and what does not parse are left to Hydra."""
    try:
        override = OverridesParser.create().parse_override(item)
        if not override.is_sweep_override():
            return [value]
        return list(override.sweep_string_iterator()) if override.is_choice_sweep() else []
    except HydraException:
        return []  # a glob needs the config loader; a malformed override is Hydra's one line later


def one_line(err: Exception) -> str:
    """Hydra's composition errors span several lines (and a chained cause): the
    first line of each, joined."""
    parts = []
    while err is not None and len(parts) < 3:
        first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
        if first and first not in parts:
            parts.append(first)
        err = err.__cause__
    return " ".join(parts)


def sweep_jobs(parser: OverridesParser, overrides: list[str]) -> list[list[str]]:
    """The jobs of a multirun's overrides, each its list of overrides: the
    Cartesian product of the swept values (``dt=0.01,0.02``, ``glob(…)``), a key
    given twice taking its last value, as Hydra's basic sweeper forms them."""
    axes: dict[str, list[str]] = {}
    for o in parser.parse_overrides(overrides):
        key = o.get_key_element()
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                raise ConfigError(f"invalid config: {o.input_line}: the basic sweeper sweeps lists only")
            axes[key] = [f"{key}={v}" for v in o.sweep_string_iterator()]
        else:
            axes[key] = [f"{key}={o.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*axes.values())]


def preflight(argv: list[str], conf_dir: Path) -> int:
    """Compose and validate every job of the command line ``argv`` before Hydra
    starts. Returns the number of jobs checked (0 when ``argv`` asks Hydra for
    something other than running, e.g. ``--help`` or ``--cfg``, or names another
    sweeper, which expands its jobs its own way: then each job checks itself).
    A user's config folder, by ``hydra.searchpath=[file://…]`` or ``--config-dir``, is
    searched as Hydra searches it (:func:`parse_command_line`, :func:`with_config_dir`).
    A frontier search (``hydra/sweeper=frontier``) has no list of jobs: its space and
    keys are checked, then the points :meth:`~teng_eq.search.space.Space.check_points`
    names (every choice, the ends and middle of every range, and the corner of last values)."""
    command = parse_command_line(argv)
    if command is None:
        return 0
    multirun, config_name = command.multirun, command.config_name
    overrides = with_config_dir(command.overrides, command.config_dir)
    check_group_choices(overrides, conf_dir, config_name=config_name)
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        try:
            parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
            fixed = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
            base = compose(config_name=config_name, overrides=fixed, return_hydra_config=True)
            # A preset may sweep through its own hydra.sweeper.params (and set hydra.mode:
            # MULTIRUN): Hydra's basic sweeper puts them before the command line's overrides.
            multirun = multirun or base.hydra.mode == RunMode.MULTIRUN
            sweeper = base.hydra.sweeper.get("_target_") if multirun else None
            fixed_count = 0
            if sweeper == SWEEPER_TARGET:  # a frontier search (teng_eq.search): the points of its space
                space = search_space(parser, base, overrides)
                check_study(base, space, conf_dir.parent)
                # A user's config folder stays on every point's search path (the space holds no Hydra keys).
                path = [o for o in overrides if o.startswith("hydra.searchpath=")]
                jobs, fixed_count = ([[*path, *job] for job in space.check_points()],
                                     len(path) + len(space.fixed))
            elif multirun and sweeper != BASIC_SWEEPER:
                return 0  # another sweeper expands its jobs its own way: each job checks itself
            else:
                swept = ([f"{k}={v}" for k, v in (base.hydra.sweeper.get("params") or {}).items()]
                         if multirun else [])
                jobs = sweep_jobs(parser, [*swept, *overrides]) if multirun else [overrides]
        except (HydraException, OmegaConfBaseException) as err:
            raise ConfigError(f"invalid config: {one_line(err)}") from None
        if (line := side_by_side_on_sqlite(base, len(jobs) if multirun else 1, conf_dir.parent)):
            print(line, file=sys.stderr)
        runs = []
        for job in jobs:
            try:
                try:
                    cfg = compose(config_name=config_name, overrides=job)
                except (HydraException, OmegaConfBaseException) as err:
                    raise ConfigError(f"invalid config: {one_line(err)}") from None
                runs.append(validate_job(cfg, root=conf_dir.parent, overrides=job).run)
            except ConfigError as err:
                if sweeper != SWEEPER_TARGET:
                    raise
                raise ConfigError(f"{err} (at the search's point {' '.join(job[fixed_count:])})") from None
    for run in runs:  # once every job passed its checks: a refused command line computes no spectrum
        say_stability(run)
    return len(jobs)


def search_space(parser: OverridesParser, base: DictConfig, overrides: list[str]) -> Space:
    """A frontier search's space (:func:`~teng_eq.search.space.parse_space`: the
    sweeper's ``params``, then the command line's overrides but Hydra's own) and its
    keys (``hydra.sweeper.*``: :func:`~teng_eq.search.space.check_options`), checked;
    its error must be one the runs report (no estimate: no ``est_global_rel_l2``)."""
    sw = base.hydra.sweeper
    check_options(n_trials=sw.get("n_trials"), n_jobs=sw.get("n_jobs"), sampler=sw.get("sampler"),
                  startup_trials=sw.get("startup_trials"), error=sw.get("error"), cost=sw.get("cost"),
                  target=sw.get("target"))
    if sw.error == "est_global_rel_l2" and base.get("estimate") == "none":
        raise ConfigError("invalid config: hydra.sweeper.error='est_global_rel_l2' needs an error estimate, "
                          "but estimate='none'")
    arguments = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_hydra_override()]
    params = sw.get("params")
    params = OmegaConf.to_container(params, resolve=True) if params is not None else {}
    return parse_space(parser, params, arguments)


#: Hydra's launchers that run a multirun's jobs side by side (the end of their ``_target_``).
PARALLEL_LAUNCHERS = ("JoblibLauncher", "LocalLauncher", "SlurmLauncher")


def side_by_side_on_sqlite(base: DictConfig, jobs: int, root: Path) -> str | None:
    """The one line of a command of ``jobs`` jobs (a multirun's; 1 for a single run) that
    write a SQLite MLflow store side by side (a parallel launcher, more than one job at
    once: a frontier search's ``n_jobs``);
    else None. SQLite takes one writer at a time: nothing is lost (every write waits for
    its turn, and is retried), but the jobs wait for each other, more the more of them
    there are (measured: docs/guides/server-and-cluster.md), and the line names the
    server for many writers."""
    target = str(base.hydra.launcher.get("_target_", ""))
    if jobs > 1 and base.hydra.sweeper.get("_target_") == SWEEPER_TARGET:
        jobs = int(base.hydra.sweeper.get("n_jobs", 1))
    if target.endswith("JoblibLauncher"):
        n_jobs = int(base.hydra.launcher.get("n_jobs", -1))  # joblib's: -1 all cores, -2 all but one, …
        jobs = min(jobs, n_jobs if n_jobs > 0 else max(1, (os.cpu_count() or 1) + 1 + n_jobs))
    uri = base.get("tracking_uri") or default_tracking_uri(root)
    if jobs < 2 or not target.endswith(PARALLEL_LAUNCHERS) or not uri.startswith("sqlite:"):
        return None
    return (f"warning: {jobs} jobs at once write the SQLite store {uri}, which takes one writer at a "
            f"time: they wait for each other's writes; for many writers use a PostgreSQL-backed mlflow "
            f"server ({SERVER_RECIPE})")


def check_study(base: DictConfig, space: Space, root: Path) -> None:
    """A frontier search's study: its storage one the search takes
    (:func:`~teng_eq.search.study.check_storage`), and, in SQLite, not held by another
    search now (SQLite takes one search at a time: the line names the recipe for many)."""
    sw = base.hydra.sweeper
    uri = base.get("tracking_uri") or default_tracking_uri(root)
    storage = sw.get("storage") or default_storage(uri, root)
    check_storage(storage)
    name = sw.get("study") or study_name(str(base.experiment_name), space, str(sw.error), str(sw.cost))
    if is_busy(storage, name):
        raise ConfigError(busy(storage, name))


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """The :data:`~teng_eq.config.options.BOOKKEEPING` keys: where a job's results go and
    how it is run.

    ``checkpoint_every``: steps between checkpoints (one is also written at the
    end); ``resume``: continue this configuration's unfinished run, skip it when
    finished (else start a new run); ``divergence_factor``: a step whose loss
    exceeds this many times the median loss of the steps before it ends the
    run as diverged (as does any non-finite value), and so does a measured ``rel_l2`` or
    estimated ``est_rel_l2`` above ``divergence_error``, or a step loss above its square
    times ‖u‖², from the first step on; ``store_retry_s``: seconds a
    job waits for an MLflow store that does not answer when it needs it (to open
    its run, upload artifacts, end the run) before it gives up — while stepping it
    never waits, whatever this is.
    """

    tracking_uri: str | None
    experiment_name: str
    cache_dir: str | None
    progress: bool
    checkpoint_every: int
    resume: bool
    divergence_factor: float
    divergence_error: float
    store_retry_s: float

    def validate(self, prefix: str) -> None:
        if not self.experiment_name.strip():
            raise bad("experiment_name", self.experiment_name, "must be a non-empty name")
        at_least(prefix, self, 1, "checkpoint_every")
        if not self.divergence_factor > 1:
            raise bad("divergence_factor", self.divergence_factor, "must be a number > 1")
        if not self.divergence_error > 0:
            raise bad("divergence_error", self.divergence_error, "must be a number > 0 (inf: no bound)")
        if not self.store_retry_s >= 0:
            raise bad("store_retry_s", self.store_retry_s, "must be a number of seconds >= 0")

    @classmethod
    def from_mapping(cls, cfg: Mapping) -> JobOptions:
        return options_from(cls, {k: cfg[k] for k in BOOKKEEPING if k in cfg}, "")


def check_top_level(cfg: Mapping) -> None:
    """No top-level key outside the run's, the :data:`SHORTHANDS` and the bookkeeping."""
    known = {"equation", "method", *RunConfig.KEYS, *SHORTHANDS, *BOOKKEEPING}
    for key in cfg:
        if key not in known:
            raise bad(key, cfg[key], "unknown key")
