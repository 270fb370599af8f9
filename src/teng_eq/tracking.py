"""MLflow helpers: the only module of the library that imports MLflow.

Curves go through ``MlflowClient.log_batch`` (one call per 1000 points, not one
per point: ~18 ms each on a 2-core machine); every run that raises is ended
FAILED with the reason in the ``failure_reason`` tag.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

_BATCH_METRICS = 1000
_BATCH_PARAMS = 100


def default_tracking_uri(root: Path) -> str:
    """``sqlite:///<root>/mlflow.db``: what a plain ``mlflow ui`` in ``root`` opens."""
    return f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def ensure_experiment(client: MlflowClient, name: str, artifact_root: Path | None) -> str:
    """The id of experiment ``name``, created (artifacts under ``artifact_root``) if new."""
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
    """Buffers step metrics of one run and writes them with ``log_batch``."""

    def __init__(self, client: MlflowClient, run_id: str):
        self.client, self.run_id = client, run_id
        self._pending: list[Metric] = []

    def params(self, params: Mapping[str, str]) -> None:
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), _BATCH_PARAMS):
            self.client.log_batch(self.run_id, params=items[i : i + _BATCH_PARAMS])

    def tags(self, tags: Mapping[str, str]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def metric(self, name: str, value: float, step: int = 0) -> None:
        self._pending.append(Metric(name, float(value), int(time.time() * 1000), int(step)))

    def curve(self, name: str, steps, values) -> None:
        now = int(time.time() * 1000)
        self._pending += [Metric(name, float(v), now, int(s)) for s, v in zip(steps, values)]

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), _BATCH_METRICS):
            self.client.log_batch(self.run_id, metrics=pending[i : i + _BATCH_METRICS])

    def artifact(self, path: Path, folder: str | None = None) -> None:
        path = Path(path)
        if path.is_dir():
            self.client.log_artifacts(self.run_id, str(path), folder)
        else:
            self.client.log_artifact(self.run_id, str(path), folder)


@contextlib.contextmanager
def tracked_run(
    tracking_uri: str,
    experiment: str,
    *,
    artifact_root: Path | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> Iterator[RunLogger]:
    """An MLflow run that ends FINISHED, or FAILED with ``failure_reason`` set."""
    client = MlflowClient(tracking_uri)
    exp_id = ensure_experiment(client, experiment, artifact_root)
    run = client.create_run(exp_id, run_name=run_name, tags=dict(tags or {}))
    logger = RunLogger(client, run.info.run_id)
    try:
        yield logger
        logger.flush()
    except BaseException as exc:
        reason = f"{type(exc).__name__}: {exc}".strip()[:4000]
        with contextlib.suppress(Exception):
            logger.flush()
            client.set_tag(run.info.run_id, "failure_reason", reason)
        client.set_terminated(run.info.run_id, status="FAILED")
        raise
    client.set_terminated(run.info.run_id, status="FINISHED")


# --- Reading runs back (pipeline/analyze.py) ---------------------------------


class SelectionError(ValueError):
    """A run selection that names something the store does not hold."""


def _open_store(tracking_uri: str) -> MlflowClient:
    # MLflow would create an empty sqlite store on first contact: refuse instead.
    if tracking_uri.startswith("sqlite:///"):
        path = Path(tracking_uri.removeprefix("sqlite:///"))
        if not path.is_file():
            raise SelectionError(f"tracking_uri={tracking_uri!r}: no such MLflow store")
    return MlflowClient(tracking_uri)


@contextlib.contextmanager
def _fluent_uri(tracking_uri: str) -> Iterator[None]:
    """``mlflow.search_runs`` reads the process-wide URI: set it, then put it back."""
    previous = mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)


def latest_sweep(tracking_uri: str) -> str:
    """The id of the most recently started run tagged ``run_kind=sweep``."""
    client = _open_store(tracking_uri)
    exps = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(exps, "tags.run_kind = 'sweep'", order_by=["attributes.start_time DESC"],
                              max_results=1) if exps else []
    if not runs:
        raise SelectionError(f"sweep='latest': no run tagged run_kind=sweep in {tracking_uri}")
    return runs[0].info.run_id


def sweep_run(tracking_uri: str, run_id: str):
    """The sweep parent run ``run_id`` (an ``mlflow.entities.Run``)."""
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
    client = MlflowClient(tracking_uri)
    curves = {}
    for run_id in run_ids:
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        curves[run_id] = ([m.step for m in history], [m.value for m in history])
    return curves


def experiment_name(tracking_uri: str, experiment_id: str) -> str:
    """The name of experiment ``experiment_id``."""
    return MlflowClient(tracking_uri).get_experiment(experiment_id).name


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
