"""The paper's network: a periodic embedding followed by a tanh MLP.

``û(x) = W₆ tanh(W₅ ⋯ tanh(W₁ σ(e(x)) + b₁) ⋯ + b₅) + b₆`` with the periodic embedding
``e(x)_{d,j} = a_{d,j} cos(2π x_d / L_d + φ_{d,j}) + c_{d,j}`` (20 features per input
dimension). With width 40 and 7 layers in all (embedding, 5 hidden, output) that
is 8,361 parameters in 2-D.

σ is the *embedding activation*. ``"tanh"`` is the network the paper's numbers
come from (its authors apply tanh to the embedding before the first dense
layer). ``"identity"`` feeds the embedding linearly into ``W₁``; then, since
``Σ_j W_ij (a_j cos(k x_d + φ_j) + c_j) = A_i cos(k x_d) + B_i sin(k x_d) + C_i``,
the first hidden layer only sees ``span{1, cos k x_d, sin k x_d}`` per dimension:
the 20 features collapse to 2, and the embedding, ``W₁`` and ``b₁`` act through
``5·width`` combinations (in 2-D) — their other directions are exact null
directions of the Jacobian. It is kept only to reproduce earlier runs.

Initialisation (``init``):

* ``"paper"``: the authors' — ``a, φ, c`` from a standard normal truncated to
  [−2, 2]; dense weights LeCun-normal (truncated, variance 1/fan_in); biases 0.
* ``"odd"``: the same with ``c = 0``. Then every feature ``tanh(a cos(k x_d + φ))``
  changes sign under ``x → x + L/2`` (in each dimension), every layer is an odd
  map of its input, and û is odd under the shift ``x → x + L/2`` applied in all
  dimensions at once. Fits keep that symmetry where the target has it: for an
  odd residual the loss gradient in ``c`` and the biases (whose Jacobian columns
  are even) vanishes. The paper's initial condition is odd under that shift, and
  heat and Allen–Cahn preserve it, so there the network effectively works in the
  odd half of its tangent space — which holds the whole update — instead of
  spending its least squares on directions the solution never needs.
  Burgers' ``u·∇u`` is even and breaks the symmetry; the network then has to
  leave the odd subspace through ``c`` and the biases.
* ``"legacy"``: the earlier one — ``a ~ N(0, 1)``, ``φ ~ U[0, 2π)``, ``c = 0``,
  equinox's default uniform weights and biases.
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

from teng_eq.config.options import at_least, one_of
from teng_eq.errors import bad

#: Embedding activations σ (see the module docstring).
EMBEDDING_ACTIVATIONS = ("tanh", "identity")
#: Initialisations (see the module docstring); ``auto`` is resolved per problem
#: (:func:`teng_eq.fit.theta0.resolve_init`) before a network is built.
INITS = ("odd", "paper", "legacy")
#: A system's network: one trunk with an output per component, or one :class:`TENGNet` per
#: component (:class:`TENGNet`, :class:`ComponentNets`).
SYSTEM_NETWORKS = ("shared", "separate")


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """The sequential methods' network (the ``network`` config group): embedding
    ``features`` per dimension, hidden ``width``, ``depth`` layers in all
    (embedding, hidden, output), ``embedding_activation`` σ and ``init`` (module
    docstring; ``auto`` as well, until resolved); for a system, ``components``: one of
    :data:`SYSTEM_NETWORKS`."""

    #: The group's ``kind`` (:mod:`teng_eq.network.kinds`): the default, which its yaml
    #: leaves out (no field: the config and θ₀'s key of a paper network stay as they were).
    KIND: ClassVar[str] = "paper"

    features: int
    width: int
    depth: int
    embedding_activation: str
    init: str
    components: str

    def validate(self, prefix: str = "network", resolved: bool = False) -> None:
        at_least(prefix, self, 1, "features", "width")
        if self.depth < 3:
            raise bad(f"{prefix}.depth", self.depth, "must be >= 3 (embedding, hidden, output)")
        one_of(f"{prefix}.embedding_activation", self.embedding_activation, EMBEDDING_ACTIVATIONS)
        one_of(f"{prefix}.init", self.init, INITS if resolved else ("auto", *INITS))
        one_of(f"{prefix}.components", self.components, SYSTEM_NETWORKS)

    def build(self, dim: int, periods: tuple[float, ...] | None, seed: int, init: str | None = None,
              outputs: int = 1, harmonics: int = 1) -> TENGNet | ComponentNets:
        """:func:`build_network` of these options."""
        return build_network(self, dim, periods, seed, init, outputs, harmonics)


class PeriodicEmbedding(eqx.Module):
    """``e_{d,j}(x) = a_{d,j} cos(m_j k_d x_d + φ_{d,j}) + c_{d,j}``, ``k_d = 2π/L_d``,
    initialised as ``init`` says (module docstring). The harmonics m_j are 1 (the paper's)
    unless ``harmonics`` M > 1 spreads them over 1, …, M across the features (a later stage of
    a multi-stage network, :mod:`teng_eq.network.multistage`, whose target oscillates faster)."""

    a: Float[Array, "dim features"]
    phi: Float[Array, "dim features"]
    c: Float[Array, "dim features"]
    wavenumbers: tuple[float, ...] = eqx.field(static=True)
    harmonics: tuple[int, ...] | None = eqx.field(static=True, default=None)  # m_j; None: all 1

    def __init__(self, dim: int, features: int, lengths, *, key: PRNGKeyArray, init: str = "odd",
                 harmonics: int = 1):
        ka, kp = jax.random.split(key)
        shape = (dim, features)
        if init == "legacy":
            self.a = jax.random.normal(ka, shape)
            self.phi = jax.random.uniform(kp, shape, maxval=2 * math.pi)
        else:
            normal = jax.nn.initializers.truncated_normal(1.0)
            self.a, self.phi = normal(ka, shape), normal(kp, shape)
        if init == "paper":
            self.c = jax.nn.initializers.truncated_normal(1.0)(jax.random.fold_in(key, 2), shape)
        else:
            self.c = jnp.zeros(shape)
        self.wavenumbers = tuple(2 * math.pi / float(length) for length in lengths)
        self.harmonics = None if harmonics == 1 else tuple(
            int(m) for m in np.round(np.linspace(1, harmonics, features)))

    def scaled_wavenumbers(self) -> Float[Array, "dim features"] | Float[Array, "dim 1"]:
        """m_j k_d per axis and feature; k_d per axis, (dim, 1), where every m_j is 1."""
        k = jnp.asarray(self.wavenumbers)[:, None]
        return k if self.harmonics is None else k * jnp.asarray(self.harmonics, jnp.float64)[None, :]

    def angles(self, x: Float[Array, " dim"]) -> Float[Array, "dim features"]:
        return self.scaled_wavenumbers() * x[:, None] + self.phi

    def __call__(self, x: Float[Array, " dim"]) -> Float[Array, " dim*features"]:
        return (self.a * jnp.cos(self.angles(x)) + self.c).reshape(-1)


class TENGNet(eqx.Module):
    """Scalar network ``û: ℝᵈ → ℝ``; the embedding takes ``embedding_activation``,
    the ``hidden`` layers tanh, ``output`` nothing.

    ``periodic=False`` drops the embedding: the first layer takes x itself (the
    paper's network on the disk, where the domain is not periodic).

    **Systems** (``outputs`` m > 1): one trunk, an output layer of m rows, one per
    component of the state (u₁, …, u_m). The network is then a scalar function of the
    point *and* the component, ``û(x, c) = W_out[c] h(x) + b_out[c]``: its input is
    ``(x, c)``, the component index c (as a float) in the last place, so that the fits'
    quadratures, least squares and norms see a system as one scalar field on m copies of
    the points (:meth:`teng_eq.equations.Equation.quadrature`) — one Gram, one solve over
    every component's rows. :meth:`vector` gives every component at a point at once (the
    operator's fields). The trunk is shared: m components cost (m − 1)(width + 1)
    parameters more than one, and a step's least squares m times the rows.
    """

    embedding: PeriodicEmbedding | None  # None: plain Cartesian input (non-periodic domains)
    hidden: tuple[eqx.nn.Linear, ...]
    output: eqx.nn.Linear
    embedding_activation: str = eqx.field(static=True)
    init: str = eqx.field(static=True)
    outputs: int = eqx.field(static=True, default=1)

    def __init__(self, dim: int = 2, features: int = 20, width: int = 40, depth: int = 7, lengths=None,
            embedding_activation: str = "tanh", init: str = "odd", *, periodic: bool = True, outputs: int = 1,
            harmonics: int = 1, key: PRNGKeyArray):
        NetworkConfig(features, width, depth, embedding_activation, init, "shared").validate(resolved=True)
        lengths = (2 * math.pi,) * dim if lengths is None else lengths
        keys = jax.random.split(key, depth)
        self.embedding_activation = embedding_activation
        self.init = init
        self.outputs = outputs
        self.embedding = (PeriodicEmbedding(dim, features, lengths, key=keys[0], init=init,
                                            harmonics=harmonics) if periodic
                          else None)
        sizes = [dim * features if periodic else dim] + [width] * (depth - 2)
        hidden = [eqx.nn.Linear(n_in, n_out, key=k)
                  for n_in, n_out, k in zip(sizes[:-1], sizes[1:], keys[1:-1])]
        output = eqx.nn.Linear(width, "scalar" if outputs == 1 else outputs, key=keys[-1])
        if init != "legacy":
            lecun = jax.nn.initializers.lecun_normal(in_axis=-1, out_axis=-2)

            def reinit(layer, k):
                weight = lecun(k, layer.weight.shape)
                return eqx.tree_at(lambda m: (m.weight, m.bias), layer, (weight, jnp.zeros_like(layer.bias)))

            wkeys = [jax.random.fold_in(k, 1) for k in keys[1:]]
            hidden = [reinit(layer, k) for layer, k in zip(hidden, wkeys)]
            output = reinit(output, wkeys[-1])
        self.hidden = tuple(hidden)
        self.output = output

    def features(self, x: Float[Array, " dim"]) -> Float[Array, " dim*features"]:
        """``σ(e(x))`` (x itself without the embedding): what the first dense layer sees."""
        if self.embedding is None:
            return x
        e = self.embedding(x)
        return jnp.tanh(e) if self.embedding_activation == "tanh" else e

    def trunk(self, x: Float[Array, " dim"]) -> Float[Array, " width"]:
        """The last hidden layer's output at the point ``x``."""
        h = self.features(x)
        for layer in self.hidden:
            h = jnp.tanh(layer(h))
        return h

    def __call__(self, x: Float[Array, "*n dim"]) -> Float[Array, "*n"]:
        """û at the point ``x`` (dim,), or at every row of ``x`` (n, dim); for a system
        the points are ``(x, c)`` (class docstring) and the value that of component c."""
        if x.ndim == 2:
            return jax.vmap(self)(x)
        if self.outputs == 1:
            return self.output(self.trunk(x))
        # The comparison has no derivative: c selects, the point's coordinates differentiate.
        return self.vector(x[:-1]) @ (jnp.arange(self.outputs) == x[-1]).astype(x.dtype)

    def vector(self, x: Float[Array, " dim"]) -> Float[Array, " outputs"]:
        """Every component's value at the (spatial) point ``x``: ``(û₁, …, û_m)``."""
        return self.output(self.trunk(x))

    def jacobian_factors_t(
        self, points: Float[Array, "n dim"]
    ) -> tuple[Float[Array, " n"], Float[Array, "g n"], Float[Array, "h n"]]:
        """``(û, Gᵀ, Hᵀ)`` with ``∂û(xₙ)/∂θ_p = Gᵀ[gcol_p, n] · Hᵀ[hcol_p, n]`` for every p.

        Every parameter of this network enters as (cotangent of some pre-activation)
        × (some per-sample factor): ``∂û/∂W[o, i] = ∂û/∂z[o] · h_in[i]``,
        ``∂û/∂b[o] = ∂û/∂z[o]``, ``∂û/∂a = ∂û/∂e · cos(·)``, ``∂û/∂φ = ∂û/∂e · (−a sin(·))``,
        ``∂û/∂c = ∂û/∂e``, where e is the embedding's pre-activation
        (``∂û/∂e = σ'(e) ⊙ W₁ᵀ ∂û/∂z₁``). So the Jacobian of any column subset
        costs one batched forward/backward pass plus an O(n·|subset|) gather,
        never the full ``n × params`` matrix. Row layout (see :meth:`factor_columns`)::

            Gᵀ = [∂û/∂e | ∂û/∂z₁ | … | ∂û/∂z_L | ∂û/∂z_out]
            Hᵀ = [1 | cos | −a sin | σ(e) | h₁ | … | h_L]

        Feature-major, so that the rows ``Jᵀ[p] = Gᵀ[gcol_p] ∘ Hᵀ[hcol_p]`` of a
        subset Jacobian are contiguous row gathers and ``JᵀJ`` a plain GEMM of
        row-major operands (faster than column gathers: docs/performance.md). The
        embedding uses ``cos(k x + φ) = cos(k x) cos φ − sin(k x) sin φ``: 2n + 2F
        transcendentals instead of 2nF, exact to a few ulp.
        """
        n = points.shape[0]
        if self.outputs > 1:  # (x, c): the output's cotangent is c's row, one-hot
            select = (jnp.arange(self.outputs)[:, None] == points[None, :, -1]).astype(points.dtype)
            points = points[:, :-1]
        inputs, head = self.layer_inputs_t(points)
        h = inputs[-1]
        if self.outputs == 1:
            u = self.output.weight[0] @ h + self.output.bias[0]
            g = jnp.ones((1, n), u.dtype)
        else:
            g = select
            u = jnp.sum(g * (self.output.weight @ h + self.output.bias[:, None]), axis=0)
        return u, self.cotangent_factors_t(inputs, g), jnp.concatenate(head + inputs, axis=0)

    def layer_inputs_t(
        self, points: Float[Array, "n dim"]
    ) -> tuple[list[Float[Array, "_ n"]], list[Float[Array, "_ n"]]]:
        """The forward pass at every (spatial) point, feature-major: what each dense layer
        sees (σ(e) or x, h₁, …, h_L: the last is the output layer's input) and the head rows
        of ``Hᵀ`` (:meth:`jacobian_factors_t`)."""
        h, head = self._embedded(points)
        inputs = []
        for layer in self.hidden:
            inputs.append(h)
            h = jnp.tanh(layer.weight @ h + layer.bias[:, None])
        inputs.append(h)
        return inputs, head

    def cotangent_factors_t(
        self, inputs: list[Float[Array, "_ n"]], g: Float[Array, "outputs n"]
    ) -> Float[Array, "g n"]:
        """``Gᵀ`` (:meth:`jacobian_factors_t`) of the scalar ``Σ_o g[o, n] û_o(xₙ)`` at every
        point: the output's cotangent ``g`` pulled back through the layers whose ``inputs``
        :meth:`layer_inputs_t` gave (one-hot rows: a system's component; a network that
        combines the outputs, :class:`~teng_eq.network.separable.SeparableNet`, its own)."""
        gs = [g]
        w_next = self.output.weight
        for layer, h_out in zip(reversed(self.hidden), reversed(inputs[1:])):
            g = (w_next.T @ g) * (1.0 - h_out**2)
            gs.append(g)
            w_next = layer.weight
        if self.embedding is not None:
            g = w_next.T @ g
            if self.embedding_activation == "tanh":
                g = g * (1.0 - inputs[0] ** 2)
            gs.append(g)
        return jnp.concatenate(gs[::-1], axis=0)

    def _embedded(
        self, points: Float[Array, "n dim"]
    ) -> tuple[Float[Array, "f n"], list[Float[Array, "_ n"]]]:
        """What the first dense layer sees at every point (σ(e), or x itself without the
        embedding) and the head rows of ``Hᵀ`` (:meth:`jacobian_factors_t`)."""
        emb, n = self.embedding, points.shape[0]
        if emb is None:
            # Cartesian input: the first layer sees x itself; no embedding factors.
            return points.T, [jnp.ones((1, n), points.dtype)]
        if emb.harmonics is None:  # one angle per axis and point, shared by its features
            kx = jnp.asarray(emb.wavenumbers)[:, None] * points.T  # (dim, n)
            ckx, skx = jnp.cos(kx)[:, None, :], jnp.sin(kx)[:, None, :]
        else:
            kx = emb.scaled_wavenumbers()[:, :, None] * points.T[:, None, :]  # (dim, features, n)
            ckx, skx = jnp.cos(kx), jnp.sin(kx)
        cphi, sphi = jnp.cos(emb.phi)[:, :, None], jnp.sin(emb.phi)[:, :, None]
        cos = ckx * cphi - skx * sphi  # (dim, features, n)
        sin = skx * cphi + ckx * sphi
        h = (emb.a[:, :, None] * cos + emb.c[:, :, None]).reshape(-1, n)
        head = [jnp.ones((1, n), h.dtype), cos.reshape(-1, n), (-emb.a[:, :, None] * sin).reshape(-1, n)]
        return (jnp.tanh(h) if self.embedding_activation == "tanh" else h), head

    def factor_rows(self) -> tuple[int, int]:
        """The rows of ``Gᵀ`` and ``Hᵀ`` (:meth:`jacobian_factors_t`)."""
        n_emb = 0 if self.embedding is None else self.embedding.a.size
        widths = sum(layer.weight.shape[0] for layer in self.hidden)
        return n_emb + widths + self.outputs, 1 + 2 * n_emb + self.hidden[0].weight.shape[1] + widths

    def factor_columns(self) -> tuple[Int[np.ndarray, " params"], Int[np.ndarray, " params"]]:
        """Flat ``(gcol, hcol)`` index arrays for :meth:`jacobian_factors_t`, in the
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
        for j, layer in enumerate(layers):
            n_out, n_in = layer.weight.shape
            o, i = np.meshgrid(np.arange(n_out), np.arange(n_in), indexing="ij")
            g_cols += [g_off[1 + j] + o, g_off[1 + j] + np.arange(n_out)]
            h_cols += [in_off[j] + i, np.zeros(n_out, int)]

        def flat(cols):
            params = eqx.filter(self, eqx.is_inexact_array)
            leaves, treedef = jax.tree_util.tree_flatten(params)
            # Same treedef as the parameters, so the same order as ravel_pytree.
            assert [v.shape for v in leaves] == [c.shape for c in cols], "layout drifted"
            tree = jax.tree_util.tree_unflatten(treedef, cols)
            return np.concatenate([c.ravel() for c in jax.tree_util.tree_leaves(tree)]).astype(np.int32)

        return flat(g_cols), flat(h_cols)


class ComponentNets(eqx.Module):
    """A system's network as one scalar :class:`TENGNet` per component (``nets``): at a row
    ``(x, c)`` the value of net c at x. Its fits and least squares see it as
    :class:`TENGNet` with ``outputs`` does (one Gram over every component's rows), but
    component c's rows depend on net c's parameters alone: the components move
    independently, where one trunk's output rows can only combine the same features (two
    components that start equal, or proportional, then move together to first order).
    m components cost m times the parameters of one."""

    nets: tuple[TENGNet, ...]

    @property
    def outputs(self) -> int:
        return len(self.nets)

    @property
    def init(self) -> str:
        return self.nets[0].init

    def __call__(self, x: Float[Array, "*n dim+1"]) -> Float[Array, "*n"]:
        if x.ndim == 2:
            return jax.vmap(self)(x)
        return self.vector(x[:-1]) @ (jnp.arange(self.outputs) == x[-1]).astype(x.dtype)

    def vector(self, x: Float[Array, " dim"]) -> Float[Array, " outputs"]:
        return jnp.stack([net(x) for net in self.nets])

    def jacobian_factors_t(self, points: Float[Array, "n dim+1"]):
        """:meth:`TENGNet.jacobian_factors_t` of every net at the rows' x, stacked; net c's
        ``Gᵀ`` rows zero on the rows of the other components."""
        x, u, gs, hs = points[:, :-1], 0.0, [], []
        for c, net in enumerate(self.nets):
            mine = (points[:, -1] == c).astype(points.dtype)
            uc, Gt, Ht = net.jacobian_factors_t(x)
            u, gs, hs = u + mine * uc, [*gs, Gt * mine], [*hs, Ht]
        return u, jnp.concatenate(gs), jnp.concatenate(hs)

    def factor_columns(self) -> tuple[Int[np.ndarray, " params"], Int[np.ndarray, " params"]]:
        """The nets' columns, each offset past the factor rows of the nets before it."""
        g_cols, h_cols, _ = stacked_columns(self.nets)
        return np.concatenate(g_cols).astype(np.int32), np.concatenate(h_cols).astype(np.int32)


def stacked_columns(nets) -> tuple[list[np.ndarray], list[np.ndarray], tuple[int, int]]:
    """``(gcol, hcol)`` of networks whose factor rows are stacked one after another: each
    net's columns offset past the rows of the nets before it, and the rows they take in all."""
    g_cols, h_cols, g_off, h_off = [], [], 0, 0
    for net in nets:
        g, h = net.factor_columns()
        g_cols.append(g + g_off)
        h_cols.append(h + h_off)
        g_rows, h_rows = net.factor_rows()
        g_off, h_off = g_off + g_rows, h_off + h_rows
    return g_cols, h_cols, (g_off, h_off)


def build_network(options: NetworkConfig, dim: int, periods: tuple[float, ...] | None, seed: int,
                  init: str | None = None, outputs: int = 1, harmonics: int = 1) -> TENGNet | ComponentNets:
    """The untrained network of ``options`` on a ``dim``-dimensional domain (periodic
    embedding with ``periods`` and ``harmonics``, :class:`PeriodicEmbedding`, or Cartesian input
    where None) with ``outputs`` components (a system's as ``options.components`` says),
    initialised from ``seed`` as ``init`` says (default ``options.init``, which must then be resolved)."""
    key, _ = jax.random.split(jax.random.PRNGKey(seed))

    def net(key, outputs):
        return TENGNet(dim=dim, features=options.features, width=options.width, depth=options.depth,
                       lengths=periods, periodic=periods is not None, outputs=outputs,
                       embedding_activation=options.embedding_activation, harmonics=harmonics,
                       init=options.init if init is None else init, key=key)

    if outputs > 1 and options.components == "separate":
        return ComponentNets(tuple(net(jax.random.fold_in(key, c), 1) for c in range(outputs)))
    return net(key, outputs)


def parameter_count(options: NetworkConfig, dim: int, periods: tuple[float, ...] | None,
                    outputs: int = 1) -> int:
    """Trainable parameters of :func:`build_network` (shape evaluation, no compute;
    they do not depend on the initialisation)."""
    return count_trainable(eqx.filter_eval_shape(build_network, options, dim, periods, 0, "paper", outputs))


def count_trainable(shapes) -> int:
    """The floating-point entries of a network's shape tree (``eqx.filter_eval_shape``)."""
    return sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(shapes)
               if isinstance(leaf, jax.ShapeDtypeStruct) and np.issubdtype(leaf.dtype, np.inexact))
