"""MLflow tracking: the only part of the library that imports MLflow (always on first
use, never at import): the store, which run a job writes (claims), batched writes, a
job's run logger, what a run could not log, the sweep callback, the readers of
``pipeline/analyze.py`` and a frontier search's trials, one module each."""

from teng_eq.tracking.claims import RunInProgress, claim_lock
from teng_eq.tracking.logger import RunLogger, tracked_run
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
    active_tracking_uri,
    artifact_root_for,
    check_store,
    default_tracking_uri,
    ensure_experiment,
    flatten,
    git_state,
    is_stale,
    open_client,
    reap_stale,
    run_alive,
    ui_address,
)
from teng_eq.tracking.sweep import PARENT_RUN_ENV, SweepCallback, sweep_hash, sweep_jobs

__all__ = [
    "PARENT_RUN_ENV", "RunInProgress", "RunLogger", "SelectionError", "StoreUnavailable", "SweepCallback",
    "active_tracking_uri", "artifact_copies", "artifact_root_for", "check_store", "claim_lock",
    "default_tracking_uri", "ensure_experiment", "experiment_name", "flatten", "git_state", "is_stale",
    "latest_sweep", "load_runs", "log_analysis", "metric_curves", "open_client", "reap_stale", "run_alive",
    "sweep_hash",
    "sweep_jobs", "sweep_run", "tracked_run", "ui_address",
]
