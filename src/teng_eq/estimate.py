"""An a-posteriori error estimate of a sequential run, from what the run knows
without a reference solution.

Let p(t) be the run's solution continued between its steps by the cubic Hermite
interpolant of û and L[û] at both ends of every step (its networks at t_n, t_{n+1}
and their slopes f = L[û]), and u the exact solution. The error e = p − u obeys

    ∂ₜe = L[p] − L[u] + δ,   δ = ∂ₜp − L[p]   (the *defect* of p),   e(0) = û₀ − u₀,

and, to first order in e, ∂ₜe = L′[û] e + δ with L′[û] the linearised operator.

**transport** (the default on a periodic box): e is carried as a field on the held-out
grid and advanced through L′[û] itself (:class:`Transport`), so that every mode decays
or grows at its own rate. L′[û] = Σ_α a_α(x) ∂^α is a differential operator of the
equation's order; its coefficients a_α at the points come from one forward-mode
derivative of L per multi-index α, along a monomial that has exactly the derivative α at
every point. With Λ(k) = Σ_α ⟨a_α⟩ (ik)^α its Fourier diagonal (the coefficients' means)
and R = L′ − Λ the rest, each step of size h does

    ê ← e^{hΛ} ê + h φ₁(hΛ) (R e)^ + φ₁(hΛ) ∫δ^,   φ₁(z) = (e^z − 1)/z

(the exponential Euler rule for the rest, the coefficients the mean of both ends'; the
step's local term ∫δ, below, spread evenly over the step, so that a mode damped within the
step is damped in its own defect: a fit's error e that sits still through a step has
δ ≈ −Λe, ∫δ = −hΛe, and φ₁(hΛ)∫δ returns it as e, where ∫δ alone would count it
|hΛ| times — the implicit steps' Δt makes |hΛ| large). A constant-coefficient operator (heat, the
biharmonic, advection–diffusion, an anisotropic diffusion) is then propagated exactly,
damped modes damped; a variable part (Allen–Cahn's reaction, Burgers' advection, a
variable diffusivity) by the explicit rule, on the modes the held-out grid resolves. A
system's Λ(k) is an m × m matrix per wave vector (:class:`SystemTransport`).

The other kinds bound instead: wherever L is one-sided Lipschitz in L² with constant μ
(⟨L[v] − L[w], v − w⟩ ≤ μ‖v − w‖², declared by the equation as
:meth:`~teng_eq.equations.Equation.growth_rate`, or measured: :func:`measured_growth_rate`),

    ‖e(t_{n+1})‖ ≤ e^{μ Δt} ‖e(t_n)‖ + ∫_{t_n}^{t_{n+1}} ‖δ(s)‖ ds,

one rate for the whole field: where the equation damps most modes (diffusion: μ = 0,
since the mean does not decay) such a bound drifts above the error. The local term:

* ``hermite``: ‖∫δ‖ with the time integral by Simpson's rule,
  ``∫δ = (û₁ − û₀) − Δt/6 (f₀ + 4 L[p(½)] + f₁)``, ``p(½) = (û₀ + û₁)/2 + Δt (f₀ − f₁)/8``.
  L[p(½)] needs ∇ and Δ of f = L[û], i.e. derivatives of û up to fourth order (nested
  forward-mode autodiff; for an operator of another form, L applied to the function p(½)
  itself: derivatives up to twice the operator's order, so for an operator above second
  order the run uses ``trapezoid`` instead, and says so). It estimates the local error of the scheme the run actually
  propagates (O(Δt³) for Heun), its projection errors included: û₁ − û₀ is the step the
  fits made, not the one the tableau asked for.
* ``trapezoid``: ‖(û₁ − û₀) − Δt/2 (f₀ + f₁)‖, the same with the trapezoid rule
  (no fourth derivatives). For Heun on a linear problem it is 3/2 of the local error to
  leading order; on a nonlinear one its leading term differs (Δt³ f′f′f/4 against
  Heun's Δt³ (f″(f,f)/12 − f′f′f/6)).
* ``hermite_triangle``: the ``hermite`` term's norm, the norms added (the triangle
  inequality: never below the vector sum, and blind to cancellations between steps);
* ``embedded``: the integrator's embedded estimate (``local_error`` of
  :class:`~teng_eq.integrators.TENGStep`, e.g. Heun − Euler, which measures the *Euler*
  step's error, orders of magnitude above Heun's own) plus the step's projection error
  ‖û₁ − target‖ on held-out points (``√holdout_loss``), summed.

Norms are quadratures on the held-out points of the fits (points no fit uses, so that
the residual between the quadrature nodes is seen), interior points only. ‖e(0)‖ is
exact: u₀ is known. The estimate is ``est_rel_l2 = E_n / ‖û_n‖``.

What it is not: a proof. ``transport`` is a first-order model of the error, not a
bound; the one-sided bound of the others is rigorous on the periodic box (see the
equations), but ‖∫δ‖ ≤ ∫‖δ‖ and both quadratures (Simpson in time, held-out points in
space) are approximations, and μ is sampled at the step ends. Off a periodic box (the
disk) ``transport`` computes ``hermite``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jaxtyping import Array, Float, PyTree

from teng_eq.equations import Equation, Field, derivatives, operator
from teng_eq.grid import Quadrature, norm2
from teng_eq.model import ParamSpace

#: The kinds of estimate (module docstring); ``none`` computes none.
KINDS = ("transport", "hermite", "hermite_triangle", "trapezoid", "embedded", "none")


class Fields(eqx.Module):
    """What the estimate needs of û_θ at its points at one time (:meth:`Defect.fields`):
    u, ∇u (first axis the dimension), f = L[û_θ]; Δu, ∇f and Δf where the Hermite term
    of the short form reads them (else None); μ where it is measured (else None)."""

    u: Float[Array, " n"]
    grad: Float[Array, "dim n"] | None  # None for a system (its transport reads the coefficients)
    lap: Float[Array, " n"] | None
    f: Float[Array, " n"]
    grad_f: Float[Array, "dim n"] | None
    lap_f: Float[Array, " n"] | None
    mu: Float[Array, ""] | None
    coefficients: Float[Array, "alphas n"] | None = None  # a_α of L′[û] (transport)


class Transport(eqx.Module):
    """The error's transport through L′[û] on a periodic grid of ``shape`` (module
    docstring): the multi-indices ``alphas`` of a differential operator of the
    equation's order and their symbols (ik)^α on the grid's wave numbers (flattened
    'ij', the grid's point order; odd derivatives of the Nyquist wave are 0), and on the
    wave numbers a fit on a grid of shape ``resolved`` represents, |k_i| ≤ π m_i / L_i
    (an ellipse; ``resolving``), where a step must be stable (:meth:`radius`)."""

    alphas: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    shape: tuple[int, ...] = eqx.field(static=True)
    symbols: np.ndarray  # (alphas, n) complex
    resolving: np.ndarray  # (alphas, modes) complex

    def __init__(self, periods, shape: tuple[int, ...], order: int, resolved: tuple[int, ...] | None = None):
        dim = len(shape)
        self.alphas = tuple(a for a in itertools.product(range(order + 1), repeat=dim) if sum(a) <= order)
        self.shape = tuple(shape)
        self.symbols = self._symbols(periods, shape, nyquist_odd=True)
        resolved = self.shape if resolved is None else tuple(resolved)
        symbols = self._symbols(periods, resolved, nyquist_odd=False)
        k = np.meshgrid(*[np.fft.fftfreq(m, 1.0 / m) / (m / 2) for m in resolved], indexing="ij")
        self.resolving = symbols[:, sum(kk**2 for kk in k).ravel() <= 1.0]

    def _symbols(self, periods, shape, nyquist_odd: bool) -> np.ndarray:
        """(ik)^α for every α on the wave numbers of a grid of ``shape`` (flattened 'ij'),
        ``nyquist_odd``: the Nyquist wave's odd derivatives 0 (as a spectral derivative's)."""
        n = [np.fft.fftfreq(m, 1.0 / m) for m in shape]
        k = [2 * np.pi / length * nn for length, nn in zip(periods, n)]
        odd = [np.where(np.abs(nn) == m / 2, 0.0, kk) if nyquist_odd else kk for kk, nn, m in zip(k, n, shape)]
        mesh = [np.meshgrid(*axes, indexing="ij") for axes in (k, odd)]
        return np.stack([np.prod([(1j * mesh[a_i % 2][i]) ** a_i for i, a_i in enumerate(a)], axis=0).ravel()
                         for a in self.alphas])

    def radius(self, a: np.ndarray) -> float:
        """ρ = max over the resolved wave numbers of −Re Λ(k) (≥ 0), Λ from the mean
        coefficients ``a`` (:meth:`symbol`): the fastest rate at which L′[û] damps a mode
        the fit can hold. An explicit step of Δt is stable on all of them where Δt ρ is
        within its stability interval."""
        return max(0.0, float(np.max(-(np.mean(np.asarray(a, np.float64), axis=1) @ self.resolving).real)))

    def coefficients(self, equation: Equation, u_fn: Callable, points, t) -> Float[Array, "alphas n"]:
        """a_α(x) of L′[û] at the points: the derivative of L[û + Σ e_α φ_α] in e, with
        φ_α(p) = Π_i (p_i − p̄_i)^{α_i}/α_i! (p̄ = p held fixed): every derivative of φ_α at
        every point is 0 but ∂^α φ_α = 1, so the derivative along e_α is a_α itself."""
        def lin(e):
            def fn(p):
                q = p - jax.lax.stop_gradient(p)
                return u_fn(p) + sum(e[j] * _monomial(q, a) for j, a in enumerate(self.alphas))
            return equation.operator(Field(fn, points), t)

        return jax.jacfwd(lin)(jnp.zeros(len(self.alphas), points.dtype)).T

    def symbol(self, a: Float[Array, "alphas n"]):
        """Λ(k) = Σ_α ⟨a_α⟩ (ik)^α on the grid's wave numbers, and the rest a_α − ⟨a_α⟩
        (a system's: the leading axes (m, m) carried through)."""
        xp = jnp if isinstance(a, jax.Array) else np
        mean = xp.mean(a, axis=-1)
        return mean @ self.symbols, a - mean[..., None]

    def growth(self, a: Float[Array, "alphas n"]) -> Float[Array, ""]:
        """The fastest rate at which Λ grows a mode, max Re Λ(k): what ``growth_rate`` logs."""
        return jnp.max(self.symbol(a)[0].real)

    def apply(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        """L′[û] v = Σ_α a_α ∂^α v on the grid (spectral derivatives of v): on the host for
        a NumPy v (the estimate), traced for a JAX one (the implicit stages' Newton matrix)."""
        return self._apply_hat(a, self._fft(v))

    def _fft(self, v: np.ndarray) -> np.ndarray:
        xp = jnp if isinstance(v, jax.Array) else np
        return xp.fft.fftn(xp.reshape(v, self.shape)).ravel()

    def _apply_hat(self, a: np.ndarray, v_hat: np.ndarray) -> np.ndarray:
        """Σ_α a_α ∂^α v from v's spectrum ``v_hat``."""
        xp = jnp if isinstance(v_hat, jax.Array) else np
        return sum(xp.asarray(c) * xp.fft.ifftn(xp.reshape(s * v_hat, self.shape)).real.ravel()
                   for c, s in zip(a, self.symbols))

    def propagate(self, e: np.ndarray, defect: np.ndarray, a: np.ndarray, h: float) -> np.ndarray:
        """e at the step's end from e at its start, the step's ``defect`` ∫δ and the
        coefficients ``a`` over the step (module docstring); on the host, NumPy."""
        lam, rest = self.symbol(np.asarray(a, np.float64))
        e_hat = self._fft(e)
        z = h * lam
        phi1 = np.where(np.abs(z) < 1e-12, 1.0 + z / 2, np.expm1(z) / np.where(z == 0, 1.0, z))
        new = np.exp(z) * e_hat + phi1 * (h * self._fft(self._apply_hat(rest, e_hat)) + self._fft(defect))
        return np.fft.ifftn(np.reshape(new, self.shape)).real.ravel()


def _monomial(q, a):
    """Π_i q_i^{a_i}/a_i! at each row of q."""
    out = jnp.ones(q.shape[0], q.dtype)
    for i, power in enumerate(a):
        for j in range(power):
            out = out * q[:, i] / (j + 1)
    return out


class SystemTransport(Transport):
    """:class:`Transport` of a system's error e = (e₁, …, e_m) (on the rows ``(x, c)``,
    component after component): L′[û] couples the components,

        (L′[û] e)ᵢ = Σⱼ Σ_α a_{ijα}(x) ∂^α eⱼ,

    so Λ(k) = Σ_α ⟨a_{ijα}⟩ (ik)^α is an m × m matrix per wave vector, and a step applies
    e^{hΛ(k)} and φ₁(hΛ(k)) to each mode's m values: the top blocks of the exponential of
    [[hΛ, I], [0, 0]] (exact where Λ(k) has no eigenbasis, e.g. the wave's k = 0). Where a
    step must be stable, Λ's eigenvalues may be complex (the wave ±ic|k|, Schrödinger
    ±i|k|²/2): ``region`` (the integrator's
    :meth:`~teng_eq.integrators.ButcherTableau.equivalent_radius`) turns them into the
    radius ρ of :meth:`Transport.radius` (without one, the largest −Re λ)."""

    components: int = eqx.field(static=True)
    region: Callable | None = eqx.field(static=True)

    def __init__(self, periods, shape: tuple[int, ...], order: int, components: int,
                 resolved: tuple[int, ...] | None = None, region: Callable | None = None):
        super().__init__(periods, shape, order, resolved)
        self.components, self.region = components, region

    def coefficients(self, equation: Equation, vector: Callable, points, t) -> Float[Array, "m m alphas n"]:
        """a_{ijα}(x) at the spatial points of the rows ``points`` (:meth:`Transport.coefficients`
        per input component j; ``vector`` gives every component of û at spatial points)."""
        m = self.components
        x = points[: points.shape[0] // m, :-1]

        def lin(e):  # e: (m, alphas), component j perturbed by Σ_α e_jα φ_α
            def fn(p):
                q = p - jax.lax.stop_gradient(p)
                return vector(p) + jnp.stack([_monomial(q, a) for a in self.alphas], axis=1) @ e.T
            return jnp.stack(equation.operator(equation.fields(fn, x), t))

        return jnp.moveaxis(jax.jacfwd(lin)(jnp.zeros((m, len(self.alphas)), points.dtype)), 1, -1)

    def rates(self, a) -> np.ndarray:
        """The eigenvalues of Λ(k) (an (m, m) matrix each) on the resolved wave numbers."""
        blocks = np.mean(np.asarray(a, np.float64), axis=-1) @ self.resolving
        return np.linalg.eigvals(np.moveaxis(blocks, -1, 0)).ravel()

    def radius(self, a) -> float:
        rates = self.rates(a)
        if self.region is None:
            return max(0.0, float(np.max(-rates.real)))
        return self.region(rates)

    def growth(self, a) -> Float[Array, ""]:
        """The largest logarithmic norm of Λ(k), max λ_max((Λ + Λᴴ)/2): the fastest rate at
        which Λ grows the L² norm of a mode's m values."""
        lam = jnp.moveaxis(self.symbol(a)[0], -1, 0)
        return jnp.max(jnp.linalg.eigvalsh((lam + jnp.conj(jnp.swapaxes(lam, -1, -2))) / 2))

    def _fft(self, v: np.ndarray) -> np.ndarray:
        m = self.components
        return np.fft.fftn(np.reshape(v, (m, *self.shape)), axes=tuple(range(1, 1 + len(self.shape)))).reshape(m, -1)

    def _apply_hat(self, a: np.ndarray, v_hat: np.ndarray) -> np.ndarray:
        axes = tuple(range(1, 1 + len(self.shape)))
        d = np.stack([np.fft.ifftn(np.reshape(s * v_hat, (self.components, *self.shape)), axes=axes).real
                      .reshape(self.components, -1) for s in self.symbols])  # ∂^α e_j: (alphas, m, n)
        return np.einsum("ijan,ajn->in", np.asarray(a), d).ravel()

    def propagate(self, e: np.ndarray, defect: np.ndarray, a: np.ndarray, h: float) -> np.ndarray:
        m = self.components
        lam, rest = self.symbol(np.asarray(a, np.float64))
        block = np.zeros((lam.shape[-1], 2 * m, 2 * m), np.complex128)
        block[:, :m, :m], block[:, :m, m:] = h * np.moveaxis(lam, -1, 0), np.eye(m)
        top = scipy.linalg.expm(block)[:, :m]
        e_hat = self._fft(e)
        forcing = h * self._fft(self._apply_hat(rest, e_hat)) + self._fft(defect)
        new = (np.einsum("kij,jk->ik", top[..., :m], e_hat) + np.einsum("kij,jk->ik", top[..., m:], forcing))
        axes = tuple(range(1, 1 + len(self.shape)))
        return np.fft.ifftn(new.reshape(m, *self.shape), axes=axes).real.ravel()


class Defect(eqx.Module):
    """The local terms of one accepted step ``θ₀ → θ₁`` of size ``dt`` from time t
    (module docstring), on the interior points of a held-out ``quadrature``, for the
    estimate of ``kind``.

    **Returns** ``(vectors, scalars)``: the local defect ``∫δ`` on the points (``defect``,
    Hermite–Simpson where it can, else the trapezoid one), and ``defect_l2`` (its norm;
    Hermite only), ``trapezoid_l2``, ``growth_rate`` (μ, the larger of its values at both
    ends; under ``transport`` the largest Re Λ(k)) and ``u_l2`` (‖û₁‖ on the points).

    An equation of the short form ``ν Δu + N(u, ∇u)`` (``short``) gets L[p(½)] from the
    fields ∇f, Δf of both ends; any other from L applied to p(½) as a function, which
    needs both ends' θ. Where the equation declares no growth rate, each end's fields
    carry μ measured there (``modes``: :func:`measured_growth_rate`'s basis); under
    ``transport`` (a periodic grid) the coefficients of L′[û] instead (:class:`Transport`),
    ``resolved`` the shape of the fit's grid (the wave numbers a step must be stable on).
    A system always carries its :class:`SystemTransport` (its μ, under the other kinds, is the
    largest logarithmic norm of Λ: a measured μ reads a scalar field); ``region``: the
    integrator's stability region for its complex rates.
    """

    space: ParamSpace
    equation: Equation
    points: Float[Array, "n dim"]
    weights: Float[Array, " n"]
    modes: Float[Array, "modes dim+1"] | None
    transport: Transport | None
    hermite: bool = eqx.field(static=True)
    short: bool = eqx.field(static=True)

    def __init__(self, space: ParamSpace, equation: Equation, quadrature: Quadrature, kind: str,
                 resolved: tuple[int, ...] | None = None, region: Callable | None = None):
        self.space, self.equation = space, equation
        self.short = equation.autonomous and type(equation).operator is Equation.operator
        self.hermite = kind in ("transport", "hermite", "hermite_triangle") and (self.short or equation.order <= 2)
        weights = jnp.broadcast_to(jnp.asarray(quadrature.weights, jnp.float64), quadrature.points.shape[:1])
        if quadrature.boundary is not None:  # the PDE holds inside; the boundary rows carry its condition
            weights = jnp.where(quadrature.boundary, 0.0, weights)
        self.points, self.weights = jnp.asarray(quadrature.points), weights
        periodic = equation.periods is not None and quadrature.grid_shape is not None
        system = bool(equation.components)
        self.transport = None if not (periodic and (kind == "transport" or system)) else SystemTransport(
            equation.periods, quadrature.grid_shape, equation.order, len(equation.components), resolved, region
        ) if system else Transport(equation.periods, quadrature.grid_shape, equation.order, resolved)
        declared = type(equation).growth_rate is not Equation.growth_rate
        self.modes = None if declared or self.transport else fourier_modes(equation.periods, len(self.points))

    @property
    def kind(self) -> str:
        """The estimate it feeds: ``transport``, else its local term, ``hermite`` or ``trapezoid``."""
        return "transport" if self.transport is not None else "hermite" if self.hermite else "trapezoid"

    def norm(self, r: Float[Array, " n"]) -> Float[Array, ""]:
        """The L² norm of values on the points (their quadrature)."""
        return jnp.sqrt(norm2(r, self.weights))

    def initial(self, theta) -> tuple[Float[Array, " n"], Float[Array, ""]]:
        """``(û₀ − u₀, ‖û₀‖)`` on the points: θ₀'s error, exact since u₀ is known."""
        u = self.space.apply(theta, self.points)
        return u - self.equation.u0(self.points.T), self.norm(u)

    def _u(self, theta) -> Callable:
        return lambda p: self.space.apply(theta, p)

    def fields(self, theta, t=0.0) -> Fields:
        """The :class:`Fields` of û_θ on the points at time t."""
        u_fn = self._u(theta)
        if self.equation.components:
            vector = lambda p: self.space.vector(theta, p)
            a = self.transport.coefficients(self.equation, vector, self.points, t)
            f = operator(self.equation, u_fn, self.points, t, vector)
            return Fields(u_fn(self.points), None, None, f, None, None, None, a)
        mu = None if self.modes is None else measured_growth_rate(
            self.equation, u_fn, self.points, self.weights, t, self.modes)
        a = None if self.transport is None else self.transport.coefficients(self.equation, u_fn, self.points, t)
        if not self.short:
            field = Field(u_fn, self.points)
            return Fields(field.value, field.grad, None, self.equation.operator(field, t), None, None, mu, a)
        u, grad, lap = derivatives(u_fn, self.points)
        f = self.equation.rhs(u, grad, lap)
        if not self.hermite:
            return Fields(u, grad, lap, f, None, None, mu, a)
        _, grad_f, lap_f = derivatives(lambda p: operator(self.equation, u_fn, p), self.points)
        return Fields(u, grad, lap, f, grad_f, lap_f, mu, a)

    def __call__(self, theta0, theta1, dt, t=0.0) -> tuple[dict[str, Float[Array, " n"]], dict[str, Float[Array, ""]]]:
        """The local terms of the step ``θ₀ → θ₁`` from t (:meth:`fields` of both ends, :meth:`combine`)."""
        return self.combine(self.fields(theta0, t), self.fields(theta1, t + dt), dt, (theta0, theta1), t)

    def combine(self, start: Fields, end: Fields, dt, thetas=None, t=0.0):
        """The step's local terms from the :class:`Fields` at both of its ends (a step's
        end is the next one's start: one evaluation per step); ``thetas`` (both ends' θ)
        and the start t for an operator of another form than the short one."""
        trapezoid = (end.u - start.u) - dt / 2 * (start.f + end.f)
        mu0, mu1 = start.mu, end.mu
        if self.transport is not None:  # the fastest rate of the diagonal part Λ over the step
            mu0 = mu1 = self.transport.growth((start.coefficients + end.coefficients) / 2)
        elif mu0 is None:
            mu0, mu1 = self.equation.growth_rate(start.u, start.grad), self.equation.growth_rate(end.u, end.grad)
        scalars = {"trapezoid_l2": self.norm(trapezoid), "u_l2": self.norm(end.u),
                   "growth_rate": jnp.maximum(jnp.asarray(mu0, jnp.float64), jnp.asarray(mu1, jnp.float64))}
        if not self.hermite:
            return {"defect": trapezoid}, scalars
        if self.short:  # p(½) of the cubic Hermite interpolant, with its gradient and Laplacian
            p = (start.u + end.u) / 2 + dt / 8 * (start.f - end.f)
            gp = (start.grad + end.grad) / 2 + dt / 8 * (start.grad_f - end.grad_f)
            lp = (start.lap + end.lap) / 2 + dt / 8 * (start.lap_f - end.lap_f)
            lp_half = self.equation.rhs(p, gp, lp)
        else:  # L of the function p(½), at t + Δt/2
            a, b = (self._u(th) for th in thetas)

            def p_half(q):
                la, lb = (operator(self.equation, fn, q, s) for fn, s in ((a, t), (b, t + dt)))
                return (a(q) + b(q)) / 2 + dt / 8 * (la - lb)

            lp_half = operator(self.equation, p_half, self.points, t + dt / 2)
        defect = (end.u - start.u) - dt / 6 * (start.f + 4 * lp_half + end.f)
        return {"defect": defect}, {**scalars, "defect_l2": self.norm(defect)}


def fourier_modes(periods, n_points: int) -> Float[Array, "modes dim+1"] | None:
    """The basis of :func:`measured_growth_rate` on the periodic box of ``periods``: rows
    ``(k₁, …, k_d, φ)`` for ``cos(k·x − φ)`` with integer wave numbers ``|mᵢ| ≤ K``
    (``kᵢ = 2π mᵢ/Lᵢ``; K = 6, 3, 2 in 1-, 2-, 3-D), each ±m once, φ = 0 (cos) and π/2
    (sin, m ≠ 0); fewer than the ``n_points`` it is sampled on. Above 3-D, where the
    (2K + 1)ᵈ wave vectors outnumber any sample, m along one axis only (K = 2: 4d + 1
    rows). None off a periodic box."""
    if periods is None:
        return None
    dim = len(periods)
    top = {1: 6, 2: 3}.get(dim, 2)
    if dim > 3:
        ms = np.concatenate([np.zeros((1, dim), int)] + [j * np.eye(dim, dtype=int) for j in (-2, -1, 1, 2)])
    else:
        ms = np.array(np.meshgrid(*[np.arange(-top, top + 1)] * dim, indexing="ij")).reshape(dim, -1).T
    half = [m for m in ms if tuple(m) > tuple(-m) or not m.any()]  # one of ±m
    rows = [(*(2 * np.pi * m / np.asarray(periods)), phase) for m in half
            for phase in ((0.0,) if not m.any() else (0.0, np.pi / 2))]
    if len(rows) >= n_points:
        raise ValueError(f"{len(rows)} Fourier modes need more than the {n_points} held-out points")
    return jnp.asarray(rows, jnp.float64)


def measured_growth_rate(equation: Equation, u_fn: Callable, points, weights, t, modes) -> Float[Array, ""]:
    """μ measured at û (``u_fn``): the largest eigenvalue of the symmetric part of the
    linearised operator L'[û] on the span of the Fourier ``modes`` (:func:`fourier_modes`),
    orthonormal in the points' quadrature — the logarithmic norm of L'[û] there, i.e.
    the rate at which two solutions near û separate in L², to first order, along the
    modes the run resolves. An equation that knows a bound declares it instead
    (:meth:`~teng_eq.equations.Equation.growth_rate`): higher modes, where an operator
    with diffusion damps, are left out."""
    root_w = jnp.sqrt(weights)[:, None]

    def basis(row):
        return lambda p: jnp.cos(p @ row[:-1] - row[-1])

    def linearised(row):  # L'[û] b at the points: d/de L[û + e b]
        b = basis(row)
        return jax.jvp(lambda e: equation.operator(Field(lambda p: u_fn(p) + e * b(p), points), t),
                       (0.0,), (1.0,))[1]

    q, r = jnp.linalg.qr(root_w * jax.vmap(lambda row: basis(row)(points), out_axes=1)(modes))
    g = q.T @ (root_w * jax.vmap(linearised, out_axes=1)(modes))
    g = jax.scipy.linalg.solve_triangular(r, g.T, trans=1, lower=False).T  # G R⁻¹
    return jnp.max(jnp.linalg.eigvalsh((g + g.T) / 2))


@dataclasses.dataclass(frozen=True)
class ErrorEstimate:
    """``E_n`` (module docstring), advanced on the host step by step: ``vector`` (the
    estimated error on the points, for the kinds that sum defects as vectors) and
    ``error`` (its norm, or the running triangle sum), what a checkpoint keeps; and
    ``fields``, the :class:`Fields` of step n's end, the next step's start (a resume
    computes them again from the checkpoint's state)."""

    kind: str
    weights: np.ndarray
    vector: np.ndarray
    error: float
    fields: Fields | None = None
    transport: Transport | None = None

    @classmethod
    def start(cls, kind: str, weights, e0, transport: Transport | None = None) -> ErrorEstimate:
        """From θ₀'s error ``e0`` on the points (``weights``: their quadrature)."""
        weights, e0 = np.asarray(weights, np.float64), np.asarray(e0, np.float64)
        return cls(kind, weights, e0, float(np.sqrt(np.sum(weights * e0 * e0))), transport=transport)

    @property
    def vectorial(self) -> bool:
        return self.kind in ("transport", "hermite", "trapezoid")

    def advance(self, dt: float, scalars: dict[str, float], defect: np.ndarray,
                ends: tuple[Fields, Fields] | None) -> ErrorEstimate:
        """``E_{n+1}`` from the step's ``scalars`` (the method's metrics and
        :class:`Defect`'s), its ``defect`` vector and the :class:`Fields` of its ``ends``."""
        growth = math.exp(scalars["growth_rate"] * dt)
        vector, error = self.vector, self.error
        if self.kind == "transport":
            a = (np.asarray(ends[0].coefficients) + np.asarray(ends[1].coefficients)) / 2
            vector = self.transport.propagate(self.vector, np.asarray(defect, np.float64), a, dt)
            error = float(np.sqrt(np.sum(self.weights * vector**2)))
        elif self.vectorial:
            vector = growth * self.vector + np.asarray(defect, np.float64)
            error = float(np.sqrt(np.sum(self.weights * vector**2)))
        elif self.kind == "hermite_triangle":
            error = growth * self.error + scalars["defect_l2"]
        else:  # embedded: the integrator's estimate, plus the projection error on held-out points
            error = growth * self.error + scalars["local_error"] + math.sqrt(max(scalars["holdout_loss"], 0.0))
        return dataclasses.replace(self, vector=vector, error=error, fields=None if ends is None else ends[1])


class CompiledEstimate:
    """A run's :class:`Defect`, compiled once from the method's state (``parameters``:
    its θ): the :class:`Fields` of a state (derivatives up to fourth order), the local
    terms of a step from the fields at both ends, and θ₀'s error against u₀. ``kind``:
    the estimate the run computes (``hermite`` asked of an operator above second order
    of another form than the short one computes ``trapezoid``)."""

    def __init__(self, defect: Defect, kind: str, parameters: Callable, state: PyTree):
        self.kind = defect.kind if kind == "transport" else (
            "trapezoid" if kind.startswith("hermite") and not defect.hermite else kind)
        self.weights, self.transport = np.asarray(defect.weights), defect.transport
        self.initial = jax.jit(lambda s: defect.initial(parameters(s))).lower(state).compile()
        if defect.short:  # autonomous, the fields hold all L[p(½)] needs: no t, no θ
            fields = jax.jit(lambda s: defect.fields(parameters(s))).lower(state).compile()
            shapes = jax.eval_shape(lambda s: defect.fields(parameters(s)), state)
            combine = jax.jit(lambda a, b, dt: defect.combine(a, b, dt)).lower(shapes, shapes, 0.0).compile()
            self.fields = lambda s, t: fields(s)
            self.combine = lambda a, b, s0, s1, dt, t: combine(a, b, dt)
            return
        shapes = jax.eval_shape(lambda s: defect.fields(parameters(s), 0.0), state)
        self.fields = jax.jit(lambda s, t: defect.fields(parameters(s), t)).lower(state, 0.0).compile()
        self.combine = jax.jit(lambda a, b, s0, s1, dt, t: defect.combine(
            a, b, dt, (parameters(s0), parameters(s1)), t)).lower(shapes, shapes, state, state, 0.0, 0.0).compile()

    def start(self, state) -> tuple[ErrorEstimate, float]:
        """The estimate at t = 0, from θ₀'s error (exact: u₀ is known), with the fields of θ₀
        (the first step's start), and ‖û₀‖²."""
        e0, norm0 = jax.device_get(self.initial(state))
        estimate = ErrorEstimate.start(self.kind, self.weights, e0, self.transport)
        return dataclasses.replace(estimate, fields=self.fields(state, 0.0)), float(norm0) ** 2

    def radius(self, estimate: ErrorEstimate) -> float | None:
        """ρ of the latest fields' L′[û] (:meth:`Transport.radius`); None without the transport."""
        if self.transport is None or estimate.fields is None:
            return None
        return self.transport.radius(estimate.fields.coefficients)

    def derivative(self, estimate: ErrorEstimate, q: int) -> float | None:
        """‖∂ₜ^q u‖ at t = 0 on the points, as (L′[û₀])^{q−1} L[û₀] (:meth:`Transport.apply`;
        exact for a linear equation, its linearisation's otherwise); None without the transport."""
        if self.transport is None or estimate.fields is None:
            return None
        a, v = np.asarray(estimate.fields.coefficients), np.asarray(estimate.fields.f)
        for _ in range(q - 1):
            v = self.transport.apply(a, v)
        return float(np.sqrt(np.sum(self.weights * v * v)))

    def local(self, start: Fields | None, previous, state, dt: float,
              t: float) -> tuple[dict[str, np.ndarray], dict[str, float], tuple[Fields, Fields]]:
        """The local terms of the step from ``previous`` at t to ``state``
        (:meth:`Defect.combine`), from the ``start`` fields (None: computed from
        ``previous``), and the fields of both ends."""
        start = self.fields(previous, t) if start is None else start
        end = self.fields(state, t + dt)
        vectors, scalars = jax.device_get(self.combine(start, end, previous, state, dt, t))
        return vectors, {k: float(v) for k, v in scalars.items()}, (start, end)
