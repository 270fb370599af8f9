"""The fits' points sharded over the local devices (the config key ``devices``).

TENG's least squares has far more rows (points, N) than columns (drawn parameters, k):
the rows split over the devices and only the k × k Gram matrix and the k-vector Jᵀr need
a sum across them,

    JᵀJ = Σ_d J_dᵀ J_d,   Jᵀr = Σ_d J_dᵀ r_d,

``J_d`` the rows of device d's points. A :class:`PointMesh` is a one-axis
:class:`jax.sharding.Mesh` of the local devices (axis :data:`AXIS`): the points and every
array with a point axis (û, the Jacobian factors Gᵀ and Hᵀ, residuals) are sharded along
it, θ and the small solve replicated.

Two mechanisms, each where it fits:

* the row-wise work (the network, its Jacobian factors, residuals and losses) by sharding
  annotations (:meth:`PointMesh.rows`): XLA's partitioner splits every point-wise
  operation and inserts the all-reduce of each sum over points, so the stage solver, the
  explicit and implicit steps and θ₀'s fit run unchanged on sharded points;
* the normal equations by :func:`jax.shard_map` with one ``psum``
  (:meth:`PointMesh.gram_and_rhs`): each device forms its partial ``[J_dᵀJ_d | J_dᵀr_d]``
  from its own rows (the gram's blocks as on one device) and a single all-reduce sums the
  k × (k + 1) result, where annotations alone would leave one all-reduce per Gram block.

``devices: 1`` (the default) builds no mesh: no annotation is made, and the programs are
those of one device, bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from jaxtyping import Array, Float

from teng_eq.errors import bad

#: The mesh's one axis: the points.
AXIS = "points"


def check_devices(value) -> int | str:
    """``devices`` as configured: a positive integer or ``"all"`` (one line otherwise)."""
    if value == "all" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise bad("devices", value, "must be a positive integer or 'all' (the local devices)")


@dataclasses.dataclass(frozen=True)
class PointMesh:
    """A one-axis mesh of local devices over which the points are split (module docstring)."""

    mesh: Mesh

    @property
    def size(self) -> int:
        """Devices on the mesh."""
        return self.mesh.devices.size

    def spec(self, ndim: int, axis: int) -> NamedSharding:
        """Arrays of ``ndim`` dimensions split along ``axis``, replicated along the others."""
        return NamedSharding(self.mesh, PartitionSpec(*(AXIS if i == axis else None for i in range(ndim))))

    def rows(self, x: Array, axis: int = 0) -> Array:
        """``x`` annotated as split along its point ``axis`` (where its length is a multiple of the
        devices; else left to XLA: an evaluation grid that does not divide is computed whole)."""
        if x.shape[axis] % self.size:
            return x
        return jax.lax.with_sharding_constraint(x, self.spec(x.ndim, axis))

    def replicated(self, tree):
        """``tree``'s arrays placed on every device of the mesh (θ, a method's state): the compiled
        programs take their inputs so."""
        return jax.device_put(tree, NamedSharding(self.mesh, PartitionSpec()))

    def everywhere(self, tree):
        """``tree``'s arrays annotated as whole on every device (inside a traced program: the state a
        step returns, which the next step takes as :meth:`replicated` gives it)."""
        return jax.lax.with_sharding_constraint(tree, NamedSharding(self.mesh, PartitionSpec()))

    def gram_and_rhs(self, blocks: Sequence[Float[Array, "_ rows"]], b: Float[Array, " rows"],
                     gram: Callable) -> tuple[Float[Array, "cols cols"], Float[Array, " cols"]]:
        """``(AᵀA, Aᵀb)`` for ``Aᵀ`` given as row blocks split along their point axis: each device's
        ``gram`` of its own columns and its ``Bᵢ b``, summed across the devices by one ``psum``."""
        def local(blocks, b):
            G = gram(blocks)
            both = jnp.concatenate([G, jnp.concatenate([B @ b for B in blocks])[:, None]], axis=1)
            return jax.lax.psum(both, AXIS)

        columns = PartitionSpec(None, AXIS)
        both = jax.shard_map(local, mesh=self.mesh, in_specs=((columns,) * len(blocks), PartitionSpec(AXIS)),
                             out_specs=PartitionSpec())(tuple(blocks), b)
        return both[:, :-1], both[:, -1]

    def check_points(self, count: int, what: str) -> None:
        """One line where ``count`` points (``what``) do not split evenly over the devices."""
        if count % self.size:
            raise bad("devices", self.size, f"does not divide the {count:,} points of {what}: the fit's "
                      "points split evenly over the devices (choose a grid or a device count that divides)")


def point_mesh(devices: int | str) -> PointMesh | None:
    """The mesh of ``devices`` local devices (``"all"``: every one), or None for one device
    (the unsharded programs). One line where more are asked for than this process has."""
    available = jax.local_devices()
    count = len(available) if devices == "all" else check_devices(devices)
    if count > len(available):
        raise bad("devices", devices, f"more than the {len(available)} local device(s) of this process "
                  f"({available[0].platform}); XLA_FLAGS=--xla_force_host_platform_device_count=N "
                  "splits a CPU into N")
    if count == 1:
        return None
    return PointMesh(Mesh(np.array(available[:count]), (AXIS,)))
