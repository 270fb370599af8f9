"""A multi-stage network (Wang & Lai 2024): a sum of networks of one kind, each fitted to
the residual of the ones before it.

``û(x) = Σ_{s=1}^{S} N_s(x; θ_s)``

**θ₀** (:func:`teng_eq.fit.theta0.stage_by_stage`), stage by stage on the fit's
quadrature: stage 1 is fitted to u₀ as a network of its kind alone is; stage s > 1 to the
residual of the stages before it rescaled to u₀'s size,

    r_s = u₀ − Σ_{s'<s} N_{s'},   ε_s = ‖r_s‖ / ‖u₀‖,   Ñ_s ≈ r_s / ε_s,

and then ``N_s = ε_s Ñ_s``, ε_s folded into its output layer (:func:`scaled_output`). So each
stage's fit sees a target of u₀'s size with the tolerances and iterations of one network's fit,
where one network alone stalls orders above round-off. The stages are networks of one ``stage``
kind (the paper's or the separable one), each drawn from its own seed. A residual is not u₀:
the paper network's on heat's 2-D u₀ (1.2e-8 of it, fitted on 64²) holds 98 % of its energy
at wave numbers 16 ≤ |k| < 32, up to the fit grid's Nyquist, which neither a network whose
embedding holds the fundamental alone nor the fit grid itself resolves (fitted there, a second
stage took the loss on the nodes to 3 % and raised the error between them). So a later stage's
embedding spreads its features over the harmonics 1, …, ``harmonics`` of each axis
(:class:`~teng_eq.network.paper.PeriodicEmbedding`), and its fit runs on ``refine`` times the
fit grid's points per axis.

**Steps**: TENG evolves every stage's parameters together. The Jacobian is the stages' side
by side, ``∂û/∂θ_s = ∂N_s/∂θ_s``: each stage's factored rows stacked
(:meth:`MultiStageNet.jacobian_factors_t`), no autodiff. A later stage's columns are ε_s times
those of an unscaled network, so the solvers' damping (relative to the whole Jacobian,
:mod:`teng_eq.fit.lstsq`) holds them back ε_s⁻² times more than stage 1's. Runs on this network
are not yet as accurate as on one network (docs/guides/accuracy.md, "A multi-stage network").

**Parameters**: S times the stage's. Not with Dirichlet data imposed exactly (refused before
θ₀): the ansatz's factor multiplies the whole sum, which the stages' fits do not see.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from teng_eq.config.options import at_least
from teng_eq.errors import bad
from teng_eq.network.paper import ComponentNets, NetworkConfig, TENGNet, stacked_columns
from teng_eq.network.separable import SeparableConfig, SeparableNet

#: A stage's own network.
StageNet = TENGNet | ComponentNets | SeparableNet


@dataclasses.dataclass(frozen=True)
class MultiStageConfig:
    """The ``network`` group of a multi-stage network (``network=multistage``): ``stages``
    networks of the ``stage`` block's kind and settings (the paper's where it names no
    ``kind``), the later ones with an embedding of ``harmonics`` and fitted on ``refine`` times
    the fit grid (module docstring)."""

    KIND: ClassVar[str] = "multistage"

    kind: str
    stages: int
    stage: NetworkConfig | SeparableConfig
    harmonics: int
    refine: int

    @property
    def init(self) -> str:
        """The stages' initialisation (the stage's setting; ``auto`` until resolved)."""
        return self.stage.init

    def build(self, dim: int, periods: tuple[float, ...] | None, seed: int, init: str | None = None,
              outputs: int = 1) -> MultiStageNet:
        """The untrained :class:`MultiStageNet`: stage s (from 0) the ``stage`` block's network
        built from ``seed + s``, so that stage 0 is the network of the stage's kind alone; the
        later ones with ``harmonics``."""
        return MultiStageNet(tuple(self.stage.build(dim, periods, seed + s, init, outputs,
                                                    1 if s == 0 else self.harmonics)
                                   for s in range(self.stages)))

    def validate(self, prefix: str = "network", resolved: bool = False) -> None:
        if self.kind != self.KIND:
            raise bad(f"{prefix}.kind", self.kind, f"must be {self.KIND!r} here")
        at_least(prefix, self, 1, "stages", "harmonics", "refine")
        self.stage.validate(f"{prefix}.stage", resolved)


class MultiStageNet(eqx.Module):
    """``û = Σ_s N_s`` (module docstring): ``stages`` the networks, each with its scale folded
    into its output layer. Points and the interface are the stages': a system's rows ``(x, c)``."""

    stages: tuple[StageNet, ...]

    @property
    def outputs(self) -> int:
        return self.stages[0].outputs

    @property
    def init(self) -> str:
        return self.stages[0].init

    def vector(self, x: Float[Array, " dim"]) -> Float[Array, " outputs"]:
        """Every component's value at the (spatial) point ``x``."""
        return sum(stage.vector(x) for stage in self.stages)

    def __call__(self, x: Float[Array, "*n dim"]) -> Float[Array, "*n"]:
        """û at the point ``x`` (dim,), or at every row of ``x`` (n, dim)."""
        if x.ndim == 2:
            return jax.vmap(self)(x)
        return sum(stage(x) for stage in self.stages)

    def jacobian_factors_t(
        self, points: Float[Array, "n dim"]
    ) -> tuple[Float[Array, " n"], Float[Array, "g n"], Float[Array, "h n"]]:
        """``(û, Gᵀ, Hᵀ)`` (:meth:`~teng_eq.network.paper.TENGNet.jacobian_factors_t`): the
        stages' values summed, their factor rows stacked stage after stage."""
        factors = [stage.jacobian_factors_t(points) for stage in self.stages]
        u = sum(f[0] for f in factors)
        return u, jnp.concatenate([f[1] for f in factors]), jnp.concatenate([f[2] for f in factors])

    def factor_rows(self) -> tuple[int, int]:
        """The rows of ``Gᵀ`` and ``Hᵀ`` (:meth:`jacobian_factors_t`)."""
        rows = [stage.factor_rows() for stage in self.stages]
        return sum(g for g, _ in rows), sum(h for _, h in rows)

    def factor_columns(self) -> tuple[Int[np.ndarray, " params"], Int[np.ndarray, " params"]]:
        """The stages' columns, each offset past the factor rows of the stages before it."""
        g_cols, h_cols, _ = stacked_columns(self.stages)
        return np.concatenate(g_cols).astype(np.int32), np.concatenate(h_cols).astype(np.int32)


def scaled_output(net: StageNet, factor: float) -> StageNet:
    """``factor · net``: the output layer's weights and biases (every component's net's, for
    :class:`~teng_eq.network.paper.ComponentNets`) times ``factor``, the rest as it is."""
    if isinstance(net, ComponentNets):
        return ComponentNets(tuple(scaled_output(n, factor) for n in net.nets))
    if isinstance(net, SeparableNet):
        return eqx.tree_at(lambda n: (n.weight, n.bias), net, (factor * net.weight, factor * net.bias))
    return eqx.tree_at(lambda n: (n.output.weight, n.output.bias), net,
                       (factor * net.output.weight, factor * net.output.bias))
