"""The PDEs: one module per equation, each named by the ``impl`` of its
``conf/equation/*.yaml`` (e.g. ``teng_eq.equations.heat:Heat``); the shared pieces
(:class:`Equation`, :func:`operator`) are in :mod:`.base`, a system's row helpers
(:func:`on_rows`, :func:`select`) in :mod:`.system`."""

from teng_eq.equations.base import Equation, Field, build_equation, derivatives, network_operator, operator
from teng_eq.equations.system import on_rows, select

__all__ = ["Equation", "Field", "build_equation", "derivatives", "network_operator", "on_rows", "operator",
           "select"]
