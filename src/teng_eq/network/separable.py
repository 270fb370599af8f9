"""A separable network: one small network per axis, combined by a rank-r sum of products
(SPINN's form, Cho et al. 2023).

``û(x) = b + Σ_{ρ=1}^{r} w_ρ Π_{d=1}^{D} f_{d,ρ}(x_d)``

with ``f_d = (f_{d,1}, …, f_{d,r})`` the r outputs of a :class:`~teng_eq.network.paper.TENGNet`
on the one coordinate x_d: its periodic embedding of that axis alone
(``a_j cos(2π x_d / L_d + φ_j) + c_j``, ``features`` of them; x_d itself on a non-periodic
domain), tanh hidden layers, a linear output layer of r rows. A sum of r products of
one-dimensional functions is exact for data of that form (the paper's 3-D heat u₀ is one:
a constant and 16 products of sines and cosines, whose 2×2×2 coefficient tensors have rank
at most 3 each), and heat keeps it exact: every product decays as a product.

**Parameters**, with F features, width w, ``depth`` layers in all (embedding, depth − 2 hidden,
output), r terms and m components (1 for a scalar)::

    per axis:  3F + (F + 1) w + (depth − 3)(w + 1) w + (w + 1) r
    in all:    D · (per axis) + (r + 1) m

linear in the dimension D (the paper's network grows as its first layer, D F w). F = 10,
w = 20, depth 4, r = 8: 838 per axis, 2,523 in 3-D, 8,389 at D = 10.

**Jacobian** (:meth:`SeparableNet.jacobian_factors_t`), factored by hand: with
``c_{d,ρ}(x) = w_ρ Π_{d' ≠ d} f_{d',ρ}(x_{d'})`` (products of the other axes' factors),

    ∂û/∂θ_d = Σ_ρ c_{d,ρ} ∂f_{d,ρ}/∂θ_d,   ∂û/∂w_ρ = Π_d f_{d,ρ},   ∂û/∂b = 1,

so axis d's rows are its network's factored rows with the output cotangent ``c_d`` in place
of a one-hot row (:meth:`~teng_eq.network.paper.TENGNet.cotangent_factors_t`): one forward and
one backward pass per axis, no per-point autodiff. A system's row ``(x, c)`` takes
component c's weights ``w_{c,ρ}``: the factors are shared by every component (``components:
shared``).

**Initialisation**: the axis networks as the paper's (``init="paper"``: embedding from a
truncated normal, LeCun-normal weights, zero biases); ``w`` LeCun-normal over the r terms,
``b = 0``. The ``odd`` start of the paper's network does not carry over: it would make every
factor odd under its own axis' half-period shift, which the products of a u₀ odd under the
shift of all axes at once need not be (cos 2x cos 2y sin z).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from teng_eq.config.options import at_least
from teng_eq.errors import bad
from teng_eq.network.paper import TENGNet, stacked_columns


@dataclasses.dataclass(frozen=True)
class SeparableConfig:
    """The ``network`` group of a separable network (``network=separable``): ``rank`` r terms
    and each axis' network of ``features``, ``width`` and ``depth`` layers in all (module
    docstring); ``components``: a system's, ``shared`` only (the factors serve every
    component, each with its own weights of the terms)."""

    KIND: ClassVar[str] = "separable"

    kind: str
    rank: int
    features: int
    width: int
    depth: int
    components: str

    @property
    def init(self) -> str:
        """The axis networks' initialisation (module docstring): not a setting."""
        return "paper"

    def build(self, dim: int, periods: tuple[float, ...] | None, seed: int, init: str | None = None,
              outputs: int = 1, harmonics: int = 1) -> SeparableNet:
        """The untrained :class:`SeparableNet` on a ``dim``-dimensional domain (each axis embedded
        with its period and ``harmonics``, or its coordinate itself where ``periods`` is None), from
        ``seed`` as the paper's network draws its key; ``init`` (the paper network's) does not apply."""
        key, _ = jax.random.split(jax.random.PRNGKey(seed))
        return SeparableNet(dim, self.rank, self.features, self.width, self.depth, periods,
                            periodic=periods is not None, outputs=outputs, init=self.init,
                            harmonics=harmonics, key=key)

    def validate(self, prefix: str = "network", resolved: bool = False) -> None:
        if self.kind != self.KIND:
            raise bad(f"{prefix}.kind", self.kind, f"must be {self.KIND!r} here")
        at_least(prefix, self, 1, "rank", "features", "width")
        if self.depth < 3:
            raise bad(f"{prefix}.depth", self.depth, "must be >= 3 (embedding, hidden, output)")
        if self.components != "shared":
            raise bad(f"{prefix}.components", self.components,
                      "the separable network takes 'shared' only (one set of factors, a term's "
                      "weight per component)")


class SeparableNet(eqx.Module):
    """``û(x) = b + Σ_ρ w_ρ Π_d f_{d,ρ}(x_d)`` (module docstring): ``factors`` one
    :class:`~teng_eq.network.paper.TENGNet` per axis (one input, ``rank`` outputs), ``weight``
    the terms' weights per component, ``bias`` a constant per component. Points and the
    interface are :class:`~teng_eq.network.paper.TENGNet`'s: a system's rows are ``(x, c)``."""

    factors: tuple[TENGNet, ...]
    weight: Float[Array, "outputs rank"]
    bias: Float[Array, " outputs"]
    init: str = eqx.field(static=True)

    def __init__(self, dim: int, rank: int, features: int, width: int, depth: int, lengths=None, *,
                 periodic: bool = True, outputs: int = 1, init: str = "paper", harmonics: int = 1,
                 key: PRNGKeyArray):
        lengths = (2 * math.pi,) * dim if lengths is None else tuple(lengths)
        keys = jax.random.split(key, dim + 1)
        self.factors = tuple(
            TENGNet(dim=1, features=features, width=width, depth=depth, lengths=(lengths[d],),
                    embedding_activation="tanh", init=init, periodic=periodic, outputs=rank,
                    harmonics=harmonics, key=keys[d])
            for d in range(dim))
        lecun = jax.nn.initializers.lecun_normal(in_axis=-1, out_axis=-2)
        self.weight = lecun(keys[-1], (outputs, rank))
        self.bias = jnp.zeros(outputs)
        self.init = init

    @property
    def outputs(self) -> int:
        return self.weight.shape[0]

    @property
    def rank(self) -> int:
        return self.weight.shape[1]

    def terms(self, x: Float[Array, " dim"]) -> Float[Array, " rank"]:
        """``(Π_d f_{d,ρ}(x_d))_ρ`` at the (spatial) point ``x``."""
        out = jnp.ones(self.rank, x.dtype)
        for d, net in enumerate(self.factors):
            out = out * jnp.reshape(net.vector(x[d : d + 1]), (-1,))
        return out

    def vector(self, x: Float[Array, " dim"]) -> Float[Array, " outputs"]:
        """Every component's value at the (spatial) point ``x``."""
        return self.weight @ self.terms(x) + self.bias

    def __call__(self, x: Float[Array, "*n dim"]) -> Float[Array, "*n"]:
        """û at the point ``x`` (dim,), or at every row of ``x`` (n, dim); a system's rows
        are ``(x, c)`` and the value that of component c."""
        if x.ndim == 2:
            return jax.vmap(self)(x)
        if self.outputs == 1:
            return self.vector(x)[0]
        # The comparison has no derivative: c selects, the point's coordinates differentiate.
        return self.vector(x[:-1]) @ (jnp.arange(self.outputs) == x[-1]).astype(x.dtype)

    def jacobian_factors_t(
        self, points: Float[Array, "n dim"]
    ) -> tuple[Float[Array, " n"], Float[Array, "g n"], Float[Array, "h n"]]:
        """``(û, Gᵀ, Hᵀ)`` with ``∂û(xₙ)/∂θ_p = Gᵀ[gcol_p, n] · Hᵀ[hcol_p, n]`` (module
        docstring). Row layout (see :meth:`factor_columns`)::

            Gᵀ = [axis 1's Gᵀ with cotangent c₁ | … | axis D's | select]
            Hᵀ = [axis 1's Hᵀ | … | axis D's | Π_d f_d | 1]

        ``select``: one row of ones (a scalar), or the rows' one-hot component (a system).
        The products over the other axes are prefix and suffix products (no division by a
        factor that may vanish)."""
        n = points.shape[0]
        if self.outputs > 1:
            select = (jnp.arange(self.outputs)[:, None] == points[None, :, -1]).astype(points.dtype)
            points = points[:, :-1]
            w = self.weight.T @ select  # (rank, n): each row's component's weights
            b = self.bias @ select
        else:
            select = jnp.ones((1, n), points.dtype)
            w, b = self.weight[0][:, None], self.bias[0]
        forward = [net.layer_inputs_t(points[:, d : d + 1]) for d, net in enumerate(self.factors)]
        f = [net.output.weight @ inputs[-1] + net.output.bias[:, None]
             for net, (inputs, _) in zip(self.factors, forward)]  # (rank, n) per axis
        before = [jnp.ones_like(f[0])]
        for fd in f[:-1]:
            before.append(before[-1] * fd)
        after = [jnp.ones_like(f[0])]
        for fd in f[:0:-1]:
            after.append(after[-1] * fd)
        after = after[::-1]
        terms = before[-1] * f[-1]
        u = jnp.sum(w * terms, axis=0) + b
        gs, hs = [], []
        for d, (net, (inputs, head)) in enumerate(zip(self.factors, forward)):
            gs.append(net.cotangent_factors_t(inputs, w * before[d] * after[d]))
            hs.append(jnp.concatenate(head + inputs, axis=0))
        Gt = jnp.concatenate([*gs, select], axis=0)
        Ht = jnp.concatenate([*hs, terms, jnp.ones((1, n), points.dtype)], axis=0)
        return u, Gt, Ht

    def factor_rows(self) -> tuple[int, int]:
        """The rows of ``Gᵀ`` and ``Hᵀ`` (:meth:`jacobian_factors_t`)."""
        rows = [net.factor_rows() for net in self.factors]
        return sum(g for g, _ in rows) + self.outputs, sum(h for _, h in rows) + self.rank + 1

    def factor_columns(self) -> tuple[Int[np.ndarray, " params"], Int[np.ndarray, " params"]]:
        """Flat ``(gcol, hcol)`` for :meth:`jacobian_factors_t` in ``ravel_pytree`` order: the
        axis networks' (each offset past the rows of those before it), then ``weight``
        (component c's row, term ρ's product), then ``bias`` (c's row, the ones)."""
        g_cols, h_cols, (g_off, h_off) = stacked_columns(self.factors)
        c, rho = np.meshgrid(np.arange(self.outputs), np.arange(self.rank), indexing="ij")
        g_cols += [(g_off + c).ravel(), g_off + np.arange(self.outputs)]
        h_cols += [(h_off + rho).ravel(), np.full(self.outputs, h_off + self.rank)]
        return np.concatenate(g_cols).astype(np.int32), np.concatenate(h_cols).astype(np.int32)
