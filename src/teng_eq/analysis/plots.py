"""Figures of a run (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

# Fixed margins instead of tight_layout, which alone doubled the time to draw a
# figure: plots are drawn inside a tracked run and count as its overhead.
_MARGINS = dict(left=0.08, right=0.97, bottom=0.14, top=0.86, wspace=0.3)


def error_curve(path: Path, times, rel_l2, step_loss=None, title: str = "", step_times=None,
                estimate=None) -> Path:
    """Relative L² error against time (paper Fig. compare_method_all; ``rel_l2`` None:
    the run has no reference), with the run's own a-posteriori ``estimate`` of it
    (``est_rel_l2``) where it has one, and the per-step final loss on a second panel
    when given, against ``step_times`` (default ``times[1:]``; a global-in-time method
    passes its block numbers)."""
    panels = 1 if step_loss is None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    ax = axes[0, 0]
    if rel_l2 is not None:
        ax.semilogy(times, rel_l2, label="error (against the reference)")
    if estimate is not None and np.isfinite(estimate).any():
        ax.semilogy(times, estimate, "--", label="estimate (no reference)")
        ax.legend(fontsize=8)
    ax.set_xlabel("t")
    ax.set_ylabel("relative L² error")
    ax.grid(True, which="both", alpha=0.3)
    if step_loss is not None:
        ax = axes[0, 1]
        x = np.asarray(times)[1:] if step_times is None else np.asarray(step_times)
        ax.semilogy(x, step_loss, ".", ms=2)
        ax.set_xlabel("t")
        ax.set_ylabel("final loss of the step")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(title)
    fig.subplots_adjust(**_MARGINS)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def loss_iterations(path: Path, table, steps, step_loss=None, step_times=None, title: str = "") -> Path:
    """Loss against iteration inside chosen time steps, one curve per stage
    (paper Fig. allen_cahn_loss), and the final loss of every step against
    ``step_times`` (one per step).

    ``table`` has rows ``(step, t, stage, iteration, loss, lsq)`` as in
    :meth:`teng_eq.run.result.RunResult.loss_table`.
    """
    table = np.asarray(table)
    steps = list(steps)
    panels = len(steps) + (step_loss is not None)
    fig, axes = plt.subplots(1, panels, figsize=(3.2 * panels, 3.2), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], steps):
        rows = table[table[:, 0] == n]
        for stage in np.unique(rows[:, 2]).astype(int):
            r = rows[rows[:, 2] == stage]
            ax.semilogy(r[:, 3], r[:, 4], "o-", ms=3, label=f"stage {stage + 1}")
        ax.set_title(f"step {n} (t = {rows[0, 1]:.4g})" if len(rows) and np.isfinite(rows[0, 1])
                     else f"step {n}")
        ax.set_xlabel("iteration")
        ax.grid(True, alpha=0.3)
    axes[0, 0].set_ylabel("loss")
    axes[0, 0].legend(fontsize=7)
    if step_loss is not None:
        ax = axes[0, -1]
        ax.semilogy(np.asarray(step_times), step_loss, ".", ms=2)
        ax.set_xlabel("t")
        ax.set_title("final loss of each step")
        ax.grid(True, alpha=0.3)
    fig.suptitle(title)
    fig.subplots_adjust(**{**_MARGINS, "left": 0.06, "wspace": 0.35, "top": 0.78})
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


#: How a side of each kind is drawn on a density panel (:meth:`~teng_eq.domains.base.Domain.edges`).
EDGE_STYLES = {"dirichlet": "-", "neumann": "--", "robin": "-."}


def density(path: Path, snapshots, times, evaluation, title: str = "", edges=()) -> Path:
    """Reference, TENG and their difference as density plots at a few times (paper Fig.
    burgers_color); ``snapshots`` maps step → (TENG, reference), each the values at the
    points of ``evaluation`` (the equation's :class:`~teng_eq.domains.quadrature.Quadrature`); a
    reference None (the run has none): TENG's row alone.

    On a 2-D grid (``evaluation.grid_shape``) the fields are images (a grid of unequal
    spacing, a box's Gauss–Legendre nodes, a colour mesh on the nodes themselves, so that
    a value is drawn where it is); on a 3-D grid, the slice through the middle of the last
    axis; on scattered 2-D points (the disk), a triangulated colour map on the domain. Each
    row shares one colour scale (the difference's symmetric about 0), so the times compare
    at a glance. ``edges`` (the domain's :meth:`~teng_eq.domains.base.Domain.edges`) are
    drawn on every panel, one line style per kind of condition (:data:`EDGE_STYLES`)."""
    steps, points, shape = sorted(snapshots), np.asarray(evaluation.points), evaluation.grid_shape
    cut, extent, where, mesh = _section(points, shape)
    has_ref = snapshots[steps[0]][1] is not None
    fields = {n: (cut(snapshots[n][1]) if has_ref else None, cut(snapshots[n][0])) for n in steps}
    shown = [f[0] if has_ref else f[1] for f in fields.values()]
    lo, hi = min(float(np.min(f)) for f in shown), max(float(np.max(f)) for f in shown)
    labels = ("reference", "TENG", "TENG − reference") if has_ref else ("TENG (no reference)",)
    worst = (max(float(np.max(np.abs(f[1] - f[0]))) for f in fields.values()) or 1.0) if has_ref else 1.0
    scales = ({"vmin": lo, "vmax": hi}, {"vmin": lo, "vmax": hi},
              {"vmin": -worst, "vmax": worst, "cmap": "RdBu_r"})[3 - len(labels):]
    fig, axes = plt.subplots(len(labels), len(steps), figsize=(2.6 * len(steps) + 1.0, 2.6 * len(labels)),
                             squeeze=False)
    images = []
    for col, n in enumerate(steps):
        ref, teng = fields[n]
        for row, field in enumerate((ref, teng, teng - ref) if has_ref else (teng,)):
            ax = axes[row, col]
            if mesh is not None:
                image = ax.pcolormesh(*mesh, field, shading="nearest", **scales[row])
                ax.set_aspect("equal")
            elif shape is not None:
                image = ax.imshow(field, origin="lower", extent=extent, aspect="equal", **scales[row])
            else:
                image = ax.tripcolor(points[:, 0], points[:, 1], field, shading="gouraud", **scales[row])
                ax.set_aspect("equal")
            if col == len(steps) - 1:
                images.append(image)
            for kind, line in edges:  # the frame off: it would hide a dashed side under it
                ax.plot(line[:, 0], line[:, 1], EDGE_STYLES[kind], color="k", lw=1.5, label=kind,
                        clip_on=False)
                ax.set_frame_on(False)
            ax.set_xticks([])
            ax.set_yticks([])
        axes[0, col].set_title(f"t = {times[n]:.4g}")
    if edges:
        handles, labels_ = axes[0, 0].get_legend_handles_labels()
        kinds = dict(zip(labels_, handles))
        fig.legend(kinds.values(), kinds.keys(), loc="upper left", ncol=len(kinds), fontsize=7, frameon=False)
    for row, label in enumerate(labels):
        axes[row, 0].set_ylabel(label)
        fig.colorbar(images[row], ax=list(axes[row]), fraction=0.03, pad=0.02,
                     format="%.1e" if row == 2 else None)
    fig.suptitle(title + where)
    fig.subplots_adjust(left=0.05, right=0.86, bottom=0.02, top=0.92, wspace=0.08, hspace=0.1)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def by_component(snapshots, evaluation):
    """``(suffix, snapshots, quadrature)`` per field to plot: a scalar's as they are (suffix
    ""); a system's component by component (``_u``, …), on the spatial points."""
    names = evaluation.components
    if not names:
        yield "", snapshots, evaluation
        return
    m = len(names)
    n = np.asarray(evaluation.points).shape[0] // m
    weights = evaluation.weights if np.ndim(evaluation.weights) == 0 else np.asarray(evaluation.weights)[:n]
    spatial = evaluation._replace(points=np.asarray(evaluation.points)[:n, :-1], weights=weights,
                                  components=())

    def part(values, i):
        return None if values is None else np.asarray(values)[i * n : (i + 1) * n]

    for i, name in enumerate(names):
        yield f"_{name}", {k: (part(u, i), part(r, i)) for k, (u, r) in snapshots.items()}, spatial


def line_fields(path: Path, snapshots, times, evaluation, title: str = "") -> Path:
    """A 1-D run's fields (``snapshots`` as for :func:`density`, on the line's points):
    u against x at four of the kept times (the reference dashed) and TENG − reference
    beside them; below, x–t images of TENG and of |TENG − reference| (log scale) over every
    kept time. Without a reference, the profiles and TENG's image alone."""
    steps, x = sorted(snapshots), np.asarray(evaluation.points)[:, 0]
    has_ref = snapshots[steps[0]][1] is not None
    every = max(1, len(x) // 1024)  # an image row needs no more points than it has pixels
    teng = np.stack([np.asarray(snapshots[n][0]) for n in steps])
    ref = np.stack([np.asarray(snapshots[n][1]) for n in steps]) if has_ref else None
    t = np.asarray([times[n] for n in steps])
    fig, axes = plt.subplots(2, 2 if has_ref else 1, figsize=(11 if has_ref else 6, 7.5), squeeze=False)
    for i, row in enumerate(sorted({round(k * (len(steps) - 1) / 3) for k in range(4)})):
        axes[0, 0].plot(x, teng[row], color=f"C{i}", lw=1, label=f"t = {t[row]:.3g}")
        if has_ref:
            axes[0, 0].plot(x, ref[row], "--", color="k", lw=0.7)
            axes[0, 1].plot(x, teng[row] - ref[row], color=f"C{i}", lw=1)
    _label(axes[0, 0], "TENG (reference dashed)" if has_ref else "TENG (no reference)", "x", "u")
    axes[0, 0].legend(fontsize=7)
    extent = (float(x.min()), float(x.max()), float(t.min()), float(t.max()))
    image = axes[1, 0].imshow(teng[:, ::every], origin="lower", extent=extent, aspect="auto")
    fig.colorbar(image, ax=axes[1, 0])
    _label(axes[1, 0], "TENG", "x", "t")
    if has_ref:
        _label(axes[0, 1], "TENG − reference", "x", "error")
        error = np.abs(teng - ref)[:, ::every]
        floor = max(float(error.max()) * 1e-6, np.finfo(float).tiny)
        image = axes[1, 1].imshow(np.log10(np.maximum(error, floor)), origin="lower", extent=extent,
                                  aspect="auto", cmap="magma")
        fig.colorbar(image, ax=axes[1, 1], label="log₁₀ |error|")
        _label(axes[1, 1], "|TENG − reference|", "x", "t")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return Path(path)


def _section(points: np.ndarray, shape):
    """What a density panel shows of values on ``points``: ``(cut, extent, where, mesh)``, the
    values as an image (a 2-D grid; a 3-D grid's middle slice of its last axis, ``where``
    it lies), at most ~128 points a side (a panel is ~250 px wide), its extent, and where
    the grid's spacing is not uniform the shown nodes' coordinates ``(x₁, x₂)`` (else None);
    on scattered points (``shape`` None) the values as they are."""
    if shape is None:
        return np.asarray, None, "", None
    if len(shape) not in (2, 3):
        raise ValueError(f"density plots need a 2-D or 3-D grid, got {shape}")
    grid = points.reshape(*shape, points.shape[1])
    pick, where = (slice(None, None, max(1, shape[0] // 128)),) * 2, ""
    if len(shape) == 3:
        pick, where = pick + (shape[2] // 2,), f", x₃ = {grid[0, 0, shape[2] // 2, 2]:.3g}"

    def cut(values):  # field[i, j] = u(x_i, y_j): transposed so that x runs along the horizontal axis
        return np.asarray(values).reshape(shape)[pick].T

    xy = grid[pick]
    x, y = xy[:, 0, 0], xy[0, :, 1]
    uniform = all(np.ptp(np.diff(c)) <= 1e-9 * np.ptp(c) for c in (x, y))
    return cut, (float(xy[..., 0].min()), float(xy[..., 0].max()), float(xy[..., 1].min()),
                 float(xy[..., 1].max())), where, None if uniform else (x, y)


def _palette(series) -> dict[str, str]:
    """One colour per label across every panel (``series``: one ``{label: …}`` per panel),
    so that a method keeps its colour where another panel lacks some label."""
    labels = list(dict.fromkeys(name for panel in series for name in panel))
    return {name: f"C{i % 10}" for i, name in enumerate(labels)}


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
    color = _palette(panels.values())
    for ax, (title, series) in zip(axes, panels.items()):
        front_r, front_e = [], []
        for name, (runtime, error, on_front) in series.items():
            runtime, error = np.asarray(runtime, float), np.asarray(error, float)
            on_front = np.asarray(on_front, bool)
            ax.plot(runtime, error, "o", ms=5, color=color[name], label=name)
            front_r += list(runtime[on_front])
            front_e += list(error[on_front])
        order = np.argsort(front_r, kind="stable")
        ax.plot(np.asarray(front_r)[order], np.asarray(front_e)[order], "-", color="k", lw=1,
                zorder=0, label="Pareto front")
        ax.plot(front_r, front_e, "o", ms=10, mfc="none", mec="k", mew=1)
        ax.set_yscale("log")
        _label(ax, title, "runtime (s)", "global relative L² error")
    return _finish(fig, path, axes)


def frontier(path: Path, panels, target: float | None = None) -> Path:
    """The error–runtime front over every run (docs/frontier.md): one marker per run,
    filled where it is on the front, hollow where a cheaper and more accurate run
    dominates it; the front as a staircase, its points labelled (``t7``: trial 7);
    ``target``: the error asked for, as a dashed line.

    ``panels``: ``{title: {source: (runtime, error, on_front, names)}}``, one source
    per study or sweep (``names``: each point's label, e.g. its trial).
    """
    fig, axes = _panels(max(len(panels), 1), width=6.5, height=4.8)
    color = _palette(panels.values())
    markers = "os^Dv<>"
    for ax, (title, series) in zip(axes, panels.items()):
        front_r, front_e = [], []
        for i, (name, (runtime, error, on_front, names)) in enumerate(series.items()):
            runtime, error = np.asarray(runtime, float), np.asarray(error, float)
            on = np.asarray(on_front, bool)
            m = markers[i % len(markers)]
            ax.plot(runtime[on], error[on], m, ms=6, color=color[name], label=f"{name}: on the front")
            ax.plot(runtime[~on], error[~on], m, ms=6, mfc="none", mec=color[name], alpha=0.6,
                    label=f"{name}: dominated")
            for r, e, text in zip(runtime[on], error[on], np.asarray(names, object)[on]):
                if text:
                    ax.annotate(str(text), (r, e), textcoords="offset points", xytext=(4, 4), fontsize=7)
            front_r += list(runtime[on])
            front_e += list(error[on])
        order = np.argsort(front_r, kind="stable")
        ax.step(np.asarray(front_r)[order], np.asarray(front_e)[order], where="post", color="k", lw=1,
                zorder=0, label="front")
        if target is not None:
            ax.axhline(target, ls="--", color="C3", lw=1, label=f"target {target:g}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        _label(ax, title, "runtime_s (stepping, s)", "global relative L² error")
    return _finish(fig, path, axes)


def error_vs_dt(path: Path, panels) -> Path:
    """Global relative L² error against Δt on log-log axes, with the least-squares
    line ``err = C Δt^p`` and its slope ``p`` in the legend (paper Fig.
    compare_integrator_dt).

    ``panels``: ``{title: {label: (dt, error, (p, C))}}``; a ``nan`` slope draws
    the points alone.
    """
    fig, axes = _panels(max(len(panels), 1))
    colors = _palette(panels.values())
    for ax, (title, series) in zip(axes, panels.items()):
        for name, (dt, error, (slope, prefactor)) in series.items():
            color = colors[name]
            if np.isfinite(slope):
                grid = np.geomspace(np.min(dt), np.max(dt), 20)
                ax.plot(grid, prefactor * grid**slope, "-", color=color, lw=1)
                name = f"{name} (slope {slope:.2f})"
            ax.plot(dt, error, "o", color=color, label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _label(ax, title, "Δt", "global relative L² error")
    return _finish(fig, path, axes)


def error_vs_time(path: Path, panels) -> Path:
    """Relative L² error against time, one curve per run (paper Fig. compare_method_all);
    ``panels``: ``{title: {label: (t, rel_l2)}}``."""
    return _curves(path, panels, "relative L² error",
                   lambda ax, t, e, **kw: ax.semilogy(t, e, "-", lw=1.2, **kw))


def estimate_vs_error(path: Path, panels) -> Path:
    """The a-posteriori error estimate (dashed) against the true error (solid) over t, one
    colour per run: how far a run's own estimate, which uses no reference, can be trusted;
    ``panels``: ``{title: {label: ((t, rel_l2), (t, est_rel_l2))}}``."""
    def draw(ax, error, estimate, color, label):
        ax.semilogy(*error, "-", color=color, lw=1.2, label=label)
        ax.semilogy(*estimate, "--", color=color, lw=1.2)
    return _curves(path, panels, "relative L² error", draw, " (dashed: estimate)")


def dt_vs_time(path: Path, panels) -> Path:
    """The step sizes the controller chose (``dt: auto``) against t, one curve per run;
    ``panels``: ``{title: {label: (t, dt)}}``."""
    return _curves(path, panels, "Δt", lambda ax, t, dt, **kw: ax.semilogy(t, dt, ".-", lw=1, ms=3, **kw))


def _curves(path: Path, panels, ylabel: str, draw, note: str = "") -> Path:
    """One panel per title, ``draw(ax, *data, color=, label=)`` for each of its runs against t."""
    fig, axes = _panels(max(len(panels), 1))
    color = _palette(panels.values())
    for ax, (title, series) in zip(axes, panels.items()):
        for name, data in series.items():
            draw(ax, *data, color=color[name], label=name)
        _label(ax, title + note, "t", ylabel)
    return _finish(fig, path, axes)


def _label(ax, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def loss_overlay(path: Path, panels) -> Path:
    """Training loss inside one time step, every method overlaid (left), and the final
    loss of every step against t (right), one row per equation (paper Fig.
    allen_cahn_loss: TENG reaches ~1e-14 in a few iterations where OBTI stalls).

    ``panels``: ``{equation: (t, in_step, final)}`` with ``in_step``
    ``{label: {stage: (iterations, losses)}}`` at the step nearest ``t`` and
    ``final`` ``{label: (times, step_loss)}``.
    """
    rows = max(len(panels), 1)
    fig, axes = plt.subplots(rows, 2, figsize=(11, 4.0 * rows), squeeze=False)
    color = _palette(final for _, _, final in panels.values())
    for (left, right), (equation, (t, in_step, final)) in zip(axes, panels.items()):
        for name, stages in in_step.items():
            for stage, (iterations, losses) in stages.items():
                label = name if len(stages) == 1 else f"{name} stage {stage + 1}"
                left.semilogy(iterations, losses, marker="o" if len(iterations) < 30 else None, ms=3, lw=1.2,
                              color=color[name], alpha=1.0 if stage == len(stages) - 1 else 0.5,
                              ls="-" if stage == len(stages) - 1 else ":", label=label)
        left.set_xscale("symlog", linthresh=10)
        _label(left, f"{equation}: loss inside the step at t ≈ {t:.4g}", "iteration", "loss")
        for name, (times, step_loss) in final.items():
            right.semilogy(times, step_loss, ".-", ms=3, lw=0.8, color=color[name], label=name)
        _label(right, f"{equation}: final loss of each step", "t", "loss")
    return _finish(fig, path, [ax for row in axes for ax in row])
