"""Long runs end to end, through pipeline/sweep.py in subprocesses on the tiny
problem: a multirun SIGKILLed in its third job and started again with the same
command skips the two finished jobs and resumes the killed one into its own run
(no new run, no metric step twice, the uninterrupted result); a job that
diverges inside a multirun fails alone, and the multirun reports it (with the
driver's test method, which reaches a NaN in seconds)."""

import os
import signal
import subprocess
import time

import numpy as np
import pytest
from helpers.configs import TINY_SWEEP, TINY_SWEEP_NO_GRID, make_config
from helpers.fake_methods import TOY
from helpers.mlflow_store import all_runs
from helpers.processes import job_env, sweep_command
from mlflow.tracking import MlflowClient

from teng_eq.run.simulation import run_simulation
from teng_eq.tracking import is_stale

#: Jobs 0 and 1 take 2 and 4 steps; job 2 takes 20, long enough to be killed midway.
KILLED_SWEEP = ["dt=0.04,0.02,0.004", "checkpoint_every=2"]
SIGKILL_AFTER = 5  # rel_l2 points of job 2 in the store (steps 0..4)

# slow: out of the default suite (≤ 15 min on 2 cores; a SIGTERM'd run resumed stays there,
# tests/test_faults.py); .ci/run runs it after README's command.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # pipeline/sweep.py in subprocesses


def _jobs(runs):
    return {int(r.data.tags["job_num"]): r for r in runs if r.data.tags.get("run_kind") == "job"}


def _kill_when_job_2_has_logged(proc, tmp, uri, deadline_s=600):
    """Poll the store (once job 2 has started, so never during the store's
    creation) until job 2 holds ``SIGKILL_AFTER`` error points, then SIGKILL
    the whole multirun."""
    deadline = time.monotonic() + deadline_s
    client = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the multirun ended before job 2 could be killed"
        if client is None and (tmp / "multirun" / "2").is_dir():
            client = MlflowClient(uri)
        if client is not None:
            job = _jobs(all_runs(uri)).get(2)
            if job is not None and len(client.get_metric_history(job.info.run_id, "rel_l2")) >= SIGKILL_AFTER:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError("job 2 logged too little before the deadline")


@pytest.fixture(scope="module")
def killed_then_rerun(tmp_path_factory, warm_cache):
    tmp = tmp_path_factory.mktemp("killed")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    cmd = sweep_command(tmp, uri, warm_cache, *KILLED_SWEEP)
    with open(tmp / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp, env=job_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        _kill_when_job_2_has_logged(proc, tmp, uri)
    before = all_runs(uri)
    second = subprocess.run(cmd, cwd=tmp, env=job_env(), capture_output=True, text=True, timeout=900,
                            check=False)
    assert second.returncode == 0, second.stderr[-4000:]
    return uri, before, all_runs(uri), second


def test_killed_runs_are_left_running_and_recognisably_stale(killed_then_rerun):
    _, before, _, _ = killed_then_rerun
    (parent,) = [r for r in before if r.data.tags["run_kind"] == "sweep"]
    jobs = _jobs(before)
    assert [jobs[n].info.status for n in (0, 1, 2)] == ["FINISHED", "FINISHED", "RUNNING"]
    assert parent.info.status == "RUNNING"
    assert is_stale(parent.data.tags) and is_stale(jobs[2].data.tags)


def test_killed_job_resumes_into_its_own_run_with_the_uninterrupted_result(killed_then_rerun, warm_cache):
    uri, before, after, _ = killed_then_rerun
    killed, job = _jobs(before)[2], _jobs(after)[2]
    assert job.info.run_id == killed.info.run_id and job.info.status == "FINISHED"
    assert job.data.tags["attempt"] == "2" and int(job.data.tags["resumed_from_step"]) >= 2
    client = MlflowClient(uri)
    for key in job.data.metrics:  # no metric step written twice
        steps = [m.step for m in client.get_metric_history(job.info.run_id, key)]
        assert len(steps) == len(set(steps)), key
    assert sorted(m.step for m in client.get_metric_history(job.info.run_id, "rel_l2")) == list(range(21))
    whole = run_simulation(make_config(*TINY_SWEEP, "dt=0.004"), cache_dir=warm_cache)
    assert job.data.metrics["global_rel_l2"] == pytest.approx(whole.global_rel_l2, rel=1e-12, abs=0)
    loss = sorted(client.get_metric_history(job.info.run_id, "step_loss"), key=lambda m: m.step)
    np.testing.assert_allclose([m.value for m in loss], whole.step_loss, rtol=1e-12, atol=0)
    # The run is FINISHED: its checkpoint is gone.
    assert not (warm_cache / "checkpoints" / job.data.tags["config_hash"]).exists()


def test_rerun_skips_the_finished_jobs_and_closes_the_same_parent(killed_then_rerun):
    _, before, after, second = killed_then_rerun
    assert {r.info.run_id for r in after} == {r.info.run_id for r in before}  # no new run
    old, new = _jobs(before), _jobs(after)
    for n in (0, 1):  # skipped: untouched
        assert new[n].info.status == "FINISHED" and new[n].info.end_time == old[n].info.end_time
        assert "attempt" not in new[n].data.tags
    assert second.stdout.count("skipped: config_hash=") + second.stderr.count("skipped: config_hash=") == 2
    (parent,) = [r for r in after if r.data.tags["run_kind"] == "sweep"]
    assert parent.info.status == "FINISHED" and parent.data.tags["attempt"] == "2"
    assert parent.data.metrics["n_jobs"] == parent.data.metrics["n_finished"] == 3
    assert all(r.info.status != "RUNNING" for r in after)


def test_diverging_job_fails_alone_and_the_multirun_reports_it(tmp_path, cache_dir):
    # The driver's cheap test method (helpers.fake_methods.Toy, no θ₀) turns NaN at
    # step 3: only the 4-step job (dt=0.02) gets there.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run(
        sweep_command(tmp_path, uri, cache_dir, "dt=0.08,0.04,0.02",
                      *(o for o in TOY if "nan_at" not in o), "+method.nan_at=3", tiny=TINY_SWEEP_NO_GRID),
        cwd=tmp_path, env=job_env(), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode != 0
    reason = "Diverged: teng_heun diverged at step 3 (t=0.06): non-finite rel_l2, step_loss"
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"error: sweep FAILED: jobs not finished: 2 (FAILED: {reason})"
    runs = all_runs(uri)
    jobs = _jobs(runs)
    assert [jobs[n].info.status for n in (0, 1, 2)] == ["FINISHED", "FINISHED", "FAILED"]
    failed = jobs[2].data.tags
    assert failed["failure_reason"] == reason
    assert (failed["diverged_at_step"], failed["last_good_step"]) == ("3", "2")
    client = MlflowClient(uri)  # the curves up to the last good step are kept
    assert sorted(m.step for m in client.get_metric_history(jobs[2].info.run_id, "rel_l2")) == [0, 1, 2]
    assert sorted(m.step for m in client.get_metric_history(jobs[2].info.run_id, "step_loss")) == [1, 2]
    assert (cache_dir / "checkpoints" / failed["config_hash"] / f"{jobs[2].info.run_id}.npz").is_file()
    (parent,) = [r for r in runs if r.data.tags["run_kind"] == "sweep"]
    assert parent.info.status == "FAILED" and parent.data.tags["failed_jobs"] == "2"
    assert parent.data.tags["failure_reason"].startswith("jobs not finished: 2 (FAILED: Diverged:")
    assert all(r.info.status != "RUNNING" for r in runs)
