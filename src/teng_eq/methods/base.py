"""The interface every method implements, TENG and the baselines alike.

:func:`teng_eq.simulation.run_simulation` drives a :class:`Method` without
knowing which one it is:

* ``state = method.init(theta0)``: the method's whole state, a pytree of arrays
  (checkpointed as it is);
* ``state, info = method.step(state, key)``, ``method.steps`` times, compiled
  once: a *sequential* method advances one time step Δt; a global-in-time one
  (``sequential = False``, e.g. a PINN) runs one block of its optimisation;
* ``method.values(state, points, t)``: û(x, t) at ``points``; a sequential
  method's state holds one time, so it ignores ``t``;
* ``method.network(state)``: the trained network, saved as ``params/theta.eqx``.

The class is named by the ``impl`` key of its ``conf/method/*.yaml``; the other
keys of that file are its :attr:`Method.Options`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray, PyTree

from teng_eq.config import bad


class StepInfo(eqx.Module):
    """What one step reports, as device arrays (the driver reads them back).

    ``losses[s, i]`` is the loss of stage (or block) ``s`` before its iteration
    ``i``, and the last finite entry of a row the loss after its last
    iteration; ``lsq[s, i]`` is what iteration ``i`` measured of its own
    subproblem (TENG: the least-squares residual). Rows are padded with NaN
    past their end; they become the run's ``tables/losses.csv``.

    ``scalars`` are per-step metrics logged under their own names
    (``step_loss`` always; e.g. ``holdout_loss``, ``iterations``); those named
    in the method's :attr:`Method.events` are also summed over the run.
    """

    losses: Float[Array, "stages rows"]
    lsq: Float[Array, "stages rows"]
    scalars: dict[str, Array]


class Method(eqx.Module):
    """A way to advance (or fit) a network so that it solves the PDE."""

    #: Steps are time steps (True) or blocks of a global-in-time optimisation (False).
    sequential: ClassVar[bool] = True
    #: Whether the method starts from the shared fitted θ₀.
    uses_theta0: ClassVar[bool] = True
    #: Names of ``StepInfo.scalars`` that count solver events (summed per run).
    events: ClassVar[tuple[str, ...]] = ()

    @dataclasses.dataclass(frozen=True)
    class Options:
        """The method's own config keys (the rest of its yaml); none by default."""

    steps: int = eqx.field(static=True)

    @classmethod
    def check(cls, cfg) -> None:
        """Checks of the whole :class:`~teng_eq.config.RunConfig` that only this
        method needs (e.g. the equations it supports); raise ``ConfigError``."""

    @classmethod
    def build(cls, cfg, problem) -> Method:
        """The method for ``cfg`` on ``problem`` (a :class:`teng_eq.simulation.Problem`)."""
        raise NotImplementedError

    def init(self, theta0: Float[Array, " params"] | None) -> PyTree:
        raise NotImplementedError

    def step(self, state: PyTree, key: PRNGKeyArray) -> tuple[PyTree, StepInfo]:
        raise NotImplementedError

    def values(self, state: PyTree, points: Float[Array, "n dim"], t) -> Float[Array, " n"]:
        raise NotImplementedError

    def network(self, state: PyTree) -> eqx.Module:
        raise NotImplementedError

    @classmethod
    def network_template(cls, cfg) -> eqx.Module:
        """An untrained network of the shape :meth:`network` returns for ``cfg``: what a
        saved ``params/theta.eqx`` is read into. Default: the sequential network."""
        from teng_eq.simulation import build_network

        return build_network(cfg)


def stack_rows(rows: list[Array], width: int) -> Float[Array, "stages width"]:
    """1-D arrays as the rows of one array, NaN-padded to ``width``."""
    return jnp.stack([jnp.concatenate([r, jnp.full(width - r.shape[0], jnp.nan, r.dtype)]) for r in rows])


def require_periodic_domain(cfg) -> None:
    """One-line :class:`~teng_eq.config.ConfigError` where the equation's domain has a
    boundary: the baselines fit the PDE alone, with no boundary rows (TENG has them)."""
    if cfg.equation.periods is None:
        bad("equation", cfg.equation.name,
            f"method {cfg.method.name} needs a periodic domain (it has no boundary term)")


__all__ = ["Method", "StepInfo", "require_periodic_domain", "stack_rows"]
