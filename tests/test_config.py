import dataclasses

import jax
import pytest
from helpers.configs import CONF, make_config, make_equation
from helpers.mlflow_store import free_port

from teng_eq.domains.bounded import BoxDomain
from teng_eq.errors import ConfigError
from teng_eq.jobs import preflight as checks
from teng_eq.jobs.preflight import check_group_choices
from teng_eq.methods import base as methods_base
from teng_eq.network.paper import parameter_count


def test_defaults_compose_to_cpu_heat_heun():
    run = make_config()
    o = run.method.options
    assert (run.equation.name, o.integrator, run.equation.nu) == ("heat", "heun", 0.1)
    assert parameter_count(o.network, run.equation.dim, run.equation.periods) == 8361


@pytest.mark.parametrize(
    "preset, equation, dt",
    [("paper_heat2d", "heat", 0.005), ("paper_allen_cahn", "allen_cahn", 0.005),
     ("paper_burgers", "burgers", 0.001)],
)
def test_paper_presets(preset, equation, dt):
    run = make_config(f"experiment={preset}")
    o = run.method.options
    assert (run.equation.name, run.method.name, run.dt, run.t_final) == (equation, "teng_heun", dt, 4.0)
    assert (o.grid, o.subsample_first, o.subsample, o.iters, o.iters_later) == (512, 1536, 1024, 7, 5)


@pytest.mark.parametrize(
    "preset, equation, dt",
    [("cpu_heat2d", "heat", 0.005), ("cpu_allen_cahn", "allen_cahn", 0.005),
     ("cpu_burgers", "burgers", 0.001)],
)
def test_cpu_horizon_presets(preset, equation, dt):
    """The paper's horizons at CPU size: the paper's Δt and T, the CPU grid, draws, the
    extrapolated start and the equation's θ₀ fit of the defaults."""
    run = make_config(f"experiment={preset}")
    o = run.method.options
    assert (run.equation.name, run.method.name, run.dt, run.t_final) == (equation, "teng_heun", dt, 4.0)
    assert (o.grid, o.subsample_first, o.subsample, o.iters, o.iters_later) == (64, 512, 384, 7, 5)
    assert (o.warm_start, o.warm_rate) == ("extrapolate", 0.9)
    assert o.fit == make_config(f"equation={equation}").method.options.fit


def test_the_paper_size_starts_and_fits_as_the_paper():
    """``size: paper`` (the paper's presets, Table 1 at its size) starts every fit from the
    one before it and fits θ₀ with the paper's stage-1 tolerance 1e-7 and the longer
    stage 2, where the CPU defaults extrapolate the start and stop stage 1 at 1e-5;
    ``warm_start=…`` on the command line reaches TENG and is refused for a PINN."""
    cpu, paper = make_config().method.options, make_config("experiment=paper_heat2d").method.options
    assert (cpu.warm_start, paper.warm_start) == ("extrapolate", "previous")
    assert (cpu.fit.stage1_tol, cpu.fit.stage2_max_iters, cpu.fit.stage2_polish_iters) == (1e-5, 100, 25)
    assert ((paper.fit.stage1_tol, paper.fit.stage2_max_iters, paper.fit.stage2_polish_iters)
            == (1e-7, 2000, 100))
    assert (paper.fit.polish_patience, paper.fit.damping) == (3, paper.damping)
    assert make_config("warm_start=previous").method.options.warm_start == "previous"
    for equation in ("allen_cahn", "burgers", "heat_disk"):  # where the shorter fit is worse (cpu.fit)
        fit = make_config(f"equation={equation}").method.options.fit
        assert dataclasses.replace(fit, stage2_tol=paper.fit.stage2_tol) == paper.fit


def test_an_equation_sets_its_own_theta0_fit_at_cpu_size():
    """``equation.cpu.fit`` replaces the fit's defaults key by key (3-D heat: θ₀ on 24³,
    a finer grid than its 16³ steps); the command line overrides it, and the paper's
    3-D preset, which drops the CPU block, fits θ₀ on its own grid with the defaults."""
    default = make_config().method.options.fit
    assert (default.grid, default.stage2_tol, default.damping) == (None, 5e-14, 1e-8)
    fit = make_config("equation=heat3d").method.options.fit
    assert ((fit.grid, fit.stage1_tol, fit.stage1_patience, fit.stage2_tol, fit.damping)
            == (24, 1e-4, 6, 1e-7, 1e-8))
    assert fit.stage1_subsample == default.stage1_subsample  # keys it does not set keep the defaults
    assert make_config("equation=heat3d", "fit.grid=32").method.options.fit.grid == 32
    assert fit.stage2_max_iters == 2000
    paper = make_config("experiment=paper_heat3d").method.options
    assert (paper.grid, paper.fit) == (64, make_config("experiment=paper_heat2d").method.options.fit)


@pytest.mark.parametrize("method, integrator",
                         [("teng_euler", "euler"), ("teng_heun", "heun"), ("teng_rk4", "rk4")])
def test_method_group(method, integrator):
    run = make_config(f"method={method}")
    assert (run.method.name, run.method.options.integrator) == (method, integrator)


def _groups(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))


#: The implicit TENG methods share one class and one check: two of them stand for all.
_IMPLICIT_LEFT_OUT = ("teng_beuler", "teng_cn", "teng_sdirk3", "teng_sdirk4", "teng_imex_euler")


@pytest.mark.parametrize("equation", _groups("equation"))
@pytest.mark.parametrize("method", [m for m in _groups("method") if m not in _IMPLICIT_LEFT_OUT])
def test_every_equation_and_method_composes(equation, method):
    """Every pair composes; it validates, or is refused in one line by the method's own
    check, for the reason the equation declares: the baselines need a periodic domain
    (``periods``), PINN-ENGD a linear equation (``linear``), the implicit TENG steps a
    periodic grid or a box's nodes (not moving points), the IMEX ones a stiff part (a system in the
    operator form declares its own), every method but TENG's a scalar equation; explicit TENG runs
    every equation."""
    eq = make_equation(equation)
    baseline = method in ("tdvp_rk4", "obti_adam", "obti_lbfgs", "pinn_bfgs", "pinn_engd")
    implicit = (CONF / "method" / f"{method}.yaml").read_text().count("_teng_implicit") > 0
    if eq.components and baseline:
        with pytest.raises(ConfigError, match=f"^invalid config: method='{method}': runs scalar equations, "
                                              f"and {equation} is a system"):
            make_config(f"equation={equation}", f"method={method}")
        return
    if eq.components and method == "teng_ars222" and not eq.has_stiff:
        reason = f"method {method} is IMEX and it declares no stiff(u, t) part"
    elif baseline and eq.periods is None:
        reason = f"method {method} needs a periodic domain"
    elif implicit and eq.periods is None and not isinstance(eq.domain, BoxDomain):
        reason = f"method {method} solves its stages on a periodic grid"
    elif (implicit and isinstance(eq.domain, BoxDomain) and not eq.linear
          and method not in ("teng_imex_euler", "teng_ars222")):
        reason = f"method {method} solves its stages on a box for F = L linear with constant coefficients"
    elif implicit and eq.domain.fresh:
        reason = f"method {method} solves its stages on a grid, and it draws moving points"
    elif method == "pinn_engd" and not eq.linear:
        reason = f"method {method} runs only linear equations"
    else:
        run = make_config(f"equation={equation}", f"method={method}")
        assert (run.equation.name, run.method.name) == (equation, method)
        return
    with pytest.raises(ConfigError) as err:
        make_config(f"equation={equation}", f"method={method}")
    message = str(err.value)
    assert message.startswith(f"invalid config: equation='{equation}': ") and "\n" not in message, message
    assert reason in message, message


@pytest.mark.parametrize("preset", _groups("experiment"))
def test_every_preset_composes(preset):
    """Every preset composes and validates (a Table-1 preset: each of its cases)."""
    cases = _groups("table1_case") if preset.startswith("table1") else [None]
    for case in cases:
        run = make_config(f"experiment={preset}", *([f"table1_case={case}"] if case else []))
        assert run.t_final in (0.05, 0.2, 1.0, 4.0, 8.0)  # 0.2: experiment=frontier; 1.0: wave_t1


@pytest.fixture(scope="module")
def preflight():
    """``pipeline/sweep.py``'s own check of a command line (every job of it)."""
    return lambda argv: checks.preflight(argv, CONF)


# Command lines (``{tmp}``: a fresh folder, ``{file}``: a regular file in it,
# ``{port}``: a closed port) and what the one-line error must name.
MALFORMED = [
    (["foo=1"], "'foo'"),  # Hydra's own error, many lines long
    (["+foo=1"], "foo=1: unknown key"),
    (["method.foo=1"], "'method.foo'"),
    (["+network.foo=1"], "network.foo=1: unknown key"),
    (["equation=tsunami"], "equation='tsunami'"),
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
    (["fit.grid=4"], "fit.grid=4"),
    (["fit.stage1_patience=0"], "fit.stage1_patience=0"),
    (["method.integrator=rk5"], "method.integrator='rk5'"),
    (["method.warm_start=linear"], "method.warm_start='linear'"),
    (["method.warm_rate=1.5"], "method.warm_rate=1.5"),
    (["+experiment=paper_heat2d"], "+experiment=paper_heat2d: experiment is in the defaults list"),
    (["stopping.min_iters=6"], "stopping.min_iters=6"),  # above iters_later = 5, a cross-key check
    (["fit.solver=lu"], "fit.solver='lu'"),
    (["method=pinn_bfgs", "iters=5"], "iters='5': method pinn_bfgs does not use it"),
    (["method=pinn_bfgs", "grid=32"], "grid='32': method pinn_bfgs does not use it"),
    (["method=tdvp_rk4", "subsample=64"], "subsample='64': method tdvp_rk4 does not use it"),
    (["method=tdvp_rk4", "warm_start=previous"], "warm_start='previous': method tdvp_rk4 does not use it"),
    (["warm_start=linear"], "warm_start='linear'"),
    (["method=tdvp_rk4", "method.subsample=9000"], "method.subsample=9000: must be an integer in [1, 8361]"),
    (["-m", "method=teng_heun,obti_adam", "stopping.policy=adaptive"], "stopping.policy='adaptive'"),
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


#: The XLA compilations jax reports (as tests/test_speed.py counts them).
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
#: The most programs a refused command line may compile: its checks run the equation's
#: functions on a few points (:meth:`teng_eq.equations.Equation.check_functions`), small
#: programs. Measured (2026-12-01, each line of MALFORMED in a fresh process, the persistent
#: cache off): at most 34 (``-m dt=0.02,-1``: 30 for the first job, 4 for each further one;
#: 0 where Hydra's composition refuses it). Building the default method on a 16² grid (θ₀'s
#: fit, before any step) compiles 177 in a fresh process but 7 in one that built it before
#: (jax's in-memory cache): so the fixture below counts θ₀'s fit on its own too.
CHECK_COMPILES = 40


@pytest.fixture
def work(monkeypatch):
    """The expensive work done while the test runs: ``theta0``, the calls of θ₀'s fit (or
    load; every method's θ₀ goes through :func:`teng_eq.methods.base.cached_initial_parameters`)
    and ``compiles``, the programs XLA compiles; jax's persistent cache is off meanwhile (a
    program it loads is not compiled)."""
    work = {"theta0": 0, "compiles": 0}
    fit = methods_base.cached_initial_parameters

    def counted_fit(*args, **kwargs):
        work["theta0"] += 1
        return fit(*args, **kwargs)

    def listener(event, duration, **kwargs):
        if event == BACKEND_COMPILE:
            work["compiles"] += 1

    monkeypatch.setattr(methods_base, "cached_initial_parameters", counted_fit)
    persistent = jax.config.jax_enable_compilation_cache
    jax.monitoring.register_event_duration_secs_listener(listener)
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        yield work
    finally:
        jax.config.update("jax_enable_compilation_cache", persistent)
        jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize("argv, needle", MALFORMED, ids=[" ".join(a) for a, _ in MALFORMED])
def test_malformed_config_is_one_line_naming_the_key(preflight, work, tmp_path, argv, needle):
    (tmp_path / "file").write_text("")
    store = tmp_path / "mlflow.db"
    fill = {"tmp": tmp_path, "file": tmp_path / "file", "port": free_port()}
    argv = [a.format(**fill) for a in argv]
    flags = [a for a in argv if a == "-m"]  # options first, as Hydra's parser wants them
    defaults = [f"tracking_uri=sqlite:///{store}", f"cache_dir={tmp_path / 'cache'}"]
    with pytest.raises(ConfigError) as err:
        preflight([*flags, *defaults, *(a for a in argv if a != "-m")])
    # Refused before any expensive work: no θ₀ fit, no more than the checks' small programs.
    assert work["theta0"] == 0 and work["compiles"] <= CHECK_COMPILES, work
    message = str(err.value)
    assert message.startswith("invalid config: ") and needle in message and "\n" not in message
    # Before any compute and before any MLflow run: neither the cache nor the store exists.
    assert not store.exists() and not (tmp_path / "cache").exists()


def test_good_command_lines_pass(preflight, tmp_path):
    uri, cache = f"tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}", f"cache_dir={tmp_path / 'cache'}"
    assert preflight([uri, cache]) == 1
    assert preflight(["-m", uri, cache, "dt=0.02,0.04", "method=teng_euler,teng_rk4"]) == 4
    assert preflight(["-m", uri, cache, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "dt=0.02"]) == 1
    assert preflight(["-m", uri, cache, "experiment=table1_cpu"]) == 19  # the preset's own sweep
    # θ₀'s fit reads solver and damping, so every method that starts from θ₀ uses them.
    assert preflight([uri, cache, "method=obti_adam", "solver=qr", "grid=32", "fit.grid=48"]) == 1
    assert preflight(["--cfg", "job"]) == 0  # Hydra's own business


def test_known_group_choices_pass():
    check_group_choices(["-m", "equation=heat,burgers", "method=teng_rk4", "experiment=paper_heat2d",
                         "dt=0.1"], CONF)
