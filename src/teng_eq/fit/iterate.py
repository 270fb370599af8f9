"""Fits in jitted chunks of iterations (:func:`iterate_chunks`), stopping at a tolerance, an
iteration cap, or after ``patience`` chunks that did not halve the loss, each chunk
reported as a :class:`FitProgress`, and whether it ended stalled (its last ``patience`` chunks
did not halve the loss: more of them would not help); the two iterations θ₀'s fit uses: damped Gauss–Newton
with step rejection (:func:`levenberg_marquardt`) and plain TENG iterations keeping the best
iterate (:func:`refine`), each optionally on points moved every chunk (:func:`on_points`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from teng_eq.domains.quadrature import norm2
from teng_eq.fit.stage import BestSoFar, StageSolver, random_subset

#: Iterations per jitted chunk of a fit stage: the unit of its ``patience`` and of its log.
CHUNK = 25


@dataclasses.dataclass(frozen=True)
class FitProgress:
    """One chunk of a θ₀ fit stage, as reported to ``log``: the stage, iterations
    done of at most ``max_iters``, the loss and the ``target`` the stage is judged
    by (None: none); ``str()`` is the log line. A progress display may show it as
    a bar instead (:mod:`teng_eq.jobs.job`)."""

    stage: str
    iteration: int
    max_iters: int
    loss: float
    target: float | None = None
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.stage}: iter {self.iteration} loss {self.loss:.3e}{self.detail}"


def iterate_chunks(run_chunk: Callable, carry, loss_of: Callable[[object], float], *, tol: float,
                   max_iters: int, chunk: int, patience: int, log: Callable[[object], None] | None,
                   label: str, describe: Callable[[object], str] = lambda carry: "",
                   goal: float | None = None, give_up: Callable[[object], bool] | None = None):
    """Run ``carry = run_chunk(carry)`` (``chunk`` iterations, jitted) until
    ``loss_of(carry) < tol``, ``max_iters`` iterations, or ``patience`` chunks in a
    row that did not halve the best loss; each chunk reported to ``log`` as a
    :class:`FitProgress` (``goal``: the loss the stage is judged by, default ``tol``).
    With ``give_up``, stop after the first chunk where ``give_up(carry)``.

    Returns ``(carry, stalled)``: ``stalled`` when the last ``patience`` chunks did not
    halve the best loss (the stop by patience, or the cap reached on such a chunk); a stop
    at the cap while the loss still halves, or at ``tol``, is not stalled."""
    best, stale = loss_of(carry), 0
    for c in range(max(1, max_iters // chunk)):
        if loss_of(carry) < tol:
            break
        carry = run_chunk(carry)
        current = loss_of(carry)
        if log is not None:
            log(FitProgress(label, (c + 1) * chunk, max_iters, current, tol if goal is None else goal,
                            describe(carry)))
        if c == 0 and give_up is not None and give_up(carry):
            break
        stale = 0 if current < 0.5 * best else stale + 1
        best = min(best, current)
        if stale >= patience:
            break
    return carry, stale >= patience


def on_points(chunk_on: Callable, data, redraw: Callable[[], object] | None, restart: Callable) -> Callable:
    """:func:`iterate_chunks`' ``run_chunk`` for a stage whose chunk ``chunk_on(data)``
    runs on the fit's points ``data``: on ``data`` throughout (jitted once, the points
    closed over), or, with ``redraw``, on new points ``redraw()`` before each chunk, the
    carry first re-scored there by ``restart(carry, data)`` (:func:`~teng_eq.fit.theta0.fresh_points`)."""
    if redraw is None:
        return jax.jit(chunk_on(data))
    run = eqx.filter_jit(lambda data, carry: chunk_on(data)(restart(carry, data)))
    return lambda carry: run(redraw(), carry)


def levenberg_marquardt(residual: Callable, jacobian: Callable, theta: Float[Array, " params"], weight: float,
        *, key, subsample: int, tol: float, max_iters: int, patience: int, chunk: int = CHUNK,
        log: Callable[[object], None] | None = None, label: str = "fit", goal: float | None = None,
        data=None, redraw: Callable[[], object] | None = None):
    """Minimise ``w‖r(θ)‖²`` by damped Gauss–Newton on random parameter subsets S.

    Each iteration solves ``(J_SᵀJ_S + λ·tr(J_SᵀJ_S)/|S| · I) Δ = −J_Sᵀ r`` and keeps
    the step only if the loss drops (then λ ← λ/3, else λ ← 4λ): the natural
    gradient of the paper's fit, made robust far from the optimum. ``residual(θ, data)``
    and ``jacobian(θ, S, data)`` see the fit's points through ``data``; with ``redraw``,
    each chunk runs on new ones (:func:`on_points`). Returns ``(θ, loss, stalled)``
    (:func:`iterate_chunks`).
    """
    n_params = theta.shape[0]

    def loss(theta, data):
        return norm2(residual(theta, data), weight)

    def chunk_on(data):
        def iteration(_, carry):
            theta, current, lam, key = carry
            key, sub = jax.random.split(key)
            subset = random_subset(sub, n_params, subsample)
            r = residual(theta, data).reshape(-1)
            J = jacobian(theta, subset, data)
            gram = J.T @ J
            A = gram + lam * jnp.trace(gram) / subsample * jnp.eye(subsample, dtype=gram.dtype)
            step = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(A), -J.T @ r)
            trial = theta.at[subset].add(step)
            new = loss(trial, data)
            better = jnp.isfinite(new) & (new < current)
            theta = jnp.where(better, trial, theta)
            current = jnp.where(better, new, current)
            lam = jnp.clip(jnp.where(better, lam / 3, lam * 4), 1e-15, 1e6)
            return theta, current, lam, key

        return lambda carry: jax.lax.fori_loop(0, chunk, iteration, carry)

    def restart(carry, data):  # a step is kept if it lowers the loss on the chunk's own points
        theta, _, lam, key = carry
        return theta, loss(theta, data), lam, key

    carry, stalled = iterate_chunks(
        on_points(chunk_on, data, redraw, restart),
        (theta, loss(theta, data), jnp.asarray(1e-3), key), lambda carry: float(carry[1]), tol=tol,
        max_iters=max_iters, chunk=chunk, patience=patience, log=log, label=label,
        describe=lambda carry: f" lambda {float(carry[2]):.1e}", goal=goal,
    )
    return carry[0], float(carry[1]), stalled


def refine(solver: StageSolver, theta: Float[Array, " params"], target: Float[Array, " n"], *, key,
        subsample: int, tol: float, max_iters: int, patience: int, chunk: int = CHUNK,
        log: Callable[[object], None] | None = None, label: str = "fit", goal: float | None = None,
        give_up_if_stuck: bool = False, redraw: Callable[[], tuple] | None = None):
    """Plain TENG iterations (Gauss–Newton on subsets, the solver's damping) towards
    ``target``, keeping the best θ seen (:class:`~teng_eq.fit.stage.BestSoFar`).
    Returns ``(θ, loss, stalled)`` (:func:`iterate_chunks`); with ``give_up_if_stuck``,
    stops after the first chunk if no iterate of it was better than θ (then returns θ
    itself). With ``redraw``, each chunk runs on new points: ``redraw()`` gives ``(solver, target)`` there
    (:func:`~teng_eq.fit.theta0.moved_solver`), and the best θ so far is re-scored on them.

    Near the optimum these steps are not monotone: a step can raise the loss and
    still lead on to a much lower one, where a monotone (Levenberg–Marquardt)
    search stalls. So every iterate is taken and the best one is returned.
    """

    def chunk_on(data):
        solver, target = data

        def body(_, carry):
            theta, best, key = carry
            key, sub = jax.random.split(key)
            new_theta, before, _ = solver.iteration(theta, target, sub, subsample)
            # ``before`` is the loss of ``theta``, the iterate this step started from.
            return new_theta, best.update(theta, before), key

        return lambda carry: jax.lax.fori_loop(0, chunk, body, carry)

    def restart(carry, data):
        theta, best, key = carry
        return theta, BestSoFar(best.theta, data[0].loss(best.theta, data[1])), key

    carry, stalled = iterate_chunks(
        on_points(chunk_on, (solver, target), redraw, restart),
        (theta, BestSoFar(theta, jnp.asarray(jnp.inf)), key), lambda carry: float(carry[1].loss),
        tol=tol, max_iters=max_iters, chunk=chunk, patience=patience, log=log, label=label, goal=goal,
        give_up=(lambda carry: bool(jnp.all(carry[1].theta == theta))) if give_up_if_stuck else None,
    )
    return carry[1].theta, float(carry[1].loss), stalled
