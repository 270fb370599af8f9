"""The fast TENG step agrees with the naive yardstick, and compiles once per run.

Speed itself is measured by ``pipeline/bench.py``, never by a timed test.
"""

import importlib.util
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import make_config

from teng_eq.benchmark import NaiveStepper, naive, solve_flops
from teng_eq.integrators import INTEGRATORS, TENGStep
from teng_eq.methods import TENG
from teng_eq.simulation import prepare, run_simulation
from teng_eq.stepper import Stepper

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def small():
    return make_config("equation.initial_condition=sines2d", "grid=32", "eval_grid=64", "dt=0.004",
                       "t_final=0.2")


@pytest.fixture(scope="module")
def problem(cache_dir):
    return prepare(small(), cache_dir=cache_dir)


def test_no_recompiles_after_the_first_step(cache_dir):
    compiles_at = {}
    count = [0]

    def listener(event, duration, **kw):
        if event == BACKEND_COMPILE:
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        result = run_simulation(small(), cache_dir=cache_dir,
                                on_step=lambda rec: compiles_at.setdefault(rec.step, count[0]))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert result.step_loss.shape == (50,)
    assert compiles_at[1] > 0  # the listener does see this run's compilations
    assert compiles_at[50] == compiles_at[2] == compiles_at[1], compiles_at
    assert count[0] == compiles_at[1]


def test_naive_jacobian_equals_factored(problem):
    p = problem
    stepper = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7)
    slow = NaiveStepper(p.space, p.points, p.weight, "cholesky", 1e-7)
    subset = jnp.arange(0, p.space.size, 37)
    u, Jt = stepper.jacobian(p.theta0, subset)
    u_ref, Jt_ref = slow.jacobian(p.theta0, subset)
    assert Jt.shape == Jt_ref.shape == (subset.size, p.points.shape[0])
    np.testing.assert_allclose(u, u_ref, rtol=0, atol=1e-14)
    np.testing.assert_allclose(Jt, Jt_ref, rtol=0, atol=1e-13 * float(jnp.abs(Jt_ref).max()))


def test_naive_iteration_gives_the_same_update(problem):
    """With few parameters drawn, J has full column rank and both solves (damped
    Cholesky, truncated SVD) return its least-squares solution."""
    p = problem
    target = p.space.apply(p.theta0, p.points) + 1e-3 * jnp.sin(p.points[:, 0])
    key = jax.random.PRNGKey(3)
    fast = Stepper(p.space, p.points, p.weight, "cholesky", 1e-7).iteration(p.theta0, target, key, 24)
    slow = NaiveStepper(p.space, p.points, p.weight, "cholesky", 1e-7).iteration(p.theta0, target, key, 24)
    d_fast, d_slow = fast[0] - p.theta0, slow[0] - p.theta0
    assert 0 < int(jnp.sum(d_fast != 0)) <= 24
    np.testing.assert_array_equal(d_fast != 0, d_slow != 0)  # the same subset
    np.testing.assert_allclose(d_fast, d_slow, rtol=0, atol=1e-6 * float(jnp.abs(d_slow).max()))
    assert float(fast[1]) == pytest.approx(float(slow[1]), rel=1e-12)  # loss before
    assert float(fast[2]) == pytest.approx(float(slow[2]), rel=1e-6)  # least-squares residual


def test_naive_step_is_the_same_step(problem):
    """A whole naive Heun step reaches the same loss level as the default one."""
    p = problem
    step = TENGStep(INTEGRATORS["heun"], Stepper(p.space, p.points, p.weight, "cholesky", 1e-7),
                    p.equation, 0.004, 3, 2, 64, 48)
    key = jax.random.PRNGKey(0)
    _, logs_fast = jax.jit(step.__call__)(p.theta0, key)
    _, logs_slow = jax.jit(naive(step).__call__)(p.theta0, key)
    fast, slow = logs_fast.stages, logs_slow.stages
    assert [log.loss.shape for log in fast] == [log.loss.shape for log in slow] == [(4,), (3,)]
    for a, b in zip(fast, slow):
        assert float(a.loss[0]) == pytest.approx(float(b.loss[0]), rel=1e-6)
    # 64 of 8361 parameters per iteration: each iteration only partly closes the gap,
    # so the two stay within a small factor of each other.
    ratio = float(logs_fast.loss) / float(logs_slow.loss)
    assert 0.5 < ratio < 2, ratio


def test_solve_flops():
    assert solve_flops("cholesky", 4096, 384) == 4096 * 384**2 + 384**3 / 3
    assert solve_flops("qr", 100, 10) == 2 * 10**2 * (100 + 10) - 2 * 10**3 / 3
    assert solve_flops("svd", 100, 10) == 4 * 100 * 100 + 22 * 1000
    with pytest.raises(ValueError):
        solve_flops("lu", 10, 10)


def test_bench_builds_the_runs_step_at_other_sizes(problem):
    """``pipeline/bench.py`` times the step a run takes: its ``step_at`` on the run's own
    grid and sizes is the run's TENG step (same θ after one step), and other grids build."""
    path = Path(__file__).resolve().parents[1] / "pipeline" / "bench.py"
    spec = importlib.util.spec_from_file_location("bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = small()
    key = jax.random.PRNGKey(1)
    mine = bench.step_at(problem, cfg, cfg.grid, cfg.solver, cfg.subsample_first, cfg.subsample)
    run = TENG.build(cfg, problem).step_fn
    np.testing.assert_array_equal(eqx.filter_jit(mine)(problem.theta0, key)[0],
                                  eqx.filter_jit(run)(problem.theta0, key)[0])
    other = bench.step_at(problem, cfg, 16, "qr", 64, 64)
    assert other.stepper.points.shape == (256, 2) and other.holdout.shape == (256, 2)
