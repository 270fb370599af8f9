import pytest
from omegaconf import OmegaConf

from teng_eq.config import ConfigError, RunConfig, check_group_choices
from conftest import CONF


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


@pytest.mark.parametrize(
    "override, key",
    [
        ("dt=0", "dt=0"),
        ("dt=-0.01", "dt=-0.01"),
        ("subsample=9000", "subsample=9000"),
        ("subsample_first=8362", "subsample_first=8362"),
        ("grid=4", "grid=4"),
        ("t_final=0.001", "t_final=0.001"),
        ("solver=lu", "solver='lu'"),
        ("iters=0", "iters=0"),
    ],
)
def test_bad_values_name_the_key(compose_config, override, key):
    with pytest.raises(ConfigError) as err:
        _run_config(compose_config([override]))
    message = str(err.value)
    assert key in message and "\n" not in message


@pytest.mark.parametrize("override", ["equation=wave", "method=teng_rk45", "equation=heat,wave"])
def test_unknown_group_choice(override):
    with pytest.raises(ConfigError, match=override.split("=")[0]):
        check_group_choices([override], CONF)


def test_known_group_choices_pass():
    check_group_choices(["-m", "equation=heat,burgers", "method=teng_rk4", "+experiment=paper_heat2d", "dt=0.1"], CONF)
