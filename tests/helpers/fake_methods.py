"""Methods for the driver's tests, named by ``method.impl=helpers.fake_methods:…``
(tests/ is on the path of the tests and of the jobs they start: helpers.processes.job_env).

* :class:`Toy`: no network fit, a state that is a pytree of a float vector and an
  integer counter, random draws from the step's key, a loss that grows by
  ``growth²`` per step, and an optional NaN at step ``nan_at``: cheap to
  compile (a whole sweep job in seconds), sensitive to every part of a
  checkpoint (state, counter, key), and divergent on cue. ``+method.delay=<s>``
  makes each step take that long (a host sleep inside the compiled step), so
  that a test can stop a run, or its store, half-way.
"""

from __future__ import annotations

import dataclasses
import time

import equinox as eqx
import jax
import jax.numpy as jnp

from teng_eq.fit.results import StepRecord
from teng_eq.methods.base import Method

#: TENG's keys of the default method group (teng_heun), which a fake method does not take.
_NOT_TENG = [f"~method.{key}" for key in ("integrator", "iters", "iters_later", "subsample_first",
                                          "subsample", "solver", "damping", "stopping", "holdout", "grid",
                                          "network", "fit", "warm_start", "warm_rate", "conserve")]

#: Overrides that turn the default method group (teng_heun) into :class:`Toy`: its
#: class, its two keys, and none of TENG's; its field is not the equation's solution, so
#: its error bounds no divergence (``divergence_error``).
TOY = ["method.impl=helpers.fake_methods:Toy", "+method.growth=1.5", "+method.nan_at=0", *_NOT_TENG,
       "divergence_error=inf"]


class Toy(Method):
    @dataclasses.dataclass(frozen=True)
    class Options:
        growth: float
        nan_at: int
        delay: float = 0.0

    growth: float = eqx.field(static=True)
    nan_at: int = eqx.field(static=True)
    delay: float = eqx.field(static=True, default=0.0)

    @classmethod
    def build(cls, options, problem, *, cache_dir=None, log=None):
        return cls(n_steps=problem.n_steps, growth=options.growth, nan_at=options.nan_at, delay=options.delay)

    @classmethod
    def network_template(cls, options, problem):
        return jnp.zeros(3)

    def init(self):
        return {"a": jnp.array([1.0, 0.5, -0.25]), "n": jnp.zeros((), jnp.int32)}

    def step(self, state, key, inputs):
        n = state["n"] + 1
        a = state["a"] * self.growth + 1e-6 * jax.random.normal(key, (3,))
        a = jnp.where(n == self.nan_at, jnp.nan, a)
        if self.delay:
            jax.debug.callback(lambda: time.sleep(self.delay), ordered=True)
        loss = jnp.sum(a * a)
        record = StepRecord(losses=jnp.stack([loss, loss])[None], inner=jnp.full((1, 2), 0.5),
                            metrics={"step_loss": loss})
        return {"a": a, "n": n}, record

    def values(self, state, points, t):
        a = state["a"]
        return a[0] * jnp.sin(points[:, 0]) + a[1] * jnp.cos(points[:, 1]) + a[2]

    def network(self, state):
        return state["a"]


#: :class:`Decay` in place of the default method group, as :data:`TOY` does for :class:`Toy`.
DECAY = ["method.impl=helpers.fake_methods:Decay", "+method.constant=0.5", *_NOT_TENG, "divergence_error=inf"]


class Decay(Method):
    """A method the step-size controller can drive: ``a ← a (1 − Δt)`` per step (no
    randomness), reporting an embedded estimate ``local_error = constant·Δt²`` (order 2,
    as Heun–Euler's) and ``u_l2 = ‖a‖``: the controller's decisions follow in closed
    form, and the state after a step shows whether a rejected try touched it.
    ``+method.delay=<s>``: as :class:`Toy`'s."""

    @dataclasses.dataclass(frozen=True)
    class Options:
        constant: float
        delay: float = 0.0

    constant: float = eqx.field(static=True)
    delay: float = eqx.field(static=True, default=0.0)

    @classmethod
    def build(cls, options, problem, *, cache_dir=None, log=None):
        return cls(n_steps=problem.n_steps, constant=options.constant, delay=options.delay)

    @classmethod
    def network_template(cls, options, problem):
        return jnp.zeros(3)

    @classmethod
    def error_order(cls, options) -> int:
        return 2

    def init(self):
        return jnp.array([1.0, 0.5, -0.25])

    def step(self, state, key, inputs):
        a = state * (1.0 - inputs.dt)
        if self.delay:
            jax.debug.callback(lambda: time.sleep(self.delay), ordered=True)
        record = StepRecord(losses=jnp.zeros((1, 1)), inner=jnp.zeros((1, 1)),
                            metrics={"step_loss": jnp.zeros(()), "local_error": self.constant * inputs.dt**2,
                                     "u_l2": jnp.sqrt(jnp.sum(a * a))})
        return a, record

    def values(self, state, points, t):
        return state[0] * jnp.sin(points[:, 0]) + state[1] * jnp.cos(points[:, 1]) + state[2]

    def network(self, state):
        return state
