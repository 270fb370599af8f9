"""A user's own equation file: its mistakes are one line before θ₀, naming
``module:Class.method`` and the first line of the cause (every function of the class is
run as a run runs it, traced by ``jax.jit`` where the run traces it, on a few points before
any fit and before any MLflow run: :meth:`teng_eq.equations.Equation.check_functions`); an
initial condition may read the equation's fields (a KPZ equation, exact by Cole–Hopf)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.bands import EVERY_STEP, TRANSPORT
from helpers.configs import CHEAP_FIT
from helpers.processes import SWEEP, job_env

from teng_eq.api import run
from teng_eq.cache.files import content_description
from teng_eq.equations import build_equation
from teng_eq.errors import ConfigError

#: The user's file: a correct heat equation and one class per mistake, each a subclass
#: that gets one function wrong.
MODULE = textwrap.dedent('''\
    import equinox as eqx
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


    class KPZ(PeriodicBox):
        """∂ₜh = ν Δh + (λ/2)|∇h|²: h = (2ν/λ) log φ with φ a solution of the heat equation."""
        dim = 2
        lam: float = eqx.field(static=True)

        def cole_hopf(self, x):
            return 2 * self.nu / self.lam * jnp.log(1 + 0.5 * jnp.cos(x[0]) * jnp.cos(x[1]))

        initial_conditions = {"cole_hopf": cole_hopf}

        def nonlinear(self, u, grad_u):
            return 0.5 * self.lam * (grad_u[0] ** 2 + grad_u[1] ** 2)

        def solution(self, x, t):
            phi = 1 + 0.5 * np.exp(-2 * self.nu * t) * np.cos(x[0]) * np.cos(x[1])
            return 2 * self.nu / self.lam * np.log(phi)
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
def test_a_mistake_stops_the_command_before_any_compute_or_mlflow_run(user_folder, tmp_path):
    """Through pipeline/sweep.py with an empty cache: one line, exit status 1, no store, and
    refused before any expensive work: no θ₀ fit, no more compiled than the checks' small
    programs (jax's persistent cache pointed at ``tmp_path / "xla"`` with no threshold keeps
    every program the command compiles)."""
    store, programs = tmp_path / "store", tmp_path / "xla"
    store.mkdir()
    env = job_env(JAX_ENABLE_COMPILATION_CACHE="true", JAX_COMPILATION_CACHE_DIR=str(programs),
                  JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
                  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    proc = subprocess.run([sys.executable, str(SWEEP), "equation=heat", "equation.impl=my_pdes:NumpyOperator",
                           "equation.initial_condition=waves",
                           f"tracking_uri=sqlite:///{store}/mlflow.db", f"cache_dir={tmp_path / 'cache'}"],
                          check=False, cwd=user_folder, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("error: invalid config: equation.impl='my_pdes:NumpyOperator'"), lines[-3:]
    assert "my_pdes:NumpyOperator.operator" in lines[-1] and len(lines) == 1, lines
    assert not any(store.iterdir()) and not (tmp_path / "cache" / "theta0").exists()
    # The run's cache folder never made: no θ₀, no reference, nothing in the job's own
    # compilation cache (<cache>/xla, which the job turns on before it builds the method).
    assert not (tmp_path / "cache").exists()
    # Compiled: the checks' programs of the user's functions on 16 points (measured
    # 2026-12-01: 21, the largest 4.6 kB); building the method, θ₀'s fit, compiles 161.
    compiled = sorted(p.name for p in programs.iterdir()) if programs.exists() else []
    assert len(compiled) <= 40, compiled


def _kpz(lam: float):
    return build_equation({"impl": "my_pdes:KPZ", "name": "kpz", "nu": 0.1, "lam": lam,
                           "lengths": [6.283185307179586] * 2, "initial_condition": "cole_hopf"})


def test_an_initial_condition_reads_the_equations_fields(user_folder):
    """KPZ's h₀ = (2ν/λ) log(1 + ½ cos x₁ cos x₂), a method of the class: another λ is
    another u₀ (and with it another θ₀'s key), equal to the Cole–Hopf solution at t = 0."""
    points = np.asarray(_kpz(1.0).evaluation(8).points).T
    h1, h2 = _kpz(1.0).u0(points), _kpz(2.0).u0(points)
    np.testing.assert_allclose(np.asarray(h1), 2 * np.asarray(h2), rtol=1e-14, atol=0)
    np.testing.assert_allclose(np.asarray(h1), _kpz(1.0).solution(points, 0.0), rtol=0, atol=1e-15)
    assert content_description(_kpz(1.0)) != content_description(_kpz(2.0))


@pytest.mark.slow  # ~25–35 s (the default suite's 15 minutes)
def test_a_kpz_run_follows_its_cole_hopf_solution(user_folder, cache_dir):
    """Four steps of TENG-Heun from the u₀ that reads ν and λ, against the exact solution:
    the error stays at θ₀'s (a short fit on a 16² grid: 1.3e-3, growing 14 % over the four
    steps), a run that did not follow the solution would be off by the solution's change
    (≈ 1.6e-2 here); and the transport estimate within [0.8, 3] of the error at every step
    (four steps: none after the fifth; tests/helpers/bands.py, ``TRANSPORT``)."""
    result = run(_kpz(1.0), "grid=16", "eval_grid=32", "t_final=0.08", "dt=0.02", *CHEAP_FIT,
                 cache_dir=cache_dir)
    assert result.rel_l2[0] < 3e-3 and result.rel_l2[-1] < 1.3 * result.rel_l2[0], result.rel_l2
    TRANSPORT.check(result.est_rel_l2, result.rel_l2, first=EVERY_STEP, min_steps=4)
