"""Faults of the environment, with real processes: pipeline/sweep.py in
subprocesses on the driver's cheap test method (helpers.fake_methods.Toy, no θ₀ fit;
``+method.delay`` makes its steps slow enough to stop half-way), real signals, a
real ``mlflow server`` stopped and started again, a real second SQLite writer,
two sweeps at once. Each test checks what was kept: the run's status and reason,
every metric step once, and — where the run resumed — the global error of an
uninterrupted run (in-process, to 1e-12 relative).

A full disk is simulated by an injected ``OSError(ENOSPC)`` at the write
(tests/helpers/faulty_sweep.py: half the file is written, then the error), not a
size-limited folder: it strikes at a chosen write on any machine, as any user."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.configs import CHEAP_FIT, ROOT, TINY_SWEEP_NO_GRID, make_config
from helpers.fake_methods import DECAY, TOY
from helpers.mlflow_store import all_runs, job_runs
from helpers.processes import finish, job_env, run_logged, start, sweep_command
from mlflow.tracking import MlflowClient

from teng_eq import api, interrupts
from teng_eq.errors import RunFailed
from teng_eq.fit.iterate import FitProgress
from teng_eq.jobs.progress import Progress
from teng_eq.run.checkpoint import CheckpointStore
from teng_eq.run.simulation import run_simulation
from teng_eq.tracking import open_client

#: The tiny problem on the Toy method (no grid: Toy has no quadrature); dt=0.004: 20 steps.
TOY_TINY = [*TINY_SWEEP_NO_GRID, *TOY, "checkpoint_every=5"]
DT = "dt=0.004"


def _slow(delay: float) -> list[str]:
    return [f"+method.delay={delay}"]


def _command(tmp: Path, uri: str, cache: Path, *overrides: str, progress: bool = False, **kw) -> list[str]:
    """:func:`helpers.processes.sweep_command` on :data:`TOY_TINY`, with or without progress bars."""
    toy = [o for o in TOY_TINY if not o.startswith("progress=")] + [f"progress={str(progress).lower()}"]
    return sweep_command(tmp, uri, cache, *overrides, tiny=toy, **kw)


def _wait_for_steps(uri: str, proc: subprocess.Popen, steps: int, deadline_s: float = 240,
                    started: Path | None = None):
    """Poll the store until a job run holds ``steps`` points of ``step_loss``; that
    run. Not before ``started`` exists (a job's folder); the store is opened as the
    jobs open it (``open_client``: a fresh SQLite store is created under a lock)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it could be interrupted"
        if started is not None and not started.exists():
            time.sleep(0.2)
            continue
        with contextlib.suppress(Exception):  # a store still being created
            client = open_client(uri)
            for run in job_runs(uri):
                if len(client.get_metric_history(run.info.run_id, "step_loss")) >= steps:
                    return run
        time.sleep(0.2)
    raise AssertionError(f"no job logged {steps} steps in {deadline_s} s")


def _each_step_once(client: MlflowClient, run, n_steps: int) -> None:
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "rel_l2")) == \
        list(range(n_steps + 1))
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "step_loss")) == \
        list(range(1, n_steps + 1))


@pytest.fixture(scope="module")
def uninterrupted_global():
    """The global error of the uninterrupted Toy run, by dt."""
    cache = {}

    def of(dt: float) -> float:
        if dt not in cache:
            cfg = make_config(*TOY_TINY, f"dt={dt}")
            cache[dt] = run_simulation(cfg).global_rel_l2
        return cache[dt]

    return of


def _same_result(run, expected: float) -> None:
    assert run.data.metrics["global_rel_l2"] == pytest.approx(expected, rel=1e-12, abs=0)


# --- 1. Signals ------------------------------------------------------------------


@pytest.fixture(scope="module")
def terminated_then_resumed(tmp_path_factory):
    """A one-job multirun SIGTERMed after its 6th step, then the same command again."""
    tmp = tmp_path_factory.mktemp("sigterm")
    uri, cache = f"sqlite:///{tmp / 'mlflow.db'}", tmp / "cache"
    cmd = _command(tmp, uri, cache, DT, *_slow(0.25))
    proc = start(cmd, tmp, "first")
    job = _wait_for_steps(uri, proc, 6, started=tmp / "multirun" / "0")
    os.kill(proc.pid, signal.SIGTERM)
    code, first_log = finish(proc)
    before = all_runs(uri)
    checkpoint = CheckpointStore.for_run(job.data.tags["config_hash"], job.info.run_id, directory=cache)
    step = json.loads(str(np.load(checkpoint.path)["info"]))["step"]
    logged = sorted(m.step for m in MlflowClient(uri).get_metric_history(job.info.run_id, "step_loss"))
    # Again, with the progress display a person sees.
    second_code, second_log = run_logged(_command(tmp, uri, cache, DT, *_slow(0.25), progress=True), tmp,
                                         "second")
    return {"uri": uri, "cache": cache, "code": code, "log": first_log, "before": before, "step": step,
            "logged": logged, "second_code": second_code, "second_log": second_log, "after": all_runs(uri),
            "run_id": job.info.run_id}


@pytest.mark.e2e
def test_sigterm_ends_the_run_killed_with_its_last_step_saved(terminated_then_resumed):
    t = terminated_then_resumed
    assert t["code"] == 128 + signal.SIGTERM, t["log"][-3000:]
    (job,) = [r for r in t["before"] if r.data.tags["run_kind"] == "job"]
    (parent,) = [r for r in t["before"] if r.data.tags["run_kind"] == "sweep"]
    reason = job.data.tags["killed_reason"]
    assert job.info.status == "KILLED" and reason.startswith("SIGTERM (signal 15) after step "), reason
    last = int(reason.split("after step ")[1].split()[0])
    assert last >= 6 and t["step"] == last  # the checkpoint holds the last step reported
    assert t["logged"] == list(range(1, last + 1))  # every finished step reached the store, once
    # The sweep's parent is told: KILLED, with the signal and the job.
    assert parent.info.status == "KILLED"
    assert parent.data.tags["killed_reason"].startswith("SIGTERM (signal 15): the sweep was stopped; "
                                                        "jobs not finished: 0 (KILLED: SIGTERM")
    errors = [line for line in t["log"].splitlines() if line.startswith("error:")]
    assert errors == [f"error: stopped by {reason}: the run is KILLED; the same command resumes it"]
    assert "Traceback" not in t["log"]


@pytest.mark.e2e
def test_the_same_command_resumes_a_terminated_run(terminated_then_resumed, uninterrupted_global):
    t = terminated_then_resumed
    assert t["second_code"] == 0, t["second_log"][-3000:]
    (job,) = [r for r in t["after"] if r.data.tags["run_kind"] == "job"]
    assert job.info.run_id == t["run_id"] and job.info.status == "FINISHED"
    assert job.data.tags["attempt"] == "2" and job.data.tags["resumed_from_step"] == str(t["step"])
    _each_step_once(MlflowClient(t["uri"]), job, 20)
    _same_result(job, uninterrupted_global(0.004))
    (parent,) = [r for r in t["after"] if r.data.tags["run_kind"] == "sweep"]
    assert parent.info.status == "FINISHED" and "killed_reason" not in parent.data.tags
    assert all(r.info.status != "RUNNING" for r in t["after"])


@pytest.mark.e2e
def test_the_log_a_person_reads(terminated_then_resumed):
    """The resumed job's output (progress=true): the log lines and one bar, each
    redraw of the bar whole on its line (nothing written into it), and none of
    the libraries' INFO lines."""
    lines = [line.split("\r") for line in terminated_then_resumed["second_log"].split("\n")]
    name = "teng_heun-heat-dt0.004"
    redraws = [seg for line in lines for seg in line if seg.strip()]
    assert any(seg.startswith("resuming from the checkpoint after step "
                              f"{terminated_then_resumed['step']} of 20")
               for seg in redraws)
    bars = [seg for seg in redraws if seg.startswith(name)]
    assert bars and bars[-1].startswith(f"{name}: 100%") and "20/20" in bars[-1]
    assert redraws[-1].startswith("runs: mlflow ui --backend-store-uri ")  # the sweep's last line
    for seg in redraws[:-1]:  # every piece is a whole bar, a Hydra log line or one of the job's own lines
        assert seg.startswith((name, "[", "resuming from the checkpoint")), seg
    for noise in ("Unable to initialize backend", "[matplotlib", "INFO mlflow", "font"):
        assert noise not in terminated_then_resumed["second_log"]


@pytest.mark.e2e
@pytest.mark.slow  # a sweep of its own: out of the default suite (≤ 15 min), run by .ci/run
def test_a_stopped_adaptive_run_names_its_step_by_time(tmp_path):
    """Under ``dt=auto`` the number of steps is known only at the end: the stop and the
    resume name the step and its t (they once read "after step 6 of None")."""
    uri, cache = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "cache"
    decay = [o for o in TOY_TINY if not o.startswith(("method.", "+method.", "~method."))] + DECAY
    cmd = sweep_command(tmp_path, uri, cache, "dt=auto", "t_final=0.5", "controller.rtol=1e-3",
                        "controller.atol=0", "controller.dt_initial=0.01", "+method.delay=0.25", tiny=decay)
    proc = start(cmd, tmp_path, "first")
    job = _wait_for_steps(uri, proc, 3, started=tmp_path / "multirun" / "0")
    os.kill(proc.pid, signal.SIGTERM)
    code, log = finish(proc)
    assert code == 128 + signal.SIGTERM, log[-3000:]
    (job,) = job_runs(uri)
    reason = job.data.tags["killed_reason"]
    match = re.fullmatch(r"SIGTERM \(signal 15\) after step (\d+) \(t=([0-9.e-]+)\) \(saved\)", reason)
    assert match and "None" not in log, reason
    step, t = int(match[1]), float(match[2])
    times = {m.step: m.value for m in MlflowClient(uri).get_metric_history(job.info.run_id, "t")}
    assert step >= 3 and times[step] == pytest.approx(t, rel=1e-5)
    code, log = run_logged([*cmd, "progress=true"], tmp_path, "second")
    assert code == 0, log[-3000:]
    assert f"resuming from the checkpoint after step {step} (t={t:.6g})" in log


@pytest.mark.e2e
@pytest.mark.slow  # a submitit sweep and its requeued job: ~60 s on 2 busy cores
def test_submitit_preemption_requeues_the_job_which_resumes(tmp_path, uninterrupted_global):
    """hydra-submitit-launcher's requeue on preemption: the job gets submitit's
    preemption signal (SIGUSR2) half-way; it saves the step it is on, ends its
    run KILLED and hands over to submitit, which requeues it; the requeued job
    resumes into the same run and finishes with the uninterrupted result."""
    uri, cache = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "cache"
    sweep = start(_command(tmp_path, uri, cache, DT, *_slow(0.25), "hydra/launcher=submitit_local",
                            "hydra.launcher.timeout_min=15"), tmp_path, "sweep")
    job = _wait_for_steps(uri, sweep, 6)
    os.kill(int(job.data.tags["pid"]), signal.SIGUSR2)
    code, log = finish(sweep)
    assert code == 0, log[-3000:]
    (run,) = job_runs(uri)
    assert run.info.run_id == job.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["attempt"] == "2" and int(run.data.tags["resumed_from_step"]) >= 6
    assert run.data.tags["pid"] != job.data.tags["pid"]  # the requeued process
    _each_step_once(MlflowClient(uri), run, 20)
    _same_result(run, uninterrupted_global(0.004))
    logs = "".join(p.read_text() for p in (tmp_path / "multirun" / ".submitit").rglob("*.err"))
    step = run.data.tags["resumed_from_step"]
    assert (f"error: stopped by SIGUSR2 (signal 12) after step {step} of 20 (saved): the run is KILLED; "
            "submitit requeues the job") in logs
    (parent,) = [r for r in all_runs(uri) if r.data.tags["run_kind"] == "sweep"]
    assert parent.info.status == "FINISHED"


def test_signals_wait_for_the_end_of_the_step_and_a_second_one_does_not(monkeypatch):
    """In-process, with real signals to this process: outside a step a signal raises
    at once; while stepping (defer) the first only marks the stop, which check()
    raises; a second one raises at once. The exit status is 128 + the signal."""
    saved = {s: signal.getsignal(s) for s in interrupts.STOP_SIGNALS}
    monkeypatch.setattr(interrupts, "_first", None)
    try:
        interrupts.install()
        with pytest.raises(interrupts.Interrupted) as caught:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs between bytecodes
        assert (str(caught.value), caught.value.exit_code) == ("SIGTERM (signal 15)", 143)
        interrupts.defer()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # nothing raised: it waits for the end of the step
        with pytest.raises(interrupts.Interrupted) as caught:
            interrupts.check()
        assert caught.value.signum == signal.SIGINT and caught.value.exit_code == 130
        interrupts.check()  # raised once
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # pending
        with pytest.raises(interrupts.Interrupted):  # a second signal while one is pending: at once
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        interrupts.check()  # that was the stop
        assert interrupts.received().signum == signal.SIGTERM  # the first of the process
    finally:
        interrupts.defer(False)
        for signum, handler in saved.items():
            signal.signal(signum, handler)


# --- 2. The cache folder, 5. sizes the machine cannot hold: refused before anything -----


@pytest.mark.e2e
def test_an_unwritable_cache_is_refused_where_the_configuration_already_finished(terminated_then_resumed,
                                                                                 tmp_path):
    # The store holds this configuration FINISHED; a job would be "skipped", but the
    # folder is checked first (by writing a file: as root os.access passes /proc).
    t = terminated_then_resumed
    cmd = [c for c in _command(tmp_path, t["uri"], t["cache"], DT, *_slow(0.25))
           if not c.startswith("cache_dir=")]
    start = time.monotonic()
    code, log = run_logged([*cmd, "cache_dir=/proc/nope"], tmp_path, "nope")
    assert code != 0 and time.monotonic() - start < 30
    assert log.strip().splitlines() == [("error: invalid config: cache_dir='/proc/nope': cannot write in "
                                         "/proc/nope (No such file or directory: /proc/nope)")]
    assert {(r.info.run_id, r.info.status, r.info.end_time) for r in all_runs(t["uri"])} == \
        {(r.info.run_id, r.info.status, r.info.end_time) for r in t["after"]}  # nothing written


# --- 3. A store that goes away -----------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow  # two starts of an mlflow server: ~100 s on 2 busy cores
def test_a_store_that_goes_away(tmp_path, mlflow_server, uninterrupted_global):
    """Two jobs on a real ``mlflow server`` that is stopped after their 3rd step:
    both keep stepping; the one that may wait (store_retry_s=300) finishes once the
    server is back; the other (store_retry_s=2) gives up at its end, writes what it
    could not log beside its checkpoint and says how to import it — which then
    completes its run."""
    server, cache = mlflow_server, tmp_path / "cache"
    waits = start(_command(tmp_path, server.url, cache, DT, *_slow(0.3), "store_retry_s=300", multirun=False),
                   tmp_path, "waits")
    gives_up = start(_command(tmp_path, server.url, cache, *_slow(0.3), "dt=0.005", "store_retry_s=2",
                               multirun=False), tmp_path, "gives_up")
    _wait_for_steps(server.url, waits, 3)
    _wait_for_steps(server.url, gives_up, 3)
    server.stop()
    code, log = finish(gives_up)
    assert code == 1, log[-3000:]
    error = log.strip().splitlines()[-1]
    assert error.startswith(f"error: the MLflow store {server.url} has not answered for "), log[-3000:]
    command = error.split("log it with: ")[1]
    record = Path(command.split()[-1])
    assert record.name == "run.json" and record.parent.name.endswith(".unlogged")
    held = json.loads(record.read_text())
    assert held["status"] == "FINISHED" and {"config", "params", "plots", "tables"} <= {
        folder.split("/")[0] for _, folder in held["artifacts"]}
    assert max(s for k, _, _, s in held["metrics"] if k == "step_loss") == 16  # it stepped to the end
    assert (record.parent.parent / f"{held['run_id']}.npz").is_file()  # its checkpoint is kept

    server.start()
    code, log = finish(waits)
    assert code == 0, log[-3000:]
    assert "not answering" in log and "answers again after" in log
    imported = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300, env=job_env(),
                              check=False)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert not record.parent.exists() and not (record.parent.parent / f"{held['run_id']}.npz").exists()

    client = MlflowClient(server.url)
    runs = {round(float(r.data.params["dt"]), 6): r for r in job_runs(server.url)}
    assert sorted(runs) == [0.004, 0.005]
    for dt, run in runs.items():
        assert run.info.status == "FINISHED"
        _each_step_once(client, run, round(0.08 / dt))
        _same_result(run, uninterrupted_global(dt))
        assert ({a.path for a in client.list_artifacts(run.info.run_id)}
                == {"config", "params", "plots", "tables"})


@pytest.mark.e2e
@pytest.mark.slow  # a sweep of its own: out of the default suite (≤ 15 min), run by .ci/run
def test_a_second_sqlite_writer_holding_the_lock(tmp_path, uninterrupted_global):
    """Another process holds SQLite's write lock for 22 s (longer than MLflow's
    20 s busy timeout) from the job's 3rd step: the job steps on to its end while
    it is held, then writes everything once it is released."""
    uri, cache = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "cache"
    job = start(_command(tmp_path, uri, cache, DT, *_slow(0.1), multirun=False), tmp_path, "job")
    run = _wait_for_steps(uri, job, 3, started=tmp_path / "outputs")
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sqlite3, sys, time; "
                                "c = sqlite3.connect(sys.argv[1], isolation_level=None); "
                                "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(22); "
                                "c.execute('COMMIT')"), str(tmp_path / "mlflow.db")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    checkpoint = CheckpointStore.for_run(run.data.tags["config_hash"], run.info.run_id, directory=cache).path
    while holder.poll() is None:  # the last step is computed and saved while the store is locked
        if checkpoint.is_file() and json.loads(str(np.load(checkpoint)["info"]))["step"] == 20:
            break
        time.sleep(0.2)
    assert holder.poll() is None, "the job did not step on while the store was locked"
    code, log = finish(job)
    holder.wait(timeout=60)
    assert code == 0, log[-3000:]
    assert "not answering (database is locked)" in log and "answers again after" in log
    (run,) = job_runs(uri)
    assert run.info.status == "FINISHED"
    _each_step_once(MlflowClient(uri), run, 20)
    _same_result(run, uninterrupted_global(0.004))


# --- 4. Two sweeps at once ---------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow  # a sweep of its own: out of the default suite (≤ 15 min), run by .ci/run
def test_two_overlapping_sweeps_at_once_run_each_configuration_once(tmp_path, uninterrupted_global):
    """Two multiruns started together on one fresh SQLite store, sharing two of
    their three configurations: each configuration runs once (the second sweep to
    reach it waits for it, then lists it as reused), no run is left RUNNING, no
    step is logged twice, and both parents end FINISHED with three jobs each."""
    uri, cache = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "cache"
    a = start(_command(tmp_path, uri, cache, "dt=0.02,0.01,0.005", *_slow(0.1), sweep_dir="a"),
              tmp_path, "a")
    b = start(_command(tmp_path, uri, cache, "dt=0.01,0.005,0.004", *_slow(0.1), sweep_dir="b"),
              tmp_path, "b")
    for proc in (a, b):
        code, log = finish(proc)
        assert code == 0, log[-3000:]
    runs = all_runs(uri)
    assert all(r.info.status == "FINISHED" for r in runs), [(r.info.status, r.data.tags) for r in runs]
    jobs = job_runs(uri)
    assert sorted(float(r.data.params["dt"]) for r in jobs) == [0.004, 0.005, 0.01, 0.02]  # each once
    client = MlflowClient(uri)
    for run in jobs:
        dt = float(run.data.params["dt"])
        _each_step_once(client, run, round(0.08 / dt))
        _same_result(run, uninterrupted_global(dt))
        assert "attempt" not in run.data.tags  # run once, never resumed
    parents = [r for r in runs if r.data.tags["run_kind"] == "sweep"]
    assert len(parents) == 2
    for parent in parents:
        assert parent.data.metrics["n_jobs"] == parent.data.metrics["n_finished"] == 3
    reused = [k for p in parents for k in p.data.tags if k.startswith("reused_run.")]
    assert reused  # the shared configurations: one sweep ran them, the other reused them


# --- 6. A full disk ---------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.slow  # a sweep of its own: out of the default suite (≤ 15 min), run by .ci/run
def test_a_full_disk_fails_the_run_and_keeps_the_previous_checkpoint(tmp_path, uninterrupted_global):
    """The 2nd checkpoint write (step 10) fills the disk half-way: the run ends
    FAILED with the reason, the checkpoint of step 5 intact; run again, it resumes
    there, and this time an artifact upload fills the disk: FAILED again, the
    final checkpoint kept; the third time it finishes — with the result of an
    uninterrupted run and every step logged once."""
    uri, cache = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "cache"
    cmd = _command(tmp_path, uri, cache, DT, multirun=False,
                   script=ROOT / "tests" / "helpers" / "faulty_sweep.py")
    os.environ["FAULTY_WRITE"] = "checkpoint:2"
    try:
        code, log = run_logged(cmd, tmp_path, "checkpoint")
        (run,) = job_runs(uri)
        checkpoint = CheckpointStore.for_run(run.data.tags["config_hash"], run.info.run_id, directory=cache)
        reason = ("the checkpoint after step 10 could not be written in "
                  f"{checkpoint.path.parent} (No space left on device); the checkpoint of step 5 is intact: "
                  "the same command resumes from it")
        assert code == 1 and log.strip().splitlines()[-1] == f"error: {reason}", log[-3000:]
        assert run.info.status == "FAILED" and run.data.tags["failure_reason"] == f"WriteFailed: {reason}"
        assert [p.name for p in checkpoint.path.parent.iterdir()] == [checkpoint.path.name]  # no partial file
        assert json.loads(str(np.load(checkpoint.path)["info"]))["step"] == 5  # sound, and the old one

        os.environ["FAULTY_WRITE"] = "artifact:2"
        code, log = run_logged(cmd, tmp_path, "artifact")
        (run,) = job_runs(uri)
        assert code == 1 and "an artifact could not be written (No space left on device" in log, log[-3000:]
        assert run.info.status == "FAILED" and "the checkpoint after step 20 is kept" in run.data.tags[
            "failure_reason"]
        assert run.data.tags["resumed_from_step"] == "5"
    finally:
        del os.environ["FAULTY_WRITE"]
    code, log = run_logged([cmd[0], str(ROOT / "pipeline" / "sweep.py"), *cmd[2:]], tmp_path, "clean")
    assert code == 0, log[-3000:]
    (run,) = job_runs(uri)
    assert run.info.status == "FINISHED" and run.data.tags["attempt"] == "3"
    assert run.data.tags["resumed_from_step"] == "20"
    _each_step_once(MlflowClient(uri), run, 20)
    _same_result(run, uninterrupted_global(0.004))
    assert {a.path for a in MlflowClient(uri).list_artifacts(run.info.run_id)} == {
        "config", "params", "plots", "tables"}
    assert not checkpoint.path.exists()


# --- 7. A run that blows up ---------------------------------------------------------------


@pytest.mark.slow  # θ₀'s fit, the compiled step and a fresh MLflow store: 51 s at load 5 (docs/claims.md)
def test_a_first_step_that_blows_up_fails_the_run_with_its_reason(tmp_path, cache_dir):
    """Heat on a line with ν = 10 at a fixed Δt = 0.5, TENG-Euler (Δt|Λ| = 5 and 20 on u₀'s
    two modes, the stable limit 2) and no reference: no median of earlier losses exists at
    step 1 and no measured error; the step's fit misses its target by far more than u₀
    (‖û₀‖² ≈ 4), so the run ends FAILED there, its reason and steps tagged."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(RunFailed, match=r"teng_euler diverged at step 1 \(t=0\.5\): step_loss .* "
                                        "misses its target by more than the solution it started from"):
        api.run("heat_1d", "method=teng_euler", "reference=none", "dt=0.5", "t_final=2", "equation.nu=10",
                "grid=32", "eval_grid=64", *CHEAP_FIT, "progress=false", mlflow=True, tracking_uri=uri,
                cache_dir=cache_dir)
    (run,) = job_runs(uri)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_reason"].startswith("Diverged: teng_euler diverged at step 1 (t=0.5): ")
    assert (run.data.tags["diverged_at_step"], run.data.tags["last_good_step"]) == ("1", "0")
    assert [m.step for m in MlflowClient(uri).get_metric_history(run.info.run_id, "est_rel_l2")] == [0]


# --- 8. What a person reads ------------------------------------------------------------


def test_the_fit_has_its_own_bars(capsys):
    """θ₀'s chunks (FitProgress) become one bar per stage — iterations, loss and
    target — closed at the iteration the stage stopped; other lines go above."""
    progress = Progress(True, "job")
    for iteration in (25, 50, 75):
        progress.note(FitProgress("θ₀ stage 1 (value+gradient)", iteration, 2000, 1e-3 / iteration, 1e-7,
                                 " lambda 1.0e-03"))
    progress.note(FitProgress("θ₀ stage 2 (value)", 25, 2000, 4.2e-13, 7.4e-13))
    progress.note("resuming from the checkpoint after step 3 of 4")
    progress.close()
    segments = [seg for line in capsys.readouterr().err.split("\n") for seg in line.split("\r")
                if seg.strip()]
    finals = {}
    for seg in segments:
        finals[seg.split(":")[0]] = seg
    stage1, stage2 = finals["θ₀ stage 1 (value+gradient)"], finals["θ₀ stage 2 (value)"]
    assert "100%" in stage1 and "75/75" in stage1 and "loss=1.33e-05 target=1.0e-07" in stage1
    assert "25/25" in stage2 and "loss=4.20e-13 target=7.4e-13" in stage2
    assert segments[-1] == "resuming from the checkpoint after step 3 of 4"
    # A plain log callback (print) still gets the log line it always got.
    assert str(FitProgress("θ₀ stage 1 (value+gradient)", 50, 2000, 1.985e-4, 1e-7, " lambda 6.4e-05")) == \
        "θ₀ stage 1 (value+gradient): iter 50 loss 1.985e-04 lambda 6.4e-05"
