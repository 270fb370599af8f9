"""A user's own PDE from a folder outside the repository: one Python file next to
where the command runs (no PYTHONPATH) and one yaml in the user's config folder, run
through ``pipeline/sweep.py`` (``hydra.searchpath=[file://…]`` and ``--config-dir``,
the latter under joblib's launcher, whose worker processes must find the file too) and
through the Python API (:func:`teng_eq.api.run`: an instance, a config name); a
missing module or class, or a bad choice in the user's folder, is one line before
any compute.

The user's equation (``helpers.user_files``: Fisher–KPP, ``∂ₜu = ν Δu + a u(1 − u)``,
ETDRK4 reference) starts from two Fourier modes on a 32² grid; every run here is the
same problem, so their errors must agree with the API's to round-off."""

import math
import subprocess
import sys

import numpy as np
import pytest
from helpers.bands import TRANSPORT
from helpers.configs import CHEAP_FIT
from helpers.mlflow_store import job_runs
from helpers.processes import SWEEP, job_env
from helpers.user_files import write_user_config, write_user_module, write_user_system

from teng_eq.api import ROOT, run
from teng_eq.config.options import import_impl
from teng_eq.errors import ConfigError
from teng_eq.fit.theta0 import REACH_FACTOR
from teng_eq.jobs import preflight as checks
from teng_eq.run.callbacks import Callback

#: The user's run: 4 steps of Δt = 0.02 on a 32² grid, errors on 64², θ₀ by a short fit.
SMALL = ["grid=32", "eval_grid=64", "t_final=0.08", "dt=0.02", "progress=false", *CHEAP_FIT]
CONF = ROOT / "conf"


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    """A folder outside the repository holding ``my_pdes.py`` and ``my_conf/equation/mine.yaml``,
    made the current folder (as a user's shell would be) while this module's tests run;
    ``sys.path`` and ``sys.modules`` restored after."""
    folder = tmp_path_factory.mktemp("user")
    write_user_module(folder)
    write_user_config(folder / "my_conf")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setattr(sys, "path", list(sys.path))
        yield folder
    sys.modules.pop("my_pdes", None)


@pytest.fixture(scope="module")
def user_cache(cache_dir):
    """The session's cache (conftest): its compiled programs (jax's persistent cache)
    serve these runs too; θ₀ of the user's equation is its own entry (its class and fields)."""
    return cache_dir


@pytest.fixture(scope="module")
def instance(user_folder):
    """The user's equation built in Python, no yaml: what a notebook does."""
    mine = import_impl("my_pdes:Mine", "equation.impl")
    return mine(name="mine", nu=0.1, a=1.0, lengths=(2 * math.pi, 2 * math.pi), initial_condition="waves")


@pytest.fixture(scope="module")
def api_result(instance, user_cache):
    """The run of the instance through the API, without MLflow (θ₀ into ``user_cache``)."""
    return run(instance, *SMALL, cache_dir=user_cache)


def test_the_api_runs_an_equation_instance(api_result):
    np.testing.assert_allclose(api_result.times, [0.0, 0.02, 0.04, 0.06, 0.08], rtol=0, atol=1e-15)
    # Against the ETDRK4 reference (measured 8.0e-5), and the estimate close to it: the run's
    # estimated global error over its true one (measured 1.0036, 2026-12-01) within the
    # transport's band (tests/helpers/bands.py), the estimate a periodic box's user gets.
    assert 2e-5 < api_result.global_rel_l2 < 3e-4
    assert api_result.estimate == "transport"
    TRANSPORT.check_ratio(api_result.scalars["est_global_rel_l2"] / api_result.global_rel_l2)
    assert api_result.rel_l2.shape == (5,) and api_result.network is not None


def test_the_api_runs_a_config_name_from_a_user_folder(user_folder, user_cache, api_result):
    """The yaml in the user's folder is the same equation as the instance: the same θ₀
    (content-keyed: no refit) and the same errors."""
    result = run("mine", *SMALL, config_dir=user_folder / "my_conf", cache_dir=user_cache)
    assert result.fit_report.cached is True
    np.testing.assert_array_equal(result.rel_l2, api_result.rel_l2)


def test_the_api_makes_the_jobs_mlflow_run(instance, user_folder, user_cache, api_result):
    uri = f"sqlite:///{user_folder / 'api.db'}"
    steps = []
    result = run(instance, *SMALL, mlflow=True, tracking_uri=uri, cache_dir=user_cache,
                 on_step=lambda rec: steps.append(rec.step))
    np.testing.assert_array_equal(result.rel_l2, api_result.rel_l2)
    assert steps[-4:] == [1, 2, 3, 4]
    (logged,) = job_runs(uri)
    assert logged.info.status == "FINISHED"
    assert logged.data.params["equation.impl"] == "my_pdes:Mine" and logged.data.params["equation.a"] == "1.0"
    assert logged.data.metrics["global_rel_l2"] == result.global_rel_l2
    # The same configuration again is the job's skip, said in one line.
    with pytest.raises(ConfigError, match="FINISHED in the store already"):
        run(instance, *SMALL, mlflow=True, tracking_uri=uri, cache_dir=user_cache)


BAD = [
    (["--config-dir", "my_conf", "equation=mien"], "equation='mien': unknown, choose one of ["),
    (["hydra.searchpath=[file://{folder}/my_conf]", "equation=mien"], "equation='mien': unknown"),
    (["equation=mine"], "equation='mine': unknown"),  # the folder not given
    (["--config-dir", "no_such_conf", "equation=mine"], "--config-dir=no_such_conf: not a folder"),
    (["--config-dir", "my_conf", "equation=mine", "equation.impl=my_pdes:Other"],
     "equation.impl='my_pdes:Other': module my_pdes has no 'Other'"),
    (["--config-dir", "my_conf", "equation=mine", "equation.impl=not_there:Mine"],
     "equation.impl='not_there:Mine': cannot import it: No module named 'not_there'"),
    (["--config-dir", "my_conf", "equation=mine", "equation.a=x"], "equation.a='x': must be a number"),
]


@pytest.mark.parametrize("argv, needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_user_equation_or_choice_is_one_line(user_folder, tmp_path, argv, needle):
    argv = [a.format(folder=user_folder) for a in argv]
    store, cache = tmp_path / "mlflow.db", tmp_path / "cache"
    with pytest.raises(ConfigError) as err:
        checks.preflight([*argv, f"tracking_uri=sqlite:///{store}", f"cache_dir={cache}"], CONF)
    message = str(err.value)
    assert message.startswith("invalid config: ") and needle in message and "\n" not in message
    if "unknown" in needle:
        known = message.split("choose one of", 1)[1]
        # the user's option, where its folder is given
        assert ("'mine'" in known) == ("equation=mine" not in argv)
    assert not store.exists() and not cache.exists()


def test_the_preflight_checks_the_user_folders_jobs(user_folder, tmp_path):
    common = [f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", f"cache_dir={tmp_path / 'cache'}", *SMALL]
    assert checks.preflight(["--config-dir", "my_conf", "equation=mine", *common], CONF) == 1
    assert checks.preflight(["-m", "--config-dir=my_conf", "equation=mine,heat", *common], CONF) == 2
    url = f"hydra.searchpath=[file://{user_folder}/my_conf]"
    no_dt = [o for o in common if not o.startswith("dt=")]
    assert checks.preflight(["-m", url, "equation=mine", "dt=0.02,0.04", *no_dt], CONF) == 2


def test_the_api_refuses_a_bad_equation_in_one_line(user_folder, tmp_path, instance):
    bad = type(instance)(name="mine", nu=-1.0, a=1.0, lengths=(1.0, 1.0), initial_condition="waves")
    with pytest.raises(ConfigError, match=r"^invalid config: equation\.nu=-1\.0: must be a number >= 0$"):
        run(bad, *SMALL, cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"equation='mien': unknown, choose one of \[.*'mine'"):
        run("mien", *SMALL, config_dir=user_folder / "my_conf", cache_dir=tmp_path / "cache")
    with pytest.raises(ConfigError, match="an equation instance comes with its own fields"):
        run(instance, "equation.nu=0.2", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["searchpath", pytest.param("config-dir+joblib", marks=pytest.mark.slow)])
def test_a_user_file_runs_through_sweep_py(user_folder, user_cache, api_result, tmp_path, how):
    """From the user's folder, no PYTHONPATH to it: the module is found by the script
    (and by joblib's workers); the run is the API's run."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    where = ([f"hydra.searchpath=[file://{user_folder}/my_conf]"] if how == "searchpath"
             else ["-m", "--config-dir", "my_conf", "hydra/launcher=joblib", "hydra.launcher.n_jobs=1"])
    env = job_env()
    assert str(user_folder) not in env["PYTHONPATH"]
    proc = subprocess.run([sys.executable, str(SWEEP), *where, "equation=mine", *SMALL, f"tracking_uri={uri}",
                           f"cache_dir={user_cache}", f"hydra.run.dir={tmp_path / 'outputs'}",
                           f"hydra.sweep.dir={tmp_path / 'multirun'}"],
                          cwd=user_folder, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (logged,) = job_runs(uri)
    assert logged.info.status == "FINISHED" and logged.data.params["equation.impl"] == "my_pdes:Mine"
    assert logged.data.tags["theta0_cached"] == "True"  # the API's θ₀: the same content key
    np.testing.assert_allclose(logged.data.metrics["global_rel_l2"], api_result.global_rel_l2,
                               rtol=1e-9, atol=0)


@pytest.mark.e2e
def test_a_missing_user_module_stops_sweep_py_in_one_line(user_folder, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run([sys.executable, str(SWEEP), "--config-dir", "my_conf", "equation=mine",
                           "equation.impl=my_pdez:Mine", *SMALL, f"tracking_uri={uri}",
                           f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'outputs'}"],
                          cwd=user_folder, env=job_env(), capture_output=True, text=True, timeout=300,
                          check=False)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: invalid config: equation.impl='my_pdez:Mine': cannot import it")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "mlflow.db").exists()


#: A user's system whose network (5 wide, 2 features) cannot reach the tolerance: on 16
#: points its θ₀ fit stops improving at a relative loss of 2.71e-10 (measured 2026-12-02),
#: 27x the tolerance 1e-11 set here, within REACH_FACTOR; one step of 0.01.
STALLING = ["grid=16", "network.width=5", "network.depth=3", "network.features=2", "subsample_first=32",
            "subsample=32", "fit.stage1_subsample=32", "fit.stage2_subsample=32", "fit.stage2_max_iters=50",
            "fit.stage2_polish_iters=50", "fit.stage2_tol=1e-11", "t_final=0.01", "dt=0.01",
            "progress=false", "resume=false"]


class Theta0Seen(Callback):
    """θ₀ as the loop starts from it, and the fit's progress reported before."""

    def __init__(self):
        self.progress, self.theta0 = [], None

    def note(self, item):
        self.progress.append(item)

    def begin(self, state):
        self.theta0 = np.asarray(state.method.theta)  # the default warm start's state: (θ, rate)


@pytest.mark.slow  # ~35 s (the default suite's 15 minutes)
def test_a_user_systems_theta0_that_stalls_near_its_tolerance_is_fitted_once(tmp_path, monkeypatch):
    """The same command twice: the first run fits θ₀, which stops improving a little above
    fit.stage2_tol, warns naming the setting and caches it; the second starts from the
    cache (no fit progress, the same θ₀ bytes), both runs tagged with the loss it reached."""
    write_user_system(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_system", raising=False)
    system = import_impl("my_system:RotDiff", "equation.impl")
    eq = system(name="rotdiff", omega=1.0, kappa=0.1, lengths=(2 * math.pi,), initial_condition="wave")
    uri, seen = f"sqlite:///{tmp_path / 'runs.db'}", [Theta0Seen(), Theta0Seen()]
    with pytest.warns(UserWarning, match=r"where it stopped improving \(within 1000x\); cached as what "
                                         r"this network reaches: fit\.stage2_tol=\de-1\d says so"):
        first = run(eq, *STALLING, mlflow=True, tracking_uri=uri, cache_dir=tmp_path / "cache",
                    callbacks=[seen[0]])
    second = run(eq, *STALLING, mlflow=True, tracking_uri=uri, cache_dir=tmp_path / "cache",
                 callbacks=[seen[1]])
    fit = first.fit_report
    assert not fit.converged and fit.stalled and 1 < fit.stage2_rel_loss / 1e-11 <= REACH_FACTOR
    assert not fit.cached and second.fit_report.cached
    assert seen[0].progress and not seen[1].progress  # the second run did not fit
    assert seen[0].theta0.tobytes() == seen[1].theta0.tobytes()
    np.testing.assert_array_equal(second.est_rel_l2, first.est_rel_l2)
    runs = sorted(job_runs(uri), key=lambda r: r.info.start_time)
    assert [r.data.tags["theta0_cached"] for r in runs] == ["False", "True"]
    assert runs[0].info.run_name == runs[1].info.run_name  # one command, one name: its overrides
    assert runs[0].info.run_name.startswith("teng_heun-rotdiff-dt0.01 grid=16 network.width=5 ")
    for r in runs:
        assert r.data.tags["theta0_rel_loss"] == f"{fit.stage2_rel_loss:.3e}"
        assert r.data.tags["theta0_converged"] == "False"
    monkeypatch.delitem(sys.modules, "my_system", raising=False)
