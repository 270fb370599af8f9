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
  and adaptive damping go below that plateau (docs/guides/accuracy.md, "θ₀").

Both run in jitted chunks of iterations (:func:`~teng_eq.fit.iterate.iterate_chunks`), stopping at a
tolerance, an iteration cap, or after ``patience`` chunks that did not halve
the loss. On a sampled box whose points are ``fresh``, stage 2 runs each chunk on
the points moved afresh (:func:`fresh_points`), as the steps do.

A fit that ends above ``stage2_tol`` is reported (a warning naming the setting to
change, and ``converged=False`` in its :class:`FitReport`). It is cached all the same when
it ended within :data:`REACH_FACTOR` of its tolerance *and* stalled (its last stage stopped
by its patience: more iterations would not take it lower), as what this network reaches on
u₀ — else every rerun would pay for the same fit again; one that is farther off, or still
improving when its iterations ran out, is not cached, so that no later run takes it for a
good θ₀ (:func:`verdict`). Cached results are stored on disk
(:func:`cached_initial_parameters`) keyed by what the fit reads — u₀'s values and gradients
on the fit points, the domain, the network, the fit settings and grid, the seed — so every
run and method of a sweep starts from the same θ₀ and none refits it, nor does a run whose
equation differs only in a coefficient that leaves u₀ as it is.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import time
import warnings
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from teng_eq.cache.files import (
    array_digest,
    cache_dir,
    content_description,
    digest,
    load_arrays,
    store_or_warn,
)
from teng_eq.config.options import at_least, one_of
from teng_eq.domains.quadrature import Quadrature
from teng_eq.equations import Equation, operator
from teng_eq.errors import bad
from teng_eq.fit.iterate import levenberg_marquardt, refine
from teng_eq.fit.lstsq import SOLVERS
from teng_eq.fit.mesh import PointMesh
from teng_eq.fit.stage import Factors, StageSolver
from teng_eq.network.multistage import MultiStageNet, scaled_output
from teng_eq.network.paper import TENGNet
from teng_eq.network.space import ParamSpace


@dataclasses.dataclass(frozen=True)
class FitOptions:
    """θ₀'s fit (the ``fit`` config group).

    ``grid``: points per dimension of θ₀'s own quadrature (None: the run's grid);
    θ₀ is a property of the initial condition, not of the run, so it may be fitted
    on a finer grid than the steps use (the paper: 1024² for every 2-D run).
    Each stage's budget: its tolerance, parameters drawn, iteration cap and
    ``patience`` (chunks of :data:`~teng_eq.fit.iterate.CHUNK` iterations in a row that did not halve its
    loss), for stage 1 (value+gradient), stage 2 (value, plain iterations) and
    stage 2's Levenberg–Marquardt polish (``stage2_polish_iters``, 0: none); the
    least squares of stage 2 (``solver``: by default the time steps'; ``damping``: the
    first try of :func:`value_stage`, conf/config.yaml sets both)."""

    grid: int | None
    stage1_tol: float
    stage1_subsample: int
    stage1_max_iters: int
    stage1_patience: int
    stage2_tol: float
    stage2_subsample: int
    stage2_max_iters: int
    stage2_patience: int
    stage2_polish_iters: int
    polish_patience: int
    solver: str
    damping: float

    def validate(self, prefix: str) -> None:
        if self.grid is not None and self.grid < 8:
            raise bad(f"{prefix}.grid", self.grid, "must be an integer >= 8, or null (the run's grid)")
        for key in ("stage1_tol", "stage2_tol"):
            if not getattr(self, key) > 0:
                raise bad(f"{prefix}.{key}", getattr(self, key), "must be > 0")
        at_least(prefix, self, 1, "stage1_subsample", "stage1_max_iters", "stage1_patience",
                 "stage2_subsample", "stage2_max_iters", "stage2_patience", "polish_patience")
        at_least(prefix, self, 0, "stage2_polish_iters")
        check_least_squares(prefix, self.solver, self.damping)

    def grid_for(self, run_grid: int) -> int:
        """Points per dimension of θ₀'s quadrature for a run on ``run_grid``."""
        return run_grid if self.grid is None else self.grid


def check_least_squares(prefix: str, solver: str, damping: float) -> None:
    """``solver`` is one of :data:`~teng_eq.fit.lstsq.SOLVERS` and ``damping`` in [0, 1)."""
    name = f"{prefix}." if prefix else ""
    one_of(f"{name}solver", solver, SOLVERS)
    if not 0 <= damping < 1:
        raise bad(f"{name}damping", damping, "must be in [0, 1)")


@dataclasses.dataclass(frozen=True)
class FitReport:
    """How θ₀'s fit went: each stage's final loss and time, the relative loss
    ``stage2_loss / ‖u₀‖²``, the damping stage 2's plain iterations ran at
    (:func:`value_stage`), whether it reached ``stage2_tol`` (``converged``), whether
    its last stage ended stalled (:func:`~teng_eq.fit.iterate.iterate_chunks`), what
    its warning says where it did not converge (:func:`verdict`) and whether it came
    from the cache."""

    stage1_loss: float
    stage2_loss: float
    stage2_rel_loss: float
    converged: bool
    stage1_s: float
    stage2_s: float
    stage2_damping: float
    cached: bool = False
    stalled: bool = False
    advice: str = ""
    #: A multi-stage network's relative loss after each stage (:func:`stage_by_stage`); empty for one network.
    stage_rel_losses: tuple[float, ...] = ()

    @property
    def seconds(self) -> float:
        """Time this run spent fitting: 0 when it came from the cache."""
        return 0.0 if self.cached else self.stage1_s + self.stage2_s


def value_gradient_rows(solver: StageSolver):
    """``(θ, S) ↦ ∂(û, ∂₁û, …)/∂θ_S`` on the solver's nodes, one row per node and
    derivative: the factored Jacobian's rows (:meth:`~teng_eq.fit.stage.StageSolver.rows`)
    and their x-derivatives by the product rule, from one JVP of the factors per
    direction."""
    points = solver.points

    def rows(theta, subset):
        f = solver.factors(theta)
        out = [jnp.concatenate(solver.rows(f, subset))]
        for d in range(points.shape[1]):
            tangent = jnp.zeros_like(points).at[:, d].set(1.0)
            _, df = jax.jvp(lambda p: solver.factors(theta, p), (points,), (tangent,))
            out.append(jnp.concatenate([
                a + b for a, b in zip(solver.rows(Factors(f.u, df.Gt, f.Ht), subset),
                                      solver.rows(Factors(f.u, f.Gt, df.Ht), subset))]))
        # Node-major (rows ordered node, derivative), each block turned first: XLA then
        # forms JᵀJ as it did from column gathers (bit for bit, so θ₀ fits are unchanged).
        return jnp.stack([rows_t.T for rows_t in out], axis=1).reshape(-1, subset.shape[0])

    return rows


def _value_and_gradient(fn, x):
    u, g = jax.value_and_grad(fn)(x)
    return jnp.concatenate([u[None], g])

def odd_under_half_shift(equation: Equation, grid: int, tol: float = 1e-12) -> bool:
    """Whether the solution stays odd under ``x → x + L/2`` (all dimensions at once),
    as far as the grid can tell: ``u₀`` and ``L[u₀]`` both change sign under the
    shift (to ``tol`` relative), and the ``grid``-point grid maps onto itself (grid even,
    a periodic domain).

    Where it holds, the network can start odd (``init="odd"``,
    :mod:`teng_eq.network.paper`) and every fit keeps it odd: see
    :func:`resolve_init`.
    """
    periods = equation.periods
    if grid % 2 or periods is None or equation.domain.sampled:  # sampled points: no grid to map onto itself
        return False
    points = jnp.asarray(equation.quadrature(grid).points)  # a system's rows (x, c): c stays
    shifted = points + jnp.zeros(points.shape[1]).at[: len(periods)].set(0.5 * jnp.asarray(periods))
    f = jax.vmap(equation.u0)
    for a, b in ((f(points), f(shifted)),
                 (operator(equation, f, points), operator(equation, f, shifted))):
        if not float(jnp.max(jnp.abs(a + b))) <= tol * float(jnp.max(jnp.abs(a))):
            return False
    return True


def resolve_init(init: str, equation: Equation, *grids: int) -> str:
    """The network initialisation to use for ``init``: ``"auto"`` is ``"odd"`` where
    the solution is odd under the half-period shift (:func:`odd_under_half_shift`)
    on every one of ``grids`` (the run's and θ₀'s: each fit keeps the symmetry only
    on a grid that maps onto itself) — the paper's initial condition under heat
    and Allen–Cahn — and ``"paper"`` elsewhere (Burgers, whose ``u·∇u`` is even, or
    a condition without the symmetry; what it buys: docs/guides/accuracy.md). Any other
    value is returned as given."""
    if init != "auto":
        return init
    return "odd" if all(odd_under_half_shift(equation, grid) for grid in grids) else "paper"


#: Bump when the fitting procedure or the key changes, so stale θ₀ files are not reused
#: (8: the key holds what the fit reads — the domain, the network as it starts, u₀'s values
#: and gradients on the fit points — and no longer the equation's fields).
FIT_VERSION = 8


def fit_key(description: dict) -> str:
    """Cache name of the θ₀ that ``description`` determines."""
    return digest({**description, "version": FIT_VERSION})[:16]


#: Tries of stage 2's plain iterations, each at ten times the damping of the one before,
#: when a try's first chunk does not lower the loss at all (see :func:`value_stage`).
DAMPING_TRIES = 3


def fresh_points(points: Float[Array, "n dim"], move: Callable, u0: Callable[[Array], Array],
                 key) -> Callable:
    """``draw()``: at each call the fit's ``points`` moved afresh, ``move(points, kᵢ)``
    (:func:`~teng_eq.domains.quadrature.rotated` on a sampled box), and u₀'s values there.

    What the steps do with ``fresh`` points, for θ₀'s value stage: on a fixed sample of N
    points a network of as many parameters fits the nodes better than the space between
    them, every iteration fitting the same values (at d = 6, 16,384 points and 11,801
    parameters: 3.6e-6 on the nodes, 1.8e-5 elsewhere); moved each chunk, the points are a
    new sample of the whole box, and the loss at a chunk's start is an unbiased estimate of
    the error everywhere (at its end a little below it: the chunk has fitted its points)."""
    count, values = itertools.count(1), jax.jit(jax.vmap(u0))

    def draw():
        moved = move(points, jax.random.fold_in(key, next(count)))
        return moved, values(moved)

    return draw


def moved_solver(solver: StageSolver, draw: Callable | None) -> Callable | None:
    """``redraw`` for a stage of ``solver`` from :func:`fresh_points`' ``draw``: the solver
    on each new set of points, with u₀'s values there; None without ``draw``."""
    if draw is None:
        return None

    def redraw():
        points, target = draw()
        return eqx.tree_at(lambda s: s.points, solver, points), target

    return redraw


def value_stage(space: ParamSpace, quadrature: Quadrature, theta: Float[Array, " params"],
        target: Float[Array, " n"], fit: FitOptions, *, key, log: Callable[[object], None] | None = None,
        goal: float | None = None, draw: Callable | None = None, mesh: PointMesh | None = None):
    """Stage 2's plain iterations (:func:`refine`) towards ``target`` at the least
    damping that makes progress: ``fit.damping`` first; where its first chunk of
    :data:`~teng_eq.fit.iterate.CHUNK` iterations leaves the loss where it started (the undamped steps
    overshoot into directions the subset Jacobian barely sees, and
    :class:`~teng_eq.fit.stage.BestSoFar` keeps the start), again from the start at ten
    times the damping, at most :data:`DAMPING_TRIES` tries. Less damping takes the
    loss further (docs/guides/accuracy.md, "θ₀"), but how little a fit stands
    depends on the network's start (``init``) and the condition.

    Returns ``(θ, loss, damping used, stalled)``. Goes on while it improves (tol 0):
    ``stage2_tol`` judges the result, it does not stop the fit half-way. With ``draw``
    (:func:`fresh_points`), each chunk on new points; with ``mesh``, the points split over devices.
    """
    damping = fit.damping
    sub = min(fit.stage2_subsample, space.size)
    for attempt in range(DAMPING_TRIES):
        last = attempt == DAMPING_TRIES - 1
        solver = StageSolver(space, quadrature, fit.solver, damping, flux=True, mesh=mesh)
        label = "θ₀ stage 2 (value)" if attempt == 0 else f"θ₀ stage 2 (value, damping {damping:.0e})"
        fitted, loss, stalled = refine(solver, theta, target, key=key, subsample=sub, tol=0.0,
                                       max_iters=fit.stage2_max_iters, patience=fit.stage2_patience,
                                       log=log, label=label, goal=goal,
                                       give_up_if_stuck=not last, redraw=moved_solver(solver, draw))
        if last or not bool(jnp.all(fitted == theta)):
            return fitted, loss, damping, stalled
        damping *= 10


def initial_parameters(net: TENGNet, u0: Callable[[Array], Array], quadrature: Quadrature, *, key,
        fit: FitOptions, log: Callable[[object], None] | None = None, mesh: PointMesh | None = None,
        move: Callable | None = None) -> tuple[Float[Array, " params"], FitReport]:
    """Two-stage fit of ``net`` to ``u0`` on ``quadrature`` (no cache); stage 2's least
    squares are ``fit.solver`` and ``fit.damping``. Returns ``(θ₀, report)``.

    ``move(points, key)``: stage 2 (value) runs each chunk on the quadrature's points
    moved by it (:func:`fresh_points`; the sampled box's ``fresh``); stage 1 keeps them:
    it only brings θ near u₀ for stage 2. Stage 2 fits the rows the steps fit: on a box's
    flux rows αu₀ + β∂ₙu₀ (:class:`~teng_eq.domains.quadrature.FluxRows`), so that θ₀ meets
    a Neumann or Robin side as a step's fit does; ``mesh``: on the points split over its devices."""
    space = ParamSpace(net)
    solver = StageSolver(space, quadrature, fit.solver, fit.damping, mesh=mesh)
    points = solver.points
    k1, k2, k3 = jax.random.split(key, 3)
    target1 = jax.vmap(lambda x: _value_and_gradient(u0, x))(points)
    target2, stage2 = target1[:, 0], solver
    if quadrature.flux is not None:
        flux, k = quadrature.flux, quadrature.flux.normals.shape[0]
        du0 = jnp.sum(flux.normals * target1[-k:, 1:], axis=1)
        target2 = target2.at[-k:].set(flux.alpha * target2[-k:] + flux.beta * du0)
        stage2 = StageSolver(space, quadrature, fit.solver, fit.damping, flux=True, mesh=mesh)
    norm = float(solver.norm2(target2))
    sub2 = min(fit.stage2_subsample, space.size)
    # Per-point quadrature weights scale each point's rows by √wₙ (the solver's weight is then 1).
    rows = value_gradient_rows(solver)
    sqrt_w = solver.scaled(jnp.ones(points.shape[0]))

    def residual1(theta, _data):
        net = space.network(theta)
        r = jax.vmap(lambda x: _value_and_gradient(net, x))(solver.on_mesh(points)) - target1
        return r if solver.sqrt_weights is None else r.reshape(-1) * jnp.repeat(sqrt_w, target1.shape[1])

    def jacobian1(theta, subset, _data):
        J = rows(theta, subset)
        return J if solver.sqrt_weights is None else J * jnp.repeat(sqrt_w, target1.shape[1])[:, None]

    t0 = time.perf_counter()
    theta, loss1, _ = levenberg_marquardt(
        residual1, jacobian1, solver.placed(space.flatten(net)), solver.weight, key=k1,
        subsample=min(fit.stage1_subsample, space.size), tol=fit.stage1_tol,
        max_iters=fit.stage1_max_iters, patience=fit.stage1_patience, log=log,
        label="θ₀ stage 1 (value+gradient)",
    )
    t1 = time.perf_counter()
    draw = None if move is None else fresh_points(points, move, u0, jax.random.fold_in(key, 4))
    theta, loss2, damping, stalled = value_stage(space, quadrature, theta, target2, fit, key=k2, log=log,
                                                 goal=fit.stage2_tol * norm, draw=draw, mesh=mesh)
    if fit.stage2_polish_iters > 0:
        theta, loss2, stalled = levenberg_marquardt(
            lambda th, data: data[0].scaled(data[0].values(th) - data[1]),
            lambda th, subset, data: data[0].scaled(data[0].jacobian(th, subset)[1]).T,
            theta, solver.weight, key=k3, subsample=sub2, tol=0.0, max_iters=fit.stage2_polish_iters,
            patience=fit.polish_patience, log=log, label="θ₀ stage 2 (value, Levenberg–Marquardt)",
            goal=fit.stage2_tol * norm, data=(stage2, target2), redraw=moved_solver(stage2, draw),
        )
    report = FitReport(stage1_loss=loss1, stage2_loss=loss2, stage2_rel_loss=loss2 / norm,
                       converged=bool(loss2 <= fit.stage2_tol * norm), stage1_s=t1 - t0,
                       stage2_s=time.perf_counter() - t1, stage2_damping=damping, stalled=stalled)
    return theta, report


def stage_by_stage(net: MultiStageNet, u0: Callable[[Array], Array], quadrature: Quadrature, *, key,
        fit: FitOptions, later: Quadrature | None = None, log: Callable[[object], None] | None = None,
        mesh: PointMesh | None = None, move: Callable | None = None
) -> tuple[Float[Array, " params"], FitReport]:
    """θ₀ of a multi-stage network (:mod:`teng_eq.network.multistage`): stage 1 by
    :func:`initial_parameters` on ``quadrature`` as one network (``key``: the same fit as that
    network's alone), stage s > 1 on ``later`` (default: ``quadrature``) to the residual r_s of
    the stages before it over ε_s = ‖r_s‖/‖u₀‖ (that quadrature's norms), from the key folded
    with s, then scaled by ε_s. Each stage's ``stage2_tol`` is ``fit.stage2_tol / ε_s²``: the
    stage stops where the whole sum reaches the tolerance. The report's relative losses are the
    sum's on each stage's points (``stage_rel_losses``: after each stage), its times every stage's."""
    later = quadrature if later is None else later

    def norm(fn, q: Quadrature) -> float:
        v = jax.vmap(fn)(q.points)
        return float(jnp.sqrt(jnp.sum(jnp.broadcast_to(jnp.asarray(q.weights, v.dtype), v.shape) * v * v)))

    done, reports, relative = [], [], []
    for s, stage in enumerate(net.stages):
        before, points = tuple(done), quadrature if s == 0 else later

        def residual(x, before=before):
            return u0(x) - sum(n(x) for n in before)

        scale = 1.0 if s == 0 else norm(residual, points) / norm(u0, points)
        target = residual if s == 0 else (lambda x, r=residual, e=scale: r(x) / e)
        stage_fit = dataclasses.replace(fit, stage2_tol=fit.stage2_tol / scale**2)
        if log is not None and s > 0:
            log(f"θ₀ stage {s + 1} of {len(net.stages)}: the residual, {scale:.3g} of u₀")
        theta, report = initial_parameters(stage, target, points, key=key if s == 0 else
                                           jax.random.fold_in(key, s), fit=stage_fit, log=log, mesh=mesh,
                                           move=move)
        done.append(scaled_output(ParamSpace(stage).network(theta), scale))
        reports.append(report)
        relative.append(report.stage2_rel_loss * scale**2)
    whole = MultiStageNet(tuple(done))
    last = reports[-1]
    report = FitReport(stage1_loss=reports[0].stage1_loss, stage2_loss=relative[-1] * norm(u0, later) ** 2,
                       stage2_rel_loss=relative[-1], converged=bool(relative[-1] <= fit.stage2_tol),
                       stage1_s=sum(r.stage1_s for r in reports), stage2_s=sum(r.stage2_s for r in reports),
                       stage2_damping=last.stage2_damping, stalled=last.stalled,
                       stage_rel_losses=tuple(relative))
    return ParamSpace(net).flatten(whole), report


#: How far above ``fit.stage2_tol`` (a factor of the relative loss) a stalled θ₀ fit may end
#: and still be cached (:func:`verdict`): its relative error then at most √1000 ≈ 32 times the
#: tolerance's (at the default 5e-14: 7e-6 instead of 2.2e-7), and said in a warning.
REACH_FACTOR = 1e3


def verdict(report: FitReport, fit: FitOptions) -> tuple[bool, str]:
    """``(cache it, warning)`` for a fit that ended at relative loss ``r`` against the
    tolerance ``τ = fit.stage2_tol``: ``r ≤ τ`` is cached without a word; ``τ < r ≤
    REACH_FACTOR·τ`` with its last stage stalled is cached as what the network reaches,
    the warning giving the tolerance that says so; farther off and stalled, or still
    improving when its iterations ran out, it is not cached, the warning naming the
    setting to change (the network, or the last stage's iterations)."""
    if report.converged:
        return True, ""
    rel, tol = report.stage2_rel_loss, fit.stage2_tol
    head = f"θ₀ fit ended above its tolerance: relative loss {rel:.2e} > fit.stage2_tol={tol:g}"
    reached = f"fit.stage2_tol={_round_up(rel):g}"
    if not report.stalled:
        key = "stage2_polish_iters" if fit.stage2_polish_iters > 0 else "stage2_max_iters"
        return False, (f"{head}, still improving at its last iteration; not cached: "
                       f"raise fit.{key} (now {getattr(fit, key)})")
    if rel <= REACH_FACTOR * tol:
        return True, (f"{head}, {rel / tol:.3g}x, where it stopped improving (within {REACH_FACTOR:g}x); "
                      f"cached as what this network reaches: {reached} says so, a wider network "
                      "(network.width) may go lower")
    return False, (f"{head}, {rel / tol:.3g}x, where it stopped improving (more than {REACH_FACTOR:g}x); "
                   f"not cached: a wider network (network.width) or a finer fit.grid, or {reached} "
                   "to take this θ₀")


def _round_up(x: float) -> float:
    """``x`` rounded up to one significant digit (6.9e-12 → 7e-12)."""
    scale = 10.0 ** math.floor(math.log10(x))
    return math.ceil(x / scale * (1 - 1e-12)) * scale


def u0_digest(u0: Callable[[Array], Array], quadrature: Quadrature) -> str:
    """sha256 of ``u0``'s values and gradients on the points of ``quadrature`` (stage 1's
    targets, stage 2's are the values), with the points and weights themselves and the
    flux rows: what θ₀'s cache key knows of the initial condition."""
    targets = jax.vmap(lambda x: _value_and_gradient(u0, x))(quadrature.points)
    if quadrature.flux is not None:  # the flux rows change what stage 2 fits
        return array_digest(quadrature.points, quadrature.weights, targets, *quadrature.flux)
    return array_digest(quadrature.points, quadrature.weights, targets)


def cached_initial_parameters(net: TENGNet, u0: Callable[[Array], Array], quadrature: Quadrature, *, key,
        fit: FitOptions, description: dict, directory=None, log: Callable[[object], None] | None = None,
        move: Callable | None = None, mesh: PointMesh | None = None, later: Quadrature | None = None
) -> tuple[Float[Array, " params"], FitReport]:
    """:func:`initial_parameters` (``mesh``: on the points split over its devices; a multi-stage
    network's :func:`stage_by_stage`, its later stages on ``later``), cached
    under ``directory`` by what the fit reads: ``description`` (the domain, the network's
    config, grid, seed, fit settings, fresh points, devices), the network ``net`` as the fit
    starts it (its class, every field and its initial parameters: the architecture, dims,
    outputs, embedding periods, an imposed-boundary factor) and u₀'s values and gradients on
    ``quadrature`` (:func:`u0_digest`) — not the equation's fields. Stored as a
    self-checking entry (:func:`teng_eq.cache.files.store_arrays`: θ and the report as
    JSON, no pickle), refitted when missing, damaged or stale.

    A fit that did not reach its tolerance is returned with a warning (:func:`verdict`,
    also kept in its report's ``advice``) and written to the cache only where it stalled
    within :data:`REACH_FACTOR` of it; nor is one written that the cache cannot take
    (disk full, a folder gone: :func:`~teng_eq.cache.files.store_or_warn`), which this
    run still uses.
    """
    # u₀ by its values, not its name: a formula edited under the same name (a user's
    # file) is a new θ₀, a coefficient u₀ does not read is not. The fit's own points and
    # weights go with them; the network by its content, whatever its family.
    description = {**description, "u0_on_fit_grid": u0_digest(u0, quadrature),
                   "network_at_start": content_description(net)}
    path = cache_dir(directory) / "theta0" / f"{fit_key(description)}.npz"
    entry_key = {**description, "version": FIT_VERSION}
    cached = load_arrays(path, entry_key)
    if cached is not None:
        report = FitReport(**{**json.loads(str(cached["info"])), "cached": True})
        return jnp.asarray(cached["theta"]), report
    # the mesh only where there is one: a one-device fit is called exactly as before it existed
    split = {} if mesh is None else {"mesh": mesh}
    if isinstance(net, MultiStageNet):
        theta, report = stage_by_stage(net, u0, quadrature, key=key, fit=fit, later=later, log=log, move=move,
                                       **split)
    else:
        theta, report = initial_parameters(net, u0, quadrature, key=key, fit=fit, log=log, move=move, **split)
    keep, advice = verdict(report, fit)
    if advice:
        report = dataclasses.replace(report, advice=advice)
        warnings.warn(advice, stacklevel=2)
    if not keep:
        return theta, report
    info = np.array(json.dumps(dataclasses.asdict(report)))
    store_or_warn(path, {"theta": np.asarray(theta), "info": info}, entry_key, "θ₀")
    return theta, report
