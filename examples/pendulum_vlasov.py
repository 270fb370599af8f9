"""A phase-space density carried by the pendulum: ``∂ₜf = −v ∂ₓf + sin(x) ∂ᵥf`` on
``[−π, π)²`` (x the angle, v the angular velocity), no diffusion: a velocity field
``(v, −sin x)`` that depends on the point, as a user's Vlasov-type transport has.

The field is divergence-free (∂ₓv = ∂ᵥ sin x = 0): it moves f along the pendulum's
orbits ``ẋ = v, v̇ = −sin x`` without growing or damping it, and its energy
``v²/2 − cos x`` is constant on each. The exact solution is u₀ at the point the orbit
through (x, v) came from, ``f(x, v, t) = f₀(X(−t), V(−t))``, found by integrating the
orbit backwards (DOP853, rtol 1e-12): the run's reference. f₀ is a periodic blob,
``exp(κ(cos(x − 0.8) − 1) + κ(cos v − 1))`` with κ = 8 (width about 1/√κ = 0.35), so that
the orbit's start may lie outside the box (f₀ is read there as the box's own, wrapped). The v
axis is periodic as a truncation: f₀ there is e^{−16} = 1e-7 of its peak, and the orbits
through the blob stay below |v| = 2; the coefficient −v of ∂ₓ jumps at v = ±π, where
almost nothing is carried.
"""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

from teng_eq.equations.periodic import PeriodicBox


def _blob(x):
    xp = jnp if isinstance(x, jax.Array) else np
    return xp.exp(8.0 * (xp.cos(x[0] - 0.8) - 1) + 8.0 * (xp.cos(x[1]) - 1))


class PendulumVlasov(PeriodicBox):
    """``∂ₜf = −v ∂ₓf + sin(x) ∂ᵥf`` on [−π, π)²; exact along the orbits."""

    dim = 2
    initial_conditions = {"blob": _blob}

    def operator(self, u, t):
        return -u.x[1] * u.grad[0] + jnp.sin(u.x[0]) * u.grad[1]

    def growth_rate(self, u, grad_u):
        """0: the field (v, −sin x) is divergence-free, so ⟨−v∂ₓe + sin(x)∂ᵥe, e⟩ = 0."""
        return 0.0

    def solution(self, x, t):
        """f₀ at the orbit's start: (x, v) carried by ẋ = −v, v̇ = sin x (time reversed) for t."""
        x = np.asarray(x, np.float64)
        if t == 0.0:
            return _blob(x)
        n = x.shape[1]

        def backwards(_, y):
            return np.concatenate([-y[n:], np.sin(y[:n])])

        end = solve_ivp(backwards, (0.0, float(t)), x.ravel(), method="DOP853", rtol=1e-12, atol=1e-13)
        return _blob(end.y[:, -1].reshape(2, n))
