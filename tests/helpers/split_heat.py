"""Heat with part of its Laplacian declared stiff: the IMEX pairs' order tests
(tests/test_orders.py) need both parts to act — the short form's own split ``S = νΔ``
would leave the explicit part N = 0. Not half and half: IMEX Euler on S = N = ½νΔ is
the trapezoidal rule, of order 2."""

from teng_eq.equations.heat import Heat


class SplitHeat(Heat):
    """``∂ₜu = νΔu`` split as S = 0.7νΔu (implicit) and N = 0.3νΔu (explicit)."""

    def stiff(self, u, t):
        return 0.7 * self.nu * u.lap
