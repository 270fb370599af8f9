"""Figures of a run (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def error_curve(path: Path, times, rel_l2, step_loss=None, title: str = "") -> Path:
    """Relative L² error against time (paper Fig. compare_method_all), and the
    per-step final loss on a second panel when given."""
    panels = 1 if step_loss is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    ax = axes[0, 0]
    ax.semilogy(times, rel_l2)
    ax.set_xlabel("t")
    ax.set_ylabel("relative L² error")
    ax.grid(True, which="both", alpha=0.3)
    if step_loss is not None:
        ax = axes[0, 1]
        ax.semilogy(np.asarray(times)[1:], step_loss, ".", ms=2)
        ax.set_xlabel("t")
        ax.set_ylabel("final loss of the step")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
