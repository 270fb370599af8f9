"""The stage, held-out and network keys: one-line errors naming key and value."""

import inspect

import pytest
from helpers.configs import make_config

from teng_eq.errors import ConfigError
from teng_eq.fit.stage import FIXED, StageSolver


def test_the_stage_solver_takes_its_least_squares_from_the_config():
    """No solver or damping default of its own (conf/ is the one source); its
    stopping default is the paper's fixed policy."""
    params = inspect.signature(StageSolver.__init__).parameters
    assert params["solver"].default is inspect.Parameter.empty
    assert params["damping"].default is inspect.Parameter.empty
    assert params["stopping"].default is FIXED and FIXED.policy == "fixed"
    o = make_config().method.options
    assert (o.solver, o.stopping.policy) == ("cholesky", "fixed")


@pytest.mark.parametrize(
    "override, key",
    [
        ("stopping.policy=sometimes", "stopping.policy='sometimes'"),
        ("stopping.min_iters=0", "stopping.min_iters=0"),
        ("stopping.min_iters=6", "stopping.min_iters=6"),  # above iters_later = 5
        ("stopping.rtol=1.5", "stopping.rtol=1.5"),
        ("stopping.patience=0", "stopping.patience=0"),
        ("stopping.floor=-1", "stopping.floor=-1.0"),
        ("holdout.grid=48", "holdout.grid=48"),  # does not divide grid = 64
        ("holdout.warn=1", "holdout.warn=1.0"),
        ("holdout.fail=10", "holdout.warn=100.0"),  # warn above fail
        ("network.embedding_activation=relu", "network.embedding_activation='relu'"),
        ("network.init=zeros", "network.init='zeros'"),
    ],
)
def test_bad_values_name_key_and_value(override, key):
    with pytest.raises(ConfigError, match="^invalid config: " + key.replace("(", r"\(")) as err:
        make_config(override)
    assert "\n" not in str(err.value)
