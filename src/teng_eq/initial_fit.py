"""θ₀: fit the network to the initial condition (paper, Appendix "Optimization").

Stage 1 minimises the value + gradient loss
``‖û − u₀‖² + Σ_d ‖∂_d û − ∂_d u₀‖²`` until it is below ``stage1_tol`` (paper:
1e-7); stage 2 switches to the value loss ``‖û − u₀‖²`` and goes on until it
stops improving; it has converged if it ended below ``stage2_tol·‖u₀‖²``
(paper: ~1e-14 in absolute terms, θ₀'s relative error ~1e-7). Both use the paper's natural gradient
(Gauss–Newton on random parameter subsets):

* stage 1 with Levenberg–Marquardt damping and step rejection, so that it
  cannot diverge from a random start;
* stage 2 first with plain TENG iterations (:func:`refine`), which take the
  loss down by orders of magnitude fast but end up oscillating around a
  plateau (a step that raises the loss is kept), then with
  Levenberg–Marquardt again (``stage2_polish_iters``), whose step rejection
  and adaptive damping go below that plateau (measured on the paper's
  condition, 64² grid: 7e-14 → 2.5e-14 in 25 iterations, where the plain
  iterations made no further progress in 200).

A fit that ends above ``stage2_tol`` is reported (a warning, and
``converged: False`` in its info) and is not cached, so that no later run
takes it for a good θ₀. Converged results are cached on disk
(:func:`cached_initial_parameters`) keyed by initial condition, architecture,
quadrature grid and seed, so every run and method of a sweep starts from the
same θ₀ and none refits it.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.cache import cache_dir, digest, load_arrays, store_arrays
from teng_eq.equations import Equation, operator
from teng_eq.grid import grid_points
from teng_eq.model import ParamSpace, TENGNet
from teng_eq.stepper import Stepper, random_subset


def _value_and_gradient(fn, x):
    u, g = jax.value_and_grad(fn)(x)
    return jnp.concatenate([u[None], g])


def levenberg_marquardt(
    residual: Callable[[Array], Array],
    jacobian: Callable[[Array, Array], Array],
    theta: Float[Array, " params"],
    weight: float,
    *,
    key,
    subsample: int,
    tol: float,
    max_iters: int,
    chunk: int = 25,
    patience: int = 4,
    log: Callable[[str], None] | None = None,
    label: str = "fit",
):
    """Minimise ``w‖r(θ)‖²`` by damped Gauss–Newton on random parameter subsets S.

    Each iteration solves ``(J_SᵀJ_S + λ·tr(J_SᵀJ_S)/|S| · I) Δ = −J_Sᵀ r`` and keeps
    the step only if the loss drops (then λ ← λ/3, else λ ← 4λ): the natural
    gradient of the paper's fit, made robust far from the optimum. Runs in
    jitted chunks of ``chunk`` iterations; stops at ``tol``, at ``max_iters``, or
    after ``patience`` chunks that did not halve the loss.
    """
    n_params = theta.shape[0]

    def loss(theta):
        r = residual(theta)
        return weight * jnp.sum(r * r)

    def iteration(_, carry):
        theta, current, lam, key = carry
        key, sub = jax.random.split(key)
        subset = random_subset(sub, n_params, subsample)
        r = residual(theta).reshape(-1)
        J = jacobian(theta, subset)
        gram = J.T @ J
        A = gram + lam * jnp.trace(gram) / subsample * jnp.eye(subsample, dtype=gram.dtype)
        step = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(A), -J.T @ r)
        trial = theta.at[subset].add(step)
        new = loss(trial)
        better = jnp.isfinite(new) & (new < current)
        theta = jnp.where(better, trial, theta)
        current = jnp.where(better, new, current)
        lam = jnp.clip(jnp.where(better, lam / 3, lam * 4), 1e-15, 1e6)
        return theta, current, lam, key

    run_chunk = jax.jit(lambda carry: jax.lax.fori_loop(0, chunk, iteration, carry))
    carry = (theta, loss(theta), jnp.asarray(1e-3), key)
    best, stale = float(carry[1]), 0
    for c in range(max(1, max_iters // chunk)):
        if float(carry[1]) < tol:
            break
        carry = run_chunk(carry)
        current = float(carry[1])
        if log is not None:
            log(f"{label}: iter {(c + 1) * chunk} loss {current:.3e} lambda {float(carry[2]):.1e}")
        stale = 0 if current < 0.5 * best else stale + 1
        best = min(best, current)
        if stale >= patience:
            break
    return carry[0], float(carry[1])


def refine(
    stepper: Stepper,
    theta: Float[Array, " params"],
    target: Float[Array, " n"],
    *,
    key,
    subsample: int,
    tol: float,
    max_iters: int,
    chunk: int = 25,
    patience: int = 4,
    log: Callable[[str], None] | None = None,
    label: str = "fit",
):
    """Plain TENG iterations (undamped Gauss–Newton on subsets) towards ``target``,
    keeping the best θ seen.

    Near the optimum these steps are not monotone: a step can raise the loss and
    still lead on to a much lower one, where a monotone (Levenberg–Marquardt)
    search stalls. So every iterate is taken and the best one is returned.
    """

    def body(_, carry):
        theta, best_theta, best, key = carry
        key, sub = jax.random.split(key)
        new_theta, before, _ = stepper.iteration(theta, target, sub, subsample)
        # ``before`` is the loss of ``theta``, the iterate this step started from.
        improved = before < best
        best_theta = jnp.where(improved, theta, best_theta)
        best = jnp.where(improved, before, best)
        return new_theta, best_theta, best, key

    run_chunk = jax.jit(lambda carry: jax.lax.fori_loop(0, chunk, body, carry))
    carry = (theta, theta, jnp.asarray(jnp.inf), key)
    best, stale = np.inf, 0
    for c in range(max(1, max_iters // chunk)):
        carry = run_chunk(carry)
        current = float(carry[2])
        if log is not None:
            log(f"{label}: iter {(c + 1) * chunk} best loss {current:.3e}")
        stale = 0 if current < 0.5 * best else stale + 1
        best = min(best, current)
        if current < tol or stale >= patience:
            break
    return carry[1], float(carry[2])


def _value_gradient_rows(stepper: Stepper):
    """``(θ, S) ↦ ∂(û, ∂₁û, …)/∂θ_S`` on the stepper's grid: the stepper's factored
    Jacobian and its x-derivatives (one JVP of the factors per direction)."""
    space, points = stepper.space, stepper.points

    def rows(theta, subset):
        net = space.network(theta)
        g, h = stepper.gcol[subset], stepper.hcol[subset]
        _, G, H = net.jacobian_factors(points)
        out = [G[:, g] * H[:, h]]
        for d in range(points.shape[1]):
            tangent = jnp.zeros_like(points).at[:, d].set(1.0)
            _, (_, dG, dH) = jax.jvp(net.jacobian_factors, (points,), (tangent,))
            out.append(dG[:, g] * H[:, h] + G[:, g] * dH[:, h])
        return jnp.stack(out, axis=1).reshape(-1, subset.shape[0])

    return rows


def odd_under_half_shift(equation: Equation, grid: int, tol: float = 1e-12) -> bool:
    """Whether the solution stays odd under ``x → x + L/2`` (all dimensions at once),
    as far as the grid can tell: ``u₀`` and ``L[u₀]`` both change sign under the
    shift (to ``tol`` relative), and the ``grid``-point grid maps onto itself (grid even,
    a periodic domain).

    Where it holds, the network can start odd (``init="odd"``,
    :mod:`teng_eq.model`) and every fit keeps it odd: see
    :func:`resolve_init`.
    """
    periods = equation.periods
    if grid % 2 or periods is None:
        return False
    points = grid_points(grid, periods)
    shifted = points + 0.5 * jnp.asarray(periods)
    f = jax.vmap(equation.u0)
    for a, b in ((f(points), f(shifted)),
                 (operator(equation, f, points), operator(equation, f, shifted))):
        if not float(jnp.max(jnp.abs(a + b))) <= tol * float(jnp.max(jnp.abs(a))):
            return False
    return True


def resolve_init(init: str, equation: Equation, grid: int) -> str:
    """The network initialisation to use for ``init``: ``"auto"`` is ``"odd"`` where
    the solution is odd under the half-period shift (:func:`odd_under_half_shift`;
    the paper's initial condition under heat and Allen–Cahn) and ``"paper"``
    elsewhere (Burgers, whose ``u·∇u`` is even, or a condition without the
    symmetry). Measured on the paper's heat problem (64², 512/384, 7+5): θ₀
    relative error 4.2e-8 against 1.3e-7, error at t = 0.06 1.2e-7 against
    3.3e-7; on Burgers an odd start diverges in its first step. Any other value
    is returned as given."""
    if init != "auto":
        return init
    return "odd" if odd_under_half_shift(equation, grid) else "paper"


#: Bump when the fitting procedure changes, so stale θ₀ files are not reused.
FIT_VERSION = 4


def fit_key(description: dict) -> str:
    """Cache name of the θ₀ that ``description`` determines."""
    return digest({**description, "version": FIT_VERSION})[:16]


def initial_parameters(
    net: TENGNet,
    u0: Callable[[Array], Array],
    points: Float[Array, "n dim"],
    weight: float,
    *,
    key,
    fit,
    solver: str,
    damping: float,
    log: Callable[[str], None] | None = None,
) -> tuple[Float[Array, " params"], dict]:
    """Two-stage fit of ``net`` to ``u0`` on ``points`` (no cache); stage 2's
    least squares are those of the time steps (``solver``, ``damping``).

    **Returns** ``(θ₀, info)``; ``info`` holds each stage's final loss and time,
    the relative loss ``loss / ‖u₀‖²`` and whether it reached ``fit.stage2_tol``
    (``converged``).
    """
    space = ParamSpace(net)
    stepper = Stepper(space, points, weight, solver, damping)
    k1, k2, k3 = jax.random.split(key, 3)
    target1 = jax.vmap(lambda x: _value_and_gradient(u0, x))(points)
    target2 = target1[:, 0]
    norm = float(stepper.norm2(target2))
    tol2 = fit.stage2_tol * norm
    sub2 = min(fit.stage2_subsample, space.size)

    # Per-point quadrature weights (a non-uniform rule): the stepper's √wₙ scale each
    # point's rows (its `weight` is then 1).
    sw = stepper.sqrt_weights
    sqrt_w = None if sw is None else jnp.repeat(sw, target1.shape[1])
    rows = _value_gradient_rows(stepper)

    def residual1(theta):
        net = space.network(theta)
        r = jax.vmap(lambda x: _value_and_gradient(net, x))(points) - target1
        return r if sqrt_w is None else r.reshape(-1) * sqrt_w

    def jacobian1(theta, subset):
        return rows(theta, subset) if sqrt_w is None else rows(theta, subset) * sqrt_w[:, None]

    t0 = time.perf_counter()
    theta, loss1 = levenberg_marquardt(
        residual1, jacobian1, space.flatten(net), stepper.weight, key=k1,
        subsample=min(fit.stage1_subsample, space.size), tol=fit.stage1_tol,
        max_iters=fit.stage1_max_iters, log=log, label="θ₀ stage 1 (value+gradient)",
    )
    t1 = time.perf_counter()
    # Stage 2 goes on while it improves (tol 0): stage2_tol judges the result,
    # it does not stop the fit half-way to the loss it could reach.
    theta, loss2 = refine(
        stepper, theta, target2, key=k2, subsample=sub2, tol=0.0, max_iters=fit.stage2_max_iters,
        patience=fit.patience, log=log, label="θ₀ stage 2 (value)",
    )
    if fit.stage2_polish_iters > 0:
        sw2 = 1.0 if sw is None else sw
        theta, loss2 = levenberg_marquardt(
            lambda th: (stepper.values(th) - target2) * sw2,
            lambda th, subset: stepper.jacobian(th, subset)[1].T * jnp.reshape(sw2, (-1, 1)),
            theta, stepper.weight, key=k3, subsample=sub2, tol=0.0, max_iters=fit.stage2_polish_iters,
            patience=fit.patience, log=log, label="θ₀ stage 2 (value, Levenberg–Marquardt)",
        )
    info = dict(
        stage1_loss=loss1, stage2_loss=loss2, stage2_rel_loss=loss2 / norm, converged=bool(loss2 <= tol2),
        stage1_s=t1 - t0, stage2_s=time.perf_counter() - t1,
    )
    return theta, info


def cached_initial_parameters(
    net: TENGNet,
    u0: Callable[[Array], Array],
    points: Float[Array, "n dim"],
    weight: float,
    *,
    key,
    fit,
    solver: str,
    damping: float,
    description: dict,
    directory=None,
    log: Callable[[str], None] | None = None,
) -> tuple[Float[Array, " params"], dict]:
    """:func:`initial_parameters`, cached under ``directory`` by ``description``
    (initial condition, architecture, grid, seed, fit settings). Stored as a
    self-checking entry (:func:`teng_eq.cache.store_arrays`: θ and the fit's info
    as JSON, no pickle), refitted when missing, damaged or stale.

    A fit that did not reach its tolerance is returned with a warning and is
    *not* written to the cache.
    """
    path = cache_dir(directory) / "theta0" / f"{fit_key(description)}.npz"
    entry_key = {**description, "version": FIT_VERSION}
    cached = load_arrays(path, entry_key)
    if cached is not None:
        return jnp.asarray(cached["theta"]), {**json.loads(str(cached["info"])), "cached": True}
    theta, info = initial_parameters(net, u0, points, weight, key=key, fit=fit, solver=solver,
                                     damping=damping, log=log)
    if not info["converged"]:
        warnings.warn(
            f"θ₀ fit ended above its tolerance: relative loss {info['stage2_rel_loss']:.2e} > "
            f"fit.stage2_tol={fit.stage2_tol:g}; not cached", stacklevel=2,
        )
        return theta, {**info, "cached": False}
    store_arrays(path, {"theta": np.asarray(theta), "info": np.array(json.dumps(info))}, entry_key)
    return theta, {**info, "cached": False}
