"""A user's mistakes in their own equation file are one line before θ₀, naming
``module:Class.method`` and the first line of the cause: every function of the class is
run as a run runs it (traced by ``jax.jit`` where the run traces it) on a few points
before any fit and before any MLflow run (:meth:`teng_eq.equations.Equation.check_functions`)."""

import subprocess
import sys
import textwrap
import time

import pytest
from helpers.processes import SWEEP, job_env

from teng_eq.equations import build_equation
from teng_eq.errors import ConfigError

#: The user's file: a correct heat equation and one class per mistake, each a subclass
#: that gets one function wrong.
MODULE = textwrap.dedent('''\
    import jax
    import jax.numpy as jnp
    import numpy as np

    from teng_eq.equations.periodic import PeriodicBox


    def waves(x):
        xp = jnp if isinstance(x, jax.Array) else np
        return xp.sin(x[0]) * xp.sin(x[1])


    class Good(PeriodicBox):
        dim = 2
        initial_conditions = {"waves": waves}

        def operator(self, u, t):
            return 0.1 * (u.d(0, 0) + u.d(1, 1))

        def growth_rate(self, u, grad_u):
            return 0.0

        def solution(self, x, t):
            return np.exp(-0.2 * t) * np.sin(x[0]) * np.sin(x[1])


    class WrongAxis(Good):
        def operator(self, u, t):
            return 0.1 * (u.d(0, 0) + u.d(0, 2))  # a typo for u.d(1, 1)


    class NumpyOperator(Good):
        def operator(self, u, t):
            return 0.1 * u.lap + np.sin(u.value)


    class NumpyNonlinear(PeriodicBox):
        dim = 2
        initial_conditions = {"waves": waves}

        def nonlinear(self, u, grad_u):
            return np.sin(u)


    class WrongShape(Good):
        def solution(self, x, t):
            return np.exp(-0.2 * t) * np.sin(x)  # (2, n), not (n,)


    class NaNOperator(Good):
        def operator(self, u, t):
            return jnp.sqrt(-1.0 - u.value**2)


    class RaisingRate(Good):
        def growth_rate(self, u, grad_u):
            raise ValueError("no bound known")


    class NumpyU0(Good):
        initial_conditions = {"waves": lambda x: np.sin(x[0]) * np.sin(np.asarray(x[1]))}
    ''')

#: class → what its one line must say (besides ``my_pdes:<class>``).
MISTAKES = {
    "WrongAxis": ("WrongAxis.operator", "IndexError: u.d(0, 2): axis 2 is not one of a 2-D field's (0 to 1)"),
    "NumpyOperator": ("NumpyOperator.operator", "TracerArrayConversionError"),
    "NumpyNonlinear": ("NumpyNonlinear.nonlinear", "TracerArrayConversionError"),
    "WrongShape": ("WrongShape.solution", "returns shape (2, 16) on 16 points, expected (16,)"),
    "NaNOperator": ("NaNOperator.operator", "returns a non-finite value"),
    "RaisingRate": ("RaisingRate.growth_rate", "ValueError: no bound known"),
    "NumpyU0": ("NumpyU0.<lambda>", "TracerArrayConversionError"),
}


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mistakes")
    (folder / "my_pdes.py").write_text(MODULE)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        mp.setattr(sys, "path", [str(folder), *sys.path])
        yield folder
    sys.modules.pop("my_pdes", None)


def _group(cls: str) -> dict:
    return {"impl": f"my_pdes:{cls}", "name": "mine", "nu": 0.1, "lengths": [6.283185307179586] * 2,
            "initial_condition": "waves"}


def test_a_correct_equation_passes(user_folder):
    assert build_equation(_group("Good")).dim == 2


@pytest.mark.parametrize("cls", list(MISTAKES))
def test_each_mistake_is_one_line_naming_the_method(user_folder, cls):
    where, cause = MISTAKES[cls]
    with pytest.raises(ConfigError) as caught:
        build_equation(_group(cls))
    message = str(caught.value)
    assert "\n" not in message and f"my_pdes:{where}" in message and cause in message, message


@pytest.mark.e2e
def test_a_mistake_stops_the_command_in_seconds_before_any_mlflow_run(user_folder, tmp_path):
    """Through pipeline/sweep.py with an empty cache: one line, exit status 1, no store."""
    store = tmp_path / "store"
    store.mkdir()
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SWEEP), "equation=heat", "equation.impl=my_pdes:NumpyOperator",
                           "equation.initial_condition=waves",
                           f"tracking_uri=sqlite:///{store}/mlflow.db", f"cache_dir={tmp_path / 'cache'}"],
                          cwd=user_folder, env=job_env(), capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: invalid config: equation.impl='my_pdes:NumpyOperator'"), lines[-3:]
    assert "my_pdes:NumpyOperator.operator" in lines[-1] and len(lines) == 1, lines
    assert not any(store.iterdir()) and not (tmp_path / "cache" / "theta0").exists()
    assert seconds < 20, seconds
