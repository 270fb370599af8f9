"""Reading what a figure of :mod:`teng_eq.analysis.plots` shows, not only that a PNG exists."""

from __future__ import annotations

import matplotlib.image
import numpy as np
import pytest

from teng_eq.analysis import plots


def keep_figures(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures :mod:`teng_eq.analysis.plots` draws from now on, kept open (its ``plt.close``
    replaced) so that a test can read their panels' data."""
    figures = []
    monkeypatch.setattr(plots.plt, "close", figures.append)
    return figures


def assert_saved(path, fig, dpi: int) -> None:
    """``path`` is a PNG that decodes, of ``fig``'s size at ``dpi``."""
    width, height = np.round(fig.get_size_inches() * dpi)
    assert matplotlib.image.imread(path).shape[:2] == (height, width)
