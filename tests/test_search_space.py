"""A frontier search's space and keys (teng_eq.search.space, teng_eq.search.study)
and the preflight that checks them before any compute: Hydra's override grammar
as Optuna distributions, the points checked, one line for each bad axis or key."""

from __future__ import annotations

import math
import subprocess
import sys

import optuna
import pytest
from helpers.configs import CONF
from helpers.fake_methods import TOY
from helpers.processes import SWEEP, job_env
from hydra.core.override_parser.overrides_parser import OverridesParser

from teng_eq.errors import ConfigError
from teng_eq.jobs.preflight import check_group_choices, preflight
from teng_eq.search.space import baseline_params, check_options, parse_space
from teng_eq.search.study import (
    SERVER_RECIPE,
    bookkeeping_turn,
    cheapest,
    default_storage,
    front,
    objective_values,
    open_study,
    study_lock,
    study_name,
)


def _space(params=None, *arguments):
    return parse_space(OverridesParser.create(), params or {}, list(arguments))


def test_each_sweep_expression_is_its_distribution():
    space = _space({"dt": "choice(0.004, 0.005)", "iters": "range(2,8)",
                    "x": "tag(log, interval(1e-7, 1e-4))", "n": "tag(log, range(64, 1025))",
                    "k": "tag(int, interval(2.5, 9.5))"},
                   "method=teng_heun,teng_rk4", "progress=false")
    d = space.distributions()
    assert d["dt"] == optuna.distributions.CategoricalDistribution(["0.004", "0.005"])
    assert d["iters"] == optuna.distributions.IntDistribution(2, 7)  # Hydra's stop is exclusive
    assert d["x"] == optuna.distributions.FloatDistribution(1e-7, 1e-4, log=True)
    assert d["n"] == optuna.distributions.IntDistribution(64, 1024, log=True)
    assert d["k"] == optuna.distributions.IntDistribution(3, 9)
    assert d["method"] == optuna.distributions.CategoricalDistribution(["teng_heun", "teng_rk4"])
    assert space.fixed == ("progress=false",)
    # A trial's overrides reproduce what was typed, floats exactly.
    params = {"dt": "0.005", "iters": 3, "x": 1 / 3 * 1e-5, "n": 100, "k": 4, "method": "teng_rk4"}
    assert space.overrides(params) == ["progress=false", "dt=0.005", "iters=3", f"x={1 / 3 * 1e-5!r}",
                                       "n=100", "k=4", "method=teng_rk4"]
    assert float(space.overrides(params)[3].split("=")[1]) == params["x"]


def test_the_checked_points_cover_every_choice_the_ends_and_the_middle():
    space = _space({"dt": "choice(0.004,0.005)", "iters": "range(2,8)", "x": "tag(log,interval(1e-6,1e-2))",
                    "n": "range(10,100)"})
    by_key = {a.name: a.checked_values() for a in space.axes}
    assert by_key["dt"] == ["0.004", "0.005"]
    assert by_key["iters"] == ["2", "3", "4", "5", "6", "7"]  # a short range: all of it
    assert [float(v) for v in by_key["x"]] == pytest.approx([1e-6, 1e-4, 1e-2], rel=1e-12)  # geometric middle
    assert by_key["n"] == ["10", "54", "99"]
    jobs = space.check_points()
    # as many as the longest axis has values; here the last is the corner of last values
    assert len(jobs) == 6
    assert jobs[0] == ["dt=0.004", "iters=2", "x=1e-06", "n=10"]  # all first
    assert jobs[-1] == ["dt=0.005", "iters=7", "x=0.01", "n=99"]  # all last
    assert _space({"a": "choice(1,2,3)", "b": "choice(1,2)"}).check_points() == [
        ["a=1", "b=1"], ["a=2", "b=2"], ["a=3", "b=1"], ["a=3", "b=2"]]  # … else it is added
    for axis, checked in by_key.items():  # every value of every axis, in some job
        assert {job[list(by_key).index(axis)].split("=")[1] for job in jobs} == set(checked)


def test_the_last_expression_of_a_key_wins_and_an_added_key_stays_added():
    space = _space({"dt": "choice(0.004,0.005)", "iters": "range(2,4)"}, "iters=5", "+method.growth=1.5",
                   "method.growth=choice(1.01,1.5)", "dt=choice(0.01,0.02)")
    assert [a.key for a in space.axes] == ["method.growth", "dt"]
    assert space.axes[1].choices == ("0.01", "0.02")
    assert space.fixed == ("iters=5", "+method.growth=1.5")


@pytest.mark.parametrize("arguments, message", [
    (["dt=interval(0.02,0.01)"], "search space dt=interval(0.02,0.01): needs low < high (got 0.02 and 0.01)"),
    (["dt=tag(log,interval(0,1))"],
     "search space dt=tag(log,interval(0,1)): a log scale needs low > 0 (got 0.0)"),
    (["dt=tag(foo,interval(1,2))"],
     "search space dt=tag(foo,interval(1,2)): unknown tag 'foo' (known: log, int)"),
    (["iters=range(3,4)"], "search space iters=range(3,4): the range holds fewer than two values"),
    (["iters=tag(log,range(1,9,2))"],
     "search space iters=tag(log,range(1,9,2)): a log-scale range steps by 1"),
    (["dt=choice(0.01)"], "search space dt=choice(0.01): a choice needs at least two values"),
    (["dt=0.01", "iters=3"], "the frontier search has no axis to search"),
    (["dt=choice(0.01"], "search space: "),
])
def test_a_bad_axis_is_one_line(arguments, message):
    with pytest.raises(ConfigError) as err:
        _space({}, *arguments)
    assert str(err.value).startswith("invalid config: " + message) and "\n" not in str(err.value)


@pytest.mark.parametrize("key, value, message", [
    ("n_trials", 0, "hydra.sweeper.n_trials=0: must be a whole number >= 1"),
    ("n_jobs", 1.5, "hydra.sweeper.n_jobs=1.5: must be a whole number >= 1"),
    ("sampler", "cmaes", "hydra.sweeper.sampler='cmaes': choose one of tpe, nsga2, random"),
    ("error", "rel_l2", "hydra.sweeper.error='rel_l2': an error metric a search can minimise"),
    ("cost", "eval_s", "hydra.sweeper.cost='eval_s': a cost metric a search can minimise"),
    ("target", -1.0, "hydra.sweeper.target=-1.0: an error to reach, > 0"),
    ("target", "small", "hydra.sweeper.target='small': an error to reach, > 0"),
])
def test_a_bad_sweeper_key_is_one_line(key, value, message):
    keys = {"n_trials": 30, "n_jobs": 1, "sampler": "tpe", "startup_trials": 10, "error": "global_rel_l2",
            "cost": "runtime_s", "target": None}
    check_options(**keys)
    with pytest.raises(ConfigError,
                       match="^invalid config: " + message.replace("(", r"\(").replace(")", r"\)")):
        check_options(**{**keys, key: value})


def test_the_baseline_is_the_configs_own_point_when_the_space_holds_it():
    space = _space({"dt": "choice(0.004,0.005)", "iters": "range(2,8)", "x": "tag(log,interval(1e-6,1e-2))"})
    assert baseline_params(space, {"dt": "0.005", "iters": "7", "x": "1e-5"}) == (
        {"dt": "0.005", "iters": 7, "x": 1e-5}, [])
    assert baseline_params(space, {"dt": "5e-3", "iters": "7", "x": "1e-5"})[0]["dt"] == "0.005"  # as written
    assert (baseline_params(space, {"dt": "0.02", "iters": "8", "x": "None"})[1]
            == ["dt=0.02", "iters=8", "x=None"])


def test_the_study_is_named_by_the_search_not_by_its_bookkeeping(tmp_path):
    a = _space({"dt": "choice(0.004,0.005)"}, "iters=3", "progress=false",
               f"tracking_uri=sqlite:///{tmp_path}/x.db")
    b = _space({"dt": "choice(0.004,0.005)"}, "iters=3")
    c = _space({"dt": "choice(0.004,0.005)"}, "iters=4")
    assert study_name("heat", a, "global_rel_l2", "runtime_s") == \
        study_name("heat", b, "global_rel_l2", "runtime_s")
    assert study_name("heat", b, "global_rel_l2", "runtime_s") != \
        study_name("heat", c, "global_rel_l2", "runtime_s")
    assert study_name("heat", b, "global_rel_l2", "runtime_s") != \
        study_name("heat", b, "global_rel_l2", "job_s")
    assert default_storage(f"sqlite:///{tmp_path}/store/mlflow.db", tmp_path) == \
        f"sqlite:///{tmp_path}/store/optuna.db"
    assert default_storage("http://127.0.0.1:5000", tmp_path) == f"sqlite:///{tmp_path}/optuna.db"


def test_front_and_target_from_a_study():
    study = optuna.create_study(directions=["minimize", "minimize"])
    # (2e-6, 4) and (1e-5, 2): dominated
    points = [(1e-6, 3.0), (1e-7, 9.0), (5e-6, 1.0), (2e-6, 4.0), (1e-5, 2.0)]
    for values in points:
        study.add_trial(optuna.trial.create_trial(values=list(values), params={},
                                                  distributions={}))
    assert [tuple(t.values) for t in front(study)] == [(5e-6, 1.0), (1e-6, 3.0), (1e-7, 9.0)]
    assert tuple(cheapest(study, 2e-6).values) == (1e-6, 3.0)
    assert tuple(cheapest(study, 1e-7).values) == (1e-7, 9.0)
    assert cheapest(study, 1e-8) is None
    assert objective_values({"global_rel_l2": 1e-6, "runtime_s": 2.0}, ("global_rel_l2", "runtime_s")) == \
        ([1e-6, 2.0], "")
    assert objective_values({"global_rel_l2": math.nan, "runtime_s": 2.0},
                            ("global_rel_l2", "runtime_s")) == (None, "global_rel_l2 = nan")
    assert objective_values({"runtime_s": 2.0}, ("est_global_rel_l2", "runtime_s")) == \
        (None, "the run has no metric est_global_rel_l2")


# --- The preflight: a search checked before any compute ----------------------------------


def _toy_search(*extra):
    return ["-m", "hydra/sweeper=frontier", *TOY, "equation.initial_condition=sines2d", "t_final=0.08",
            *extra]


def test_the_preflight_checks_the_points_of_a_search():
    # (0.004, 1.01), (0.008, 1.5), (0.004, 2), and the corner (0.008, 2)
    assert preflight(_toy_search("dt=choice(0.004,0.008)", "method.growth=choice(1.01,1.5,2)"), CONF) == 4


@pytest.mark.parametrize("extra, message", [
    # A fixed Δt must divide t_final: an interval's middle does not.
    (["dt=interval(0.004,0.02)"], ("invalid config: t_final=0.08: must be a whole number of steps "
                                   "of dt=0.012 (at the search's point dt=0.012)")),
    (["foo=choice(1,2)"], ("invalid config: Could not override 'foo'. Key 'foo' is not in struct "
                           "(at the search's point foo=1)")),
    (["dt=choice(0.004,0.008)", "hydra.sweeper.sampler=grid"],
     "invalid config: hydra.sweeper.sampler='grid': choose one of tpe, nsga2, random"),
    (["dt=choice(0.004,0.008)", "hydra.sweeper.error=est_global_rel_l2", "estimate=none"],
     "invalid config: hydra.sweeper.error='est_global_rel_l2' needs an error estimate, but estimate='none'"),
])
def test_a_bad_search_is_refused_in_one_line(extra, message):
    with pytest.raises(ConfigError) as err:
        preflight(_toy_search(*extra), CONF)
    assert str(err.value) == message


def test_a_second_search_of_a_sqlite_study_is_refused_before_any_compute_naming_the_recipe(tmp_path):
    """SQLite takes one search at a time (measured: docs/guides/server-and-cluster.md): the
    preflight of a search whose SQLite study another process holds says so in one line."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    search = _toy_search("dt=choice(0.004,0.008)", f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                         "hydra.sweeper.study=toy")
    with study_lock(storage, "toy"), pytest.raises(ConfigError) as err:
        preflight(search, CONF)
    assert str(err.value) == (
        f"study 'toy' in {storage} is being searched by another process: SQLite takes one search at a "
        "time; wait for it, name another study (hydra.sweeper.study=…), or keep the study in PostgreSQL "
        f"for searches at once ({SERVER_RECIPE})")


@pytest.mark.parametrize("launcher, warned", [
    (["hydra/launcher=joblib", "hydra.launcher.n_jobs=4"], 2),  # 2 jobs: both at once
    (["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"], 0),  # one after the other
])
def test_parallel_jobs_on_a_sqlite_store_are_told_of_the_server(tmp_path, capsys, launcher, warned):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert preflight(["-m", *TOY, "equation.initial_condition=sines2d", "t_final=0.08", f"tracking_uri={uri}",
                      *launcher, "dt=0.02,0.04"], CONF) == 2
    lines = capsys.readouterr().err.splitlines()
    line = (f"warning: {warned} jobs at once write the SQLite store {uri}, which takes one writer at a time: "
            "they wait for each other's writes; for many writers use a PostgreSQL-backed mlflow server "
            f"({SERVER_RECIPE})")
    assert lines == ([line] if warned else [])


@pytest.mark.parametrize("storage, why", [
    ("mysql://u@h/db", "not a storage the frontier takes: sqlite:///, postgresql://, "
                       "postgresql+<driver>://, journal:///"),
    ("journal:///", "a journal storage is journal:///<absolute path of a file>"),
    ("postgresql+psycopg://", "a PostgreSQL storage is postgresql+psycopg://<user>@<host>[:port]/<database>"),
])
def test_a_bad_storage_is_one_line(storage, why):
    with pytest.raises(ConfigError) as err:
        preflight(_toy_search("dt=choice(0.004,0.008)", f"hydra.sweeper.storage={storage}"), CONF)
    assert str(err.value) == f"invalid config: hydra.sweeper.storage={storage!r}: {why}"


def test_a_journal_study_takes_turns_and_numbers_its_trials_in_order(tmp_path):
    """Optuna's journal file (a study shared over a filesystem): created, asked and told in
    turns (a ``flock`` beside the file), and continued with a seed moved on."""
    storage = f"journal:///{tmp_path / 'optuna.journal'}"
    study = open_study(storage, "toy", sampler="random", seed=0, startup_trials=1)
    with bookkeeping_turn(storage, "toy"):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        study.tell(trial, [x, 1 - x])
    again = open_study(storage, "toy", sampler="random", seed=0, startup_trials=1)
    second = again.ask()
    assert [t.number for t in again.get_trials()] == [0, 1]
    assert second.suggest_float("x", 0.0, 1.0) != x  # seed 0 + 1 trial held: not the first draw again
    assert list(tmp_path.glob("optuna.journal-*.lock"))


def test_the_preset_searches_the_default_problem_and_passes_the_preflight():
    """experiment=frontier: every integrator, Δt, iteration count and subsample size of
    2-D heat's search composed and validated, in 10 jobs (9 values of Δt, and a corner)."""
    assert preflight(["experiment=frontier"], CONF) == 10


def test_a_group_axis_names_known_options_only():
    check_group_choices(["method=choice(teng_heun,teng_rk4)"], CONF)
    with pytest.raises(ConfigError, match=r"^invalid config: method='teng_rk5': unknown, choose one of \["):
        check_group_choices(["method=choice(teng_heun,teng_rk5)"], CONF)


@pytest.mark.e2e
def test_a_bad_search_stops_pipeline_sweep_before_any_run(tmp_path):
    proc = subprocess.run([sys.executable, str(SWEEP), "experiment=frontier",
                           "iters=range(0,3)", f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=job_env(),
                          check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        ("error: invalid config: iters=0: must be an integer >= 1 (at the search's point method=teng_heun "
         "dt=0.004 iters_later=2 subsample_first=128 subsample=128 iters=0)")]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "optuna.db").exists()
