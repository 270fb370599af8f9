"""An a-posteriori error estimate of a sequential run, from what the run knows
without a reference solution.

Let p(t) be the run's solution continued between its steps by the cubic Hermite
interpolant of û and L[û] at both ends of every step (its networks at t_n, t_{n+1}
and their slopes f = L[û]), and u the exact solution. The error e = p − u obeys

    ∂ₜe = L[p] − L[u] + δ,   δ = ∂ₜp − L[p]   (the *defect* of p),   e(0) = û₀ − u₀,

and, to first order in e, ∂ₜe = L′[û] e + δ with L′[û] the linearised operator.

**transport** (the default on a periodic box and a box with sides): e is carried as a field on the held-out
grid and advanced through L′[û] itself (:class:`~teng_eq.estimate.transport.Transport`), so
that every mode decays or grows at its own rate. L′[û] = Σ_α a_α(x) ∂^α is a differential operator of the
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
variable diffusivity) by the explicit rule, on the modes the held-out grid resolves; where
that rule would grow what the operator only moves (a velocity c(x) with nothing to damp
its variable part) by Lawson's RK4 in substeps stable on R's rates. A
system's Λ(k) is an m × m matrix per wave vector (:class:`~teng_eq.estimate.transport.SystemTransport`).

The other kinds bound instead: wherever L is one-sided Lipschitz in L² with constant μ
(⟨L[v] − L[w], v − w⟩ ≤ μ‖v − w‖², declared by the equation as
:meth:`~teng_eq.equations.Equation.growth_rate`, or measured:
:func:`~teng_eq.estimate.defect.measured_growth_rate`),

    ‖e(t_{n+1})‖ ≤ e^{μ Δt} ‖e(t_n)‖ + ∫_{t_n}^{t_{n+1}} ‖δ(s)‖ ds,

one rate for the whole field: where the equation damps most modes (diffusion: μ = 0,
since the mean does not decay) such a bound drifts above the error. The local term:

* ``hermite``: ‖∫δ‖ with the time integral by Simpson's rule,
  ``∫δ = (û₁ − û₀) − Δt/6 (f₀ + 4 L[p(½)] + f₁)``, ``p(½) = (û₀ + û₁)/2 + Δt (f₀ − f₁)/8``.
  L[p(½)] needs ∇ and Δ of f = L[û], i.e. derivatives of û up to fourth order (nested
  forward-mode autodiff; for an operator of another form, L applied to the function p(½)
  itself: derivatives up to twice the operator's order, so for an operator above second
  order the run uses ``trapezoid`` instead, and says so). It estimates the local error of the scheme
  the run actually propagates (O(Δt³) for Heun), its projection errors included: û₁ − û₀ is the step
  the fits made, not the one the tableau asked for.
* ``trapezoid``: ‖(û₁ − û₀) − Δt/2 (f₀ + f₁)‖, the same with the trapezoid rule
  (no fourth derivatives). For Heun on a linear problem it is 3/2 of the local error to
  leading order; on a nonlinear one its leading term differs (Δt³ f′f′f/4 against
  Heun's Δt³ (f″(f,f)/12 − f′f′f/6)).
* ``hermite_triangle``: the ``hermite`` term's norm, the norms added (the triangle
  inequality: never below the vector sum, and blind to cancellations between steps);
* ``embedded``: the integrator's embedded estimate (``local_error`` of
  :class:`~teng_eq.stepping.explicit.TENGStep`, e.g. Heun − Euler, which measures the *Euler*
  step's error, orders of magnitude above Heun's own) plus the step's projection error
  ‖û₁ − target‖ on held-out points (``√holdout_loss``), summed.

Norms are quadratures on the held-out points of the fits (points no fit uses, so that
the residual between the quadrature nodes is seen), interior points only. ‖e(0)‖ is
exact: u₀ is known. The estimate is ``est_rel_l2 = E_n / ‖û_n‖``.

What it is not: a proof. ``transport`` is a first-order model of the error, not a
bound; the one-sided bound of the others is rigorous on the periodic box (see the
equations), but ‖∫δ‖ ≤ ∫‖δ‖ and both quadratures (Simpson in time, held-out points in
space) are approximations, and μ is sampled at the step ends. On a box with sides
``transport`` runs in the box's own modes instead of the Fourier ones: each axis's
eigenfunctions of ∂ₓ² under the homogeneous form of its sides' conditions (sines,
cosines, Robin's; :class:`~teng_eq.estimate.box.BoxTransport`). Elsewhere off a periodic
box (the disk, sampled points, a system on a box) ``transport`` computes ``hermite``.

The package: a step's local terms (:mod:`.defect`), the error carried through the
linearised operator (:mod:`.transport`; on a box with sides, :mod:`.box`) and the estimate
advanced step by step on the host (:mod:`.running`).
"""
