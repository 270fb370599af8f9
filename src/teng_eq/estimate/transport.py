"""The error carried as a field through the linearised operator L′[û] on a periodic grid
(:class:`Transport`; a system's, :class:`SystemTransport`): its coefficients by autodiff,
its Fourier diagonal, the exponential Euler rule of a step, and the stable step of an
explicit tableau on the modes a fit resolves; also the implicit stages' spectral
operators (:mod:`teng_eq.stepping.implicit`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jaxtyping import Array, Float

from teng_eq.equations import Equation, Field


class Transport(eqx.Module):
    """The error's transport through L′[û] on a periodic grid of ``shape`` (module
    docstring): the multi-indices ``alphas`` of a differential operator of the
    equation's order and their symbols (ik)^α on the grid's wave numbers (flattened
    'ij', the grid's point order; odd derivatives of the Nyquist wave are 0), and on the
    wave numbers a fit on a grid of shape ``resolved`` represents, |k_i| ≤ π m_i / L_i
    (an ellipse; ``resolving``), where a step must be stable (:meth:`radius`); ``region``
    (an explicit integrator's :meth:`~teng_eq.stepping.tableau.Tableau.equivalent_radius`)
    reads the rates there that lie off the negative real axis."""

    alphas: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    shape: tuple[int, ...] = eqx.field(static=True)
    symbols: np.ndarray  # (alphas, n) complex
    resolving: np.ndarray  # (alphas, modes) complex
    region: Callable | None = eqx.field(static=True)
    # the step's local term arrives as the flow's defect over the step (:func:`flow_defect`), already
    # carried to the step's end: added as it is, not weighted by φ₁(hΛ)
    carried: bool = eqx.field(static=True)
    # the rest R carried by Lawson's RK4 in substeps (:meth:`lawson`), where the frozen-coefficient
    # model does not hold (:meth:`frozen`) but R is of first order (:meth:`transports`)
    substepped: bool = eqx.field(static=True)

    def __init__(self, periods, shape: tuple[int, ...], order: int, resolved: tuple[int, ...] | None = None,
                 region: Callable | None = None, carried: bool = False, substepped: bool = False):
        dim = len(shape)
        self.region, self.carried, self.substepped = region, carried, substepped
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
        odd = [np.where(np.abs(nn) == m / 2, 0.0, kk) if nyquist_odd else kk
               for kk, nn, m in zip(k, n, shape)]
        mesh = [np.meshgrid(*axes, indexing="ij") for axes in (k, odd)]
        return np.stack([np.prod([(1j * mesh[a_i % 2][i]) ** a_i for i, a_i in enumerate(a)], axis=0).ravel()
                         for a in self.alphas])

    #: How much the region's radius must exceed the real axis's before it replaces it: its
    #: extents are tabulated to 10⁻³ (:meth:`~teng_eq.stepping.tableau.Tableau.equivalent_radius`;
    #: ≥ 3.6·10⁻⁴ of every stability interval x ≥ 2.79), so below that they cannot tell a
    #: rate a hair off the axis (Burgers' near-real ones: 10⁻⁶) from one on it, where the
    #: real-axis rule is exact.
    RESOLUTION: ClassVar[float] = 1e-3

    def rates(self, a: np.ndarray) -> np.ndarray:
        """Λ(k) on the resolved wave numbers, Λ from the mean coefficients ``a``
        (:meth:`symbol`): the eigenvalue of the 1 × 1 symbol, complex where L′[û] has odd
        derivatives (advection ±ik, dispersion ∓ik³)."""
        return np.mean(np.asarray(a, np.float64), axis=1) @ self.resolving

    def radius(self, a: np.ndarray) -> float:
        """ρ with Δt ρ ≤ x (the tableau's stability interval [−x, 0]) where Δtλ lies in the
        stability region for every rate λ of :meth:`rates`: ρ₀ = max −Re λ (≥ 0), the
        fastest rate at which L′[û] damps a mode the fit can hold; with a ``region``, its
        radius of the rates along their own rays where that exceeds ρ₀ by more than
        :attr:`RESOLUTION` (waves, dispersion, advection), else ρ₀. On a real spectrum
        (heat, Allen–Cahn) ρ = ρ₀, the real axis's; on KdV's iω, ω ≈ k³, RK4 holds
        |Δtω| ≤ 2.83, its region on the imaginary axis."""
        rates = self.rates(a)
        rho = max(0.0, float(np.max(-rates.real)))
        if self.region is None:
            return rho
        through = self.region(rates)
        return through if through > rho * (1 + self.RESOLUTION) else rho

    def frozen(self, a: np.ndarray) -> bool:
        """Whether the frozen-coefficient model holds for L′ = Σ_α a_α(x) ∂^α (``a`` on the
        grid, on the host): on every wave number k ≠ 0 a fit resolves, the variable part of
        the derivatives never exceeds the damping their means give that mode,

            max_x |Σ_{|α|≥1} (a_α(x) − ⟨a_α⟩)(ik)^α| ≤ max(0, −Re Σ_{|α|≥1} ⟨a_α⟩(ik)^α)

        (+ 10⁻¹⁰ of the symbol's size; a mode the mean part grows, as Kuramoto–Sivashinsky's
        long waves, admits no variable part).

        Then :meth:`propagate`'s explicit rule for the rest R is a contraction relative to
        e^{hΛ} on each mode (for a real Λ = −d and |r| ≤ d: e^{−hd} + (1 − e^{−hd}) r/d ∈
        [−1, 1]), as on a variable diffusivity a ≥ ½ ⟨a⟩. Where it fails (a velocity that
        varies in x with ν = 0: Λ = −i⟨c⟩·k, no damping) the rule is Euler's on
        R's imaginary rates, |1 + ihr| > 1: it grows an error the operator only moves.
        The zeroth-order part (a reaction c(x)) is bounded and left out."""
        a = np.asarray(a, np.float64)
        derivative = np.array([sum(alpha) >= 1 for alpha in self.alphas])
        waves = np.any(self.resolving[derivative] != 0, axis=0)  # k ≠ 0
        symbols = self.resolving[derivative][:, waves]
        mean = a[derivative].mean(axis=1)
        damping = -(mean @ symbols).real
        variable = np.max(np.abs((a[derivative] - mean[:, None]).T @ symbols), axis=0)
        scale = np.max(np.abs(a[derivative]), axis=1) @ np.abs(symbols)
        return bool(np.all(variable <= np.maximum(damping, 0.0) + 1e-10 * scale))

    def transports(self, a: np.ndarray) -> bool:
        """Whether only L′'s first- and zeroth-order coefficients vary over the grid (``a`` on
        the host; 10⁻¹⁰ of each coefficient's size allowed): a velocity c(x), a reaction
        c(x), under constant diffusion or none. Then the rest R = L′ − Λ has rates of size
        |c − ⟨c⟩||k|, and :meth:`lawson` carries it in a few substeps of an explicit step
        stable on them; a variable diffusivity's rest (rates |a − ⟨a⟩||k|²) would need
        substeps as small as the explicit stable step itself."""
        a = np.asarray(a, np.float64)
        high = np.array([sum(alpha) >= 2 for alpha in self.alphas])
        spread = np.max(np.abs(a[high] - a[high].mean(axis=1, keepdims=True)), axis=1, initial=0.0)
        return bool(np.all(spread <= 1e-10 * np.max(np.abs(a[high]), axis=1, initial=0.0)))

    def coefficients(self, equation: Equation, u_fn: Callable, points, t) -> Float[Array, "alphas n"]:
        """a_α(x) of L′[û] at the points: the derivative of L[û + Σ e_α φ_α] in e, with
        φ_α(p) = Π_i (p_i − p̄_i)^{α_i}/α_i! (p̄ = p held fixed): every derivative of φ_α at
        every point is 0 but ∂^α φ_α = 1, so the derivative along e_α is a_α itself."""
        return linear_coefficients(equation, u_fn, points, t, self.alphas)

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
        coefficients ``a`` over the step (module docstring); on the host, NumPy. A
        :attr:`carried` defect (:func:`flow_defect`) is added as it is."""
        lam, rest = self.symbol(np.asarray(a, np.float64))
        e_hat = self._fft(e)
        z = h * lam
        if self.substepped:
            source = self._fft(defect) if self.carried else phi1(z) * self._fft(defect)
            new = self.lawson(e_hat, lam, rest, h) + source
            return np.fft.ifftn(np.reshape(new, self.shape)).real.ravel()
        varying = h * self._fft(self._apply_hat(rest, e_hat))
        if self.carried:
            new = np.exp(z) * e_hat + phi1(z) * varying + self._fft(defect)
        else:
            new = np.exp(z) * e_hat + phi1(z) * (varying + self._fft(defect))
        return np.fft.ifftn(np.reshape(new, self.shape)).real.ravel()

    #: Lawson's RK4 on the imaginary axis: |R(iy)| ≤ 1 for |y| ≤ 2√2; its substeps keep
    #: τ·max|R| at :attr:`SUBSTEP` below that (a margin for R's rates off the axis).
    SUBSTEP: ClassVar[float] = 2.0

    def lawson(self, e_hat: np.ndarray, lam: np.ndarray, rest: np.ndarray, h: float) -> np.ndarray:
        """ê at the end of a step of size h of ∂ₜe = Λe + Re (the linearised flow without
        its source) by Lawson's integrating-factor RK4 (RK4 on e^{−tΛ}e, exact where R = 0),
        in s substeps of size τ = h/s with τ·ρ_R ≤ :attr:`SUBSTEP`, ρ_R = max_k Σ_α
        max_x |a_α − ⟨a_α⟩| |(ik)^α| (a bound on R's rates on the grid's waves). With E(τ) =
        e^{τΛ}, each substep:

            k₁ = Rv,  k₂ = R E(τ/2)(v + τk₁/2),  k₃ = R (E(τ/2)v + τk₂/2),  k₄ = R (E(τ)v + τE(τ/2)k₃),
            v ← E(τ)v + τ/6 (E(τ)k₁ + 2E(τ/2)(k₂ + k₃) + k₄)."""
        rho = float(np.max(np.max(np.abs(rest), axis=1) @ np.abs(self.symbols)))
        substeps = max(1, math.ceil(h * rho / self.SUBSTEP))
        tau = h / substeps
        half, whole = np.exp(tau * lam / 2), np.exp(tau * lam)

        def r(v_hat):
            return self._fft(self._apply_hat(rest, v_hat))

        v = e_hat
        for _ in range(substeps):
            k1 = r(v)
            k2 = r(half * (v + tau / 2 * k1))
            k3 = r(half * v + tau / 2 * k2)
            k4 = r(whole * v + tau * half * k3)
            v = whole * v + tau / 6 * (whole * k1 + 2 * half * (k2 + k3) + k4)
        return v

    def flow_defect(self, u: tuple[Array, Array], remainder: tuple[Array, Array], a: tuple[Array, Array], h,
                    curvature: Array | None = None) -> Float[Array, " n"]:
        """The step's local term as the defect of the linearised flow over it, on the grid
        (traced): with Λ the Fourier diagonal of the step's mean coefficients and
        N = L[û] − Λû the rest at the step's start, middle and end (N₀, N½, N₁),

            d = û₁ − e^{hΛ} û₀ − ∫₀^h e^{(h−s)Λ} N(s) ds,

        the exact flow of ∂ₜu = Λu + N from û₀, taken from û₁ (variation of constants), N
        quadratic in time through its three values: N½ the ends' mean plus the ``curvature``
        of N's explicit dependence on t (a forcing's; None: 0, as on an autonomous equation;
        :meth:`~teng_eq.estimate.defect.Defect.combine`), the state's part linear between the
        ends (the mean of two networks, or of their coefficients, lies O(h²) off the
        solution's midpoint, which Simpson's weight would carry into a term of the step's own
        order): the integral is
        h(φ₁N̂₀ + φ₂(4N̂½ − 3N̂₀ − N̂₁) + 4φ₃(N̂₀ − 2N̂½ + N̂₁)), φⱼ(hΛ), exact for a forcing
        quadratic in t (Simpson's rule where Λ = 0). Λû is applied spectrally, as an implicit
        stage applies (I − hΛ)⁻¹ on its grid, and N = ``remainder`` + Σ_α a_α ∂^α û − Λû with the
        ``remainder`` L[û] − L′[û]û pointwise (the network's own derivatives, where a stiff
        Λ would multiply the network's content above the grid's band by |k|⁴: what the
        trapezoid defect sees, and which counted the error of the fit that sits still
        through an implicit step |hΛ| times): ∂^α û spectral too. ``u``, ``remainder`` and the
        coefficients ``a``: both ends'."""
        mean = (a[0] + a[1]) / 2
        lam = self.symbol(mean)[0]
        z = h * lam
        hat = [self._fft(v) for v in u]
        ends = [self._fft(r + self.apply(c, v)) - lam * v_hat for r, c, v, v_hat in zip(remainder, a, u, hat)]
        middle = (ends[0] + ends[1]) / 2 + (0.0 if curvature is None else self._fft(curvature))
        rest = (ends[0], middle, ends[1])
        p1, p2, p3 = (_phi(j, z) for j in (1, 2, 3))
        integral = p1 * rest[0] + p2 * (4 * rest[1] - 3 * rest[0] - rest[2]) + 4 * p3 * (
            rest[0] - 2 * rest[1] + rest[2])
        d_hat = hat[1] - jnp.exp(z) * hat[0] - h * integral
        return jnp.fft.ifftn(jnp.reshape(d_hat, self.shape)).real.ravel()


def oscillatory(transport, a) -> bool:
    """Whether ``transport``'s stable-step radius at the coefficients ``a`` (``radius(a)``) is
    that of rates off the real axis (waves, dispersion, advection): above the fastest real
    decay max(0, max −Re λ) by more than the region's tabulation, :attr:`Transport.RESOLUTION`."""
    decay = max(0.0, float(np.max(-np.asarray(transport.rates(a)).real)))
    return transport.radius(a) > decay * (1 + Transport.RESOLUTION)


def phi1(z: np.ndarray) -> np.ndarray:
    """φ₁(z) = (e^z − 1)/z, 1 + z/2 near 0 (complex or real z, on the host)."""
    return np.where(np.abs(z) < 1e-12, 1.0 + z / 2, np.expm1(z) / np.where(z == 0, 1.0, z))


def _phi(j: int, z: Array) -> Array:
    """φⱼ(z) = (e^z − Σ_{m<j} z^m/m!)/z^j (φ₁ = (e^z − 1)/z), traced: its Taylor series
    Σ_m z^m/(m + j)! to 20 terms where |z| < ½ (there the quotient loses digits to
    cancellation; the series' remainder is below 10⁻²⁰), the quotient elsewhere."""
    small = jnp.abs(z) < 0.5
    series = sum(z**m / float(math.factorial(m + j)) for m in range(20))
    safe = jnp.where(small, 1.0, z)
    head = sum(safe**m / float(math.factorial(m)) for m in range(1, j))
    return jnp.where(small, series, (jnp.expm1(safe) - head) / safe**j)


def linear_coefficients(equation: Equation, u_fn: Callable, points, t,
                        alphas: tuple[tuple[int, ...], ...]) -> Float[Array, "alphas n"]:
    """a_α(x) of L′[û] = Σ_α a_α ∂^α at the points: the derivative of L[û + Σ e_α φ_α] in e,
    with φ_α(p) = Π_i (p_i − p̄_i)^{α_i}/α_i! (p̄ = p held fixed): every derivative of φ_α at
    every point is 0 but ∂^α φ_α = 1, so the derivative along e_α is a_α itself."""
    def lin(e):
        def fn(p):
            q = p - jax.lax.stop_gradient(p)
            return u_fn(p) + sum(e[j] * _monomial(q, a) for j, a in enumerate(alphas))
        return equation.operator(Field(fn, points), t)

    return jax.jacfwd(lin)(jnp.zeros(len(alphas), points.dtype)).T


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
    :meth:`~teng_eq.stepping.tableau.Tableau.equivalent_radius`) turns them into the
    radius ρ of :meth:`Transport.radius` (without one, the largest −Re λ)."""

    components: int = eqx.field(static=True)

    def __init__(self, periods, shape: tuple[int, ...], order: int, components: int,
                 resolved: tuple[int, ...] | None = None, region: Callable | None = None):
        super().__init__(periods, shape, order, resolved, region)
        self.components = components

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
        """Every eigenvalue through the ``region``, near the real axis too (without one,
        the largest −Re λ)."""
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
        """Each component's spectrum, (m, n): on the host for a NumPy v, traced for a JAX one."""
        m, xp = self.components, jnp if isinstance(v, jax.Array) else np
        return xp.fft.fftn(xp.reshape(v, (m, *self.shape)),
                           axes=tuple(range(1, 1 + len(self.shape)))).reshape(m, -1)

    def _apply_hat(self, a: np.ndarray, v_hat: np.ndarray) -> np.ndarray:
        """(L′ e)ᵢ = Σⱼ Σ_α a_{ijα} ∂^α eⱼ from e's spectra ``v_hat`` (m, n), on the rows."""
        axes, xp = tuple(range(1, 1 + len(self.shape))), jnp if isinstance(v_hat, jax.Array) else np
        d = xp.stack([xp.fft.ifftn(xp.reshape(s * v_hat, (self.components, *self.shape)), axes=axes).real
                      .reshape(self.components, -1) for s in self.symbols])  # ∂^α e_j: (alphas, m, n)
        return xp.einsum("ijan,ajn->in", xp.asarray(a), d).ravel()

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
