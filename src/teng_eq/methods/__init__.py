"""Methods that solve a PDE with a network: TENG and the paper's baselines,
behind one interface (:class:`Method`). Each is named by ``conf/method/*.yaml``
through its ``impl`` key."""

from teng_eq.methods.base import Method, StepInfo
from teng_eq.methods.teng import TENG

__all__ = ["TENG", "Method", "StepInfo"]
