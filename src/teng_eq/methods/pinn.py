"""Physics-informed neural networks (paper §Baselines): one network û(x, t) for the
whole space-time domain, trained globally in time; here by BFGS (PINN-BFGS), and
by energy natural gradient in :mod:`teng_eq.methods.engd` (PINN-ENGD).

The loss is the squared L² norm of the PDE residual over Ω × [0, T] plus that of
the initial-condition misfit over Ω,

    L(θ) = ‖∂ₜû − L[û]‖²_{L²(Ω×[0,T])} + ‖û(·, 0) − u₀‖²_{L²(Ω)}
         ≈ |Ω|T/N Σᵢ r(xᵢ, tᵢ)² + Σⱼ wⱼ (û(xⱼ, 0) − u₀(xⱼ))²,

with N fixed space-time collocation points (a scrambled Halton sequence, so the
objective is deterministic, as BFGS needs) and the initial condition on the
equation's quadrature grid of ``initial`` points per dimension (weights wⱼ). The
periodic boundary conditions hold by construction of the network
(:class:`SpaceTimeNet`).

The optimisation is split into ``iterations / block`` method steps of ``block``
iterations each, so that the driver reports progress (and checkpoints) per
block; each block's ``step_loss`` is the training loss L(θ) after it. The error
against the reference is measured once training is over, at the same times
``t_n = n Δt`` as for the sequential methods.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float, PRNGKeyArray, PyTree
from scipy.stats import qmc

from teng_eq.config.options import at_least
from teng_eq.equations import Equation, operator
from teng_eq.errors import bad
from teng_eq.fit.results import StepRecord
from teng_eq.methods.base import Method, Problem, StepInputs, require_periodic_domain
from teng_eq.network.paper import PeriodicEmbedding
from teng_eq.network.space import ParamSpace


class SpaceTimeNet(eqx.Module):
    """``û(x, t) = W_out tanh(⋯ tanh(W₁ [e(x); t] + b₁) ⋯) + b_out``: the ENGD paper's
    tanh MLP (Müller & Zeinhofer 2023; one hidden layer there) on the periodic
    embedding ``e`` of :class:`~teng_eq.network.paper.PeriodicEmbedding` in space and the
    raw time. Called on one space-time point ``z = (x₁, …, x_d, t)``."""

    embedding: PeriodicEmbedding
    hidden: tuple[eqx.nn.Linear, ...]
    output: eqx.nn.Linear

    def __init__(self, dim: int, features: int, width: int, layers: int, lengths, *, key: PRNGKeyArray):
        keys = jax.random.split(key, layers + 2)
        # Phases uniform over the circle, c = 0: the symmetry-aware inits of TENG's
        # network (teng_eq.network.paper) are chosen per equation for that network, not this one.
        self.embedding = PeriodicEmbedding(dim, features, lengths, key=keys[0], init="legacy")
        sizes = [dim * features + 1] + [width] * layers
        self.hidden = tuple(eqx.nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys[1:-1]))
        self.output = eqx.nn.Linear(width, "scalar", key=keys[-1])

    def __call__(self, z: Float[Array, "*n dim+1"]) -> Float[Array, "*n"]:
        """û at the space-time point ``z`` (dim+1,), or at every row of ``z`` (n, dim+1)."""
        if z.ndim == 2:
            return jax.vmap(self)(z)
        h = jnp.concatenate([self.embedding(z[:-1]), z[-1:]])
        for layer in self.hidden:
            h = jnp.tanh(layer(h))
        return self.output(h)


def pde_residual(
    equation: Equation, fn: Callable[[Array], Array], z: Float[Array, " dim+1"]
) -> Float[Array, ""]:
    """``∂ₜu − L[u]`` at one space-time point ``z = (x, t)`` of a scalar ``fn(z)``
    (time derivative by a JVP, L by :func:`~teng_eq.equations.operator`)."""
    x, t = z[:-1], z[-1:]
    _, u_t = jax.jvp(lambda s: fn(jnp.concatenate([x, s])), (t,), (jnp.ones_like(t),))
    lu = operator(equation, lambda p: jax.vmap(lambda y: fn(jnp.concatenate([y, t])))(p), x[None], t[0])
    return u_t - lu[0]


class PINNState(eqx.Module):
    """θ, the training loss L(θ) and the optimiser's own state (None if it keeps none)."""

    theta: Float[Array, " params"]
    loss: Float[Array, ""]
    optimizer: PyTree


class PINN(Method):
    """A PINN on ``equation`` over ``[0, t_final]``; subclasses choose the optimiser
    (:meth:`init_optimizer`, :meth:`iteration`)."""

    sequential = False

    @dataclasses.dataclass(frozen=True)
    class Options:
        features: int  # periodic-embedding features per space dimension
        width: int  # hidden width (paper: 64)
        layers: int  # hidden tanh layers (the ENGD paper's network: 1)
        collocation: int  # space-time collocation points of the residual
        initial: int  # initial-condition points per space dimension (the equation's quadrature grid)
        iterations: int  # optimiser iterations in all
        block: int  # iterations per method step (progress, step_loss, checkpoints)

        def validate(self, prefix: str) -> None:
            at_least(prefix, self, 1, "features", "width", "layers", "collocation", "initial", "iterations",
                     "block")
            if self.iterations % self.block:
                raise bad(f"{prefix}.iterations", self.iterations,
                    f"must be a whole number of blocks of {prefix}.block={self.block}")

    space: ParamSpace
    equation: Equation
    theta_init: Float[Array, " params"]
    interior: Float[Array, "n dim+1"]
    interior_weight: float = eqx.field(static=True)
    initial: Float[Array, "m dim"]
    initial_weights: Float[Array, ""] | Float[Array, " m"]
    u0: Float[Array, " m"]
    options: object = eqx.field(static=True)

    @classmethod
    def check(cls, options, problem: Problem, name: str) -> None:
        require_periodic_domain(problem, name)

    @classmethod
    def network_template(cls, options, problem: Problem) -> SpaceTimeNet:
        """The untrained space-time network (initialised from ``seed``)."""
        key = jax.random.fold_in(jax.random.PRNGKey(problem.seed), 2)
        eq = problem.equation
        return SpaceTimeNet(eq.dim, options.features, options.width, options.layers, eq.lengths, key=key)

    @classmethod
    def build(cls, options, problem: Problem, *, cache_dir=None, log=None) -> PINN:
        equation = problem.equation
        net = cls.network_template(options, problem)
        space = ParamSpace(net)
        scale = np.asarray(list(equation.lengths) + [problem.t_final])
        halton = qmc.Halton(d=equation.dim + 1, scramble=True, seed=problem.seed)
        lower = np.asarray(list(getattr(equation.domain, "origin", None) or (0.0,) * equation.dim) + [0.0])
        interior = jnp.asarray(halton.random(options.collocation) * scale + lower)
        quadrature = equation.quadrature(options.initial)
        points = quadrature.points
        return cls(n_steps=options.iterations // options.block, space=space, equation=equation,
                   theta_init=space.flatten(net), interior=interior,
                   interior_weight=float(np.prod(scale)) / options.collocation, initial=points,
                   initial_weights=jnp.asarray(quadrature.weights), u0=jax.vmap(equation.u0)(points),
                   options=options)

    # -- the loss ---------------------------------------------------------------------------

    def interior_residual(
        self, theta: Float[Array, " params"], z: Float[Array, " dim+1"]
    ) -> Float[Array, ""]:
        """``√(|Ω|T/N) (∂ₜû − L[û])`` at the collocation point ``z``."""
        return math.sqrt(self.interior_weight) * pde_residual(self.equation, self.space.network(theta), z)

    def initial_residual(
        self, theta: Float[Array, " params"], x: Float[Array, " dim"], u0: Float[Array, ""], w
    ) -> Float[Array, ""]:
        """``√w (û(x, 0) − u₀(x))``."""
        return jnp.sqrt(w) * (self.space.network(theta)(jnp.concatenate([x, jnp.zeros(1, x.dtype)])) - u0)

    def _each(self, theta, transform=lambda f: f):
        """``transform(residual)(θ, point)`` at every collocation point, then at every
        initial point, stacked."""
        weights = jnp.broadcast_to(self.initial_weights, self.u0.shape)
        interior = jax.vmap(transform(self.interior_residual), (None, 0))(theta, self.interior)
        initial = jax.vmap(transform(self.initial_residual), (None, 0, 0, 0))(
            theta, self.initial, self.u0, weights)
        return jnp.concatenate([interior, initial])

    def residuals(self, theta: Float[Array, " params"]) -> Float[Array, " n+m"]:
        """The weighted residual vector ``ρ`` with ``L(θ) = ‖ρ‖₂²``: ``√(|Ω|T/N) r(xᵢ, tᵢ)``
        at the n collocation points, then ``√wⱼ (û(xⱼ, 0) − u₀(xⱼ))`` at the m initial points."""
        return self._each(theta)

    def jacobian(self, theta: Float[Array, " params"]) -> Float[Array, "n+m params"]:
        """``J = ∂ρ/∂θ``, row by row (each row one point's reverse-mode gradient)."""
        return self._each(theta, jax.grad)

    def loss(self, theta: Float[Array, " params"]) -> Float[Array, ""]:
        r = self.residuals(theta)
        return jnp.sum(r * r)

    # -- the optimisation -------------------------------------------------------------------

    def init_optimizer(self, theta: Float[Array, " params"]) -> PyTree:
        return None

    def iteration(self, state: PINNState) -> tuple[PINNState, Float[Array, ""]]:
        """One optimiser iteration: the new state and what it measured (``inner``)."""
        raise NotImplementedError

    def init(self) -> PINNState:
        theta = self.theta_init
        return PINNState(theta=theta, loss=self.loss(theta), optimizer=self.init_optimizer(theta))

    def step(self, state: PINNState, key: PRNGKeyArray, inputs: StepInputs) -> tuple[PINNState, StepRecord]:
        def body(s, _):
            new, measured = self.iteration(s)
            return new, (s.loss, measured)

        state, (before, measured) = jax.lax.scan(body, state, length=self.options.block)
        losses = jnp.concatenate([before, state.loss[None]])
        inner = jnp.concatenate([measured, jnp.full(1, jnp.nan)])
        return state, StepRecord(losses=losses[None], inner=inner[None], metrics={"step_loss": state.loss})

    def values(self, state: PINNState, points: Float[Array, "n dim"], t) -> Float[Array, " n"]:
        times = jnp.full((points.shape[0], 1), t, dtype=points.dtype)
        return self.space.apply(state.theta, jnp.concatenate([points, times], axis=1))

    def network(self, state: PINNState) -> SpaceTimeNet:
        return self.space.network(state.theta)


class PINNBFGS(PINN):
    """PINN trained by BFGS (``optimistix.BFGS``: dense inverse-Hessian approximation,
    backtracking Armijo line search). One iteration is one optimistix step: one
    evaluation of L and ∇L at a trial point, accepted or (line search) halved.
    (The first step only evaluates L and ∇L at θ₀.) ``inner`` records ``‖∇L‖₂`` at
    the iterate after the iteration. Tolerances are zero: it runs
    its full ``iterations`` unless an iterate repeats exactly (then it stops moving).

    Memory: the inverse Hessian is a dense ``P × P`` float64 matrix, 8P² bytes (for
    the paper's network in 2-D, P = 2,873: 66 MB).
    """

    inner_measure = "grad_norm"

    @property
    def solver(self) -> optx.BFGS:
        return optx.BFGS(rtol=0.0, atol=0.0)

    def _fn(self, theta, args):
        return self.loss(theta), None

    def init_optimizer(self, theta):
        f_struct = jax.ShapeDtypeStruct((), theta.dtype)
        return self.solver.init(self._fn, theta, None, {}, f_struct, None, frozenset())

    def iteration(self, state: PINNState) -> tuple[PINNState, Float[Array, ""]]:
        def advance(s):
            theta, opt, _ = self.solver.step(self._fn, s.theta, None, {}, s.optimizer, frozenset())
            return PINNState(theta=theta, loss=opt.f_info.f, optimizer=opt)

        new = jax.lax.cond(state.optimizer.terminate, lambda s: s, advance, state)
        return new, jnp.linalg.norm(new.optimizer.f_info.grad)
