"""The paper's network: a periodic embedding followed by a tanh MLP.

``û(x) = W₆ tanh(W₅ ⋯ tanh(W₁ e(x) + b₁) ⋯ + b₅) + b₆`` with the periodic embedding
``e(x)_{d,j} = a_{d,j} cos(2π x_d / L_d + φ_{d,j}) + c_{d,j}`` (20 features per input
dimension). With width 40 and 7 layers in all (embedding, 5 hidden, output) that
is 8,361 parameters in 2-D.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Float, Int, PRNGKeyArray


class PeriodicEmbedding(eqx.Module):
    """``e_{d,j}(x) = a_{d,j} cos(k_d x_d + φ_{d,j}) + c_{d,j}``, ``k_d = 2π/L_d``."""

    a: Float[Array, "dim features"]
    phi: Float[Array, "dim features"]
    c: Float[Array, "dim features"]
    wavenumbers: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, dim: int, features: int, lengths, *, key: PRNGKeyArray):
        ka, kp = jax.random.split(key)
        self.a = jax.random.normal(ka, (dim, features))
        self.phi = jax.random.uniform(kp, (dim, features), maxval=2 * math.pi)
        self.c = jnp.zeros((dim, features))
        self.wavenumbers = tuple(2 * math.pi / float(length) for length in lengths)

    def angles(self, x: Float[Array, " dim"]) -> Float[Array, "dim features"]:
        return jnp.asarray(self.wavenumbers)[:, None] * x[:, None] + self.phi

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, " dim*features"]:
        return (self.a * jnp.cos(self.angles(x)) + self.c).reshape(-1)


class TENGNet(eqx.Module):
    """Scalar network ``û: ℝᵈ → ℝ``; ``hidden`` layers take tanh, ``output`` does not.

    ``periodic=False`` drops the embedding: the first layer takes x itself (the
    paper's network on the disk, where the domain is not periodic).
    """

    embedding: PeriodicEmbedding | None  # None: plain Cartesian input (non-periodic domains)
    hidden: tuple[eqx.nn.Linear, ...]
    output: eqx.nn.Linear

    def __init__(
        self,
        dim: int = 2,
        features: int = 20,
        width: int = 40,
        depth: int = 7,
        lengths=None,
        *,
        periodic: bool = True,
        key: PRNGKeyArray,
    ):
        if depth < 3:
            raise ValueError(f"depth must be >= 3 (embedding, hidden, output), got {depth}")
        lengths = (2 * math.pi,) * dim if lengths is None else lengths
        keys = jax.random.split(key, depth)
        self.embedding = PeriodicEmbedding(dim, features, lengths, key=keys[0]) if periodic else None
        sizes = [dim * features if periodic else dim] + [width] * (depth - 2)
        self.hidden = tuple(
            eqx.nn.Linear(n_in, n_out, key=k)
            for n_in, n_out, k in zip(sizes[:-1], sizes[1:], keys[1:-1])
        )
        self.output = eqx.nn.Linear(width, "scalar", key=keys[-1])

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        h = x if self.embedding is None else self.embedding(x)
        for layer in self.hidden:
            h = jnp.tanh(layer(h))
        return self.output(h)

    def jacobian_factors(
        self, points: Float[Array, "n dim"]
    ) -> tuple[Float[Array, " n"], Float[Array, "n g"], Float[Array, "n h"]]:
        """``(û, G, H)`` with ``∂û(xₙ)/∂θ_p = G[n, gcol_p] · H[n, hcol_p]`` for every p.

        Every parameter of this network enters as (cotangent of some pre-activation)
        × (some per-sample factor): ``∂û/∂W[o, i] = ∂û/∂z[o] · h_in[i]``,
        ``∂û/∂b[o] = ∂û/∂z[o]``, ``∂û/∂a = ∂û/∂e · cos(·)``, ``∂û/∂φ = ∂û/∂e · (−a sin(·))``,
        ``∂û/∂c = ∂û/∂e``. So the Jacobian of any column subset costs one batched
        forward/backward pass plus an O(n·|subset|) gather, never the full
        ``n × params`` matrix. Column layout (see :meth:`factor_columns`)::

            G = [∂û/∂e | ∂û/∂z₁ | … | ∂û/∂z_L | ∂û/∂z_out]
            H = [1 | cos | −a sin | e | h₁ | … | h_L]

        The sample-major view of :meth:`jacobian_factors_t`.
        """
        u, Gt, Ht = self.jacobian_factors_t(points)
        return u, Gt.T, Ht.T

    def jacobian_factors_t(
        self, points: Float[Array, "n dim"]
    ) -> tuple[Float[Array, " n"], Float[Array, "g n"], Float[Array, "h n"]]:
        """``(û, Gᵀ, Hᵀ)``: :meth:`jacobian_factors` with one row per factor.

        Feature-major so that the rows ``Jᵀ[p] = Gᵀ[gcol_p] ∘ Hᵀ[hcol_p]`` of a
        subset Jacobian are contiguous row gathers, and ``JᵀJ`` a plain GEMM of
        row-major operands (measured at 64², 384 columns: the subset Jacobian
        1.7× faster than gathering columns of the sample-major factors).
        The embedding uses ``cos(k x + φ) = cos(k x) cos φ − sin(k x) sin φ``: 2n + 2F
        transcendentals instead of 2nF, exact to a few ulp.
        """
        emb = self.embedding
        n = points.shape[0]
        if emb is None:
            # Cartesian input: the first layer sees x itself; no embedding factors.
            h, head = points.T, [jnp.ones((1, n), points.dtype)]
        else:
            kx = jnp.asarray(emb.wavenumbers)[:, None] * points.T  # (dim, n)
            ckx, skx = jnp.cos(kx)[:, None, :], jnp.sin(kx)[:, None, :]
            cphi, sphi = jnp.cos(emb.phi)[:, :, None], jnp.sin(emb.phi)[:, :, None]
            cos = ckx * cphi - skx * sphi  # (dim, features, n)
            sin = skx * cphi + ckx * sphi
            h = (emb.a[:, :, None] * cos + emb.c[:, :, None]).reshape(-1, n)
            head = [jnp.ones((1, n), h.dtype), cos.reshape(-1, n), (-emb.a[:, :, None] * sin).reshape(-1, n)]
        inputs = []
        for layer in self.hidden:
            inputs.append(h)
            h = jnp.tanh(layer.weight @ h + layer.bias[:, None])
        inputs.append(h)
        u = self.output.weight[0] @ h + self.output.bias[0]
        g = jnp.ones((1, n), u.dtype)
        gs = [g]
        w_next = self.output.weight
        for layer, h_out in zip(reversed(self.hidden), reversed(inputs[1:])):
            g = (w_next.T @ g) * (1.0 - h_out**2)
            gs.append(g)
            w_next = layer.weight
        if emb is not None:
            gs.append(w_next.T @ g)
        Gt = jnp.concatenate(gs[::-1], axis=0)
        Ht = jnp.concatenate(head + inputs, axis=0)
        return u, Gt, Ht

    def factor_columns(self) -> tuple[Int[np.ndarray, " params"], Int[np.ndarray, " params"]]:
        """Flat ``(gcol, hcol)`` index arrays for :meth:`jacobian_factors`, in the
        order of ``ravel_pytree`` over the parameters."""
        n_emb = 0 if self.embedding is None else self.embedding.a.size
        n_in = self.hidden[0].weight.shape[1]  # the first layer's input: e, or x itself
        widths = [layer.weight.shape[0] for layer in self.hidden]
        g_off = np.cumsum([0, n_emb] + widths)  # start of ∂û/∂e, ∂û/∂z₁, …, ∂û/∂z_out
        in_off = np.cumsum([1 + 2 * n_emb, n_in] + widths)  # start of e (or x), h₁, …, h_L
        g_cols, h_cols = [], []
        if self.embedding is not None:
            emb = np.arange(n_emb).reshape(self.embedding.a.shape)
            g_cols = [emb, emb, emb]
            h_cols = [1 + emb, 1 + n_emb + emb, np.zeros_like(emb)]
        layers = list(self.hidden) + [self.output]
        for l, layer in enumerate(layers):
            n_out, n_in = layer.weight.shape
            o, i = np.meshgrid(np.arange(n_out), np.arange(n_in), indexing="ij")
            g_cols += [g_off[1 + l] + o, g_off[1 + l] + np.arange(n_out)]
            h_cols += [in_off[l] + i, np.zeros(n_out, int)]

        def flat(cols):
            params = eqx.filter(self, eqx.is_inexact_array)
            leaves, treedef = jax.tree_util.tree_flatten(params)
            # Same treedef as the parameters, so the same order as ravel_pytree.
            assert [v.shape for v in leaves] == [c.shape for c in cols], "layout drifted"
            tree = jax.tree_util.tree_unflatten(treedef, cols)
            return np.concatenate([c.ravel() for c in jax.tree_util.tree_leaves(tree)]).astype(np.int32)

        return flat(g_cols), flat(h_cols)


class ParamSpace(eqx.Module):
    """A network seen as a function of one flat parameter vector θ.

    ``eqx.partition`` splits the trainable arrays from the static rest;
    ``ravel_pytree`` flattens them. All integrators and the stepper work on θ.
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
        """``û_θ`` at each of ``points``."""
        return jax.vmap(self.network(theta))(points)
