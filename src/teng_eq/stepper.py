"""One TENG stage (Subroutine ``TENG_stepper``): repeated projected least squares.

Given θ and a target ``u_target`` on the quadrature grid, each iteration:

1. residual ``r = û_θ − u_target`` and loss ``L = ‖r‖²_{L²} ≈ Σₙ wₙ r(xₙ)²``;
2. ``Δu = −α ∂L/∂û = −r`` (α = 1/2: the full Gauss–Newton step);
3. ``J = ∂û_θ(xₙ)/∂θ_S`` for a random subset S of the parameters;
4. ``Δθ_S = argmin ‖W^{1/2}(J Δθ_S − Δu)‖₂`` (:func:`teng_eq.lstsq.least_squares`; a
   uniform weight drops out, per-point weights scale each row by √wₙ);
5. ``θ_S ← θ_S + Δθ_S``.

A whole stage is one traced function (``lax.fori_loop`` over iterations), so it
runs without any host round trip.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from teng_eq.lstsq import DAMPING, least_squares_rows, row_blocks
from teng_eq.model import ParamSpace


def random_subset(key: PRNGKeyArray, n: int, k: int) -> Int[Array, " k"]:
    """``k`` distinct indices out of ``range(n)``, uniformly, in increasing order:
    those of the k largest of n uniform draws.

    The k-th largest draw is found by bisection on its value instead of a sort
    (``lax.top_k``): 1.0 ms against 2.3 ms for n = 8361, k = 384 on 2 cores, and
    the same set as ``top_k``. Float64 uniforms are multiples of 2⁻⁵², so 60
    halvings of [0, 1] leave at most one distinct draw between the bounds.
    """
    u = jax.random.uniform(key, (n,))

    def halve(_, bounds):
        # Invariant: #{u ≥ lo} ≥ k > #{u ≥ hi}.
        lo, hi = bounds
        mid = 0.5 * (lo + hi)
        enough = jnp.sum(u >= mid) >= k
        return jnp.where(enough, mid, lo), jnp.where(enough, hi, mid)

    lo, _ = jax.lax.fori_loop(0, 60, halve, (jnp.zeros((), u.dtype), jnp.ones((), u.dtype)))
    return jnp.nonzero(u >= lo, size=k)[0]


def residual(
    rows: tuple[Float[Array, "_ n"], ...], x: Float[Array, " k"], du: Float[Array, " n"]
) -> Float[Array, " n"]:
    """``J x − Δu`` with ``Jᵀ`` as row blocks."""
    out, start = -du, 0
    for B in rows:
        out = out + x[start : start + B.shape[0]] @ B
        start += B.shape[0]
    return out


class StageLog(eqx.Module):
    """Per-iteration record of one stage.

    ``loss[i]`` is the loss before iteration i and ``loss[-1]`` the loss after the
    last one; ``lsq[i]`` is iteration i's least-squares residual ``w‖J Δθ − Δu‖²``.
    """

    loss: Float[Array, " iters+1"]
    lsq: Float[Array, " iters"]


class Stepper(eqx.Module):
    """TENG iterations for the network ``space`` on the quadrature ``points``."""

    space: ParamSpace
    points: Float[Array, "n dim"]
    weight: float = eqx.field(static=True)
    # Per-point quadrature weights as √wₙ (then ``weight`` is 1); None: the uniform ``weight``.
    sqrt_weights: Float[Array, " n"] | None
    solver: str = eqx.field(static=True)
    damping: float = eqx.field(static=True)
    gcol: Int[Array, " params"]
    hcol: Int[Array, " params"]

    def __init__(
        self,
        space: ParamSpace,
        points,
        weight: float,
        solver: str = "qr",
        damping: float = DAMPING,
    ):
        self.space = space
        self.points = jnp.asarray(points)
        if jnp.ndim(weight) == 0:
            self.weight, self.sqrt_weights = float(weight), None
        else:
            self.weight, self.sqrt_weights = 1.0, jnp.sqrt(jnp.asarray(weight))
        self.solver = solver
        self.damping = float(damping)
        gcol, hcol = space.static_network().factor_columns()
        self.gcol, self.hcol = jnp.asarray(gcol), jnp.asarray(hcol)

    def values(self, theta: Float[Array, " params"]) -> Float[Array, " n"]:
        return self.space.apply(theta, self.points)

    def loss(self, theta, target) -> Float[Array, ""]:
        r = self.values(theta) - target
        if self.sqrt_weights is not None:
            r = r * self.sqrt_weights
        return self.weight * jnp.sum(r * r)

    def jacobian(
        self, theta: Float[Array, " params"], subset: Int[Array, " k"]
    ) -> tuple[Float[Array, " n"], Float[Array, "k n"]]:
        """``(û_θ, Jᵀ)`` on the grid, ``Jᵀ[j, n] = ∂û_θ(xₙ)/∂θ_{S_j}``: one row per
        drawn parameter."""
        u, rows = self.jacobian_rows(theta, subset)
        return u, jnp.concatenate(rows)

    def jacobian_rows(
        self, theta: Float[Array, " params"], subset: Int[Array, " k"]
    ) -> tuple[Float[Array, " n"], tuple[Float[Array, "_ n"], ...]]:
        """``(û_θ, Jᵀ)`` with ``Jᵀ`` as the row blocks of :func:`~teng_eq.lstsq.row_blocks`,
        each gathered straight from the network's factored Jacobian
        ``Jᵀ[j] = Gᵀ[gcol_{S_j}] ∘ Hᵀ[hcol_{S_j}]`` (no copy of Jᵀ is ever sliced)."""
        u, Gt, Ht = self.space.network(theta).jacobian_factors_t(self.points)
        g, h = self.gcol[subset], self.hcol[subset]
        rows = tuple(Gt[g[a:b]] * Ht[h[a:b]] for a, b in row_blocks(subset.shape[0]))
        return u, rows

    def solve(
        self, rows: tuple[Float[Array, "_ n"], ...], du: Float[Array, " n"]
    ) -> Float[Array, " k"]:
        """``argmin ‖J Δθ_S − Δu‖₂`` by the configured solver, ``Jᵀ`` as row blocks."""
        return least_squares_rows(rows, du, self.solver, self.damping)

    def iteration(self, theta, target, key: PRNGKeyArray, n_sub: int):
        subset = random_subset(key, self.space.size, n_sub)
        u, rows = self.jacobian_rows(theta, subset)
        du = target - u
        if self.sqrt_weights is not None:
            rows = tuple(B * self.sqrt_weights for B in rows)
            du = du * self.sqrt_weights
        step = self.solve(rows, du)
        # A failed solve must not poison θ: skip the update instead.
        step = jnp.where(jnp.all(jnp.isfinite(step)), step, 0.0)
        res = residual(rows, step, du)
        theta = theta.at[subset].add(step)
        return theta, self.weight * jnp.sum(du * du), self.weight * jnp.sum(res * res)

    def stage(
        self,
        theta: Float[Array, " params"],
        target: Float[Array, " n"],
        key: PRNGKeyArray,
        iters: int,
        n_first: int,
        n_rest: int,
    ) -> tuple[Float[Array, " params"], StageLog]:
        """``iters`` TENG iterations towards ``target``; the first draws ``n_first``
        parameters, the others ``n_rest``."""
        keys = jax.random.split(key, iters)
        loss = jnp.zeros(iters + 1)
        lsq = jnp.zeros(iters)
        theta, l0, q0 = self.iteration(theta, target, keys[0], n_first)
        loss, lsq = loss.at[0].set(l0), lsq.at[0].set(q0)

        def body(i, carry):
            theta, loss, lsq = carry
            theta, li, qi = self.iteration(theta, target, keys[i], n_rest)
            return theta, loss.at[i].set(li), lsq.at[i].set(qi)

        theta, loss, lsq = jax.lax.fori_loop(1, iters, body, (theta, loss, lsq))
        loss = loss.at[iters].set(self.loss(theta, target))
        return theta, StageLog(loss=loss, lsq=lsq)
