import importlib.util
import socket
import time

import pytest
from conftest import CONF, ROOT
from omegaconf import OmegaConf

from teng_eq.config import ConfigError, RunConfig, check_group_choices


def _run_config(cfg):
    return RunConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True))


def test_defaults_compose_to_cpu_heat_heun(compose_config):
    run = _run_config(compose_config())
    assert (run.equation.name, run.method.options.integrator, run.equation.nu) == ("heat", "heun", 0.1)
    assert run.n_params == 8361


@pytest.mark.parametrize(
    "preset, equation, dt",
    [("paper_heat2d", "heat", 0.005), ("paper_allen_cahn", "allen_cahn", 0.005), ("paper_burgers", "burgers", 0.001)],
)
def test_paper_presets(compose_config, preset, equation, dt):
    run = _run_config(compose_config([f"+experiment={preset}"]))
    assert (run.equation.name, run.method.name, run.dt, run.t_final) == (equation, "teng_heun", dt, 4.0)
    assert (run.grid, run.subsample_first, run.subsample, run.iters, run.iters_later) == (512, 1536, 1024, 7, 5)


@pytest.mark.parametrize("method, integrator", [("teng_euler", "euler"), ("teng_heun", "heun"), ("teng_rk4", "rk4")])
def test_method_group(compose_config, method, integrator):
    run = _run_config(compose_config([f"method={method}"]))
    assert (run.method.name, run.method.options.integrator) == (method, integrator)


@pytest.fixture(scope="module")
def preflight():
    """``pipeline/sweep.py``'s own check of a command line (every job of it)."""
    spec = importlib.util.spec_from_file_location("sweep_script", ROOT / "pipeline" / "sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.preflight


def _closed_port() -> int:
    with socket.socket() as s:  # nobody listens on it once this block closes it
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Command lines (``{tmp}``: a fresh folder, ``{file}``: a regular file in it,
# ``{port}``: a closed port) and what the one-line error must name.
MALFORMED = [
    (["foo=1"], "'foo'"),  # Hydra's own error, many lines long
    (["+foo=1"], "foo=1: unknown key"),
    (["method.foo=1"], "'method.foo'"),
    (["+network.foo=1"], "network.foo=1: unknown key"),
    (["equation=wave"], "equation='wave'"),
    (["-m", "method=teng_euler,teng_rk45"], "method='teng_rk45'"),
    (["dt=0.01,0.02"], "'dt=0.01,0.02'"),  # a sweep without -m
    (["dt=abc"], "dt='abc': must be a number"),
    (["dt=0"], "dt=0.0: must be > 0"),
    (["-m", "dt=0.02,-1"], "dt=-1.0: must be > 0"),  # the second job of a sweep
    (["t_final=0.0123"], "t_final=0.0123: must be a whole number of steps"),
    (["iters=2.5"], "iters=2.5: must be an integer"),
    (["iters_later=0"], "iters_later=0"),
    (["subsample=9000"], "subsample=9000: must be an integer in [1, 8361]"),
    (["subsample_first=0"], "subsample_first=0"),
    (["grid=4"], "grid=4"),
    (["eval_grid=abc"], "eval_grid='abc'"),
    (["solver=lu"], "solver='lu'"),
    (["damping=-1"], "damping=-1.0"),
    (["seed=-1"], "seed=-1"),
    (["~seed"], "seed=None: missing"),
    (["network.width=0"], "network.width=0"),
    (["fit.stage1_tol=0"], "fit.stage1_tol=0.0"),
    (["method.integrator=rk5"], "method.integrator='rk5'"),
    (["equation.nu=-1"], "equation.nu=-1"),
    (["equation.initial_condition=nope"], "equation.initial_condition='nope'"),
    (["tracking_uri=ftp://host/x"], "tracking_uri=ftp://host/x: not a store URI"),
    (["tracking_uri=sqlite:///{tmp}/no/such/mlflow.db"], "tracking_uri=sqlite:///"),
    (["tracking_uri=http://127.0.0.1:{port}"], "no MLflow server answers"),
    (["cache_dir={file}/cache"], "is not a folder"),
    (["checkpoint_every=0"], "checkpoint_every=0"),
    (["resume=maybe"], "resume='maybe'"),
    (["progress=3"], "progress=3"),
    (["divergence_factor=0.5"], "divergence_factor=0.5"),
    (["experiment_name="], "experiment_name=''"),
]


@pytest.mark.parametrize("argv, needle", MALFORMED, ids=[" ".join(a) for a, _ in MALFORMED])
def test_malformed_config_is_one_line_naming_the_key(preflight, tmp_path, argv, needle):
    (tmp_path / "file").write_text("")
    store = tmp_path / "mlflow.db"
    fill = {"tmp": tmp_path, "file": tmp_path / "file", "port": _closed_port()}
    argv = [a.format(**fill) for a in argv]
    flags = [a for a in argv if a == "-m"]  # options first, as Hydra's parser wants them
    defaults = [f"tracking_uri=sqlite:///{store}", f"cache_dir={tmp_path / 'cache'}"]
    start = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        preflight([*flags, *defaults, *(a for a in argv if a != "-m")])
    assert time.perf_counter() - start < 30
    message = str(err.value)
    assert message.startswith("invalid config: ") and needle in message and "\n" not in message
    # Before any compute and before any MLflow run: neither the cache nor the store exists.
    assert not store.exists() and not (tmp_path / "cache").exists()


def test_good_command_lines_pass(preflight, tmp_path):
    uri, cache = f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", f"cache_dir={tmp_path / 'cache'}"
    assert preflight([uri, cache]) == 1
    assert preflight(["-m", uri, cache, "dt=0.02,0.04", "method=teng_euler,teng_rk4"]) == 4
    assert preflight(["-m", uri, cache, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "dt=0.02"]) == 1
    assert preflight(["--cfg", "job"]) == 0  # Hydra's own business


def test_known_group_choices_pass():
    check_group_choices(["-m", "equation=heat,burgers", "method=teng_rk4", "+experiment=paper_heat2d", "dt=0.1"], CONF)
