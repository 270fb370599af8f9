"""Methods for the driver's tests, named by ``method.impl=fake_methods:…`` (this
folder is on the path of the tests and of the jobs they start).

* :class:`Toy`: no network fit, a state that is a pytree of a float vector and an
  integer counter, random draws from the step's key, a loss that grows by
  ``growth²`` per step, and an optional NaN at step ``nan_at``: cheap to
  compile (a whole sweep job in seconds), sensitive to every part of a
  checkpoint (state, counter, key), and divergent on cue.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from teng_eq.methods.base import Method, StepInfo


class Toy(Method):
    @dataclasses.dataclass(frozen=True)
    class Options:
        growth: float
        nan_at: int

    uses_theta0 = False
    growth: float = eqx.field(static=True)
    nan_at: int = eqx.field(static=True)

    @classmethod
    def build(cls, cfg, problem):
        o = cfg.method.options
        return cls(steps=cfg.n_steps, growth=o.growth, nan_at=o.nan_at)

    def init(self, theta0):
        return {"a": jnp.array([1.0, 0.5, -0.25]), "n": jnp.zeros((), jnp.int32)}

    def step(self, state, key):
        n = state["n"] + 1
        a = state["a"] * self.growth + 1e-6 * jax.random.normal(key, (3,))
        a = jnp.where(n == self.nan_at, jnp.nan, a)
        loss = jnp.sum(a * a)
        info = StepInfo(losses=jnp.stack([loss, loss])[None], lsq=jnp.full((1, 2), 0.5),
                        scalars={"step_loss": loss})
        return {"a": a, "n": n}, info

    def values(self, state, points, t):
        a = state["a"]
        return a[0] * jnp.sin(points[:, 0]) + a[1] * jnp.cos(points[:, 1]) + a[2]

    def network(self, state):
        return state["a"]
