"""The networks a run chooses from (``network=`` in conf/, its group's ``kind``): the paper's
(:mod:`.paper`, the default: its group has no ``kind`` key, so that its config, config_hash and
θ₀ keys stay those of the runs before the choice existed), the separable one
(:mod:`.separable`) and the multi-stage sum of either (:mod:`.multistage`). A kind is one
module (its options dataclass with a ``KIND`` and a ``build``), one yaml in conf/network/ and
a place in :data:`NetworkOptions`. Every kind offers
what the fits and steps use: values, ``vector``, ``outputs``, ``init`` and the factored
Jacobian (``jacobian_factors_t``, ``factor_rows``, ``factor_columns``)."""

from __future__ import annotations

import equinox as eqx

from teng_eq.network.multistage import MultiStageConfig, MultiStageNet
from teng_eq.network.paper import ComponentNets, NetworkConfig, TENGNet, count_trainable
from teng_eq.network.separable import SeparableConfig, SeparableNet

#: A ``network`` group's options, by ``kind`` (the first: where the group names none).
NetworkOptions = NetworkConfig | SeparableConfig | MultiStageConfig
#: Every network a run can evolve.
Network = TENGNet | ComponentNets | SeparableNet | MultiStageNet


def make_network(options: NetworkOptions, dim: int, periods: tuple[float, ...] | None, seed: int,
                 init: str | None = None, outputs: int = 1) -> Network:
    """The untrained network of ``options`` (any kind: its own ``build``) on a
    ``dim``-dimensional domain, as :func:`~teng_eq.network.paper.build_network` says for the
    paper's; ``init`` the paper network's resolved initialisation (a separable network has
    its own)."""
    return options.build(dim, periods, seed, init, outputs)


def parameter_count(options: NetworkOptions, dim: int, periods: tuple[float, ...] | None,
                    outputs: int = 1) -> int:
    """Trainable parameters of :func:`make_network` (shape evaluation, no compute; they do not
    depend on the initialisation)."""
    return count_trainable(eqx.filter_eval_shape(make_network, options, dim, periods, 0, "paper", outputs))
