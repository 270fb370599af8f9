"""Faults of the environment, with real processes: pipeline/sweep.py in
subprocesses on the driver's cheap test method (fake_methods.Toy, no θ₀ fit;
``+method.delay`` makes its steps slow enough to stop half-way), real signals, a
real ``mlflow server`` stopped and started again, a real second SQLite writer,
two sweeps at once. Each test checks what was kept: the run's status and reason,
every metric step once, and — where the run resumed — the global error of an
uninterrupted run (in-process, to 1e-12 relative).

A full disk is simulated by an injected ``OSError(ENOSPC)`` at the write
(tests/faulty_sweep.py: half the file is written, then the error), not a
size-limited folder: it strikes at a chosen write on any machine, as any user."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, TINY, all_runs, make_config
from fake_methods import TOY
from mlflow.tracking import MlflowClient

from teng_eq.checkpoint import CheckpointStore
from teng_eq.simulation import run_simulation

#: The tiny problem on the Toy method (no grid: Toy has no quadrature), 20 steps.
TOY_TINY = [o for o in TINY if not o.startswith("grid=")] + TOY + ["dt=0.004", "checkpoint_every=5"]


def _slow(delay: float) -> list[str]:
    return [f"+method.delay={delay}"]


def _env() -> dict:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT / "tests"),
                                                    env.get("PYTHONPATH")) if p)
    env.pop("TENG_EQ_PARENT_RUN", None)
    return env


def _command(tmp: Path, uri: str, cache: Path, *overrides: str, multirun: bool = True,
             script: Path = ROOT / "pipeline" / "sweep.py", sweep_dir: str = "multirun") -> list[str]:
    return [sys.executable, str(script), *(["-m"] if multirun else []), *TOY_TINY, f"tracking_uri={uri}",
            f"cache_dir={cache}", f"hydra.sweep.dir={tmp / sweep_dir}", f"hydra.run.dir={tmp / 'outputs'}",
            *overrides]


def _start(cmd: list[str], tmp: Path, name: str) -> subprocess.Popen:
    out = open(tmp / f"{name}.log", "w")  # noqa: SIM115 - closed with the process (_finish)
    proc = subprocess.Popen(cmd, cwd=tmp, env=_env(), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.log_file = out
    return proc


def _finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Wait for ``proc``; its exit status and output."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.log_file.close()
    return proc.returncode, Path(proc.log_file.name).read_text()


def _run(cmd: list[str], tmp: Path, name: str, timeout: float = 300) -> tuple[int, str]:
    return _finish(_start(cmd, tmp, name), timeout)


def _job_runs(uri: str) -> list:
    return [r for r in all_runs(uri) if r.data.tags.get("run_kind") == "job"]


def _wait_for_steps(uri: str, proc: subprocess.Popen, steps: int, deadline_s: float = 240,
                    started: Path | None = None):
    """Poll the store until a job run holds ``steps`` points of ``step_loss``; that
    run. Not before ``started`` exists (a job's folder: the sweep made the store),
    so that this process never races the sweep on creating it."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the job ended before it could be interrupted"
        if started is not None and not started.exists():
            time.sleep(0.2)
            continue
        try:
            client = MlflowClient(uri)
            for run in _job_runs(uri):
                if len(client.get_metric_history(run.info.run_id, "step_loss")) >= steps:
                    return run
        except Exception:  # noqa: BLE001 - a store still being created
            pass
        time.sleep(0.2)
    raise AssertionError(f"no job logged {steps} steps in {deadline_s} s")


def _each_step_once(client: MlflowClient, run, n_steps: int) -> None:
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice"
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "rel_l2")) == list(range(n_steps + 1))
    assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "step_loss")) == \
        list(range(1, n_steps + 1))


@pytest.fixture(scope="module")
def uninterrupted_global():
    """The global error of the uninterrupted Toy run, by dt."""
    cache = {}

    def of(dt: float) -> float:
        if dt not in cache:
            cfg = make_config(*(o for o in TOY_TINY if not o.startswith(("dt=", "checkpoint_every"))), f"dt={dt}")
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
    cmd = _command(tmp, uri, cache, *_slow(0.25))
    proc = _start(cmd, tmp, "first")
    job = _wait_for_steps(uri, proc, 6, started=tmp / "multirun" / "0")
    os.kill(proc.pid, signal.SIGTERM)
    code, first_log = _finish(proc)
    before = all_runs(uri)
    checkpoint = CheckpointStore.for_run(job.data.tags["config_hash"], job.info.run_id, directory=cache)
    step = json.loads(str(np.load(checkpoint.path)["info"]))["step"]
    logged = sorted(m.step for m in MlflowClient(uri).get_metric_history(job.info.run_id, "step_loss"))
    second_code, second_log = _run(cmd, tmp, "second")
    return dict(uri=uri, cache=cache, code=code, log=first_log, before=before, step=step, logged=logged,
                second_code=second_code, second_log=second_log, after=all_runs(uri), run_id=job.info.run_id)


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


# --- 2. The cache folder, 5. sizes the machine cannot hold: refused before anything -----


def test_an_unwritable_cache_is_refused_where_the_configuration_already_finished(terminated_then_resumed,
                                                                                 tmp_path):
    # The store holds this configuration FINISHED; a job would be "skipped", but the
    # folder is checked first (by writing a file: as root os.access passes /proc).
    t = terminated_then_resumed
    cmd = [c for c in _command(tmp_path, t["uri"], t["cache"], *_slow(0.25)) if not c.startswith("cache_dir=")]
    start = time.monotonic()
    code, log = _run([*cmd, "cache_dir=/proc/nope"], tmp_path, "nope")
    assert code != 0 and time.monotonic() - start < 30
    assert log.strip().splitlines() == ["error: invalid config: cache_dir='/proc/nope': cannot write in "
                                        "/proc/nope (No such file or directory: /proc/nope)"]
    assert {(r.info.run_id, r.info.status, r.info.end_time) for r in all_runs(t["uri"])} == \
        {(r.info.run_id, r.info.status, r.info.end_time) for r in t["after"]}  # nothing written
