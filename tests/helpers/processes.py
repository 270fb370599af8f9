"""pipeline/ scripts in subprocesses, as a person runs them: their environment, the
command line of a sweep on a small problem, and a run that must succeed.

A test that starts pipeline/sweep.py (or an ``mlflow server``) in a subprocess is
marked ``e2e`` (pyproject.toml's pytest markers)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from helpers.configs import ROOT, TINY_SWEEP

PIPELINE = ROOT / "pipeline"
SWEEP = PIPELINE / "sweep.py"


def job_env(drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """The environment of a job a test starts: this process's, less the variables whose
    names start with one of ``drop``, plus ``extra``. One BLAS thread (the suite's
    machine has 2 busy cores); src/ and tests/ on the path (helpers, the fake methods
    named by ``method.impl``); never a job of a sweep this process may be one of
    (``TENG_EQ_PARENT_RUN``, ``TENG_EQ_STUDY``: how a sweep or a search hands itself to its jobs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(tuple(drop))}
    env.update(extra, OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT / "tests"),
                                                    env.get("PYTHONPATH")) if p)
    for key in ("TENG_EQ_PARENT_RUN", "TENG_EQ_STUDY"):  # how a sweep (a search) hands itself to its jobs
        env.pop(key, None)
    return env


def sweep_command(tmp: Path, uri: str, cache: Path, *overrides: str, tiny: Sequence[str] = TINY_SWEEP,
                  multirun: bool = True, script: Path = SWEEP, sweep_dir: str = "multirun") -> list[str]:
    """pipeline/sweep.py (or ``script``, a wrapper of it) on the problem ``tiny``: its store
    at ``uri``, its cache folder ``cache``, Hydra's folders in ``tmp``; ``overrides`` last."""
    return [sys.executable, str(script), *(["-m"] if multirun else []), *tiny, f"tracking_uri={uri}",
            f"cache_dir={cache}", f"hydra.sweep.dir={tmp / sweep_dir}", f"hydra.run.dir={tmp / 'outputs'}",
            *overrides]


def run_sweep(tmp_path: Path, uri: str, cache_dir: Path, *overrides: str, multirun: bool = True,
              timeout: float = 900, tiny: Sequence[str] = TINY_SWEEP) -> subprocess.CompletedProcess:
    """:func:`sweep_command` run in ``tmp_path``; the finished process, which succeeded."""
    proc = subprocess.run(sweep_command(tmp_path, uri, cache_dir, *overrides, tiny=tiny, multirun=multirun),
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path, env=job_env(),
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def run_script(script: str, *args: str, cwd: Path, timeout: float = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python pipeline/<script> <args>`` in ``cwd`` (in :func:`job_env` unless ``env``);
    the finished process, whatever its exit status."""
    return subprocess.run([sys.executable, str(PIPELINE / script), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=job_env() if env is None else env, check=False)


def start(cmd: list[str], tmp: Path, name: str) -> subprocess.Popen:
    """``cmd`` started in ``tmp`` (in :func:`job_env`, a session of its own, so that a
    signal can reach its whole group), its output in ``tmp/<name>.log``."""
    out = open(tmp / f"{name}.log", "w")  # noqa: SIM115 - closed with the process (finish)
    proc = subprocess.Popen(cmd, cwd=tmp, env=job_env(), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    proc.log_file = out
    return proc


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    """Wait for a :func:`start` ed process (killed past ``timeout``); its exit status and output."""
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.log_file.close()
    return proc.returncode, Path(proc.log_file.name).read_text()


def run_logged(cmd: list[str], tmp: Path, name: str, timeout: float = 300) -> tuple[int, str]:
    """:func:`start` then :func:`finish`."""
    return finish(start(cmd, tmp, name), timeout)
