"""Dirichlet data imposed exactly: the ansatz ``u = c + φ(x) N(x)`` (:class:`Imposed`) around a
network N, with φ vanishing on the Dirichlet sides of a box (Sukumar & Srivastava 2022's
construction, here with the box's own polynomial distance factors).

Per bounded axis, with s = (x − a)/L ∈ [0, 1]:

* both ends Dirichlet: ``φ_d = 4s(1 − s)``;
* the lower end only: ``φ_d = s(2 − s)``; the upper end only: ``φ_d = (1 − s)(1 + s)``;
* neither (periodic, or Neumann/Robin at both): ``φ_d = 1``;

and φ = Π_d φ_d. Each factor is a quadratic: φ is smooth, its Laplacian bounded (constant per
axis: −8/L² with both ends), which matters since the operator is applied to the ansatz; a factor
with one Dirichlet end has zero slope at the other end, so a Neumann or Robin side there sees
``∂ₙu = φ ∂ₙN`` and its flux rows constrain N alone. c is the constant data of the Dirichlet
sides (one number on every one of them: :meth:`teng_eq.domains.bounded.BoxDomain.imposition`).

The Jacobian keeps the network's factored form: ``∂u/∂θ = φ ∂N/∂θ``, so the rows of ``Gᵀ`` are
scaled by φ at each point (:meth:`Imposed.jacobian_factors_t`) and every fit and step runs
unchanged.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from teng_eq.network.paper import TENGNet


class Imposed(eqx.Module):
    """``u(x) = value + φ(x) net(x)`` (module docstring); ``axes`` one ``(a, L, lower, upper)``
    per axis, ``lower``/``upper`` whether that end is a Dirichlet side."""

    net: TENGNet
    axes: tuple[tuple[float, float, bool, bool], ...] = eqx.field(static=True)
    value: float = eqx.field(static=True)

    @property
    def init(self) -> str:
        return self.net.init

    @property
    def outputs(self) -> int:
        return self.net.outputs

    def factor(self, x: Float[Array, "*n dim"]) -> Float[Array, "*n"]:
        """φ at the point ``x`` (dim,) or at every row of ``x`` (n, dim)."""
        phi = jnp.ones(x.shape[:-1], x.dtype)
        for d, (a, length, lower, upper) in enumerate(self.axes):
            s = (x[..., d] - a) / length
            if lower and upper:
                phi = phi * 4.0 * s * (1.0 - s)
            elif lower:
                phi = phi * s * (2.0 - s)
            elif upper:
                phi = phi * (1.0 - s) * (1.0 + s)
        return phi

    def __call__(self, x: Float[Array, "*n dim"]) -> Float[Array, "*n"]:
        if x.ndim == 2:
            return jax.vmap(self)(x)
        return self.value + self.factor(x) * self.net(x)

    def vector(self, x: Float[Array, " dim"]) -> Float[Array, " 1"]:
        return self(x)[None]

    def jacobian_factors_t(self, points: Float[Array, "n dim"]):
        """The network's ``(N, Gᵀ, Hᵀ)`` (:meth:`~teng_eq.network.paper.TENGNet.jacobian_factors_t`)
        as ``(c + φN, Gᵀ φ, Hᵀ)``: ∂u/∂θ_p = φ Gᵀ[gcol_p] Hᵀ[hcol_p]."""
        u, Gt, Ht = self.net.jacobian_factors_t(points)
        phi = self.factor(points)
        return self.value + phi * u, Gt * phi[None, :], Ht

    def factor_rows(self) -> tuple[int, int]:
        return self.net.factor_rows()

    def factor_columns(self) -> tuple[Int[np.ndarray, " params"], Int[np.ndarray, " params"]]:
        return self.net.factor_columns()
