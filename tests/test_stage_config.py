"""The stage, held-out and network keys of issue 8: one source of defaults, one-line errors."""

import pytest
from omegaconf import OmegaConf

from teng_eq.config import ConfigError, RunConfig
from teng_eq.stepper import DEFAULTS, Stepper


def _run_config(cfg):
    return RunConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True))


def test_conf_stepper_and_runconfig_share_the_defaults(compose_config):
    run = _run_config(compose_config())
    assert (run.solver, run.damping, run.stopping, run.min_iters, run.stop_rtol, run.stop_patience,
            run.stop_floor) == (DEFAULTS.solver, DEFAULTS.damping, DEFAULTS.policy, DEFAULTS.min_iters,
                                DEFAULTS.rtol, DEFAULTS.patience, DEFAULTS.floor)
    for key in ("solver", "damping", "stopping", "min_iters", "stop_rtol", "stop_patience", "stop_floor",
                "holdout_grid", "holdout_warn", "holdout_fail", "network", "fit"):
        assert getattr(run, key) == getattr(RunConfig(), key), key
    defaults = Stepper.__init__.__defaults__
    assert defaults == (DEFAULTS.solver, DEFAULTS.damping, DEFAULTS.policy, DEFAULTS.min_iters,
                        DEFAULTS.rtol, DEFAULTS.patience, DEFAULTS.floor)


@pytest.mark.parametrize(
    "override, key",
    [
        ("stopping=sometimes", "stopping='sometimes'"),
        ("min_iters=0", "min_iters=0"),
        ("min_iters=6", "min_iters=6"),  # above iters_later = 5
        ("stop_rtol=1.5", "stop_rtol=1.5"),
        ("stop_patience=0", "stop_patience=0"),
        ("stop_floor=-1", "stop_floor=-1"),
        ("holdout_grid=48", "holdout_grid=48"),  # does not divide grid = 64
        ("holdout_warn=1", "holdout_warn=1"),
        ("holdout_fail=10", "holdout_warn=100"),  # warn above fail
        ("network.embedding_activation=relu", "network.embedding_activation='relu'"),
        ("network.init=zeros", "network.init='zeros'"),
    ],
)
def test_bad_values_name_key_and_value(compose_config, override, key):
    with pytest.raises(ConfigError, match="^invalid config: " + key.replace("(", r"\(")) as err:
        _run_config(compose_config([override]))
    assert "\n" not in str(err.value)
