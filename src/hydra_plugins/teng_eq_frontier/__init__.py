"""Hydra loads plugins from the ``hydra_plugins`` namespace package only: this one
registers teng-eq's frontier sweeper (:mod:`teng_eq.search.sweeper`)."""
