"""Timing of TENG iterations and steps, part by part, against a naive yardstick.

One TENG iteration is: subset draw and Jacobian ``Jᵀ`` (with ``û`` on the grid),
residual ``Δu = target − û``, the least-squares solve, the update. Its floor is
the solve, O(N·n²) flops for N grid points and n drawn parameters; the ratio
(iteration time / solve time) says how close to that floor the iteration is.

Flop counts of the solve are the textbook ones (Golub & Van Loan), whatever
the implementation executes, for an N × n matrix with N ≥ n:

* ``cholesky``: ``N n²`` (the symmetric gram AᵀA) ``+ n³/3`` (the factorisation);
* ``qr``: ``2 n² (N + n) − 2n³/3`` (Householder QR of the damped ``[A; √λ I]``);
* ``svd``: ``4 N n² + 22 n³`` (R-SVD with U₁, Σ, V).

Lower-order terms (Aᵀb, triangular solves) are left out.

:class:`NaiveSolver` is the same TENG iteration done the obvious way: the
per-sample gradient of û with respect to *all* parameters (``vmap(grad)``), a
column gather of the subset, and an SVD least squares (``jnp.linalg.lstsq``).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from teng_eq.domains.quadrature import Quadrature, norm2
from teng_eq.equations import network_operator
from teng_eq.estimate.defect import Defect
from teng_eq.estimate.running import CompiledEstimate
from teng_eq.fit.results import RESULTS
from teng_eq.fit.stage import Factors, StageSolver, random_subset, residual
from teng_eq.stepping.explicit import TENGStep


def solve_flops(solver: str, rows: int, cols: int) -> float:
    """Textbook flop count of the least-squares solve (see the module docstring)."""
    N, n = float(rows), float(cols)
    if solver == "cholesky":
        return N * n * n + n**3 / 3
    if solver == "qr":
        return 2 * n * n * (N + n) - 2 * n**3 / 3
    if solver == "svd":
        return 4 * N * n * n + 22 * n**3
    raise ValueError(f"unknown solver {solver!r}")


def median_seconds(fn: Callable, *args, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn(*args)`` over ``repeats`` calls, after ``warmup``
    calls (the first compiles); every call waits for its result."""
    for _ in range(warmup):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class NaiveSolver(StageSolver):
    """The yardstick: the stage solver of ``base`` with the Jacobian of every parameter
    by per-sample reverse mode, a column gather, and an SVD ``lstsq``.

    Its :class:`~teng_eq.fit.stage.Factors` hold that whole Jacobian (``Gt``, one
    row per parameter; ``Ht`` unused), so the stage loop is the default one.
    """

    def __init__(self, base: StageSolver):
        for field in dataclasses.fields(StageSolver):
            setattr(self, field.name, getattr(base, field.name))

    def factors(self, theta: Float[Array, " params"], points=None) -> Factors:
        points = self.points if points is None else points

        def value(th, x):
            return self.space.network(th)(x)

        full = jax.vmap(jax.grad(value), in_axes=(None, 0))(theta, points)  # (n, params)
        return Factors(self.space.apply(theta, points), full.T, jnp.ones((1, points.shape[0])))

    def rows(self, factors: Factors, subset: Int[Array, " k"]) -> tuple[Float[Array, "k n"]]:
        return (factors.Gt[subset],)

    def solve(
        self, rows: tuple[Float[Array, "k n"], ...], rhs: Float[Array, " n"]
    ) -> tuple[Float[Array, " k"], RESULTS]:
        return jnp.linalg.lstsq(jnp.concatenate(rows).T, rhs, rcond=self.damping)[0], RESULTS.successful


def naive(step: TENGStep) -> TENGStep:
    """``step`` with its stage solver replaced by a :class:`NaiveSolver` (same grid,
    solver settings and stopping policy)."""
    return dataclasses.replace(step, solver=NaiveSolver(step.solver))


@dataclasses.dataclass
class IterationTiming:
    """Median milliseconds of one iteration's parts, and of the whole (fused) one.

    ``operator`` is ``L[û]`` and the stage target on the grid (once per stage,
    not part of an iteration); ``jacobian`` the subset draw and ``(û, Jᵀ)``;
    ``solve`` the least squares on a given ``Jᵀ``; ``update`` the residual norms
    and the scatter into θ; ``iteration`` one :meth:`StageSolver.iteration` as a
    single compiled call (residual, Jacobian, solve, update).
    """

    grid_points: int
    subsample: int
    solver: str
    operator_ms: float
    jacobian_ms: float
    solve_ms: float
    update_ms: float
    iteration_ms: float
    flops: float
    finite: bool

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s of the solve (textbook flops / solve time)."""
        return self.flops / (self.solve_ms * 1e-3) / 1e9

    @property
    def ratio(self) -> float:
        """Iteration time / solve time: 1 is the floor."""
        return self.iteration_ms / self.solve_ms


def time_iterations(step: TENGStep, quadrature: Quadrature, theta: Float[Array, " params"], key: PRNGKeyArray,
        n_sub: int, solvers: tuple[str, ...], repeats: int = 5) -> list[IterationTiming]:
    """Time one iteration of ``step``'s stage solver (on ``quadrature``, its nodes)
    with each of ``solvers``, part by part, towards the Euler target ``û + Δt L[û]``
    of ``theta``. The parts that do not depend on the solver are timed once."""
    base = step.solver
    ms = 1e3

    def operator_and_target(th):
        return base.values(th) + step.dt * network_operator(step.equation, base.space, th, base.points)

    def jacobian(th, k):
        subset = random_subset(k, base.space.size, n_sub)
        f = base.factors(th)
        return subset, f.u, base.rows(f, subset)

    def update(th, subset, rows, du, x):
        x = jnp.where(jnp.all(jnp.isfinite(x)), x, 0.0)
        return th.at[subset].add(x), norm2(du, base.weight), norm2(residual(rows, x, du), base.weight)

    operator_fn, jacobian_fn, update_fn = jax.jit(operator_and_target), jax.jit(jacobian), jax.jit(update)
    target = operator_fn(theta)
    subset, u, rows = jacobian_fn(theta, key)
    du = target - u
    operator_ms = ms * median_seconds(operator_fn, theta, repeats=repeats)
    jacobian_ms = ms * median_seconds(jacobian_fn, theta, key, repeats=repeats)
    out = []
    for solver in solvers:
        stage = StageSolver(base.space, quadrature, solver, base.damping)
        solve_fn = jax.jit(lambda r, b, s=stage: s.solve(r, b)[0])
        iteration_fn = jax.jit(lambda th, tg, k, s=stage: s.iteration(th, tg, k, n_sub))
        x = solve_fn(rows, du)
        out.append(IterationTiming(
            grid_points=int(du.shape[0]),
            subsample=n_sub,
            solver=solver,
            operator_ms=operator_ms,
            jacobian_ms=jacobian_ms,
            solve_ms=ms * median_seconds(solve_fn, rows, du, repeats=repeats),
            update_ms=ms * median_seconds(update_fn, theta, subset, rows, du, x, repeats=repeats),
            iteration_ms=ms * median_seconds(iteration_fn, theta, target, key, repeats=repeats),
            flops=solve_flops(solver, int(du.shape[0]), n_sub),
            finite=bool(jnp.all(jnp.isfinite(x))),
        ))
    return out


def compiled_step(step: TENGStep, theta: Float[Array, " params"], key: PRNGKeyArray):
    """``step`` compiled once ahead of time, as :func:`~teng_eq.run.simulation.run_simulation` does."""
    return jax.jit(step.__call__).lower(theta, key).compile()


@dataclasses.dataclass
class StepComparison:
    """Whole-step wall times (seconds, one per repeat) of the default and naive steps."""

    default_s: list[float]
    naive_s: list[float]
    default_loss: float  # final loss of the step's last stage
    naive_loss: float
    max_theta_diff: float  # max |θ_default − θ_naive| after one step

    @property
    def ratio(self) -> float:
        return statistics.median(self.naive_s) / statistics.median(self.default_s)


def compare_with_naive(
    step: TENGStep, theta: Float[Array, " params"], key: PRNGKeyArray, rounds: int = 3, per_round: int = 2
) -> StepComparison:
    """Time ``step`` and :func:`naive` ``(step)`` in alternating rounds (so that a
    change of machine load hits both), ``per_round`` calls of each per round."""
    fast, slow = compiled_step(step, theta, key), compiled_step(naive(step), theta, key)
    theta_fast, record_fast = jax.block_until_ready(fast(theta, key))
    theta_slow, record_slow = jax.block_until_ready(slow(theta, key))
    times: dict[str, list[float]] = {"default": [], "naive": []}
    for _ in range(rounds):
        for name, fn in (("default", fast), ("naive", slow)):
            times[name] += [median_seconds(fn, theta, key, repeats=1, warmup=0) for _ in range(per_round)]
    return StepComparison(
        default_s=times["default"],
        naive_s=times["naive"],
        default_loss=float(record_fast.metrics["step_loss"]),
        naive_loss=float(record_slow.metrics["step_loss"]),
        max_theta_diff=float(jnp.max(jnp.abs(theta_fast - theta_slow))),
    )


def estimate_seconds(defect: Defect, kind: str, theta: Float[Array, " params"],
                     theta_next: Float[Array, " params"], dt: float, repeats: int = 5) -> float:
    """Median seconds the a-posteriori estimate of ``kind`` adds to one accepted step
    ``theta → theta_next``, as a run spends them: the fields of the step's end (its start's
    are the step before's), the local terms from both ends, and the estimate's update on
    the host (:class:`~teng_eq.estimate.running.CompiledEstimate`)."""
    compiled = CompiledEstimate(defect, kind, lambda s: s, theta)
    estimate, _ = compiled.start(theta)

    def once():
        vectors, scalars, ends = compiled.local(estimate.fields, theta, theta_next, dt, 0.0)
        return estimate.advance(dt, {**scalars, "local_error": 0.0, "holdout_loss": 0.0}, vectors["defect"],
                                ends).vector

    return median_seconds(once, repeats=repeats)
