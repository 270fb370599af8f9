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


# --- Figures across runs (pipeline/analyze.py) --------------------------------


def _panels(n: int, width: float = 5.5, height: float = 4.2):
    fig, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False)
    return fig, list(axes[0])


def _finish(fig, path: Path, ax_with_legend) -> Path:
    for ax in ax_with_legend:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def error_vs_runtime(path: Path, panels) -> Path:
    """Global relative L² error against runtime, one point per run, the Pareto front
    circled and joined (paper Fig. run_time_error).

    ``panels``: ``{title: {label: (runtime, error, on_front)}}``; the front of a
    panel is the points of all its labels with ``on_front`` true.
    """
    fig, axes = _panels(max(len(panels), 1))
    for ax, (title, series) in zip(axes, panels.items()):
        front_r, front_e = [], []
        for i, (name, (runtime, error, on_front)) in enumerate(series.items()):
            runtime, error = np.asarray(runtime, float), np.asarray(error, float)
            on_front = np.asarray(on_front, bool)
            ax.plot(runtime, error, "o", ms=5, color=f"C{i % 10}", label=name)
            front_r += list(runtime[on_front])
            front_e += list(error[on_front])
        order = np.argsort(front_r, kind="stable")
        ax.plot(np.asarray(front_r)[order], np.asarray(front_e)[order], "-", color="k", lw=1,
                zorder=0, label="Pareto front")
        ax.plot(front_r, front_e, "o", ms=10, mfc="none", mec="k", mew=1)
        ax.set_yscale("log")
        ax.set_xlabel("runtime (s)")
        ax.set_ylabel("global relative L² error")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, path, axes)


def error_vs_dt(path: Path, panels) -> Path:
    """Global relative L² error against Δt on log-log axes, with the least-squares
    line ``err = C Δt^p`` and its slope ``p`` in the legend (paper Fig.
    compare_integrator_dt).

    ``panels``: ``{title: {label: (dt, error, (p, C))}}``; a ``nan`` slope draws
    the points alone.
    """
    fig, axes = _panels(max(len(panels), 1))
    for ax, (title, series) in zip(axes, panels.items()):
        for i, (name, (dt, error, (slope, prefactor))) in enumerate(series.items()):
            color = f"C{i % 10}"
            if np.isfinite(slope):
                grid = np.geomspace(np.min(dt), np.max(dt), 20)
                ax.plot(grid, prefactor * grid**slope, "-", color=color, lw=1)
                name = f"{name} (slope {slope:.2f})"
            ax.plot(dt, error, "o", color=color, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("Δt")
        ax.set_ylabel("global relative L² error")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, path, axes)


def error_vs_time(path: Path, panels) -> Path:
    """Relative L² error against time, one curve per run (paper Fig. compare_method_all).

    ``panels``: ``{title: {label: (t, rel_l2)}}``.
    """
    fig, axes = _panels(max(len(panels), 1))
    for ax, (title, series) in zip(axes, panels.items()):
        for i, (name, (t, rel_l2)) in enumerate(series.items()):
            ax.semilogy(t, rel_l2, "-", color=f"C{i % 10}", lw=1.2, label=name)
        ax.set_xlabel("t")
        ax.set_ylabel("relative L² error")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, path, axes)
