"""MLflow tracking: the only part of the library that imports MLflow (always
on first use, never at import).

* :mod:`~teng_eq.tracking.store`: where the store is, whether it answers,
  experiments, liveness of RUNNING runs (heartbeats) and reaping stale ones;
* :mod:`~teng_eq.tracking.claims`: which run a job writes — a new one, its
  configuration's unfinished run resumed, or none (finished) — decided under a lock;
* :mod:`~teng_eq.tracking.writer`: batched writes in the background that wait out a
  store that goes away;
* :mod:`~teng_eq.tracking.logger`: a job's run — opened in the background, its
  metrics and artifacts, ended FINISHED / FAILED / KILLED;
* :mod:`~teng_eq.tracking.unlogged`: what a run could not log (its store never
  came back), kept on disk, and the command that logs it later;
* :mod:`~teng_eq.tracking.sweep`: the Hydra callback that makes a multirun one
  parent run (``teng_eq.tracking.SweepCallback`` in ``conf/config.yaml``);
* :mod:`~teng_eq.tracking.readers`: runs read back for ``pipeline/analyze.py``;
* :mod:`~teng_eq.tracking.trials`: a frontier search's trials (tags ``study``, ``trial``)
  and their runs, for the frontier sweeper (:mod:`teng_eq.search`).
"""

from teng_eq.tracking.readers import (
    SelectionError,
    artifact_copies,
    experiment_name,
    latest_sweep,
    load_runs,
    log_analysis,
    metric_curves,
    sweep_run,
)
from teng_eq.tracking.store import (
    StoreUnavailable,
    artifact_root_for,
    check_store,
    default_tracking_uri,
    ensure_experiment,
    flatten,
    git_state,
    is_stale,
    open_client,
    reap_stale,
    ui_address,
)
from teng_eq.tracking.sweep import PARENT_RUN_ENV, SweepCallback, sweep_hash, sweep_jobs
from teng_eq.tracking.claims import RunInProgress, claim_lock
from teng_eq.tracking.logger import RunLogger, tracked_run

__all__ = [
    "PARENT_RUN_ENV", "RunInProgress", "RunLogger", "SelectionError", "StoreUnavailable", "SweepCallback",
    "artifact_copies", "artifact_root_for", "check_store", "claim_lock", "default_tracking_uri",
    "ensure_experiment", "experiment_name", "flatten", "git_state", "is_stale", "latest_sweep",
    "load_runs", "log_analysis", "metric_curves", "open_client", "reap_stale", "sweep_hash", "sweep_jobs",
    "sweep_run", "tracked_run", "ui_address",
]
