"""The Python API: one run from a notebook or a script, with the command line's
overrides and checks, with or without MLflow.

    from teng_eq.api import run

    result = run("mine", "dt=auto", config_dir="my_conf")  # a config name (conf/equation/, my_conf/equation/)
    result = run(Mine(name="mine", nu=0.1, a=1.0, lengths=(6.283185307179586,) * 2,
                      initial_condition="waves"), "grid=32")  # an instance: no yaml needed
    result.times, result.rel_l2, result.est_rel_l2, result.network
    result.field(points), result.field.on_grid(128)       # û at the end: any (n, dim) points, a grid
    load_run("<run id>").on_grid()                        # the same from a logged run (or its folder)
    load_run("<run id>", tracking_uri="sqlite:///…/x.db")  # … of another store

:func:`run` composes ``conf/`` with Hydra's compose API (this module is, with
:mod:`teng_eq.jobs.preflight` and :mod:`teng_eq.search`, one of the places that import
Hydra), checks the job as :func:`~teng_eq.jobs.preflight.preflight` checks a command line
(one-line :class:`~teng_eq.errors.ConfigError` before any compute), then runs it:
with ``mlflow=True`` through :func:`teng_eq.jobs.job.tracked_job`, the same MLflow run a
job of ``pipeline/sweep.py`` makes; without, :func:`teng_eq.run.simulation.run_simulation`
alone. ``import teng_eq`` does not import this module (nor JAX).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from teng_eq import tracking
from teng_eq.config.options import user_folders_on_path
from teng_eq.equations import Equation
from teng_eq.errors import ConfigError, bad
from teng_eq.fit.results import StepRecord
from teng_eq.jobs.job import JobContext, enable_compilation_cache, tracked_job
from teng_eq.jobs.preflight import check_group_choices, one_line, say_stability, validate_job, with_config_dir
from teng_eq.run.callbacks import Callback, OnStep
from teng_eq.run.config import RunConfig
from teng_eq.run.result import FinalField, RunResult
from teng_eq.run.simulation import load_network, run_simulation

#: The checkout whose ``conf/`` the API composes (``pip install -e .``: the repository),
#: and where the default MLflow store is (``<root>/mlflow.db``), as for ``pipeline/sweep.py``.
ROOT = Path(__file__).resolve().parents[2]


def run(equation: Equation | str, *overrides: str, mlflow: bool = False, tracking_uri: str | None = None,
        cache_dir: str | Path | None = None, on_step: Callable[[StepRecord], None] | None = None,
        callbacks: Sequence[Callback | Callable] = (), config_dir: str | Path | None = None,
        conf: str | Path | None = None) -> RunResult:
    """Run ``equation`` with the command line's ``overrides`` (``"dt=auto"``, ``"grid=32"``,
    …; one run: no sweeps) and return its :class:`~teng_eq.run.result.RunResult`.

    ``equation``: a config name of the ``equation`` group (of ``conf/equation/`` or of ``config_dir``), or an
    :class:`~teng_eq.equations.Equation` instance, whose class and fields become the ``equation`` group (its
    class importable as ``module:Class``, a user's file in the current folder included). ``mlflow``: log the
    run as ``pipeline/sweep.py``'s job does, in ``tracking_uri`` (None: the config's); a configuration already
    FINISHED there is skipped unless ``"resume=false"`` (else a :class:`~teng_eq.errors.ConfigError`).
    ``cache_dir``: θ₀ and references (None: the config's). ``on_step``: called with every step's
    :class:`~teng_eq.fit.results.StepRecord`; ``callbacks``: :class:`~teng_eq.run.callbacks.Callback` s,
    or functions called as ``cb(record, state)``, a true value stopping the run there. ``config_dir``: a
    user's config folder (as ``--config-dir``); ``conf``: the primary config folder (None: ``<root>/conf``). A
    bad equation, override or value raises a one-line :class:`~teng_eq.errors.ConfigError` before any compute;
    a run that fails, :class:`~teng_eq.errors.RunFailed`.
    """
    conf_dir = Path(conf) if conf is not None else ROOT / "conf"
    if not (conf_dir / "config.yaml").is_file():
        raise ConfigError(f"invalid config: conf={conf_dir}: no config.yaml there "
                          "(pass conf=<checkout>/conf)")
    user_folders_on_path()  # a user's module in the current folder, as on the command line
    overrides = list(overrides)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item or item.startswith("-"):
            raise bad("overrides", item, "must be 'key=value' strings, as on the command line (no options)")
    group = None
    if isinstance(equation, Equation):
        if any(o.lstrip("+~").split("=")[0].split(".")[0] == "equation" for o in overrides):
            raise ConfigError("invalid config: an equation instance comes with its own fields; "
                              "set them on the instance, not by equation overrides")
        group = equation_group(equation)
    elif isinstance(equation, str):
        overrides.insert(0, f"equation={equation}")
    else:
        raise bad("equation", equation, "must be an Equation instance or the name of an equation config")
    if config_dir is not None:
        folder = Path(config_dir).expanduser().absolute()
        if not folder.is_dir():
            raise ConfigError(f"invalid config: config_dir={config_dir}: not a folder ({folder})")
        overrides = with_config_dir(overrides, str(folder))
    cfg = compose_job(conf_dir, overrides, group=group, tracking_uri=tracking_uri, cache_dir=cache_dir)
    job = validate_job(cfg, root=ROOT, overrides=overrides)
    say_stability(job.run)  # before θ₀, as the command line's preflight
    enable_compilation_cache(job.options.cache_dir)
    if not mlflow:
        return run_simulation(job.run, on_step=on_step, callbacks=callbacks, cache_dir=job.options.cache_dir,
                              divergence_factor=job.options.divergence_factor,
                              divergence_error=job.options.divergence_error)
    with tempfile.TemporaryDirectory(prefix="teng-eq-api-") as output_dir:
        context = JobContext(root=ROOT, overrides=tuple(overrides), job_num=None, output_dir=Path(output_dir))
        _, result = tracked_job(cfg, job, context, time.perf_counter(),
                                callbacks=[*callbacks, *([OnStep(on_step, record_only=True)]
                                                         if on_step is not None else [])])
    if result is None:
        raise ConfigError("invalid config: this configuration's run is FINISHED in the store already "
                          "(skipped); pass 'resume=false' to run it again")
    return result


def load_run(run: str | Path, *, tracking_uri: str | None = None) -> FinalField:
    """The final field of a logged run (:class:`~teng_eq.run.result.FinalField`: evaluate it
    on any points, or on a grid), from its ``params/theta.eqx`` and the resolved config
    beside it (``config/config.yaml``). ``run``: an MLflow run id, or a run's artifact folder
    (or its ``theta.eqx``). A run id is looked up in ``tracking_uri``; None: MLflow's own
    store where one is set (``mlflow.set_tracking_uri``, else ``$MLFLOW_TRACKING_URI``), else
    the checkout's default store (:func:`~teng_eq.tracking.active_tracking_uri`). A user's
    equation must be importable, as for the run (its file in the current folder)."""
    path = Path(run).expanduser()
    names = ("config/config.yaml", "params/theta.eqx")
    with tempfile.TemporaryDirectory(prefix="teng-eq-run-") as tmp:
        if path.exists():
            folder = path.parent.parent if path.is_file() else path
            config, theta = (folder / name for name in names)
            if not (config.is_file() and theta.is_file()):
                raise bad("run", str(run), f"{folder} holds no {' and '.join(names)}")
        else:
            uri = tracking_uri or tracking.active_tracking_uri(ROOT)
            try:
                config, theta = (tracking.artifact_copies(uri, [str(run)], name, Path(tmp) / name)
                                 .get(str(run)) for name in names)
            except tracking.SelectionError as err:
                raise bad("run", str(run), str(err)) from None
            if config is None or theta is None:
                raise bad("run", str(run), f"no run with {' and '.join(names)} in {uri} (a FINISHED run of "
                          "pipeline/sweep.py or of run(..., mlflow=True) has both)")
        user_folders_on_path()
        cfg = RunConfig.from_mapping(OmegaConf.to_container(OmegaConf.load(config), resolve=True))
        return FinalField(cfg, load_network(cfg, theta))


def compose_job(conf_dir: Path, overrides: Sequence[str], *, group: Mapping | None = None,
                tracking_uri: str | None = None, cache_dir: str | Path | None = None):
    """``conf_dir/config.yaml`` composed with ``overrides`` (after the one-line check of
    their group choices, :func:`~teng_eq.jobs.preflight.check_group_choices`); ``group``
    replaces the ``equation`` group; ``tracking_uri`` and ``cache_dir`` set theirs."""
    check_group_choices(list(overrides), conf_dir)
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        try:
            cfg = compose(config_name="config", overrides=list(overrides))
        except (HydraException, OmegaConfBaseException) as err:
            raise ConfigError(f"invalid config: {one_line(err)}") from None
    settings = {"equation": group, "tracking_uri": tracking_uri,
                "cache_dir": None if cache_dir is None else str(Path(cache_dir).expanduser().absolute())}
    for key, value in settings.items():
        if value is not None:
            OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def equation_group(equation: Equation) -> dict:
    """The ``equation`` config group of an instance: ``impl`` (its class as
    ``module:Class``) and every field, as config values (tuples as lists). A field
    that a config cannot hold (an array, a function) is a one-line error."""
    cls = type(equation)
    group = {"impl": f"{cls.__module__}:{cls.__qualname__}"}
    for field in dataclasses.fields(equation):
        group[field.name] = _config_value(getattr(equation, field.name), f"equation.{field.name}")
    return group


def _config_value(value, key: str):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_config_value(v, key) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _config_value(v, f"{key}.{k}") for k, v in value.items()}
    raise bad(key, type(value).__name__, "cannot be a config value (numbers, strings, lists, mappings)")
