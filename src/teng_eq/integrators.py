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

Every target is built from ``û_t`` on the quadrature grid, except on the rows of a
Dirichlet boundary (``boundary``), where it is the boundary value 0; the first fit of a step
runs ``iters`` iterations (its first drawing ``subsample_first`` parameters), the
later fits ``iters_later``.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

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


class TENGStep(eqx.Module):
    """One time step ``θ_t ↦ θ_{t+Δt}`` of a TENG integrator."""

    integrator: Integrator
    stepper: Stepper
    equation: Equation
    dt: float = eqx.field(static=True)
    iters: int = eqx.field(static=True)
    iters_later: int = eqx.field(static=True)
    subsample_first: int = eqx.field(static=True)
    subsample: int = eqx.field(static=True)
    # Rows of the quadrature on a Dirichlet boundary (u = 0 there); None: no boundary.
    boundary: Bool[Array, " n"] | None = None

    def rhs(self, theta: Float[Array, " params"]) -> Float[Array, " n"]:
        """``L[û_θ]`` on the quadrature grid."""
        return operator(
            self.equation, lambda p: self.stepper.space.apply(theta, p), self.stepper.points
        )

    def __call__(
        self, theta: Float[Array, " params"], key: PRNGKeyArray
    ) -> tuple[Float[Array, " params"], tuple[StageLog, ...]]:
        u_t = self.stepper.values(theta)
        slopes = [self.rhs(theta)]
        keys = jax.random.split(key, self.integrator.stages)
        coeffs = list(self.integrator.a) + [self.integrator.b]
        logs = []
        for j, c in enumerate(coeffs):
            target = u_t + self.dt * sum(cj * k for cj, k in zip(c, slopes) if cj != 0.0)
            if self.boundary is not None:
                target = jnp.where(self.boundary, 0.0, target)
            if j == 0:
                theta, log = self.stepper.stage(
                    theta, target, keys[j], self.iters, self.subsample_first, self.subsample
                )
            else:
                theta, log = self.stepper.stage(
                    theta, target, keys[j], self.iters_later, self.subsample, self.subsample
                )
            logs.append(log)
            if j < len(coeffs) - 1:
                slopes.append(self.rhs(theta))
        return theta, tuple(logs)
