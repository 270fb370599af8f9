"""One TENG stage — the paper's Subroutine ``TENG_stepper`` — solved by repeated
projected least squares (:class:`StageSolver`).

Given θ and a target ``u_target`` on the quadrature grid, each iteration:

1. residual ``r = û_θ − u_target`` and loss ``L = ‖r‖²_{L²} ≈ Σₙ wₙ r(xₙ)²``;
2. ``Δu = −α ∂L/∂û = −r`` (α = 1/2: the full Gauss–Newton step);
3. ``J = ∂û_θ(xₙ)/∂θ_S`` for a random subset S of the parameters;
4. ``Δθ_S = argmin ‖W^{1/2}(J Δθ_S − Δu)‖₂`` (:meth:`StageSolver.project`; a
   uniform weight drops out, per-point weights scale each row by √wₙ);
5. ``θ_S ← θ_S + Δθ_S``.

How many iterations a stage runs is its *stopping policy*:

* ``"fixed"``: exactly the cap (the paper's 7 + 5), returning the last iterate;
* ``"adaptive"``: with ``L_k`` the loss after k iterations and ``B_k = min_{j≤k} L_j``,
  iteration k *improves* if ``L_k ≤ (1 − rtol)·B_{k−1}``. The stage stops after
  iteration k ≥ ``min_iters`` once ``B_k ≤ floor·‖u_target‖²`` (converged to the
  floor) or the last ``patience`` iterations did not improve; never beyond the
  cap. Iterations go on from the latest iterate, as in the paper (a step that
  raised the loss is often followed by a much better one), but the stage
  returns the best one (:class:`BestSoFar`).
* ``"local_error"``: the same, with the floor set by the time step's own expected
  local error ε (docs/guides/error-control.md): the stage stops once ``B_k ≤ (floor·ε)²``,
  i.e. once its residual is below the fraction ``floor`` of ε — a fit far more
  accurate than the step it belongs to buys nothing. ε is passed to :meth:`StageSolver.stage`
  (without it the floor is 0).

A whole stage is one traced function (``lax.while_loop`` over iterations), so it
runs without any host round trip; the Jacobian factors of each new iterate give
its loss for the stopping test and the next iteration's Jacobian, so the test
costs no extra pass over the network.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from teng_eq.config.options import at_least, one_of
from teng_eq.domains.quadrature import FluxRows, Quadrature, norm2
from teng_eq.errors import bad
from teng_eq.fit.lstsq import least_squares_rows, row_blocks
from teng_eq.fit.mesh import PointMesh
from teng_eq.fit.results import RESULTS, event_counts
from teng_eq.network.space import ParamSpace

#: Stopping policies of a stage (see the module docstring).
POLICIES = ("adaptive", "fixed", "local_error")


@dataclasses.dataclass(frozen=True)
class Stopping:
    """How many iterations a stage runs (module docstring): ``policy`` ``fixed``
    (the cap), ``adaptive`` or ``local_error``, with ``min_iters``, ``rtol``,
    ``patience`` and ``floor`` for the latter two (the ``stopping`` config group;
    under ``local_error`` ``floor`` is the fraction of the expected local error)."""

    policy: str
    min_iters: int
    rtol: float
    patience: int
    floor: float

    def validate(self, prefix: str = "stopping") -> None:
        one_of(f"{prefix}.policy", self.policy, POLICIES)
        at_least(prefix, self, 1, "min_iters", "patience")
        if not 0 < self.rtol < 1:
            raise bad(f"{prefix}.rtol", self.rtol, "must be in (0, 1)")
        if not 0 <= self.floor < 1:
            raise bad(f"{prefix}.floor", self.floor, "must be in [0, 1)")


#: The paper's policy: every stage runs its cap (the other fields are unused).
FIXED = Stopping(policy="fixed", min_iters=1, rtol=0.5, patience=1, floor=0.0)


def random_subset(key: PRNGKeyArray, n: int, k: int) -> Int[Array, " k"]:
    """``k`` distinct indices out of ``range(n)``, uniformly, in increasing order:
    those of the k largest of n uniform draws.

    The k-th largest draw is found by bisection on its value instead of a sort
    (``lax.top_k``: slower, docs/performance.md), the same set. Float64 uniforms
    are multiples of 2⁻⁵², so 60 halvings of [0, 1] leave at most one distinct
    draw between the bounds.
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


class BestSoFar(eqx.Module):
    """The iterate of lowest loss seen so far (the pattern of optimistix's
    ``BestSoFarLeastSquares``): iterations go on from the latest iterate, this
    keeps the one to return."""

    theta: Float[Array, " params"]
    loss: Float[Array, ""]

    def update(self, theta: Float[Array, " params"], loss: Float[Array, ""]) -> BestSoFar:
        better = loss < self.loss
        return BestSoFar(jnp.where(better, theta, self.theta), jnp.where(better, loss, self.loss))


class StageLog(eqx.Module):
    """Record of one stage.

    ``loss[k]`` is the loss after k iterations (``loss[0]`` that of the starting
    θ) and ``lsq[k]`` iteration k's least-squares residual ``‖J Δθ − Δu‖²``: the
    loss the linearised model predicts after it. Both keep the length of the cap
    and are NaN after the stage stopped. ``final_loss`` is the loss of the θ the
    stage returns; ``iterations`` how many it ran; ``events`` how many of its
    solves ran into each of :data:`~teng_eq.fit.results.EVENTS`.
    """

    loss: Float[Array, " iters+1"]
    lsq: Float[Array, " iters"]
    final_loss: Float[Array, ""]
    iterations: Int[Array, ""]
    events: dict[str, Int[Array, ""]]


class Factors(eqx.Module):
    """``û_θ`` on the grid and the factored Jacobian ``(Gᵀ, Hᵀ)`` of one θ
    (:meth:`~teng_eq.network.paper.TENGNet.jacobian_factors_t`); with flux rows
    (:class:`~teng_eq.domains.quadrature.FluxRows`) ``u`` holds αû + β∂ₙû on them and
    ``dGt``, ``dHt`` the factors' derivatives along the normals there."""

    u: Float[Array, " n"]
    Gt: Float[Array, "g n"]
    Ht: Float[Array, "h n"]
    dGt: Float[Array, "g k"] | None = None
    dHt: Float[Array, "h k"] | None = None


class StageSolver(eqx.Module):
    """Solves TENG stages for the network ``space`` on a ``quadrature``.

    **Arguments:** ``space``; the ``quadrature`` (its points and weights: one
    number, or one per point); ``solver`` and relative ``damping`` of the least
    squares (:mod:`teng_eq.fit.lstsq`); the ``stopping`` policy (:class:`Stopping`);
    ``flux``: whether the quadrature's flux rows are fitted as such (a step's fits; θ₀ fits
    values on every row); ``mesh``: the local devices the points are split over
    (:mod:`teng_eq.fit.mesh`; None: one device).

    **Flux rows** (a Neumann or Robin side): on the last k rows the fitted value is
    ``α û + β ∂ₙû``, whose parameter derivative is, from ``∂û/∂θ_p = G[gcol_p] H[hcol_p]``,

        ∂(αû + β∂ₙû)/∂θ_p = α G H + β (∂ₙG · H + G · ∂ₙH)   (at gcol_p, hcol_p),

    with ``∂ₙG``, ``∂ₙH`` one forward-mode derivative of the factors along the normals: the
    same factored gather, two more products on k rows.
    """

    space: ParamSpace
    points: Float[Array, "n dim"]
    weight: float = eqx.field(static=True)
    # Per-point quadrature weights as √wₙ (then ``weight`` is 1); None: the uniform ``weight``.
    sqrt_weights: Float[Array, " n"] | None
    solver: str = eqx.field(static=True)
    damping: float = eqx.field(static=True)
    stopping: Stopping = eqx.field(static=True)
    gcol: Int[Array, " params"]
    hcol: Int[Array, " params"]
    flux: FluxRows | None
    mesh: PointMesh | None = eqx.field(static=True)

    def __init__(self, space: ParamSpace, quadrature: Quadrature, solver: str, damping: float,
                 stopping: Stopping = FIXED, *, flux: bool = False, mesh: PointMesh | None = None):
        self.space = space
        self.points = jnp.asarray(quadrature.points)
        weights = quadrature.weights
        if jnp.ndim(weights) == 0:
            self.weight, self.sqrt_weights = float(weights), None
        else:
            self.weight, self.sqrt_weights = 1.0, jnp.sqrt(jnp.asarray(weights))
        self.solver = solver
        self.damping = float(damping)
        self.stopping = stopping
        gcol, hcol = space.static_network().factor_columns()
        self.gcol, self.hcol = jnp.asarray(gcol), jnp.asarray(hcol)
        self.flux = quadrature.flux if flux else None
        self.mesh = mesh

    def on_mesh(self, x: Array, axis: int = 0) -> Array:
        """``x`` split over the mesh along its point ``axis`` (as it is on one device)."""
        return x if self.mesh is None else self.mesh.rows(x, axis)

    def placed(self, theta: Float[Array, " params"]) -> Float[Array, " params"]:
        """θ on every device of the mesh, as the fits return it (on one device: θ)."""
        return theta if self.mesh is None else self.mesh.replicated(theta)

    def values(self, theta: Float[Array, " params"]) -> Float[Array, " n"]:
        """What the fits fit: û on the nodes (αû + β∂ₙû on flux rows: one forward
        derivative there, no Jacobian factors)."""
        u = self.on_mesh(self.space.apply(theta, self.on_mesh(self.points)))
        if self.flux is None:
            return u
        k = self.flux.normals.shape[0]
        _, du = jax.jvp(lambda p: self.space.apply(theta, p), (self.points[-k:],), (self.flux.normals,))
        return u.at[-k:].set(self.flux.alpha * u[-k:] + self.flux.beta * du)

    def scaled(self, r: Float[Array, "*rows n"]) -> Float[Array, "*rows n"]:
        """``r`` (or rows of ``Jᵀ``) times √wₙ where the weights are per point, so
        that ``self.weight · ‖scaled(r)‖₂²`` is the quadrature of ``r²``."""
        return r if self.sqrt_weights is None else r * self.sqrt_weights

    def norm2(self, r: Float[Array, " n"]) -> Float[Array, ""]:
        """``Σₙ wₙ rₙ²``: the quadrature of ``r²`` (:func:`~teng_eq.domains.quadrature.norm2`)."""
        return norm2(self.scaled(r), self.weight)

    def loss(self, theta, target) -> Float[Array, ""]:
        return self.norm2(self.values(theta) - target)

    def factors(self, theta: Float[Array, " params"], points=None) -> Factors:
        """:class:`Factors` of θ on ``points`` (default: the quadrature nodes, with their
        flux rows)."""
        net = self.space.network(theta)
        if self.mesh is not None:
            return self._sharded(self._factors(net, points))
        return self._factors(net, points)

    def _factors(self, net, points) -> Factors:
        if points is not None or self.flux is None:
            return Factors(*net.jacobian_factors_t(self.on_mesh(self.points if points is None else points)))
        u, Gt, Ht = net.jacobian_factors_t(self.on_mesh(self.points))
        k, (alpha, beta) = self.flux.normals.shape[0], (self.flux.alpha, self.flux.beta)
        _, (du, dGt, dHt) = jax.jvp(net.jacobian_factors_t, (self.points[-k:],), (self.flux.normals,))
        return Factors(u.at[-k:].set(alpha * u[-k:] + beta * du), Gt, Ht, dGt, dHt)

    def _sharded(self, f: Factors) -> Factors:
        """``f`` with its point axes split over the mesh (what XLA's partitioner propagates)."""
        return Factors(self.on_mesh(f.u), self.on_mesh(f.Gt, 1), self.on_mesh(f.Ht, 1), f.dGt, f.dHt)

    def rows(self, factors: Factors, subset: Int[Array, " k"]) -> tuple[Float[Array, "_ n"], ...]:
        """``Jᵀ`` of the parameters ``subset`` as the row blocks of
        :func:`~teng_eq.fit.lstsq.row_blocks`, each gathered straight from the factored
        Jacobian ``Jᵀ[j] = Gᵀ[gcol_{S_j}] ∘ Hᵀ[hcol_{S_j}]`` (no copy of Jᵀ is ever sliced)."""
        g, h = self.gcol[subset], self.hcol[subset]
        blocks = [(g[a:b], h[a:b]) for a, b in row_blocks(subset.shape[0])]
        if self.flux is None:
            return tuple(factors.Gt[gb] * factors.Ht[hb] for gb, hb in blocks)
        k, alpha, beta = self.flux.normals.shape[0], self.flux.alpha, self.flux.beta

        def block(gb, hb):
            G, H = factors.Gt[gb], factors.Ht[hb]
            values = G * H
            edge = alpha * values[:, -k:] + beta * (factors.dGt[gb] * H[:, -k:] + G[:, -k:] * factors.dHt[hb])
            return jnp.concatenate([values[:, :-k], edge], axis=1)

        return tuple(block(gb, hb) for gb, hb in blocks)

    def jacobian(
        self, theta: Float[Array, " params"], subset: Int[Array, " k"]
    ) -> tuple[Float[Array, " n"], Float[Array, "k n"]]:
        """``(û_θ, Jᵀ)`` on the grid, ``Jᵀ[j, n] = ∂û_θ(xₙ)/∂θ_{S_j}``: one row per
        drawn parameter."""
        f = self.factors(theta)
        return f.u, jnp.concatenate(self.rows(f, subset))

    def solve(
        self, rows: tuple[Float[Array, "_ n"], ...], rhs: Float[Array, " n"]
    ) -> tuple[Float[Array, " k"], RESULTS]:
        """``argmin ‖J x − rhs‖₂`` by the configured solver (:mod:`teng_eq.fit.lstsq`),
        ``Jᵀ`` as row blocks, unweighted; and what the solve ran into."""
        return least_squares_rows(rows, rhs, self.solver, self.damping, self.mesh)

    def project(
        self, rows: tuple[Float[Array, "_ n"], ...], rhs: Float[Array, " n"]
    ) -> tuple[Float[Array, " k"], Float[Array, ""], tuple[RESULTS, RESULTS]]:
        """The weighted least squares ``x = argmin ‖J x − rhs‖²_{L²}`` (``Jᵀ`` as row
        blocks; rows scaled by √wₙ), by the configured solver.

        **Returns** ``(x, ‖J x − rhs‖²_{L²}, results)``: ``results`` what the solve
        ran into, then what the update did; a non-finite solution is replaced by 0
        (``RESULTS.nonfinite_update``), so that it cannot poison θ.
        """
        rows, rhs = tuple(self.scaled(B) for B in rows), self.scaled(rhs)
        x, solved = self.solve(rows, rhs)
        finite = jnp.all(jnp.isfinite(x))
        x = jnp.where(finite, x, 0.0)
        updated = RESULTS.where(finite, RESULTS.successful, RESULTS.nonfinite_update)
        return x, norm2(residual(rows, x, rhs), self.weight), (solved, updated)

    def update(self, theta, u, rows, subset, target):
        """One Gauss–Newton update of ``θ_S`` from ``û_θ = u`` and ``Jᵀ = rows``:
        ``(θ_new, lsq, results)`` (:meth:`project` of ``Δu = target − u``)."""
        step, lsq, results = self.project(rows, target - u)
        return theta.at[subset].add(step), lsq, results

    def iteration(self, theta, target, key: PRNGKeyArray, n_sub: int):
        """One standalone iteration: ``(θ_new, loss before, lsq)``."""
        subset = random_subset(key, self.space.size, n_sub)
        f = self.factors(theta)
        theta_new, lsq, _ = self.update(theta, f.u, self.rows(f, subset), subset, target)
        return theta_new, self.norm2(target - f.u), lsq

    def stage(self, theta: Float[Array, " params"], target: Float[Array, " n"], key: PRNGKeyArray, iters: int,
            n_first: int, n_rest: int, expected=None) -> tuple[Float[Array, " params"], StageLog]:
        """TENG iterations towards ``target``, at most ``iters`` of them (exactly
        ``iters`` under the ``fixed`` policy); the first draws ``n_first``
        parameters, the others ``n_rest``; ``expected``: the step's expected local
        error ε (policy ``local_error``)."""
        keys = jax.random.split(key, iters)
        stop = self.stopping
        if stop.policy == "local_error":
            floor = (stop.floor * expected) ** 2 if expected is not None else jnp.zeros(())
        else:
            floor = stop.floor * self.norm2(target)
        adaptive = stop.policy != "fixed"

        def advance(carry, n_sub):
            i, theta, f, best, stall, loss, lsq, events = carry
            subset = random_subset(keys[i], self.space.size, n_sub)
            theta, q, results = self.update(theta, f.u, self.rows(f, subset), subset, target)
            # The new iterate's factors give its loss now and its Jacobian next.
            f = self.factors(theta)
            new = self.norm2(f.u - target)
            if adaptive:
                stall = jnp.where(new <= (1.0 - stop.rtol) * best.loss, 0, stall + 1)
                best = best.update(theta, new)
            events = jax.tree_util.tree_map(jnp.add, events, event_counts(*results))
            return i + 1, theta, f, best, stall, loss.at[i + 1].set(new), lsq.at[i].set(q), events

        def go(carry):
            i, best, stall = carry[0], carry[3], carry[4]
            more = i < iters
            if adaptive:
                converged = (best.loss <= floor) | (stall >= stop.patience)
                more = more & ((i < stop.min_iters) | ~converged)
            return more

        f = self.factors(theta)
        l0 = self.norm2(f.u - target)
        nan = jnp.full((), jnp.nan, theta.dtype)
        zero = jnp.zeros((), jnp.int32)
        events = event_counts()
        carry = (zero, theta, f, BestSoFar(theta, l0), zero, jnp.full(iters + 1, nan).at[0].set(l0),
                 jnp.full(iters, nan), events)
        carry = advance(carry, n_first)
        carry = jax.lax.while_loop(go, lambda c: advance(c, n_rest), carry)
        i, theta, _, best, _, loss, lsq, events = carry
        if adaptive:
            theta, final = best.theta, best.loss
        else:
            final = loss[iters]
        return theta, StageLog(loss=loss, lsq=lsq, final_loss=final, iterations=i, events=events)
