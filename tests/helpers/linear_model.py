"""A network linear in θ on which TENG's projections are exact: the order tests of the
integrators (tests/test_orders.py).

``û_θ(x) = Σⱼ θⱼ cos(kⱼ·x − φⱼ)`` over a few Fourier modes (each k with φ = 0 and π/2:
cos and sin). The heat operator maps this span into itself (``Δ cos(k·x − φ) = −|k|²
cos(k·x − φ)``), the initial condition ``sines2d`` lies in it, and on a periodic grid
that resolves the modes the stage's least squares are solved exactly: a TENG step on
this model is the Runge–Kutta step of its tableau applied to ``θ' = Λθ`` (``Λ = −ν|k|²``),
up to the stage solver's damping (relative 1e-7, contracted by every further iteration).
All that is left of the error is the integrator's."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from teng_eq.methods.teng import TENG
from teng_eq.network.space import ParamSpace
from teng_eq.run.config import RunConfig

#: Wave vectors k (each with a cos and a sin): sines2d's modes (1, ±1), (2, 1) and three more.
WAVES = ((1, 1), (1, -1), (2, 1), (1, 2), (3, 0), (0, 2))


class FourierNet(eqx.Module):
    """``x ↦ Σⱼ θⱼ cos(kⱼ·x − φⱼ)``, with the two hooks of the stage solver's
    factored Jacobian (:meth:`teng_eq.network.paper.TENGNet.jacobian_factors_t`):
    ``∂û(xₙ)/∂θⱼ = 1 · cos(kⱼ·xₙ − φⱼ)``, so Gᵀ is one row of ones and Hᵀ the basis."""

    theta: jax.Array
    waves: tuple = eqx.field(static=True)
    phases: tuple = eqx.field(static=True)

    def basis(self, points):
        k = jnp.asarray(self.waves, dtype=points.dtype)
        return jnp.cos(points @ k.T - jnp.asarray(self.phases, dtype=points.dtype))

    def __call__(self, x):
        return self.basis(x[None])[0] @ self.theta

    def factor_columns(self):
        return np.zeros(self.theta.size, int), np.arange(self.theta.size)

    def jacobian_factors_t(self, points):
        b = self.basis(points)
        return b @ self.theta, jnp.ones((1, points.shape[0]), b.dtype), b.T


def fourier_net() -> FourierNet:
    waves = WAVES + WAVES
    phases = (0.0,) * len(WAVES) + (np.pi / 2,) * len(WAVES)
    return FourierNet(jnp.zeros(len(waves)), tuple(tuple(float(v) for v in k) for k in waves), phases)


def teng_on_fourier(cfg: RunConfig) -> tuple[TENG, np.ndarray]:
    """TENG of ``cfg`` (its class — explicit or implicit —, integrator, stages, solver) on
    :func:`fourier_net`, θ₀ the least-squares fit of the initial condition on the run's grid (exact for
    sines2d); and the decay rates ``Λⱼ = −ν|kⱼ|²`` of heat, with which ``θ(t) = θ₀ e^{Λt}``."""
    net = fourier_net()
    space = ParamSpace(net)
    eq, options = cfg.problem.equation, cfg.method.options
    quadrature = eq.quadrature(options.grid)
    basis = np.asarray(net.basis(jnp.asarray(quadrature.points)))
    u0 = np.asarray(eq.u0(np.asarray(quadrature.points).T))
    theta0 = jnp.asarray(np.linalg.lstsq(basis, u0, rcond=None)[0])
    cls = cfg.method.cls
    method = cls(n_steps=cfg.problem.n_steps, space=space, theta0=theta0, report=None,
                 **cls.parts(options, cfg.problem, space, quadrature))
    rates = -eq.nu * np.sum(np.square(net.waves), axis=1)
    return method, rates
