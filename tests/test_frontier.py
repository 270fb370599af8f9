"""The frontier search end to end (docs/frontier.md): pipeline/sweep.py with
``hydra/sweeper=frontier`` in subprocesses, on the driver's cheap Toy method
(tests/helpers/fake_methods.py, a job in seconds), real signals. Each test compares the
Optuna study with the MLflow store trial by trial: states, values, run ids.

* a diverging trial is PRUNED in the study and FAILED in MLflow, and the search goes
  on; a trial left asked but never launched is started when the search is run again;
* Ctrl-C (SIGINT) in the middle of a trial, then the same command: the trial resumes
  its own run, no trial is lost or run twice, the study and MLflow agree;
* the target mode answers from the study and prints a command whose rerun reproduces
  the trial; analyze.py tables and draws the front over every trial.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
from helpers.configs import ROOT, TINY_SWEEP_NO_GRID
from helpers.fake_methods import TOY
from helpers.mlflow_store import all_runs
from helpers.processes import SWEEP, finish, run_logged, start
from hydra import compose, initialize_config_dir
from mlflow.tracking import MlflowClient

from teng_eq.analysis import compare as analysis
from teng_eq.analysis import report
from teng_eq.search.sweeper import config_dir_words
from teng_eq.tracking import open_client

# slow: out of the default suite (≤ 15 min on 2 cores); .ci/run runs it after README's command.
pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # searches of pipeline/sweep.py in subprocesses

#: Toy on the tiny problem (t_final = 0.08) with no NaN: dt 0.004 / 0.005 / 0.008 is 20 / 16 / 10 steps.
TOY_TINY = TINY_SWEEP_NO_GRID + TOY
#: The healthy search: trial 0 is the config's own values (dt=0.005, growth 1.5: the baseline).
HEALTHY = ["dt=choice(0.004,0.005,0.008)", "method.growth=choice(1.01,1.5)"]


def _search(tmp: Path, *overrides: str, toy=TOY_TINY) -> list[str]:
    return [sys.executable, str(SWEEP), "-m", "hydra/sweeper=frontier", *toy,
            f"tracking_uri=sqlite:///{tmp / 'mlflow.db'}", f"cache_dir={tmp / 'cache'}",
            f"hydra.sweep.dir={tmp / 'multirun'}", f"hydra.run.dir={tmp / 'outputs'}", *overrides]


def _study(tmp: Path):
    """The one study of the search in ``tmp`` (its storage beside the MLflow store)."""
    storage = f"sqlite:///{tmp / 'optuna.db'}"
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage)


def _trial_runs(tmp: Path) -> dict[int, object]:
    """``{trial number: run}`` of the job runs; fails if a trial has two runs."""
    runs = [r for r in all_runs(f"sqlite:///{tmp / 'mlflow.db'}") if r.data.tags.get("run_kind") == "job"]
    numbers = [int(r.data.tags["trial"]) for r in runs]
    assert len(numbers) == len(set(numbers)), f"a trial with two runs: {sorted(numbers)}"
    return dict(zip(numbers, runs))


def _agree(study, runs: dict) -> None:
    """The study and MLflow hold the same trials: one run each, COMPLETE ⇔ FINISHED with
    the run's (global_rel_l2, runtime_s) as values, PRUNED or FAIL ⇔ FAILED (PRUNED where it
    diverged or overfit), each naming the other."""
    trials = study.get_trials()
    assert sorted(runs) == [t.number for t in trials] == list(range(len(trials)))
    for t in trials:
        run = runs[t.number]
        assert t.user_attrs["mlflow_run_id"] == run.info.run_id
        assert run.data.tags["study"] == study.study_name and run.data.tags["job_num"] == str(t.number)
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert run.info.status == "FINISHED"
            assert t.values == [run.data.metrics["global_rel_l2"], run.data.metrics["runtime_s"]]
        else:
            assert run.info.status == "FAILED"
            broke_down = run.data.tags["failure_reason"].startswith(("Diverged:", "Overfit:"))
            assert t.state == (optuna.trial.TrialState.PRUNED if broke_down else optuna.trial.TrialState.FAIL)
            assert t.user_attrs["failure_reason"] == run.data.tags["failure_reason"]


def _wait_for_steps(uri: str, proc: subprocess.Popen, trial: int, steps: int,
                    deadline_s: float = 240) -> None:
    """Poll the store until trial ``trial``'s run holds ``steps`` points of ``step_loss``."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the search ended before it could be interrupted"
        with contextlib.suppress(Exception):  # a store still being created
            client = open_client(uri)
            for run in client.search_runs([e.experiment_id for e in client.search_experiments()],
                                          f"tags.trial = '{trial}'"):
                if len(client.get_metric_history(run.info.run_id, "step_loss")) >= steps:
                    return
        time.sleep(0.2)
    raise AssertionError(f"trial {trial} did not log {steps} steps in {deadline_s} s")


# --- 1. A trial that diverges; a trial asked but never launched -------------------------


def test_a_diverging_trial_is_pruned_and_failed_and_the_search_goes_on(tmp_path):
    """Every Toy run here diverges at step 3 (+method.nan_at=3). Trial 0 was asked by
    an earlier search that stopped before launching it (made here with Optuna): the
    search starts it; then trial 1. Both are PRUNED (so that TPE moves away from them)
    and FAILED with the reason; the
    search's parent is FINISHED (failed trials are answers, not failures) and the
    command succeeds."""
    toy = [o.replace("+method.nan_at=0", "+method.nan_at=3") for o in TOY_TINY]
    name = "toy-diverging"
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(storage=storage, study_name=name, directions=["minimize", "minimize"])
    orphan = study.ask()
    asked = orphan.suggest_categorical("dt", ["0.005", "0.008"])  # asked, then the search stopped
    code, log = run_logged(_search(tmp_path, "dt=choice(0.005,0.008)", "hydra.sweeper.n_trials=2",
                             f"hydra.sweeper.study={name}", toy=toy), tmp_path, "diverging")
    assert code == 0, log[-3000:]
    assert "trial 0 was left unfinished (it opened no run): starting it" in log
    study = optuna.load_study(study_name=name, storage=storage)
    runs = _trial_runs(tmp_path)
    _agree(study, runs)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.PRUNED] * 2
    # Trial 0 is the orphan, run with the value the study recorded for it when it was asked
    # (not a value drawn again by the search): its run's dt is that value.
    assert study.trials[0].params == {"dt": asked}
    assert float(runs[0].data.params["dt"]) == float(asked), (asked, runs[0].data.params["dt"])
    for run in runs.values():
        assert run.data.tags["failure_reason"].startswith("Diverged: teng_heun diverged at step 3 ")
    assert f"study {name} ({storage}): 2 trials: 2 pruned" in log
    (parent,) = [r for r in all_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
                 if r.data.tags["run_kind"] == "sweep"]
    assert parent.info.status == "FINISHED" and parent.data.tags["study"] == name


# --- 2. Ctrl-C in the middle of a trial, then the same command ---------------------------


@pytest.fixture(scope="module")
def interrupted_then_continued(tmp_path_factory):
    """A 3-trial search Ctrl-C'd (SIGINT) at trial 0's 5th step, then the same command
    (asking for a target: :func:`test_the_target_mode_answers_with_a_command_that_reproduces_the_trial`)."""
    tmp = tmp_path_factory.mktemp("frontier")
    cmd = _search(tmp, *HEALTHY, "hydra.sweeper.n_trials=3", "+method.delay=0.2")
    proc = start(cmd, tmp, "first")
    _wait_for_steps(f"sqlite:///{tmp / 'mlflow.db'}", proc, trial=0, steps=5)
    os.kill(proc.pid, signal.SIGINT)
    code, first = finish(proc)
    stopped = {"study": [(t.number, t.state) for t in _study(tmp).trials], "runs": _trial_runs(tmp)}
    # The same command, asking for the cheapest trial below an error of 100 (not the baseline: 2.6e2).
    second_code, second = run_logged([*cmd, "hydra.sweeper.target=100"], tmp, "second")
    return {"tmp": tmp, "cmd": cmd, "code": code, "log": first, "stopped": stopped,
            "second_code": second_code, "second_log": second}


def test_ctrl_c_stops_the_search_with_its_trial_running(interrupted_then_continued):
    t = interrupted_then_continued
    assert t["code"] == 128 + signal.SIGINT, t["log"][-3000:]
    assert "Traceback" not in t["log"]
    assert t["stopped"]["study"] == [(0, optuna.trial.TrialState.RUNNING)]
    (run,) = t["stopped"]["runs"].values()
    assert (run.info.status == "KILLED"
            and run.data.tags["killed_reason"].startswith("SIGINT (signal 2) after step"))


def test_the_same_command_continues_the_study_losing_and_repeating_nothing(interrupted_then_continued):
    t = interrupted_then_continued
    assert t["second_code"] == 0, t["second_log"][-3000:]
    study, runs = _study(t["tmp"]), _trial_runs(t["tmp"])
    _agree(study, runs)
    assert [s.state for s in study.trials] == [optuna.trial.TrialState.COMPLETE] * 3
    # Trial 0 is the baseline (the config's own dt and growth), resumed in its own run.
    assert study.trials[0].params == {"dt": "0.005", "method.growth": "1.5"}
    before = t["stopped"]["runs"][0]
    assert runs[0].info.run_id == before.info.run_id and runs[0].data.tags["attempt"] == "2"
    client = MlflowClient(f"sqlite:///{t['tmp'] / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "step_loss")]
    assert sorted(steps) == list(range(1, 17))  # dt=0.005: 16 steps, each logged once
    assert "trial 0 was left unfinished (its run" in t["second_log"] and "resuming it" in t["second_log"]
    assert "3 trials: 3 complete" in t["second_log"] and "3 trial runs: 3 FINISHED" in t["second_log"]
    sweeps = [r for r in all_runs(f"sqlite:///{t['tmp'] / 'mlflow.db'}")
              if r.data.tags["run_kind"] == "sweep"]
    assert len(sweeps) == 1 and sweeps[0].info.status == "FINISHED"  # one parent, reopened


def test_the_target_mode_answers_with_a_command_that_reproduces_the_trial(interrupted_then_continued):
    """Asked for the cheapest trial with error <= 100, the search answers at its end
    with the command of that trial; the command, run again, makes a run of the same error."""
    t = interrupted_then_continued
    study = _study(t["tmp"])
    best = min((s for s in study.trials if s.values[0] <= 100), key=lambda s: (s.values[1], s.values[0]))
    assert best.number != 0  # the baseline's error is 2.6e2
    lines = t["second_log"].splitlines()
    (i,) = [k for k, line in enumerate(lines) if line.startswith("target global_rel_l2 <= 100: ")]
    assert lines[i].startswith(f"target global_rel_l2 <= 100: trial {best.number} "
                               "is the cheapest that reaches it")
    command = shlex.split(lines[i + 1])
    assert command[:2] == ["python", str(SWEEP)] and command[-1] == "resume=false"
    code, log = run_logged([sys.executable, *command[1:]], t["tmp"], "rerun")
    assert code == 0, log[-3000:]
    rerun = [r for r in all_runs(f"sqlite:///{t['tmp'] / 'mlflow.db'}")
             if r.data.tags.get("run_kind") == "job" and "trial" not in r.data.tags]
    (rerun,) = rerun
    assert rerun.data.metrics["global_rel_l2"] == pytest.approx(best.values[0], rel=1e-12, abs=0)


def test_analyze_draws_and_tables_the_front_of_every_trial(interrupted_then_continued, tmp_path):
    t = interrupted_then_continued
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="analyze", overrides=[f"tracking_uri=sqlite:///{t['tmp'] / 'mlflow.db'}",
                                                          f"out={tmp_path}", "mlflow=false", "target=100"])
    report.analyze(cfg, ROOT)
    study = _study(t["tmp"])
    table = pd.read_csv(tmp_path / "frontier.csv")
    assert sorted(table["trial"]) == [0, 1, 2]  # the latest sweep: the search's trials, not the rerun
    by_trial = {s.number: s.values for s in study.trials}
    for _, row in table.iterrows():
        assert [row["global_rel_l2"], row["runtime_s"]] == by_trial[row["trial"]]
    brute = [not any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in by_trial.values())
             for p in (by_trial[n] for n in table["trial"])]
    assert table["pareto"].tolist() == brute
    assert {s.number for s in study.best_trials} == set(table.loc[table["pareto"], "trial"])
    md = (tmp_path / "frontier.md").read_text()
    assert md.startswith(f"## heat: the error–runtime front, {sum(brute)} of 3 runs")
    assert (tmp_path / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.all(np.diff(table["runtime_s"]) >= 0)  # cheapest first
    (best,) = analysis.cheapest_below(table, 100).itertuples()
    assert best.runtime_s == table.loc[table["global_rel_l2"] <= 100, "runtime_s"].min()
    assert f"Cheapest run with global rel. L² error ≤ 100: source={best.source} trial={best.trial} " in md


def test_the_fronts_table_shows_every_searched_key():
    """A search's points are scattered: a key the other keys happen to fix is still one
    of its axes (subsample_first here); a copy of a key (method.iters) is not."""
    df = pd.DataFrame({"run_id": list("abc"), "method": ["teng_heun", "teng_bs3", "teng_bs3"],
                       "equation": "heat", "dt": [0.005, 0.01, 0.02], "iters": [7, 7, 3],
                       "method.iters": [7, 7, 3], "subsample_first": [512, 384, 384],
                       "method.integrator": ["heun", "bs3", "bs3"], "progress": [False] * 3,
                       "global_rel_l2": [1e-7, 2e-7, 1e-6], "runtime_s": [30.0, 10.0, 5.0]})
    # for a grid's labels: dt already tells the runs apart
    assert analysis.varied_axes(df) == ["method", "dt"]
    assert analysis.frontier_axes(df) == ["method", "dt", "iters", "subsample_first"]


def test_a_searchs_rerun_command_keeps_its_config_folder():
    """The command that runs the cheapest trial again names the search's --config-dir (-cd)."""
    assert config_dir_words(["--config-dir", "conf", "experiment=stiff_frontier"]) == ["--config-dir", "conf"]
    assert config_dir_words(["-cd=my conf", "dt=0.1"]) == ["-cd=my conf"]
    assert config_dir_words(["experiment=frontier"]) == []
