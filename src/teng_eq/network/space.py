"""A network seen as a function of one flat parameter vector θ (:class:`ParamSpace`): what
every fit, step and estimate works on."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float

from teng_eq.network.paper import TENGNet


class ParamSpace(eqx.Module):
    """A network seen as a function of one flat parameter vector θ.

    ``eqx.partition`` splits the trainable arrays from the static rest;
    ``ravel_pytree`` flattens them. All integrators and the stage solver work on θ.
    """

    static: TENGNet = eqx.field(static=True)
    unravel: object = eqx.field(static=True)
    size: int = eqx.field(static=True)

    def __init__(self, net: TENGNet):
        params, static = eqx.partition(net, eqx.is_inexact_array)
        flat, unravel = ravel_pytree(params)
        self.static = static
        self.unravel = unravel
        self.size = int(flat.size)

    def flatten(self, net: TENGNet) -> Float[Array, " params"]:
        return ravel_pytree(eqx.filter(net, eqx.is_inexact_array))[0]

    def static_network(self) -> TENGNet:
        """The network with zeros for its parameters: its structure only."""
        return self.network(jnp.zeros(self.size))

    def network(self, theta: Float[Array, " params"]) -> TENGNet:
        return eqx.combine(self.unravel(theta), self.static)

    def apply(self, theta: Float[Array, " params"], points: Float[Array, "n dim"]) -> Float[Array, " n"]:
        """``û_θ`` at each of ``points`` (a system's: ``(x, c)``, :class:`TENGNet`)."""
        return jax.vmap(self.network(theta))(points)

    def vector(
        self, theta: Float[Array, " params"], points: Float[Array, "n dim"]
    ) -> Float[Array, "n outputs"]:
        """Every component of a system's ``û_θ`` at each of the (spatial) ``points``."""
        return jax.vmap(self.network(theta).vector)(points)
