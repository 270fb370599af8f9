"""MLflow helpers: the only module of the library that imports MLflow.

Curves go through ``MlflowClient.log_batch`` (one call per 1000 points, not one
per point: ~18 ms each on a 2-core machine); every run that raises is ended
FAILED with the reason in the ``failure_reason`` tag.

A Hydra multirun is one *parent* run with a *child* run per job. The parent is
made by :class:`SweepCallback` in the launching process, before any job starts,
which also creates the store: parallel jobs opening a fresh SQLite store race
on its schema migration.

MLflow itself is imported on first use (``import mlflow`` takes ~2 s): a job's
run is opened in a background thread, so that import overlaps the job's own
start-up instead of adding to its wall time.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import platform
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: Environment variable through which the launching process hands the parent
#: run's id to its jobs (inherited by joblib workers, submitit and SLURM jobs).
PARENT_RUN_ENV = "TENG_EQ_PARENT_RUN"

_BATCH_METRICS = 1000
_BATCH_PARAMS = 100


def default_tracking_uri(root: Path) -> str:
    """``sqlite:///<root>/mlflow.db``: what a plain ``mlflow ui`` in ``root`` opens."""
    return f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def artifact_root_for(tracking_uri: str, root: Path) -> Path | None:
    """``<root>/mlruns`` for a local store; ``None`` (the server's own artifact
    store) for a remote ``http(s)://`` one."""
    return None if tracking_uri.startswith(("http://", "https://")) else Path(root) / "mlruns"


def git_state(root: Path) -> tuple[str, bool]:
    """``(commit, dirty)`` of the checkout at ``root``; ``("unknown", False)`` outside git."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


def device_description() -> str:
    """The accelerator jax computes on, e.g. ``gpu: NVIDIA H100 80GB HBM3`` or ``cpu: x86_64 (2 cores)``."""
    import jax

    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return f"cpu: {_cpu_model()} ({os.cpu_count()} cores)"
    return f"{dev.platform}: {dev.device_kind}"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def ensure_experiment(client: MlflowClient, name: str, artifact_root: Path | None) -> str:
    """The id of experiment ``name``, created (artifacts under ``artifact_root``) if new."""
    import mlflow

    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    location = None if artifact_root is None else (Path(artifact_root).resolve() / name).as_uri()
    try:
        return client.create_experiment(name, artifact_location=location)
    except mlflow.exceptions.MlflowException:
        # Another process created it between our lookup and create.
        return client.get_experiment_by_name(name).experiment_id


def flatten(mapping: Mapping, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}} -> {"a.b": "1"}``: a nested config as MLflow params."""
    out: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


class RunLogger:
    """One run's logger: params, tags and metrics are buffered and written with
    ``log_batch`` at each :meth:`flush`.

    The run is opened in a background thread (``opening``), so that creating the
    store's connection, and the run, overlaps the caller's own start-up (θ₀,
    compilation) instead of adding to it. ``seconds`` adds up the time the
    caller spends in its calls and in :meth:`timed` blocks: the tracking
    overhead of the run.
    """

    def __init__(self, opening: Future):
        self._opening = opening
        self.seconds = 0.0
        # Plain tuples until flush: building mlflow entities would import mlflow
        # on the caller's thread.
        self._metrics: list[tuple[str, float, int, int]] = []
        self._params: list[tuple[str, str]] = []
        self._tags: list[tuple[str, str]] = []

    @property
    def client(self) -> MlflowClient:
        return self._opening.result()[0]

    @property
    def run_id(self) -> str:
        return self._opening.result()[1]

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        """Count the block's time as tracking overhead (e.g. drawing the plots)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    def params(self, params: Mapping[str, str]) -> None:
        self._params += [(k, str(v)[:6000]) for k, v in params.items()]

    def tags(self, tags: Mapping[str, str]) -> None:
        self._tags += [(k, str(v)) for k, v in tags.items()]

    def metric(self, name: str, value: float, step: int = 0) -> None:
        self._metrics.append((name, float(value), int(time.time() * 1000), int(step)))

    def curve(self, name: str, steps, values) -> None:
        now = int(time.time() * 1000)
        self._metrics += [(name, float(v), now, int(s)) for s, v in zip(steps, values)]

    def flush(self) -> None:
        """Write everything buffered (waits for the run to be open)."""
        with self.timed():
            client, run_id = self._opening.result()
            from mlflow.entities import Metric, Param, RunTag

            params, self._params = [Param(*p) for p in self._params], []
            tags, self._tags = [RunTag(*t) for t in self._tags], []
            metrics, self._metrics = [Metric(*m) for m in self._metrics], []
            for i in range(0, len(params), _BATCH_PARAMS):
                client.log_batch(run_id, params=params[i : i + _BATCH_PARAMS])
            if tags:
                client.log_batch(run_id, tags=tags)
            for i in range(0, len(metrics), _BATCH_METRICS):
                client.log_batch(run_id, metrics=metrics[i : i + _BATCH_METRICS])

    def artifact(self, path: Path, folder: str | None = None) -> None:
        with self.timed():
            client, run_id = self._opening.result()
            path = Path(path)
            if path.is_dir():
                client.log_artifacts(run_id, str(path), folder)
            else:
                client.log_artifact(run_id, str(path), folder)


def check_store(tracking_uri: str) -> None:
    """Fail fast, before any compute, on a store that cannot be reached: a
    ``sqlite:///`` file whose folder is missing, or a server that does not answer."""
    if tracking_uri.startswith("sqlite:///"):
        folder = Path(tracking_uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise ValueError(f"tracking_uri={tracking_uri}: folder {folder} does not exist")
    elif tracking_uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=10):
                pass
        except OSError as err:
            raise ValueError(f"tracking_uri={tracking_uri}: no MLflow server answers ({err})") from None


def _open_run(tracking_uri, experiment, artifact_root, run_name, tags) -> tuple[MlflowClient, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    exp_id = ensure_experiment(client, experiment, artifact_root)
    return client, client.create_run(exp_id, run_name=run_name, tags=tags).info.run_id


@contextlib.contextmanager
def tracked_run(
    tracking_uri: str,
    experiment: str,
    *,
    artifact_root: Path | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    parent_run_id: str | None = None,
) -> Iterator[RunLogger]:
    """An MLflow run that ends FINISHED, or FAILED with ``failure_reason`` set;
    a child of ``parent_run_id`` when given (it may live in another experiment).

    The run is created in the background (see :class:`RunLogger`); an error in
    doing so surfaces at the first flush, or on leaving the block.
    """
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlflow-open")
    opening = pool.submit(_open_run, tracking_uri, experiment, artifact_root, run_name, tags)
    pool.shutdown(wait=False)
    logger = RunLogger(opening)
    try:
        yield logger
        logger.flush()
    except BaseException as exc:
        try:
            client, run_id = opening.result()
        except Exception:
            raise exc from None  # no run was made: nothing to mark
        reason = f"{type(exc).__name__}: {exc}".strip()[:4000]
        with contextlib.suppress(Exception):
            logger.flush()
            client.set_tag(run_id, "failure_reason", reason)
        client.set_terminated(run_id, status="FAILED")
        raise
    client, run_id = opening.result()
    client.set_terminated(run_id, status="FINISHED")


def _config_root(config) -> Path:
    """The folder holding the primary config folder (``conf/``): the repo root."""
    for source in config.hydra.runtime.config_sources:
        if source.provider == "main" and source.schema == "file":
            return Path(source.path).parent
    return Path.cwd()


def _all_experiment_ids(client: MlflowClient) -> list[str]:
    return [e.experiment_id for e in client.search_experiments()]


def children(client: MlflowClient, parent_run_id: str) -> list:
    """The child runs of ``parent_run_id``, in every experiment."""
    return client.search_runs(
        _all_experiment_ids(client), f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
        max_results=50000,
    )


class SweepCallback:
    """Hydra callback (``hydra.callbacks``) that gives a multirun one parent run.

    In the launching process, before any job starts, ``on_multirun_start`` opens
    the store (creating and migrating it once), creates the experiment
    ``config.experiment_name`` and a parent run tagged ``run_kind=sweep``,
    ``sweep_dir`` and ``sweep_overrides``, and exports its id in
    :data:`PARENT_RUN_ENV` for the jobs. The parent ends FINISHED when every
    child finished, else FAILED with the failed jobs in ``failure_reason``; an
    exit that skips ``on_multirun_end`` (Hydra re-raises a failed job) ends it
    through ``atexit``.

    Written against Hydra's callback protocol without importing Hydra (the
    library stays Hydra-free); the config is read by attribute.
    """

    def __init__(self) -> None:
        self.uri: str | None = None
        self.run_id: str | None = None

    def __getstate__(self) -> dict:
        # Launchers pickle the callbacks into each job's process; the parent run
        # belongs to the launching process alone.
        return {"uri": None, "run_id": None}

    def on_multirun_start(self, config, **kwargs) -> None:
        try:
            from mlflow.tracking import MlflowClient

            root = _config_root(config)
            uri = config.tracking_uri or default_tracking_uri(root)
            client = MlflowClient(uri)
            exp_id = ensure_experiment(client, config.experiment_name, artifact_root_for(uri, root))
            sweep_dir = str(config.hydra.sweep.dir)
            commit, dirty = git_state(root)
            name = "/".join(Path(sweep_dir).parts[-2:])
            run = client.create_run(exp_id, run_name=f"sweep {name}", tags={
                "run_kind": "sweep", "sweep_dir": sweep_dir,
                "sweep_overrides": " ".join(config.hydra.overrides.task),
                "git_commit": commit, "git_dirty": str(dirty),
            })
        except Exception as exc:
            # Hydra only warns about a callback's exception; a sweep without its
            # store must not start at all.
            raise SystemExit(f"error: cannot open the MLflow store for this sweep: {exc}") from exc
        self.uri, self.run_id = uri, run.info.run_id
        os.environ[PARENT_RUN_ENV] = self.run_id
        atexit.register(self.close)

    def on_multirun_end(self, config, **kwargs) -> None:
        self.close(complete=True)

    def close(self, complete: bool = False) -> None:
        """End the parent run (once). Hydra calls ``on_multirun_end`` only when
        every job returned; any other exit reaches here through ``atexit``."""
        if self.run_id is None:
            return
        run_id, self.run_id = self.run_id, None
        os.environ.pop(PARENT_RUN_ENV, None)
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        client = MlflowClient(self.uri)
        runs = children(client, run_id)
        failed = sorted(r.data.tags.get("job_num", "?") for r in runs if r.info.status != "FINISHED")
        client.log_batch(run_id, metrics=[Metric("n_jobs", len(runs), int(time.time() * 1000), 0)])
        if complete and runs and not failed:
            client.set_terminated(run_id, status="FINISHED")
            return
        reason = "the sweep stopped before all its jobs returned" if not complete else "no job ran"
        if failed:
            reason = f"jobs not finished: {', '.join(failed)}"
        client.set_tag(run_id, "failure_reason", reason)
        client.set_terminated(run_id, status="FAILED")

    def on_run_start(self, config, **kwargs) -> None:
        pass

    def on_run_end(self, config, **kwargs) -> None:
        pass

    def on_job_start(self, config, **kwargs) -> None:
        pass

    def on_job_end(self, config, job_return, **kwargs) -> None:
        pass


# --- Reading runs back (pipeline/analyze.py) ---------------------------------


class SelectionError(ValueError):
    """A run selection that names something the store does not hold."""


def _open_store(tracking_uri: str) -> MlflowClient:
    from mlflow.tracking import MlflowClient

    # MLflow would create an empty sqlite store on first contact: refuse instead.
    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise SelectionError(f"tracking_uri={tracking_uri!r}: no such MLflow store")
    return MlflowClient(tracking_uri)


@contextlib.contextmanager
def _fluent_uri(tracking_uri: str) -> Iterator[None]:
    """``mlflow.search_runs`` reads the process-wide URI: set it, then put it back."""
    import mlflow

    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)


def latest_sweep(tracking_uri: str) -> str:
    """The id of the most recently started run tagged ``run_kind=sweep``."""
    client = _open_store(tracking_uri)
    exps = _all_experiment_ids(client)
    runs = client.search_runs(exps, "tags.run_kind = 'sweep'", order_by=["attributes.start_time DESC"],
                              max_results=1) if exps else []
    if not runs:
        raise SelectionError(f"sweep='latest': no run tagged run_kind=sweep in {tracking_uri}")
    return runs[0].info.run_id


def sweep_run(tracking_uri: str, run_id: str):
    """The sweep parent run ``run_id`` (an ``mlflow.entities.Run``)."""
    import mlflow

    client = _open_store(tracking_uri)
    try:
        run = client.get_run(run_id)
    except mlflow.exceptions.MlflowException:
        raise SelectionError(f"sweep={run_id!r}: no such run in {tracking_uri}") from None
    kind = run.data.tags.get("run_kind")
    if kind != "sweep":
        raise SelectionError(f"sweep={run_id!r}: not a sweep parent run (run_kind={kind})")
    return run


def load_runs(
    tracking_uri: str,
    *,
    experiments: list[str] | tuple[str, ...] | None = None,
    sweep: str | None = None,
    filter_string: str | None = None,
):
    """Runs as a ``mlflow.search_runs`` pandas DataFrame, every status and kind.

    ``experiments``: names to search (default: all); ``sweep``: a parent run id,
    or ``"latest"``, whose children (``mlflow.parentRunId``) are selected in
    every experiment; ``filter_string``: an MLflow search filter, and-ed on.
    A name, id or filter the store rejects raises :class:`SelectionError`.
    """
    import mlflow

    client = _open_store(tracking_uri)
    names = None
    if experiments:
        names = list(experiments)
        known = {e.name for e in client.search_experiments()}
        for name in names:
            if name not in known:
                raise SelectionError(f"experiment={name!r}: no such experiment "
                                     f"(known: {', '.join(sorted(known)) or 'none'})")
    clauses = []
    if sweep is not None:
        sweep_id = latest_sweep(tracking_uri) if sweep == "latest" else sweep_run(tracking_uri, sweep).info.run_id
        clauses.append(f"tags.mlflow.parentRunId = '{sweep_id}'")
    if filter_string:
        clauses.append(filter_string)
    with _fluent_uri(tracking_uri):
        try:
            return mlflow.search_runs(experiment_names=names, filter_string=" and ".join(clauses),
                                      search_all_experiments=names is None)
        except mlflow.exceptions.MlflowException as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise SelectionError(f"filter={filter_string!r}: {first}") from None


def metric_curves(tracking_uri: str, run_ids: list[str] | tuple[str, ...], key: str) -> dict[str, tuple]:
    """``{run_id: (steps, values)}``, the history of metric ``key`` sorted by step."""
    client = _open_store(tracking_uri)
    curves = {}
    for run_id in run_ids:
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        curves[run_id] = ([m.step for m in history], [m.value for m in history])
    return curves


def artifact_copies(tracking_uri: str, run_ids: list[str] | tuple[str, ...], path: str,
                    folder: Path) -> dict[str, Path]:
    """``{run_id: local copy}`` of the artifact ``path`` (e.g. ``tables/losses.csv``) of
    each run, downloaded into ``folder/<run_id>/``; runs without it are left out."""
    import mlflow

    _open_store(tracking_uri)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per file otherwise
    copies = {}
    for run_id in run_ids:
        try:
            local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path,
                                                        dst_path=str(Path(folder) / run_id),
                                                        tracking_uri=tracking_uri)
        except (mlflow.exceptions.MlflowException, OSError):
            continue
        copies[run_id] = Path(local)
    return copies


def experiment_name(tracking_uri: str, experiment_id: str) -> str:
    """The name of experiment ``experiment_id``."""
    return _open_store(tracking_uri).get_experiment(experiment_id).name


def log_analysis(
    tracking_uri: str,
    experiment: str,
    paths: list[Path],
    *,
    analysis_of: str,
    params: Mapping[str, str] | None = None,
    artifact_root: Path | None = None,
    run_name: str | None = None,
) -> str:
    """Log ``paths`` (files or folders) as artifacts under ``reports/`` of a new run
    tagged ``run_kind=analysis``, ``analysis_of=<what>``, in ``experiment``; its id."""
    tags = {"run_kind": "analysis", "analysis_of": analysis_of}
    with tracked_run(tracking_uri, experiment, artifact_root=artifact_root, run_name=run_name,
                     tags=tags) as run:
        if params:
            run.params(params)
        for path in paths:
            run.artifact(Path(path), "reports")
    return run.run_id
