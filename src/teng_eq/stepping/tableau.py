"""Runge–Kutta tableaux, explicit and diagonally implicit, in one type (:class:`Tableau`), and
the named ones TENG's steps take (:data:`TABLEAUS`, :data:`DIRK_TABLEAUS`).

A tableau ``(A, b)`` with A lower triangular advances ``u_t`` by

    u⁽ʲ⁾ = u_t + Δt Σ_{i≤j} A_{ji} kᵢ,   kⱼ = F[u⁽ʲ⁾],   u_{t+Δt} = u_t + Δt Σⱼ bⱼ kⱼ.

Where A's diagonal is zero the scheme is explicit (:mod:`teng_eq.stepping.explicit` fits a
network to each stage's value and takes the next slope on it); elsewhere it is diagonally
implicit and stiffly accurate, b the last row of A (:mod:`teng_eq.stepping.implicit` solves
each implicit stage in function space and fits its solution), and with a strictly lower
``imex`` part an IMEX pair. Every tableau checks itself when it is made: Butcher's order
conditions, its embedded estimate's order, and an implicit one's A-stability.
"""

from __future__ import annotations

import functools

import diffrax
import equinox as eqx
import numpy as np


def _order_conditions(A: np.ndarray, b: np.ndarray) -> list[tuple[float, float]]:
    """Butcher's order conditions up to order 4, ``(value, exact)`` in order (1 for
    order 1, 1 more for order 2, 2 more for order 3, 4 more for order 4)."""
    c = A.sum(axis=1)
    return [(b.sum(), 1.0), (b @ c, 1 / 2), (b @ c**2, 1 / 3), (b @ A @ c, 1 / 6),
            (b @ c**3, 1 / 4), (b @ (c * (A @ c)), 1 / 8), (b @ A @ c**2, 1 / 12), (b @ A @ A @ c, 1 / 24)]


#: How many of :func:`_order_conditions` a method of each order satisfies.
_CONDITIONS = {0: 0, 1: 1, 2: 2, 3: 4, 4: 8}


def _extents(poly: np.polynomial.Polynomial, directions) -> np.ndarray:
    """The stability region's extent along the ray of each unit ``direction``: the last r
    on a grid of step 10⁻³ in [0, 8] before |R(r d)| exceeds 1 (8 where it never does)."""
    r = np.linspace(0.0, 8.0, 8001)
    outside = np.abs(poly(np.asarray(directions)[:, None] * r)) > 1.0 + 1e-12
    first = np.argmax(outside, axis=1)
    return np.where(outside.any(axis=1), r[np.maximum(first - 1, 0)], 8.0)


@functools.lru_cache(maxsize=16)
def _extent_table(coefficients: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Angles from π/2 to π every 0.1° and the extents along them (:func:`_extents`), once
    per stability polynomial (its ``coefficients``)."""
    angles = np.linspace(np.pi / 2, np.pi, 901)
    return angles, _extents(np.polynomial.Polynomial(coefficients), np.exp(1j * angles))


class Tableau(eqx.Module):
    """A Runge–Kutta tableau: ``a[j]`` the coefficients of stage j on stages 0 … j (j + 1
    of them, the diagonal last), ``b`` the step's weights (None: the last row of A, a
    stiffly accurate scheme), ``order`` its order; ``imex``, for an IMEX pair, the
    strictly lower s × s explicit part Â (row j: stage j on the stages before it), stiffly
    accurate too (the pairs of Ascher, Ruuth & Spiteri, 1997).

    **Embedded error estimate** (optional): ``b_error`` are the weights of

        err = Δt Σⱼ b_errorⱼ kⱼ = y_{t+Δt} − ŷ_{t+Δt},

    the difference between the step and an embedded solution ŷ of lower order with
    weights ``b − b_error`` (diffrax's convention). An explicit tableau's ``b_error`` may
    hold one weight more than there are stages: the slope ``k_{s+1} = L[y_{t+Δt}]`` at the
    step's end ("first same as last", FSAL; in TENG an operator evaluation on the final
    network, no fit). ``err`` is of order ``error_order`` in Δt.

    It checks itself: every row has its length; Butcher's order conditions up to ``order``
    hold, for a pair in both parts with the coupling conditions of order 2 (bᵀĉ = b̂ᵀc = ½);
    the embedded solution satisfies the conditions up to ``error_order − 1`` and fails one
    of ``error_order`` (so that ``err`` is neither of higher order than claimed nor zero);
    an implicit tableau has a diagonal ≥ 0 (its stage equations have their solutions for
    small Δt) and is A-stable on the imaginary axis (``R(iy)`` for y up to 10⁴).
    """

    name: str = eqx.field(static=True)
    a: tuple[tuple[float, ...], ...] = eqx.field(static=True)
    order: int = eqx.field(static=True)
    b: tuple[float, ...] | None = eqx.field(static=True, default=None)
    b_error: tuple[float, ...] | None = eqx.field(static=True, default=None)
    error_order: int = eqx.field(static=True, default=0)
    imex: tuple[tuple[float, ...], ...] | None = eqx.field(static=True, default=None)

    def __check_init__(self):
        s = self.stages
        if any(len(row) != j + 1 for j, row in enumerate(self.a)) or len(self.weights) != s:
            raise ValueError(f"tableau {self.name!r}: row j of a must hold j+1 coefficients, "
                             "and b one per stage")
        if not 1 <= self.order <= 4:
            raise ValueError(f"tableau {self.name!r}: order {self.order} is not checked (1 to 4)")
        A, b = self.matrix, np.asarray(self.weights)
        parts = [("", A, b)]
        if self.imex is not None:
            E = self.imex_matrix
            if E.shape != (s, s) or np.any(np.triu(E) != 0):
                raise ValueError(f"tableau {self.name!r}: the explicit rows must be strictly lower, "
                                 f"{s} stages")
            parts.append((" (explicit)", E, E[-1]))
            if self.order >= 2 and max(abs(v - 0.5)
                                       for v in (b @ E.sum(axis=1), E[-1] @ A.sum(axis=1))) > 1e-12:
                raise ValueError(f"tableau {self.name!r}: the pair's coupling conditions of order 2 fail")
        for label, M, w in parts:
            for k, (value, exact) in enumerate(_order_conditions(M, w)[: _CONDITIONS[self.order]]):
                if abs(value - exact) > 1e-12:
                    raise ValueError(f"tableau {self.name!r}{label} is not of order {self.order}: "
                                     f"order condition {k + 1} gives {value:.6g}, not {exact:.6g}")
        if not self.explicit:
            if np.any(np.diag(A) < 0):
                raise ValueError(f"tableau {self.name!r}: a negative diagonal entry")
            if np.max(np.abs(self.stability(1j * np.geomspace(1e-3, 1e4, 400)))) > 1 + 1e-12:
                raise ValueError(f"tableau {self.name!r}: not A-stable (|R(iy)| > 1)")
        if self.b_error is not None:
            self._check_embedded()

    def _check_embedded(self) -> None:
        s = self.stages
        if len(self.b_error) not in ((s, s + 1) if self.explicit else (s,)) or not (
                2 <= self.error_order <= self.order + 1):
            raise ValueError(f"tableau {self.name!r}: b_error needs {s} weights "
                             f"(an explicit one: or {s + 1}) and 2 <= error_order <= {self.order + 1}")
        A, b = self.embedding_matrix, np.asarray(self.weights)
        if self.fsal:
            b = np.append(b, 0.0)
        held = [abs(value - exact) <= 1e-12
                for value, exact in _order_conditions(A, b - np.asarray(self.b_error))]
        low, high = _CONDITIONS[self.error_order - 1], _CONDITIONS[self.error_order]
        if not all(held[:low]) or all(held[low:high]):
            raise ValueError(f"tableau {self.name!r}: its embedded solution is not of order "
                             f"{self.error_order - 1} exactly, so b_error is not an estimate of order "
                             f"{self.error_order}")

    @classmethod
    def explicit_rk(cls, name: str, lower, b, order: int, b_error=None, error_order: int = 0) -> Tableau:
        """An explicit tableau from the strictly lower rows of A (``lower[j]``: stage j + 1 on
        stages 0 … j) and the weights ``b``."""
        a = ((0.0,), *((*row, 0.0) for row in lower))
        return cls(name, a=a, order=order, b=tuple(b), b_error=b_error, error_order=error_order)

    @classmethod
    def from_diffrax(cls, name: str, tableau, order: int, error_order: int) -> Tableau:
        """One of diffrax's explicit tableaux (``diffrax.<Solver>.tableau``), its FSAL stage
        (a last row equal to the weights, weight 0) kept only in ``b_error``."""
        lower = [tuple(float(v) for v in row) for row in tableau.a_lower]
        b = [float(v) for v in tableau.b_sol]
        if tableau.fsal:
            if b[-1] != 0.0 or lower[-1] != tuple(b[:-1]):
                raise ValueError(f"diffrax tableau {name!r}: its last stage is not first-same-as-last")
            lower, b = lower[:-1], b[:-1]
        return cls.explicit_rk(name, lower, b, order, tuple(float(v) for v in tableau.b_error), error_order)

    @property
    def stages(self) -> int:
        return len(self.a)

    @property
    def weights(self) -> tuple[float, ...]:
        """b (a stiffly accurate tableau's: A's last row)."""
        return self.a[-1] if self.b is None else self.b

    @property
    def explicit(self) -> bool:
        """Whether every stage is explicit (A's diagonal zero)."""
        return all(row[-1] == 0.0 for row in self.a)

    @property
    def lower(self) -> tuple[tuple[float, ...], ...]:
        """An explicit tableau's strictly lower rows, stage 1 on: what
        :func:`~teng_eq.stepping.explicit.rk_slopes` walks."""
        return tuple(row[:-1] for row in self.a[1:])

    @property
    def nodes(self) -> list[float]:
        """cⱼ = Σᵢ A_{ji}: the time of stage j in units of Δt."""
        return [float(sum(row)) for row in self.a]

    @property
    def matrix(self) -> np.ndarray:
        s = self.stages
        A = np.zeros((s, s))
        for j, row in enumerate(self.a):
            A[j, : j + 1] = row
        return A

    @property
    def imex_matrix(self) -> np.ndarray:
        return np.asarray(self.imex, float)

    @property
    def fsal(self) -> bool:
        """Whether the error estimate uses the slope at the step's end (one operator
        evaluation on the final network)."""
        return self.b_error is not None and len(self.b_error) == self.stages + 1

    @property
    def embedding_matrix(self) -> np.ndarray:
        """A, with the FSAL stage (its row b) where the estimate takes it."""
        A, s = self.matrix, self.stages
        if not self.fsal:
            return A
        return np.block([[A, np.zeros((s, 1))], [np.asarray(self.weights)[None, :], np.zeros((1, 1))]])

    @property
    def error_constant(self) -> float:
        """C with ``err = C (ΔtL)^q y + O(Δt^{q+1})`` on y′ = Ly (q = ``error_order``; 0 without
        an estimate): with stage values ``yⱼ = Rⱼ(z) y``, ``Rⱼ = (1 + z Σ_{i<j} a_ji Rᵢ)/(1 − z a_jj)``
        as power series in z = ΔtL (the FSAL stage's row is b), C is the z^q coefficient of
        ``Σⱼ b_errorⱼ z Rⱼ(z)``. What a first step of ``dt_initial: auto`` is sized by."""
        if self.b_error is None:
            return 0.0
        q, A, series = self.error_order, self.embedding_matrix, []
        for j in range(A.shape[0]):
            top = np.zeros(q + 1)
            top[0] = 1.0
            for i in range(j):
                top[1:] += A[j, i] * series[i][:-1]
            geometric = A[j, j] ** np.arange(q + 1)  # 1/(1 − z a_jj)
            series.append(np.convolve(top, geometric)[: q + 1])
        return float(sum(w * r[q - 1] for w, r in zip(self.b_error, series)))

    def stability(self, z) -> np.ndarray:
        """R(z) = 1 + z bᵀ(I − zA)⁻¹𝟙, for an array of z."""
        A, s, b = self.matrix, self.stages, np.asarray(self.weights)
        return np.array([1 + zi * b @ np.linalg.solve(np.eye(s) - zi * A, np.ones(s)) for zi in np.ravel(z)])

    @property
    def stiff_decay(self) -> float:
        """|R(−∞)| (0: L-stable; 1: only A-stable, as Crank–Nicolson)."""
        return float(abs(self.stability(np.array([-1e8]))[0]))

    @property
    def stability_polynomial(self) -> np.polynomial.Polynomial:
        """An explicit tableau's R(z) = 1 + Σ_{m≥1} z^m bᵀA^{m−1}𝟙: a step multiplies a mode of
        y′ = λy by R(Δtλ)."""
        A, b = self.matrix, np.asarray(self.weights)
        powers, v = [], np.ones(self.stages)
        for _ in range(self.stages):
            powers.append(float(b @ v))
            v = A @ v
        return np.polynomial.Polynomial([1.0, *powers])

    @property
    def stability_limit(self) -> float | None:
        """x of an explicit tableau's stability interval [−x, 0] on the negative real axis:
        |R(z)| ≤ 1 there (Euler and Heun 2, Bogacki–Shampine 2.51, RK4 2.79). A step of Δt is
        stable on a mode that decays at rate ρ where Δt ρ ≤ x: what ``dt: auto`` caps a step
        by on a stiff operator. None for an implicit tableau (A-stable: no bound)."""
        if not self.explicit:
            return None
        return float(_extents(self.stability_polynomial, np.array([-1.0]))[0])

    def equivalent_radius(self, rates) -> float:
        """ρ with ``Δt ρ ≤ x`` (:attr:`stability_limit`) exactly where every Δtλ, λ in
        ``rates`` (complex), lies in an explicit tableau's stability region |R| ≤ 1 along
        its ray from 0: the largest |λ| x / r(arg λ), r(φ) the region's extent along the ray
        of angle φ (tabulated every 0.1° of the left half-plane; between two angles the
        smaller). On real negative rates, ρ = max |λ|, the scalar transport's radius. A rate
        in the right half-plane (Re λ > 10⁻⁹|λ|) is the equation's own growth, no
        constraint; one on the imaginary axis (waves, Schrödinger) is: there RK4 reaches
        2.83, Bogacki–Shampine 1.73, Heun 10⁻³ (|R(iy)|² = 1 + y⁴/4: it amplifies every
        oscillation)."""
        rates = np.ravel(np.asarray(rates, np.complex128))
        size = np.abs(rates)
        keep = (size > 0) & (rates.real <= 1e-9 * size)
        if not keep.any():
            return 0.0
        angles, table = _extent_table(tuple(float(c) for c in self.stability_polynomial.coef))
        phi = np.clip(np.abs(np.angle(rates[keep])), angles[0], angles[-1])  # |R(z̄)| = |R(z)|
        j = np.clip(np.searchsorted(angles, phi), 1, len(angles) - 1)
        extent = np.minimum(table[j - 1], table[j])
        return float(np.max(np.where(extent > 0,
                                     size[keep] * self.stability_limit / np.maximum(extent, 1e-300),
                                     np.inf)))


EULER = Tableau.explicit_rk("euler", (), (1.0,), order=1)

#: Heun's method with Euler embedded (diffrax's ``Heun``): err = Δt (k₁ − k₂)/2, the
#: difference between TENG-Heun's result and its Euler predictor, of order 2 (it
#: estimates the *Euler* step's local error, not Heun's own, which is O(Δt³)).
HEUN = Tableau.from_diffrax("heun", diffrax.Heun.tableau, order=2, error_order=2)

#: Heun's method with an estimate of its *own* local error: with the slope at the step's
#: end k₃ = L[y_{t+Δt}] (FSAL), err = Δt (k₂ − k₃)/3, of order 3 — to leading order exactly
#: Heun's local error on a linear problem (there k₂ − k₃ = −Δt² L³y/2 and Heun's error is
#: −Δt³ L³y/6), the f″(f, f) term of a nonlinear one aside. One operator evaluation more.
HEUN_FSAL = Tableau.explicit_rk("heun_fsal", ((1.0,),), (0.5, 0.5), order=2, b_error=(0.0, 1 / 3, -1 / 3),
                                error_order=3)

#: Classical RK4 with the third-order FSAL solution ŷ = y + Δt(k₁ + 2k₂ + 2k₃ + k₅)/6
#: embedded, k₅ = L[y_{t+Δt}] (diffrax has no classical RK4 pair): err = Δt(k₄ − k₅)/6.
RK4 = Tableau.explicit_rk("rk4", ((0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)), (1 / 6, 1 / 3, 1 / 3, 1 / 6),
                          order=4, b_error=(0.0, 0.0, 0.0, 1 / 6, -1 / 6), error_order=4)

#: Bogacki–Shampine 3(2) (diffrax's ``Bosh3``): three fits, the second-order solution
#: embedded through the FSAL slope at the step's end.
BS3 = Tableau.from_diffrax("bs3", diffrax.Bosh3.tableau, order=3, error_order=3)

#: The explicit tableaux by name (``method.integrator`` of the explicit TENG methods).
TABLEAUS: dict[str, Tableau] = {t.name: t for t in (EULER, HEUN, HEUN_FSAL, RK4, BS3)}

_G2 = float(1 - 1 / np.sqrt(2))  # Alexander's SDIRK2; also ARS(2,2,2)'s γ

#: γ of Alexander's L-stable three-stage SDIRK of order 3: the root of 6γ³ − 18γ² + 9γ − 1 in (1/6, 1/2).
_G3 = 0.43586652150845899941601945

#: Backward Euler: u⁽¹⁾ = u_t + Δt F[u⁽¹⁾]; order 1, L-stable.
BEULER = Tableau("beuler", a=((1.0,),), order=1)

#: Crank–Nicolson (the trapezoidal rule) with its explicit first stage k₁ = F[u_t]: order 2,
#: A-stable, not L-stable (stiff modes flip sign each step instead of decaying). Embedded:
#: backward Euler's weights on the same slopes, err = Δt (k₁ − k₂)/2.
CN = Tableau("cn", a=((0.0,), (0.5, 0.5)), order=2, b_error=(0.5, -0.5), error_order=2)

#: Alexander's two-stage SDIRK, γ = 1 − 1/√2: order 2, L-stable. Embedded: the first stage
#: alone (weights (1, 0)), err = γ Δt (k₂ − k₁).
SDIRK2 = Tableau("sdirk2", a=((_G2,), (1 - _G2, _G2)), order=2, b_error=(-_G2, _G2), error_order=2)

#: Alexander's three-stage SDIRK: order 3, L-stable. Embedded: the second-order solution on
#: the first two stages, weights (1 − β, β, 0) with β = (1 − 2γ)/(1 − γ).
_B3 = ((1 - _G3) / 2, _G3)
_A3 = (-(6 * _G3**2 - 16 * _G3 + 1) / 4, (6 * _G3**2 - 20 * _G3 + 5) / 4, _G3)
_E3 = (1 - 2 * _G3) / (1 - _G3)

SDIRK3 = Tableau("sdirk3", order=3, a=((_G3,), _B3, _A3),
                 b_error=(_A3[0] - (1 - _E3), _A3[1] - _E3, _G3), error_order=3)

#: Hairer & Wanner's five-stage SDIRK (Solving ODEs II, §IV.6, γ = 1/4): order 4, L-stable.
#: Embedded: their third-order solution on the same slopes, weights (59/48, −17/96, 225/32, −85/12, 0).
_A4 = ((1 / 4,), (1 / 2, 1 / 4), (17 / 50, -1 / 25, 1 / 4), (371 / 1360, -137 / 2720, 15 / 544, 1 / 4),
       (25 / 24, -49 / 48, 125 / 16, -85 / 12, 1 / 4))

SDIRK4 = Tableau("sdirk4", order=4, a=_A4, b_error=(-9 / 48, -81 / 96, 25 / 32, 0.0, 1 / 4),
                 error_order=4)

#: IMEX Euler: u⁽¹⁾ = u_t + Δt N[u_t] + Δt S[u⁽¹⁾]; order 1 (a zero first stage carries u_t).
IMEX_EULER = Tableau("imex_euler", a=((0.0,), (0.0, 1.0)), order=1, imex=((0.0, 0.0), (1.0, 0.0)))

#: ARS(2,2,2) (Ascher, Ruuth & Spiteri 1997): L-stable implicit part, order 2.
_D = float(1 - 1 / (2 * _G2))
ARS222 = Tableau("ars222", order=2, a=((0.0,), (0.0, _G2), (0.0, 1 - _G2, _G2)),
                 imex=((0.0, 0.0, 0.0), (_G2, 0.0, 0.0), (_D, 1 - _D, 0.0)))

#: The diagonally implicit and IMEX tableaux by name (``method.integrator`` of the implicit TENG methods).
DIRK_TABLEAUS: dict[str, Tableau] = {
    t.name: t for t in (BEULER, CN, SDIRK2, SDIRK3, SDIRK4, IMEX_EULER, ARS222)}
