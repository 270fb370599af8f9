"""``hydra/sweeper=frontier`` (conf/hydra/sweeper/frontier.yaml) names this class:
Hydra instantiates sweepers from ``hydra_plugins`` only. The search itself is
:class:`teng_eq.search.sweeper.FrontierSweeper`."""

from teng_eq.search import sweeper


class FrontierSweeper(sweeper.FrontierSweeper):
    """The frontier search (:class:`teng_eq.search.sweeper.FrontierSweeper`), registered with Hydra."""
