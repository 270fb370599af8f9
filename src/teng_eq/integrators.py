"""TENG time integrators: explicit Runge–Kutta schemes whose stages are TENG fits.

An explicit RK scheme with tableau ``(A, b)`` advances ``u_t`` by

    u_{t+Δt} = u_t + Δt Σⱼ bⱼ kⱼ,   kⱼ = L[u⁽ʲ⁾],   u⁽ʲ⁾ = u_t + Δt Σ_{i<j} A_{ji} kᵢ.

TENG never forms ``u⁽ʲ⁾`` as a function: it *fits* a network to each stage target
(Subroutine ``TENG_stepper``) and evaluates the next slope ``k`` on that fitted
network, so L is only ever applied to a network, never to ``L[û]`` itself.
With ``s`` stages a step makes ``s`` fits; fit j starts from the parameters of fit
j−1 (the previous stage's network is the best warm start we have):

* **TENG-Euler** (``A = []``, ``b = [1]``): one fit to ``û_t + Δt L[û_t]``.
* **TENG-Heun** (``A = [[1]]``, ``b = [½, ½]``): Algorithm ``TENG_Heun``:
  θ_temp fits ``û_t + Δt k₁``; θ_{t+Δt} fits ``û_t + Δt (k₁ + k₂)/2`` starting
  from θ_temp, with ``k₂ = L[û_{θ_temp}]``.
* **TENG-RK4** (classical RK4): ``k₁ = L[û_t]``;
  θ₁ fits ``û_t + Δt/2 k₁``, ``k₂ = L[û_{θ₁}]``;
  θ₂ fits ``û_t + Δt/2 k₂`` (from θ₁), ``k₃ = L[û_{θ₂}]``;
  θ₃ fits ``û_t + Δt k₃`` (from θ₂), ``k₄ = L[û_{θ₃}]``;
  θ_{t+Δt} fits ``û_t + Δt (k₁ + 2k₂ + 2k₃ + k₄)/6`` (from θ₃).

Every target is built from ``û_t`` on the quadrature grid, except on the rows of
a Dirichlet boundary (``boundary``), where it is the boundary value 0; the first
fit of a step runs at most ``iters`` iterations (its first drawing
``subsample_first`` parameters), the later fits at most ``iters_later`` (exactly
these under the ``fixed`` stopping policy of :mod:`teng_eq.stepper`).

**Held-out check.** A fit can match its target on the quadrature nodes and go
wild between them (a network with more parameters than nodes can interpolate),
and the training loss cannot see it. So each step also measures the loss of its
final fit on ``holdout`` points that no fit uses: the same target function
``û_t + Δt Σⱼ bⱼ kⱼ`` (its slopes ``kⱼ = L[û_{θⱼ}]`` evaluated there too) against
``û_{θ_{t+Δt}}``. On a resolved, well-behaved fit both losses estimate the same
``‖r‖²_{L²}`` and agree; ``holdout_loss ≫ loss`` says the fit overfits the nodes.
Their ratio is taken against ``max(loss, ε·‖target‖²)`` (ε the float64 machine
epsilon: a loss below it is round-off), so that two losses both at round-off
level never read as a large ratio.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from teng_eq.equations import Equation, operator
from teng_eq.stepper import StageLog, Stepper


class Integrator(eqx.Module):
    """Explicit Runge–Kutta tableau: ``a[j]`` are the coefficients of stage j+2's
    target, ``b`` those of the step's final target."""

    name: str = eqx.field(static=True)
    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    b: tuple[float, ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)

    @property
    def stages(self) -> int:
        return len(self.b)


EULER = Integrator("euler", a=(), b=(1.0,), order=1)
HEUN = Integrator("heun", a=((1.0,),), b=(0.5, 0.5), order=2)
RK4 = Integrator(
    "rk4", a=((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), b=(1 / 6, 1 / 3, 1 / 3, 1 / 6), order=4
)
INTEGRATORS: dict[str, Integrator] = {"euler": EULER, "heun": HEUN, "rk4": RK4}


class StepLog(eqx.Module):
    """What one step reports: a :class:`~teng_eq.stepper.StageLog` per stage, the
    final fit's training loss on the quadrature nodes (``loss``), its loss on the
    held-out points (``holdout_loss``) and their ratio (``holdout_ratio``, see the
    module docstring); both NaN without held-out points."""

    stages: tuple[StageLog, ...]
    loss: Float[Array, ""]
    holdout_loss: Float[Array, ""]
    holdout_ratio: Float[Array, ""]

    @property
    def iterations(self) -> Int[Array, ""]:
        return sum(s.iterations for s in self.stages)

    @property
    def fallbacks(self) -> Int[Array, ""]:
        return sum(s.fallbacks for s in self.stages)

    @property
    def zero_steps(self) -> Int[Array, ""]:
        return sum(s.zero_steps for s in self.stages)


class TENGStep(eqx.Module):
    """One time step ``θ_t ↦ θ_{t+Δt}`` of a TENG integrator.

    **Arguments:** the ``integrator`` tableau, the ``stepper`` (network, quadrature
    nodes, least squares, stopping policy), the ``equation``, ``dt``; the caps
    ``iters`` (first stage) and ``iters_later``; the parameters drawn on a step's
    first iteration (``subsample_first``) and on the others (``subsample``);
    ``holdout`` points (m × dim) and their quadrature weight ``holdout_weight`` (one
    number or one per point) for the held-out check (module docstring), or ``None``;
    the rows of the nodes (``boundary``) and of the held-out points
    (``holdout_boundary``) on a Dirichlet boundary, or ``None``.
    """

    integrator: Integrator
    stepper: Stepper
    equation: Equation
    dt: float = eqx.field(static=True)
    iters: int = eqx.field(static=True)
    iters_later: int = eqx.field(static=True)
    subsample_first: int = eqx.field(static=True)
    subsample: int = eqx.field(static=True)
    holdout: Float[Array, "m dim"] | None = None
    holdout_weight: float | Float[Array, " m"] = 0.0
    # Rows of the quadrature / of the held-out points on a Dirichlet boundary (u = 0
    # there); None: no boundary.
    boundary: Bool[Array, " n"] | None = None
    holdout_boundary: Bool[Array, " m"] | None = None

    def rhs(self, theta: Float[Array, " params"], points=None) -> Float[Array, " n"]:
        """``L[û_θ]`` on ``points`` (default: the quadrature grid)."""
        points = self.stepper.points if points is None else points
        return operator(self.equation, lambda p: self.stepper.space.apply(theta, p), points)

    def __call__(
        self, theta: Float[Array, " params"], key: PRNGKeyArray
    ) -> tuple[Float[Array, " params"], StepLog]:
        n = self.stepper.points.shape[0]
        # Targets on the nodes and the held-out points at once: one pass each.
        points = self.stepper.points
        if self.holdout is not None:
            points = jnp.concatenate([points, self.holdout])
        on_boundary = None
        if self.boundary is not None:
            on_boundary = self.boundary if self.holdout is None else jnp.concatenate(
                [self.boundary, self.holdout_boundary])
        u_t = self.stepper.space.apply(theta, points)
        slopes = [self.rhs(theta, points)]
        keys = jax.random.split(key, self.integrator.stages)
        coeffs = list(self.integrator.a) + [self.integrator.b]
        logs = []
        for j, c in enumerate(coeffs):
            target = u_t + self.dt * sum(cj * k for cj, k in zip(c, slopes) if cj != 0.0)
            if on_boundary is not None:
                target = jnp.where(on_boundary, 0.0, target)
            if j == 0:
                theta, log = self.stepper.stage(
                    theta, target[:n], keys[j], self.iters, self.subsample_first, self.subsample
                )
            else:
                theta, log = self.stepper.stage(
                    theta, target[:n], keys[j], self.iters_later, self.subsample, self.subsample
                )
            logs.append(log)
            if j < len(coeffs) - 1:
                slopes.append(self.rhs(theta, points))
        loss = logs[-1].final_loss
        if self.holdout is None:
            holdout_loss = ratio = jnp.full((), jnp.nan, theta.dtype)
        else:
            r = self.stepper.space.apply(theta, self.holdout) - target[n:]
            holdout_loss = jnp.sum(self.holdout_weight * r * r)
            scale = jnp.sum(self.holdout_weight * target[n:] ** 2)
            ratio = holdout_loss / jnp.maximum(loss, jnp.finfo(scale.dtype).eps * scale)
        return theta, StepLog(stages=tuple(logs), loss=loss, holdout_loss=holdout_loss, holdout_ratio=ratio)
