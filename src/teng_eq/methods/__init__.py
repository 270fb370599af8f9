"""Methods that solve a PDE with a network: TENG and the paper's baselines,
behind one interface (:class:`Method`). Each is named by ``conf/method/*.yaml``
through its ``impl`` key."""

from teng_eq.methods.base import Method, StepInfo
from teng_eq.methods.engd import PINNENGD
from teng_eq.methods.obti import OBTI, OBTILBFGS, OBTIAdam
from teng_eq.methods.pinn import PINN, PINNBFGS, SpaceTimeNet
from teng_eq.methods.tdvp import TDVP
from teng_eq.methods.teng import TENG

__all__ = ["OBTI", "OBTILBFGS", "PINN", "PINNBFGS", "PINNENGD", "TDVP", "TENG", "Method", "OBTIAdam",
           "SpaceTimeNet", "StepInfo"]
