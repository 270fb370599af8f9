"""The fast TENG step agrees with the naive yardstick, and compiles once per run.

Speed itself is measured by ``pipeline/bench.py``, never by a timed test.
"""


import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers.configs import small

from benchmarks.steps import step_at
from benchmarks.timing import NaiveSolver, naive, solve_flops
from teng_eq.fit.stage import StageSolver
from teng_eq.methods.base import StepInputs
from teng_eq.run.simulation import build_method, run_simulation
from teng_eq.stepping.explicit import TENGStep
from teng_eq.stepping.tableau import HEUN

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


#: 50 steps of the small run.
STEPS = ["dt=0.004", "t_final=0.2"]


@pytest.fixture(scope="module")
def problem(cache_dir):
    """The run's TENG method (θ₀ fitted), its equation and its fit quadrature."""
    cfg = small(*STEPS)
    return build_method(cfg, cache_dir=cache_dir), cfg.equation, cfg.equation.quadrature(32)


def _solvers(problem):
    method, _, quadrature = problem
    fast = StageSolver(method.space, quadrature, "cholesky", 1e-7)
    return fast, NaiveSolver(fast)


def test_no_recompiles_after_the_first_step(cache_dir):
    compiles_at = {}
    count = [0]

    def listener(event, duration, **kw):
        if event == BACKEND_COMPILE:
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    # Off: a program from the session's persistent cache (conftest) is loaded, not compiled.
    jax.config.update("jax_enable_compilation_cache", False)
    try:
        result = run_simulation(small(*STEPS), cache_dir=cache_dir,
                                on_step=lambda rec: compiles_at.setdefault(rec.step, count[0]))
    finally:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.monitoring.unregister_event_duration_listener(listener)
    assert result.step_loss.shape == (50,)
    assert compiles_at[1] > 0  # the listener does see this run's compilations
    assert compiles_at[50] == compiles_at[2] == compiles_at[1], compiles_at
    assert count[0] == compiles_at[1]


def test_naive_jacobian_equals_factored(problem):
    p = problem[0]
    stepper, slow = _solvers(problem)
    subset = jnp.arange(0, p.space.size, 37)
    u, Jt = stepper.jacobian(p.theta0, subset)
    u_ref, Jt_ref = slow.jacobian(p.theta0, subset)
    assert Jt.shape == Jt_ref.shape == (subset.size, stepper.points.shape[0])
    np.testing.assert_allclose(u, u_ref, rtol=0, atol=1e-14)
    np.testing.assert_allclose(Jt, Jt_ref, rtol=0, atol=1e-13 * float(jnp.abs(Jt_ref).max()))


def test_naive_iteration_gives_the_same_update(problem):
    """With few parameters drawn, J has full column rank and both solves (damped
    Cholesky, truncated SVD) return its least-squares solution."""
    p = problem[0]
    stepper, naive_solver = _solvers(problem)
    points = stepper.points
    target = p.space.apply(p.theta0, points) + 1e-3 * jnp.sin(points[:, 0])
    key = jax.random.PRNGKey(3)
    fast = stepper.iteration(p.theta0, target, key, 24)
    slow = naive_solver.iteration(p.theta0, target, key, 24)
    d_fast, d_slow = fast[0] - p.theta0, slow[0] - p.theta0
    assert 0 < int(jnp.sum(d_fast != 0)) <= 24
    np.testing.assert_array_equal(d_fast != 0, d_slow != 0)  # the same subset
    np.testing.assert_allclose(d_fast, d_slow, rtol=0, atol=1e-6 * float(jnp.abs(d_slow).max()))
    assert float(fast[1]) == pytest.approx(float(slow[1]), rel=1e-12)  # loss before
    assert float(fast[2]) == pytest.approx(float(slow[2]), rel=1e-6)  # least-squares residual


def test_naive_step_is_the_same_step(problem):
    """A whole naive Heun step reaches the same loss level as the default one."""
    p, equation, _ = problem
    step = TENGStep(tableau=HEUN, solver=_solvers(problem)[0], equation=equation, dt=0.004, iters=3,
                    iters_later=2, subsample_first=64, subsample=48)
    key = jax.random.PRNGKey(0)
    _, fast = jax.jit(step.__call__)(p.theta0, key)
    _, slow = jax.jit(naive(step).__call__)(p.theta0, key)
    assert fast.losses.shape == slow.losses.shape == (2, 4)  # 3 + 2 iterations, padded
    np.testing.assert_array_equal(np.isnan(fast.losses), np.isnan(slow.losses))
    # Each stage's start: the first is θ₀'s (the same arithmetic); the second follows
    # three solves of the damped least squares by the two routes (Cholesky on the
    # factored Jacobian, SVD on autodiff's), whose round-off differs (its loss, a
    # residual ~1e-4 of |û|, measured: docs/claims.md).
    np.testing.assert_allclose(fast.losses[:, 0], slow.losses[:, 0], rtol=2e-5, atol=0)
    # Every later loss too: the routes' round-off, carried through five solves of 64 of
    # 8361 parameters each, moves them by about 2e-5 relative (docs/claims.md); 5e-4 is
    # 20× that, while another step (another subset, a stage skipped or repeated) moves
    # them by O(1).
    np.testing.assert_allclose(fast.losses, slow.losses, rtol=5e-4, atol=0, equal_nan=True)
    np.testing.assert_allclose(fast.metrics["step_loss"], slow.metrics["step_loss"], rtol=5e-4, atol=0)


def test_solve_flops():
    assert solve_flops("cholesky", 4096, 384) == 4096 * 384**2 + 384**3 / 3
    assert solve_flops("qr", 100, 10) == 2 * 10**2 * (100 + 10) - 2 * 10**3 / 3
    assert solve_flops("svd", 100, 10) == 4 * 100 * 100 + 22 * 1000
    with pytest.raises(ValueError):
        solve_flops("lu", 10, 10)


def test_bench_builds_the_runs_step_at_other_sizes(problem):
    """``pipeline/bench.py`` times the step a run takes: its ``step_at`` on the run's own
    grid and sizes is the run's TENG step (same θ after one step), and other grids build."""
    cfg, method = small(*STEPS), problem[0]
    o = cfg.method.options
    key = jax.random.PRNGKey(1)
    mine = step_at(method, cfg, o.grid, o.solver, o.subsample_first, o.subsample)
    np.testing.assert_array_equal(eqx.filter_jit(mine)(method.theta0, key)[0],
                                  eqx.filter_jit(method.step)(method.theta0, key, StepInputs())[0])
    other = step_at(method, cfg, 16, "qr", 64, 64)
    assert other.solver.points.shape == (256, 2) and other.holdout.points.shape == (256, 2)
