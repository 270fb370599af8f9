"""MLflow tracking: the only part of the library that imports MLflow (always
on first use, never at import).

* :mod:`~teng_eq.tracking.store`: where the store is, whether it answers,
  experiments, liveness of RUNNING runs (heartbeats) and reaping stale ones;
* :mod:`~teng_eq.tracking.writer`: a job's run — batched writes, resume of an
  unfinished run of the same configuration, FINISHED / FAILED / KILLED;
* :mod:`~teng_eq.tracking.sweep`: the Hydra callback that makes a multirun one
  parent run (``teng_eq.tracking.SweepCallback`` in ``conf/config.yaml``);
* :mod:`~teng_eq.tracking.readers`: runs read back for ``pipeline/analyze.py``.
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
    artifact_root_for,
    check_store,
    default_tracking_uri,
    ensure_experiment,
    flatten,
    git_state,
    is_stale,
    reap_stale,
)
from teng_eq.tracking.sweep import PARENT_RUN_ENV, SweepCallback, sweep_hash, sweep_jobs
from teng_eq.tracking.writer import RunInProgress, RunLogger, tracked_run

__all__ = [
    "PARENT_RUN_ENV", "RunInProgress", "RunLogger", "SelectionError", "SweepCallback",
    "artifact_copies", "artifact_root_for", "check_store", "default_tracking_uri",
    "ensure_experiment", "experiment_name", "flatten", "git_state", "is_stale", "latest_sweep",
    "load_runs", "log_analysis", "metric_curves", "reap_stale", "sweep_hash", "sweep_jobs",
    "sweep_run", "tracked_run",
]
