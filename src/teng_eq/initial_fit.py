"""θ₀: fit the network to the initial condition (paper, Appendix "Optimization").

Stage 1 minimises the value + gradient loss
``‖û − u₀‖² + Σ_d ‖∂_d û − ∂_d u₀‖²`` until it is below ``stage1_tol`` (paper:
1e-7); stage 2 switches to the value loss ``‖û − u₀‖²`` and goes on until it stops
improving (paper: ~1e-14). Both use the paper's natural gradient (Gauss–Newton
on random parameter subsets): stage 1 with Levenberg–Marquardt damping and step
rejection, so that it cannot diverge from a random start; stage 2 with plain
TENG iterations, which keep converging where a monotone search stalls.

Results are cached on disk (:func:`cached_initial_fit`) keyed by initial
condition, architecture, quadrature grid and seed, so every run and method of a
sweep starts from the same θ₀ and none refits it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.cache import cache_dir, digest, load_arrays, store_arrays
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


#: Bump when the fitting procedure changes, so stale θ₀ files are not reused.
FIT_VERSION = 3


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
    log: Callable[[str], None] | None = None,
) -> tuple[Float[Array, " params"], dict]:
    """Two-stage fit of ``net`` to ``u0`` on ``points`` (no cache)."""
    space = ParamSpace(net)
    stepper = Stepper(space, points, weight, solver="cholesky", damping=1e-7)
    k1, k2 = jax.random.split(key)
    target1 = jax.vmap(lambda x: _value_and_gradient(u0, x))(points)
    target2 = target1[:, 0]

    # Per-point quadrature weights (a non-uniform rule): residual rows scaled by √wₙ.
    sqrt_w = None if jnp.ndim(weight) == 0 else jnp.repeat(jnp.sqrt(jnp.asarray(weight)), target1.shape[1])
    rows = _value_gradient_rows(stepper)

    def residual1(theta):
        net = space.network(theta)
        r = jax.vmap(lambda x: _value_and_gradient(net, x))(points) - target1
        return r if sqrt_w is None else r.reshape(-1) * sqrt_w

    def jacobian1(theta, subset):
        return rows(theta, subset) if sqrt_w is None else rows(theta, subset) * sqrt_w[:, None]

    t0 = time.perf_counter()
    theta, loss1 = levenberg_marquardt(
        residual1, jacobian1, space.flatten(net), weight if sqrt_w is None else 1.0, key=k1,
        subsample=min(fit.stage1_subsample, space.size), tol=fit.stage1_tol,
        max_iters=fit.stage1_max_iters, log=log, label="θ₀ stage 1 (value+gradient)",
    )
    t1 = time.perf_counter()
    theta, loss2 = refine(
        stepper, theta, target2, key=k2, subsample=min(fit.stage2_subsample, space.size),
        tol=fit.stage2_tol, max_iters=fit.stage2_max_iters, patience=fit.patience, log=log,
        label="θ₀ stage 2 (value)",
    )
    info = dict(stage1_loss=loss1, stage2_loss=loss2, stage1_s=t1 - t0, stage2_s=time.perf_counter() - t1)
    return theta, info


def cached_initial_parameters(
    net: TENGNet,
    u0: Callable[[Array], Array],
    points: Float[Array, "n dim"],
    weight: float,
    *,
    key,
    fit,
    description: dict,
    directory=None,
    log: Callable[[str], None] | None = None,
) -> tuple[Float[Array, " params"], dict]:
    """:func:`initial_parameters`, cached under ``directory`` by ``description``
    (initial condition, architecture, grid, seed, fit settings). Stored as a
    self-checking entry (:func:`teng_eq.cache.store_arrays`: θ and the fit's info
    as JSON, no pickle), refitted when missing, damaged or stale."""
    path = cache_dir(directory) / "theta0" / f"{fit_key(description)}.npz"
    entry_key = {**description, "version": FIT_VERSION}
    cached = load_arrays(path, entry_key)
    if cached is not None:
        return jnp.asarray(cached["theta"]), {**json.loads(str(cached["info"])), "cached": True}
    theta, info = initial_parameters(net, u0, points, weight, key=key, fit=fit, log=log)
    store_arrays(path, {"theta": np.asarray(theta), "info": np.array(json.dumps(info))}, entry_key)
    return theta, {**info, "cached": False}
