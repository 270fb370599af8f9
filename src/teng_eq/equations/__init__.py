"""The PDEs: one module per equation, each named by the ``impl`` of its
``conf/equation/*.yaml`` (e.g. ``teng_eq.equations.heat:Heat``); the shared pieces
(:class:`Equation`, :func:`operator`) are in :mod:`.base`."""

from teng_eq.equations.base import Equation, Field, build_equation, derivatives, network_operator, operator

__all__ = ["Equation", "Field", "build_equation", "derivatives", "network_operator", "operator"]
