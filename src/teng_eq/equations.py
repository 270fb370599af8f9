"""PDEs of the form ∂ₜu = L[u] on a periodic box, and their initial conditions.

Every equation here is ``L[u] = ν Δu + N(u, ∇u)``: a linear diffusion part and a
pointwise nonlinear part. The same :meth:`Equation.nonlinear` serves the neural
network (derivatives by autodiff, :func:`operator`) and the pseudo-spectral
reference (derivatives by FFT), so the two cannot disagree about the PDE.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np
import jax.numpy as jnp
from jaxtyping import Array, Float

from teng_eq.config import bad
from teng_eq.grid import cell_volume, grid_points, holdout_points

TWO_PI = 2.0 * math.pi


class Quadrature(NamedTuple):
    """``∫ f ≈ Σₙ wₙ f(xₙ)``: ``points`` (n, dim) and ``weights``, one number when
    every point has the same weight (a uniform periodic grid), else (n,)."""

    points: Float[Array, "n dim"]
    weights: float | Float[Array, " n"]


class Equation(eqx.Module):
    """``∂ₜu = ν Δu + N(u, ∇u)`` on ``[0, L₁) × … × [0, L_d)``, periodic, from the
    initial condition ``INITIAL_CONDITIONS[initial_condition]``.

    What the rest of the code asks of an equation: its operator (:meth:`rhs`,
    :func:`operator`), initial condition (:meth:`u0`), quadrature for the fits
    (:meth:`quadrature`), points held out of them (:meth:`holdout`), the points
    and weights of the error norms (:meth:`evaluation`) and its reference
    solution (:meth:`reference`). Built from its config group by
    :meth:`from_config`.
    """

    name: str = eqx.field(static=True)
    nu: float = eqx.field(static=True)
    lengths: tuple[float, ...] = eqx.field(static=True, default=(TWO_PI, TWO_PI))
    initial_condition: str = eqx.field(static=True, default="paper2d")

    @classmethod
    def from_config(cls, group: Mapping) -> Equation:
        """The equation of the ``equation`` config group (without its ``impl``);
        a bad key or value raises a one-line :class:`~teng_eq.config.ConfigError`."""
        known = {"name", "nu", "lengths", "initial_condition"}
        for key in group:
            if key not in known:
                bad(f"equation.{key}", group[key], f"unknown key; known: {sorted(known)}")
        name = group.get("name")
        if not isinstance(name, str):
            bad("equation.name", name, "must be a string")
        nu = group.get("nu")
        if isinstance(nu, bool) or not isinstance(nu, (int, float)) or not nu > 0:
            bad("equation.nu", nu, "must be a number > 0")
        lengths = group.get("lengths", (TWO_PI, TWO_PI))
        if not (isinstance(lengths, (list, tuple)) and len(lengths) >= 1
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in lengths)):
            bad("equation.lengths", lengths, "must be a list of numbers > 0, one per dimension")
        ic = group.get("initial_condition", "paper2d")
        if ic not in INITIAL_CONDITIONS:
            bad("equation.initial_condition", ic, f"unknown, choose one of {sorted(INITIAL_CONDITIONS)}")
        return cls(name=name, nu=float(nu), lengths=tuple(float(v) for v in lengths), initial_condition=ic)

    @property
    def dim(self) -> int:
        return len(self.lengths)

    def u0(self, x: Float[Array, " dim"]) -> Float[Array, ""]:
        """The initial condition at one point (NumPy or JAX, coordinate first)."""
        return INITIAL_CONDITIONS[self.initial_condition](x)

    def quadrature(self, n: int) -> Quadrature:
        """The ``n^d`` periodic grid and its (uniform) trapezoid weight."""
        return Quadrature(grid_points(n, self.lengths), cell_volume(n, self.lengths))

    def holdout(self, n: int, m: int) -> Quadrature:
        """Points no fit on :meth:`quadrature` (n) uses: an ``m^d`` grid (m dividing
        n) at cell centres of the n-grid, half a cell from its nodes along every
        axis, with its own weight."""
        return Quadrature(holdout_points(n, m, self.lengths), cell_volume(m, self.lengths))

    def evaluation(self, m: int) -> Quadrature:
        """Points and weights of the error norms: the ``m^d`` grid."""
        return self.quadrature(m)

    def reference(self, times, *, cache_dir=None):
        """Reference solution at ``times`` (see :func:`teng_eq.reference.reference_solution`);
        its ``values(k, m)`` are u(·, times[k]) at the points of :meth:`evaluation` (m)."""
        from teng_eq.reference import reference_solution

        return reference_solution(self, times, cache_dir=cache_dir, initial_condition=self.initial_condition)

    def nonlinear(self, u, grad_u):
        """N(u, ∇u); ``grad_u`` has the spatial dimension as its *first* axis.

        Written with arithmetic only so that it takes NumPy and JAX arrays alike.
        """
        raise NotImplementedError

    def rhs(self, u, grad_u, lap_u):
        """L[u] = ν Δu + N(u, ∇u)."""
        return self.nu * lap_u + self.nonlinear(u, grad_u)


class Heat(Equation):
    """Heat: ``∂ₜu = ν Δu`` (paper: ν = 1/10)."""

    def nonlinear(self, u, grad_u):
        return 0.0 * u


class AllenCahn(Equation):
    """Allen–Cahn: ``∂ₜu = ν Δu + u − u³`` (paper: ν = 1/200)."""

    def nonlinear(self, u, grad_u):
        return u - u * u * u


class Burgers(Equation):
    """Viscous Burgers: ``∂ₜu = ν Δu − u Σᵢ ∂ᵢu`` (paper: ν = 1/100)."""

    def nonlinear(self, u, grad_u):
        return -u * sum(grad_u[i] for i in range(len(grad_u)))


EQUATIONS: dict[str, type[Equation]] = {
    "heat": Heat,
    "allen_cahn": AllenCahn,
    "burgers": Burgers,
}


def make_equation(name: str, nu: float, lengths=(TWO_PI, TWO_PI)) -> Equation:
    """The equation called ``name`` (a key of :data:`EQUATIONS`)."""
    try:
        cls = EQUATIONS[name]
    except KeyError:
        raise ValueError(f"unknown equation {name!r}; known: {sorted(EQUATIONS)}") from None
    return cls(name=name, nu=float(nu), lengths=tuple(float(v) for v in lengths))


def paper_initial_condition(x: Float[Array, " 2"]) -> Float[Array, ""]:
    """The paper's 2-D initial condition (eq. ``initial_condition``)::

        u₀ = (e^{3 sin x₁ + sin x₂} + e^{−3 sin x₁ + sin x₂}
              − e^{3 sin x₁ − sin x₂} − e^{−3 sin x₁ − sin x₂}) / 100
           = 4 cosh(3 sin x₁) sinh(sin x₂) / 100.

    Works on NumPy or JAX arrays whose first axis is the coordinate.
    """
    xp = jnp if isinstance(x, jax.Array) else np
    s1, s2 = xp.sin(x[0]), xp.sin(x[1])
    return (
        xp.exp(3 * s1 + s2) + xp.exp(-3 * s1 + s2) - xp.exp(3 * s1 - s2) - xp.exp(-3 * s1 - s2)
    ) / 100.0


def sines_initial_condition(x: Float[Array, " 2"]) -> Float[Array, ""]:
    """``u₀ = sin x₁ sin x₂ + ½ cos(2x₁ + x₂)``: two Fourier modes (|k|² = 2, 5).

    Not from the paper: a band-limited condition that a coarse grid resolves
    exactly, for fast tests (convergence orders) and smoke runs.
    """
    xp = jnp if isinstance(x, jax.Array) else np
    return xp.sin(x[0]) * xp.sin(x[1]) + 0.5 * xp.cos(2 * x[0] + x[1])


INITIAL_CONDITIONS: dict[str, Callable] = {
    "paper2d": paper_initial_condition,
    "sines2d": sines_initial_condition,
}


def derivatives(
    fn: Callable[[Array], Array], points: Float[Array, "n dim"]
) -> tuple[Float[Array, " n"], Float[Array, "dim n"], Float[Array, " n"]]:
    """``(u, ∇u, Δu)`` of a pointwise function at every row of ``points``, by autodiff.

    ``fn`` maps ``(n, dim)`` points to ``(n,)`` values, each row on its own (a
    network applied row by row). Along each axis d one forward-over-forward JVP
    with tangent e_d on every row gives ``∂_d u`` and ``∂²_d u`` together.
    Measured on the paper's network, 4096 points, 2 cores: 17 ms, against 62 ms
    for the trace of a per-point forward-over-reverse Hessian (``vmap`` of
    ``jax.hessian``).
    """
    grads, lap = [], 0.0
    u = None
    for d in range(points.shape[1]):
        e = jnp.zeros_like(points).at[:, d].set(1.0)

        def along(p, e=e):
            return jax.jvp(fn, (p,), (e,))

        (u, du), (_, d2u) = jax.jvp(along, (points,), (e,))
        grads.append(du)
        lap = lap + d2u
    return u, jnp.stack(grads), lap


def operator(
    equation: Equation, fn: Callable[[Array], Array], points: Float[Array, "n dim"]
) -> Float[Array, " n"]:
    """``L[fn]`` at every row of ``points`` (autodiff in x, see :func:`derivatives`)."""
    return equation.rhs(*derivatives(fn, points))
