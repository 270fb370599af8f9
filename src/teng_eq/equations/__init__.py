"""The PDEs: one module per equation, each named by the ``impl`` of its
``conf/equation/*.yaml`` (e.g. ``teng_eq.equations.heat:Heat``); the shared pieces
(:class:`Equation`, :class:`Quadrature`, :func:`operator`) are in :mod:`.base`."""

from teng_eq.equations.base import Equation, Quadrature, build_equation, derivatives, operator

__all__ = ["Equation", "Quadrature", "build_equation", "derivatives", "operator"]
