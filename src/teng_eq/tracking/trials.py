"""The MLflow side of a frontier search (:mod:`teng_eq.search`): each trial is an
ordinary job run, a child of the search's parent run, tagged ``study`` (the
study's name) and ``trial`` (its number in the study) from the moment it opens.

The launching process names the study in :data:`STUDY_ENV`; a job of a multirun
that sees it tags its run with the study and with its job number as the trial
number (the sweeper launches trial ``n`` as job ``n``): :func:`search_tags`. The
sweeper reads a trial's outcome back with :func:`trial_run`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from teng_eq.tracking.store import all_experiment_ids, search

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: Environment variable through which the frontier sweeper names its study to the
#: jobs it launches (inherited by joblib workers, submitit and SLURM jobs).
STUDY_ENV = "TENG_EQ_STUDY"

#: The tags of a trial's run.
STUDY_TAG, TRIAL_TAG = "study", "trial"


def search_tags(job_num: int | None) -> dict[str, str]:
    """``{study, trial}`` for job ``job_num`` of a multirun launched by a frontier
    search (:data:`STUDY_ENV` set); else nothing."""
    study = os.environ.get(STUDY_ENV)
    if not study or job_num is None:
        return {}
    return {STUDY_TAG: study, TRIAL_TAG: str(job_num)}


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "\\'") + "'"


def trial_run(client: MlflowClient, study: str, number: int):
    """The run of trial ``number`` of ``study`` (the most recently started, if a
    relaunch made another), in any experiment; None when no job opened one."""
    runs = search(client, all_experiment_ids(client),
                  f"tags.{STUDY_TAG} = {_quoted(study)} and tags.{TRIAL_TAG} = '{int(number)}' "
                  "and tags.run_kind = 'job'", order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def finished_twin(client: MlflowClient, run):
    """A FINISHED run of the same configuration as ``run`` (its ``config_hash``), or
    None: where a relaunched trial's job found its work done and skipped it."""
    chash = run.data.tags.get("config_hash")
    if not chash:
        return None
    runs = search(client, [run.info.experiment_id],
                  f"tags.config_hash = '{chash}' and tags.run_kind = 'job' "
                  "and attributes.status = 'FINISHED'",
                  order_by=["attributes.start_time DESC"])
    return runs[0] if runs else None


def study_runs(client: MlflowClient, study: str) -> list:
    """Every job run tagged with ``study``, in any experiment."""
    return search(client, all_experiment_ids(client),
                  f"tags.{STUDY_TAG} = {_quoted(study)} and tags.run_kind = 'job'")


def set_tags(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> None:
    """Tags on ``run_id`` (the search's parent: its study, the target's answer)."""
    from mlflow.entities import RunTag

    client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])
