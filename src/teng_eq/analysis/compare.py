"""Comparisons across runs: Pareto front, convergence slopes, Table-1 summaries.

Pure numpy/pandas on the ``mlflow.search_runs`` DataFrame (``params.dt``,
``metrics.global_rel_l2``, ``tags.run_kind``, …); loading it is
:mod:`teng_eq.tracking`'s job.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from teng_eq.config.options import BOOKKEEPING

# Axes first in every grouping and label, in this order; the rest follow sorted.
LEADING = ("method", "equation", "adaptive", "dt")
METRICS = ("global_rel_l2", "runtime_s", "compile_s", "fit_s", "reference_s", "est_global_rel_l2",
           "steps_accepted", "steps_rejected", "iterations_total")


class PowerLaw(NamedTuple):
    """``err ≈ prefactor · dt**slope``."""

    slope: float
    prefactor: float


def pareto_front(runtime: Sequence[float], error: Sequence[float]) -> np.ndarray:
    """Mask of the non-dominated points of ``(runtime, error)``, both minimised.

    Point ``i`` is dominated when some ``j`` has ``r_j ≤ r_i`` and ``e_j ≤ e_i``
    with one inequality strict; equal points do not dominate each other. Points
    with a non-finite coordinate are never on the front and dominate nothing.
    """
    r = np.asarray(runtime, dtype=float)
    e = np.asarray(error, dtype=float)
    if r.shape != e.shape or r.ndim != 1:
        raise ValueError(f"runtime {r.shape} and error {e.shape} must be 1-D of one length")
    ok = np.isfinite(r) & np.isfinite(e)
    # O(n²) memory: fine for the hundreds of runs of a sweep, and obviously right.
    rj, ri = r[ok][:, None], r[ok][None, :]
    ej, ei = e[ok][:, None], e[ok][None, :]
    dominated = ((rj <= ri) & (ej <= ei) & ((rj < ri) | (ej < ei))).any(axis=0)
    mask = np.zeros(r.shape, dtype=bool)
    mask[np.flatnonzero(ok)] = ~dominated
    return mask


def pareto_by_equation(df: pd.DataFrame) -> np.ndarray:
    """:func:`pareto_front` of ``(runtime_s, global_rel_l2)`` within each equation of a
    :func:`tidy` frame: errors of different PDEs are not comparable."""
    mask = np.zeros(len(df), dtype=bool)
    for rows in df.groupby("equation", sort=False).indices.values():
        mask[rows] = pareto_front(df["runtime_s"].iloc[rows], df["global_rel_l2"].iloc[rows])
    return mask


def fit_power_law(dt: Sequence[float], err: Sequence[float]) -> PowerLaw:
    """Least-squares fit of ``log err = slope · log dt + log prefactor``.

    Points with a non-positive or non-finite ``dt`` or ``err`` are left out;
    fewer than two distinct ``dt`` give ``nan``.
    """
    x = np.asarray(dt, dtype=float)
    y = np.asarray(err, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = np.log(x[keep]), np.log(y[keep])
    if np.unique(x).size < 2:
        return PowerLaw(float("nan"), float("nan"))
    slope, intercept = np.polyfit(x, y, 1)
    return PowerLaw(float(slope), float(np.exp(intercept)))


def select_jobs(runs: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The FINISHED job runs of a ``search_runs`` frame, and how many others were dropped.

    Jobs are runs tagged ``run_kind=job`` or with no ``run_kind`` (older runs);
    sweep parents and analysis runs are not jobs. The count is of jobs whose
    status is not FINISHED (failed, killed or still running).
    """
    kind = runs["tags.run_kind"] if "tags.run_kind" in runs else pd.Series(np.nan, runs.index)
    jobs = runs[kind.isna() | (kind == "job")]
    finished = jobs["status"] == "FINISHED"
    return jobs[finished].copy(), int((~finished).sum())


def tidy(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run: ``run_id``, ``experiment_id``, every param by its own name
    (numbers parsed where every value is one), and the scalar metrics; ``global_rel_l2``
    of a run without a reference is its ``est_global_rel_l2`` (``error_source``:
    ``estimate``, else ``reference``).

    ``method`` and ``equation`` fall back to the tags of the same name where the
    params lack them.
    """
    out = pd.DataFrame({"run_id": runs["run_id"], "experiment_id": runs["experiment_id"]})
    for col in runs.columns:
        if col.startswith("params."):
            out[col.removeprefix("params.")] = _parsed(runs[col])
    for name in ("method", "equation"):
        tag = runs.get(f"tags.{name}")
        if tag is not None:
            out[name] = out[name].fillna(tag) if name in out else tag
        elif name not in out:
            out[name] = "?"
    for name in METRICS:
        col = f"metrics.{name}"
        out[name] = runs[col].astype(float) if col in runs else np.nan
    for col in runs.columns:  # a system's: final_rel_l2/<component>, max_drift/<invariant>
        if col.startswith(("metrics.final_rel_l2/", "metrics.max_drift/")):
            out[col.removeprefix("metrics.")] = runs[col].astype(float)
    # A run of an equation without a reference: its error is its own estimate, and says so.
    estimated = out["global_rel_l2"].isna() & out["est_global_rel_l2"].notna()
    out["error_source"] = np.where(estimated, "estimate", "reference")
    out.loc[estimated, "global_rel_l2"] = out.loc[estimated, "est_global_rel_l2"]
    # dt: auto (the step-size controller) is a kind of run, not a step size.
    dt = out["dt"].astype(str) if "dt" in out else pd.Series("", index=out.index)
    out["adaptive"] = dt == "auto"
    if "dt" in out:
        out["dt"] = pd.to_numeric(out["dt"], errors="coerce")
    return out.reset_index(drop=True)


def _parsed(values: pd.Series) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce")
    # Only a column that is numbers throughout becomes numeric: "true"/"null" stay text.
    return numbers if numbers.notna().all() else values


def varied_axes(df: pd.DataFrame) -> list[str]:
    """Config params that take more than one value across the runs of ``df``.

    ``df`` is a :func:`tidy` frame. Bookkeeping params are ignored, and so is a
    param fixed by the axes kept before it (``method.name`` by ``method``,
    ``equation.nu`` by ``equation``); ``method``, ``equation``, ``dt`` come
    first, then the rest sorted with the short (top-level) names ahead.
    """
    skip = BOOKKEEPING | {"run_id", "experiment_id", "pareto", "error_source", *METRICS}
    candidates = [c for c in df.columns if c not in skip]
    order = [c for c in LEADING if c in candidates]
    order += sorted((c for c in candidates if c not in LEADING), key=lambda c: (c.count("."), c))
    filled = df[order].astype(str)
    kept: list[str] = []
    for col in order:
        if filled[col].nunique() < 2:
            continue
        if kept and filled.groupby(kept)[col].nunique().max() < 2:
            continue
        kept.append(col)
    return kept


def summary_table(df: pd.DataFrame, axes: Sequence[str] | None = None) -> pd.DataFrame:
    """Table 1 of the paper, one row per (method, equation, other varied axes).

    Repeats (runs equal on every axis but ``seed``) are merged: the columns
    ``global_rel_l2`` and ``runtime_s`` hold their medians, ``n_runs`` their count; where
    some runs have no reference, ``error_source`` says which errors are estimates.
    """
    axes = varied_axes(df) if axes is None else list(axes)
    keys = group_keys(axes)
    estimated = "error_source" in df and (df["error_source"] == "estimate").any()
    sources = {"error_source": ("error_source", "first")} if estimated else {}
    table = (
        df.groupby(keys, sort=False, dropna=False)
        .agg(global_rel_l2=("global_rel_l2", "median"), runtime_s=("runtime_s", "median"),
             n_runs=("run_id", "size"), **sources)
        .reset_index()
    )
    return table.sort_values(keys[1::-1] + keys[2:], kind="stable").reset_index(drop=True)


def group_keys(axes: Sequence[str], drop: Sequence[str] = ("seed",)) -> list[str]:
    """``method``, ``equation`` and the other ``axes`` except ``drop``: what a group is."""
    return ["method", "equation"] + [a for a in axes if a not in ("method", "equation", *drop)]


def label(row: pd.Series | dict, keys: Sequence[str]) -> str:
    """``"teng_heun iters=3 subsample=256"``: the method then ``key=value`` for the rest
    (``equation`` by name)."""
    parts = [str(row["method"])] if "method" in keys else []
    parts += [str(row[k]) if k == "equation" else f"{k}={row[k]}" for k in keys if k != "method"]
    return " ".join(parts)


def table_markdown(table: pd.DataFrame) -> str:
    """``table`` as a GitHub markdown table: errors as ``1.588e-06``, runtimes to 4 digits."""
    head = {"global_rel_l2": "global rel. L² error", "runtime_s": "runtime (s)", "n_runs": "runs"}
    cells = [[_cell(c, row[c]) for c in table.columns] for _, row in table.iterrows()]
    return _markdown([head.get(c, c) for c in table.columns], cells, ["---:" if c in head else "---"
                                                                      for c in table.columns])


def _markdown(header: Sequence[str], rows, align: Sequence[str]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    return "\n".join(lines + ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]) + "\n"


def _cell(col: str, value) -> str:
    if col in ("global_rel_l2", "runtime_s"):
        if not np.isfinite(value):
            return "–"
        return f"{value:.3e}" if col == "global_rel_l2" else f"{value:.4g}"
    return str(value)


def method_by_equation(table: pd.DataFrame, methods: Sequence[str] = (),
                       equations: Sequence[str] = ()) -> pd.DataFrame:
    """The paper's Table 1 layout of a :func:`summary_table`: one row per method
    (and other varied axis), one column per equation, cells ``error (runtime s)``.

    Rows and columns come in the order of ``methods`` and ``equations`` where they
    are named there, the others after them in their order of appearance.
    """
    rows = [c for c in table.columns if c not in ("equation", "global_rel_l2", "runtime_s", "n_runs")]
    table = table.iloc[np.argsort([_rank(m, methods) for m in table["method"]], kind="stable")]
    cells = table.assign(cell=[f"{_cell('global_rel_l2', e)} ({_cell('runtime_s', r)} s)"
                               for e, r in zip(table["global_rel_l2"], table["runtime_s"])])
    wide = cells.pivot_table(index=rows, columns="equation", values="cell", aggfunc="first", sort=False)
    cols = sorted(wide.columns, key=lambda e: _rank(e, equations))  # stable: appearance order kept
    return wide[cols].fillna("–").reset_index().rename_axis(columns=None)


def _rank(name, order: Sequence[str]) -> int:
    return list(order).index(name) if name in order else len(order)


def curve_times(steps, dt: float, t_curve=None) -> np.ndarray:
    """The times of a run's metric ``steps``: ``step·dt`` with a fixed Δt, else read from
    its ``t`` curve ``(steps, t)`` (logged from step 1; step 0 is t = 0)."""
    steps = np.asarray(steps, dtype=int)
    if t_curve is None or not len(t_curve[0]):
        return steps * float(dt)
    by_step = dict(zip(np.asarray(t_curve[0], int), np.asarray(t_curve[1], float)))
    by_step.setdefault(0, 0.0)
    return np.array([by_step.get(int(n), np.nan) for n in steps])


def estimate_ratio(rel_l2: tuple, est_rel_l2: tuple, skip: int = 5) -> tuple[float, float]:
    """Min and max over steps ``> skip`` of ``est_rel_l2 / rel_l2`` (curves ``(steps, values)``,
    matched by step): how well a run's a-posteriori estimate tracks its true error
    (docs/guides/error-control.md). NaN where the curves share no such step."""
    true = dict(zip(np.asarray(rel_l2[0], int), np.asarray(rel_l2[1], float)))
    ratios = [v / true[n] for n, v in zip(np.asarray(est_rel_l2[0], int), np.asarray(est_rel_l2[1], float))
              if n > skip and n in true and true[n] > 0]
    return (float(np.min(ratios)), float(np.max(ratios))) if ratios else (float("nan"), float("nan"))


def step_near(table: np.ndarray, t: float) -> int:
    """The time step of a run's loss table (rows ``(step, t, stage, iteration, loss, lsq)``,
    :meth:`teng_eq.run.result.RunResult.loss_table`) whose time is nearest ``t``."""
    steps, times = np.asarray(table)[:, 0], np.asarray(table)[:, 1]
    return int(steps[np.nanargmin(np.abs(times - t))])


def in_step_losses(table: np.ndarray, step: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``{stage: (iterations, losses)}`` inside time step ``step`` of a loss table."""
    rows = np.asarray(table)
    rows = rows[rows[:, 0] == step]
    return {int(s): (rows[rows[:, 2] == s, 3], rows[rows[:, 2] == s, 4]) for s in np.unique(rows[:, 2])}


def write_table(table: pd.DataFrame, folder: Path, methods: Sequence[str] = (),
                equations: Sequence[str] = ()) -> tuple[Path, Path]:
    """``table.md`` (the long table, then method × equation in the order of ``methods``
    and ``equations``) and ``table.csv`` (the long table, full precision) in ``folder``."""
    folder = Path(folder)
    md, csv = folder / "table.md", folder / "table.csv"
    md.write_text(table_markdown(table) + "\n## Global relative L² error (runtime), method × equation\n\n"
                  + wide_markdown(method_by_equation(table, methods, equations)))
    table.to_csv(csv, index=False)
    return md, csv


def wide_markdown(wide: pd.DataFrame) -> str:
    """A :func:`method_by_equation` table as GitHub markdown."""
    return _markdown(list(wide.columns), wide.itertuples(index=False), ["---"] * len(wide.columns))


# --- The error–runtime frontier (docs/frontier.md) ------------------------------------------


def run_sources(runs: pd.DataFrame) -> pd.DataFrame:
    """Where each job run of a ``search_runs`` frame comes from: ``source`` is ``study
    <name>`` for a frontier search's trial (tags ``study``, ``trial``), ``sweep
    <parent id[:8]>`` for a grid sweep's job, else ``run``; ``trial`` its trial number."""
    def tag(name: str) -> pd.Series:
        col = f"tags.{name}"
        return runs[col] if col in runs else pd.Series(np.nan, index=runs.index, dtype=object)

    study, parent = tag("study"), tag("mlflow.parentRunId")
    source = np.where(study.notna(), "study " + study.astype(str),
                      np.where(parent.notna(), "sweep " + parent.astype(str).str[:8], "run"))
    trial = pd.to_numeric(tag("trial"), errors="coerce").astype("Int64")
    return pd.DataFrame({"run_id": runs["run_id"].to_numpy(), "source": source, "trial": trial.to_numpy()})


def frontier_axes(df: pd.DataFrame) -> list[str]:
    """The params that vary across a :func:`tidy` frame, every one a search may have
    drawn: all the top-level ones (:func:`varied_axes` drops those its earlier axes
    happen to fix, which in a search's scattered points is most of them), and the
    dotted ones the top-level ones do not fix (``method.integrator`` is ``method``'s)."""
    skip = BOOKKEEPING | {"run_id", "experiment_id", "pareto", *METRICS}
    filled = df[[c for c in df.columns if c not in skip]].astype(str)
    varied = [c for c in filled.columns if filled[c].nunique() > 1]
    top = [c for c in LEADING if c in varied] + sorted(c for c in varied if "." not in c and c not in LEADING)
    dotted = sorted(c for c in varied if "." in c
                    and (not top or filled.groupby(top)[c].nunique().max() > 1))
    return top + dotted


def frontier_table(df: pd.DataFrame, sources: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """Every run of a :func:`tidy` frame (with ``pareto``: on its equation's front) with
    its source and trial (:func:`run_sources`) and the varied ``axes``, by equation and
    runtime: the front's table, dominated points included and marked."""
    keep = [a for a in axes if a != "equation"]
    table = df.merge(sources, on="run_id", how="left")
    cols = ["equation", "source", "trial", *keep, "global_rel_l2", "runtime_s", "pareto", "run_id"]
    return (table[cols].sort_values(["equation", "runtime_s", "global_rel_l2"], kind="stable")
            .reset_index(drop=True))


def cheapest_below(table: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per equation, the run of least runtime whose error is at most ``target`` (none:
    the equation has no row)."""
    ok = table[table["global_rel_l2"] <= target]
    return (ok.sort_values(["runtime_s", "global_rel_l2"], kind="stable")
            .groupby("equation", sort=True).head(1))


def frontier_markdown(table: pd.DataFrame, target: float | None = None, failed: dict | None = None) -> str:
    """The front of each equation (a :func:`frontier_table`'s ``pareto`` rows, cheapest
    first) as markdown, with how many runs it was drawn from, the failed trials left
    out (``failed``: ``{source: count}``) and, given a ``target``, the cheapest run
    reaching it."""
    axes = [c for c in table.columns if c not in ("equation", "source", "trial", "global_rel_l2",
                                                   "runtime_s", "pareto", "run_id")]
    head = ["source", "trial", *axes, "global rel. L² error", "runtime (s)", "run"]
    align = ["---", "---:", *["---"] * len(axes), "---:", "---:", "---"]

    def row(r) -> list[str]:
        trial = "" if pd.isna(r["trial"]) else str(int(r["trial"]))
        return [r["source"], trial, *(str(r[a]) for a in axes), _cell("global_rel_l2", r["global_rel_l2"]),
                _cell("runtime_s", r["runtime_s"]), str(r["run_id"])[:8]]

    parts = []
    for eq, runs in table.groupby("equation", sort=True):
        on = runs[runs["pareto"]]
        parts.append(f"## {eq}: the error–runtime front, {len(on)} of {len(runs)} runs\n\n")
        parts.append(_markdown(head, [row(r) for _, r in on.iterrows()], align))
        if target is not None:
            best = cheapest_below(runs, target)
            parts.append(f"\nCheapest run with global rel. L² error ≤ {target:g}: "
                         + ("none" if best.empty else " ".join(f"{k}={v}" for k, v in
                                                               zip(head, row(best.iloc[0])) if v))
                         + "\n")
        parts.append("\n")
    for source, n in sorted((failed or {}).items()):
        parts.append(f"{source}: {n} failed trial(s), not drawn (no error to plot).\n")
    return "".join(parts)
