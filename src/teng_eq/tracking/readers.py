"""Reading runs back for ``pipeline/analyze.py``, and logging its report."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from teng_eq.tracking.claims import REUSED_TAG
from teng_eq.tracking.logger import tracked_run
from teng_eq.tracking.store import all_experiment_ids, search

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient


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
    runs = search(client, all_experiment_ids(client), "tags.run_kind = 'sweep'", max_results=1,
                  order_by=["attributes.start_time DESC"])
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


def load_runs(tracking_uri: str, *, experiments: list[str] | tuple[str, ...] | None = None,
        sweep: str | None = None, filter_string: str | None = None):
    """Runs as a ``mlflow.search_runs`` pandas DataFrame, every status and kind.

    ``experiments``: names to search (default: all); ``sweep``: a parent run id,
    or ``"latest"``, whose jobs are selected in every experiment (its children,
    and the finished runs of other sweeps it reused); ``filter_string``: an
    MLflow search filter, and-ed on. A name, id or filter the store rejects
    raises :class:`SelectionError`.
    """
    import mlflow
    import pandas as pd

    client = _open_store(tracking_uri)
    names = None
    if experiments:
        names = list(experiments)
        known = {e.name for e in client.search_experiments()}
        for name in names:
            if name not in known:
                raise SelectionError(f"experiment={name!r}: no such experiment "
                                     f"(known: {', '.join(sorted(known)) or 'none'})")
    selections = [[filter_string] if filter_string else []]
    if sweep is not None:
        parent = sweep_run(tracking_uri, latest_sweep(tracking_uri) if sweep == "latest" else sweep)
        reused = sorted({v for k, v in parent.data.tags.items() if k.startswith(REUSED_TAG)})
        base = selections[0]
        selections = [[f"tags.mlflow.parentRunId = '{parent.info.run_id}'", *base]]
        if reused:  # MLflow filters have no OR: a second search
            ids = ", ".join(f"'{r}'" for r in reused)
            selections.append([f"attributes.run_id IN ({ids})", *base])
    frames = []
    with _fluent_uri(tracking_uri):
        for clauses in selections:
            try:
                frames.append(mlflow.search_runs(experiment_names=names, filter_string=" and ".join(clauses),
                                                 search_all_experiments=names is None))
            except mlflow.exceptions.MlflowException as err:
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise SelectionError(f"filter={filter_string!r}: {first}") from None
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True).drop_duplicates("run_id", ignore_index=True)


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


def log_analysis(tracking_uri: str, experiment: str, paths: list[Path], *, analysis_of: str,
        params: Mapping[str, str] | None = None, artifact_root: Path | None = None,
        run_name: str | None = None) -> str:
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
