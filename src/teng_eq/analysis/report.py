"""What ``pipeline/analyze.py`` does: select runs from MLflow, then tabulate, plot and
log them (paper Table 1 and figures; see docs/guides/analysis.md).

Writes error_vs_runtime.png, error_vs_dt.png, error_vs_time.png, table.md
(Table 1: method × equation), table.csv, runs.csv (one row per run, Pareto flag),
slopes.csv, frontier.png/.csv/.md (the error–runtime front over every run, a
frontier search's trials by study: docs/frontier.md) and, where the selection has runs of the
``loss_overlay`` methods, loss_overlay.png (their in-step losses, from each run's ``tables/losses.csv``) to
``reports/<selection>/``, then logs them as an MLflow run tagged
``run_kind=analysis``. Only FINISHED job runs count; the others are reported.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from teng_eq import tracking
from teng_eq.analysis import compare, plots


def _fail(message: str):
    sys.exit(f"error: {message}")  # message to stderr, exit status 1


def _selection(cfg: DictConfig) -> tuple[str | None, list[str] | None, str | None]:
    exps = cfg.experiments
    if exps is not None:
        exps = [str(e) for e in exps] if OmegaConf.is_list(exps) else [str(exps)]
        if not exps:
            _fail("experiments=[] names no experiment")
    filter_string = None if cfg.filter is None else str(cfg.filter)
    sweep = cfg.sweep
    if sweep is None and exps is None and filter_string is None:
        sweep = "latest"
    return (None if sweep is None else str(sweep)), exps, filter_string


def _selection_name(sweep_id: str | None, exps: list[str] | None, filter_string: str | None) -> str:
    parts = [f"sweep-{sweep_id[:8]}"] if sweep_id else []
    if exps:
        parts.append("exp-" + "+".join(exps))
    if filter_string:
        parts.append("filter-" + hashlib.sha1(filter_string.encode()).hexdigest()[:8])
    return "_".join(parts) or "all"


def write_report(df: pd.DataFrame, curves: dict, out: Path, *, losses: dict | None = None,
                 loss_time: float | None = None, methods=(), equations=(),
                 extra: dict | None = None) -> list[Path]:
    """Figures and tables of the tidy runs ``df`` (with ``pareto``) into ``out``.

    ``curves``: ``{run_id: (steps, rel_l2)}``; ``extra``: the curves of other per-step
    metrics by name (``t`` and ``dt`` of adaptive runs, ``est_rel_l2``), each
    ``{run_id: (steps, values)}``, for estimate_vs_error.png and estimate.csv (the
    runs with an estimate) and dt_vs_time.png (the adaptive ones).
    ``losses``: ``{run_id: (loss table, (steps, step_loss))}`` of the runs to overlay
    in ``loss_overlay.png`` (none: no such figure), shown at the step nearest
    ``loss_time`` (None: a quarter of each run's horizon); ``methods``, ``equations``:
    the order of the rows and columns of the method × equation table.
    """
    axes = compare.varied_axes(df)
    groups = compare.group_keys(axes, drop=("seed", "dt"))
    groups.remove("equation")  # one panel per equation
    run_keys = [k for k in compare.group_keys(axes, drop=()) if k != "equation"]
    panels, slopes, quality = _report_panels(df, curves, extra or {}, groups, run_keys)
    runtime_panels, dt_panels, time_panels, estimate_panels, step_panels = panels
    out.mkdir(parents=True, exist_ok=True)
    table = compare.summary_table(df, axes)
    paths = [
        plots.error_vs_runtime(out / "error_vs_runtime.png", runtime_panels),
        plots.error_vs_dt(out / "error_vs_dt.png", dt_panels),
        plots.error_vs_time(out / "error_vs_time.png", time_panels),
        *compare.write_table(table, out, methods, equations),
    ]
    if quality:
        paths.append(plots.estimate_vs_error(out / "estimate_vs_error.png",
                                             {k: v for k, v in estimate_panels.items() if v}))
        pd.DataFrame(quality).to_csv(out / "estimate.csv", index=False)
        paths.append(out / "estimate.csv")
    if any(step_panels.values()):
        paths.append(plots.dt_vs_time(out / "dt_vs_time.png", {k: v for k, v in step_panels.items() if v}))
    if losses:
        paths.append(plots.loss_overlay(out / "loss_overlay.png",
                                        _overlay_panels(df, losses, run_keys, loss_time)))
    cols = ["run_id", "experiment_id", *run_keys[:1], "equation", *run_keys[1:],
            "global_rel_l2", "runtime_s", "compile_s", "pareto"]
    df[cols].to_csv(out / "runs.csv", index=False)
    pd.DataFrame(slopes).to_csv(out / "slopes.csv", index=False)
    return paths + [out / "runs.csv", out / "slopes.csv"]


def _print_summary(df: pd.DataFrame, jobs: pd.DataFrame, out: Path, methods, equations, target) -> None:
    """What :func:`analyze` prints: the tables, the estimate's quality, the front and the
    cheapest run below ``target``."""
    table = compare.summary_table(df)
    print(compare.table_markdown(table), end="")
    print(compare.wide_markdown(compare.method_by_equation(table, methods, equations)), end="")
    if (out / "estimate.csv").exists():
        quality = pd.read_csv(out / "estimate.csv")
        print("error estimate / true error after step 5 (min, max) per run:")
        for _, q in quality.iterrows():
            print(f"  {q['equation']} {q['run']}: {q['ratio_min']:.3g} .. {q['ratio_max']:.3g}; global "
                  f"{q['global_rel_l2']:.3g}, estimated {q['est_global_rel_l2']:.3g}")
    front = df[df["pareto"]]
    print(f"error–runtime front: {len(front)} of {len(df)} runs (frontier.md)")
    if target is not None:
        for _, best in compare.cheapest_below(compare.frontier_table(df, compare.run_sources(jobs), []),
                                               target).iterrows():
            trial = "" if pd.isna(best["trial"]) else f" trial {int(best['trial'])}"
            print(f"  {best['equation']}: cheapest with global_rel_l2 <= {target:g}: run {best['run_id']} "
                  f"({best['source']}{trial}), {best['global_rel_l2']:.3e} in {best['runtime_s']:.4g} s")
    parts = sorted(c for c in df.columns if c.startswith(("final_rel_l2/", "max_drift/")))
    if parts:
        print("systems, per component and invariant at the end:")
        for _, r in df.dropna(subset=parts, how="all").iterrows():
            print(f"  {r['equation']} {r['run_id'][:8]}: "
                  + ", ".join(f"{c} {r[c]:.3g}" for c in parts if pd.notna(r[c])))
    print(f"{len(df)} runs; varied: {', '.join(compare.varied_axes(df)) or 'nothing'}")


def _log_analysis(cfg, uri, root, df, paths, parent, sweep_id, exps, filter_string, name, n_other) -> None:
    """The analysis as an MLflow run: in ``log_experiment``, else the sweep's experiment, else
    the runs' one experiment, else ``analysis``."""
    if cfg.log_experiment:
        log_exp = str(cfg.log_experiment)
    elif parent is not None:
        log_exp = tracking.experiment_name(uri, parent.info.experiment_id)
    elif df["experiment_id"].nunique() == 1:
        log_exp = tracking.experiment_name(uri, df["experiment_id"].iloc[0])
    else:
        log_exp = "analysis"
    of = sweep_id or f"experiments={exps} filter={filter_string}"
    params = {"sweep": sweep_id, "experiments": exps, "filter": filter_string,
              "n_runs": len(df), "n_excluded": n_other}
    run_id = tracking.log_analysis(uri, log_exp, paths, analysis_of=of, run_name=f"analysis-{name}",
                                   params=params, artifact_root=tracking.artifact_root_for(uri, root))
    print(f"logged analysis run {run_id} in experiment {log_exp!r}")


def _report_panels(df: pd.DataFrame, curves: dict, extra: dict, groups: list, run_keys: list):
    """:func:`write_report`'s panels by equation — error against runtime and against Δt
    (by group), against time, the estimate beside it, Δt against time (by run) —, the
    Δt slopes and the estimate's quality rows."""
    t_curves, est_curves, dt_curves = (extra.get(k, {}) for k in ("t", "est_rel_l2", "dt"))
    panels, slopes, quality = tuple({} for _ in range(5)), [], []
    for eq, runs in df.groupby("equation", sort=True):
        runtime, by_dt, by_time, estimate, steps_of = (p.setdefault(eq, {}) for p in panels)
        for _, g in runs.groupby(groups, sort=True, dropna=False):
            name = compare.label(g.iloc[0], groups)
            runtime[name] = (g["runtime_s"], g["global_rel_l2"], g["pareto"])
            fit = compare.fit_power_law(g["dt"], g["global_rel_l2"])
            by_dt[name] = (g["dt"], g["global_rel_l2"], fit)
            slopes.append({"equation": eq, "group": name, "slope": fit.slope, "prefactor": fit.prefactor,
                           "n_runs": len(g), "n_dt": g["dt"].nunique()})
        for _, row in runs.sort_values(run_keys).iterrows():
            run_id, name = row["run_id"], compare.label(row, run_keys)
            steps, values = curves[run_id]
            t_curve = t_curves.get(run_id)
            by_time[name] = (compare.curve_times(steps, row["dt"], t_curve), values)
            est = est_curves.get(run_id)
            if est is not None and len(est[0]):
                estimate[name] = (by_time[name], (compare.curve_times(est[0], row["dt"], t_curve), est[1]))
                low, high = compare.estimate_ratio(curves[run_id], est)
                quality.append({"equation": eq, "run": name, "run_id": run_id, "ratio_min": low,
                                "ratio_max": high, "global_rel_l2": row["global_rel_l2"],
                                "est_global_rel_l2": row.get("est_global_rel_l2", np.nan)})
            if dt_curves.get(run_id) is not None and len(dt_curves[run_id][0]):
                dsteps, dvalues = dt_curves[run_id]
                steps_of[name] = (compare.curve_times(dsteps, row["dt"], t_curve), dvalues)
    return panels, slopes, quality


def write_frontier(df: pd.DataFrame, jobs: pd.DataFrame, runs: pd.DataFrame, out: Path,
                   target: float | None = None) -> list[Path]:
    """The error–runtime front over every run of ``df`` (a tidy frame with ``pareto``;
    ``jobs``: its rows of ``search_runs``; ``runs``: the whole selection, for the failed
    trials): frontier.png (dominated points marked), frontier.csv (every run, with its
    source: a study's trial or a sweep's job) and frontier.md (the front, and the
    cheapest run reaching ``target``)."""
    table = compare.frontier_table(df, compare.run_sources(jobs), compare.frontier_axes(df))
    panels = {}
    for eq, rows in table.groupby("equation", sort=True):
        title = f"{eq}: {int(rows['pareto'].sum())} of {len(rows)} runs on the front"
        panels[title] = {src: (g["runtime_s"], g["global_rel_l2"], g["pareto"],
                               ["" if pd.isna(t) else f"t{int(t)}" for t in g["trial"]])
                         for src, g in rows.groupby("source", sort=False)}
    failed = {}
    if "tags.study" in runs and len(runs):
        bad = runs[runs["tags.study"].notna() & (runs["status"] == "FAILED")]
        failed = {f"study {k}": len(g) for k, g in bad.groupby("tags.study")}
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "frontier.csv", index=False)
    (out / "frontier.md").write_text(compare.frontier_markdown(table, target, failed))
    return [plots.frontier(out / "frontier.png", panels, target), out / "frontier.csv", out / "frontier.md"]


def _overlay_panels(df: pd.DataFrame, losses: dict, run_keys: list[str], loss_time: float | None) -> dict:
    """``{equation: (t, in_step, final)}`` for :func:`teng_eq.analysis.plots.loss_overlay`."""
    panels = {}
    chosen = df[df["run_id"].isin(list(losses))]
    for eq, runs in chosen.groupby("equation", sort=True):
        in_step, final, times = {}, {}, []
        for _, row in runs.sort_values(run_keys).iterrows():
            table, (steps, values) = losses[row["run_id"]]
            t = np.nanmax(table[:, 1]) / 4 if loss_time is None else loss_time
            n = compare.step_near(table, t)
            name = compare.label(row, run_keys)
            in_step[name] = compare.in_step_losses(table, n)
            final[name] = (np.asarray(steps) * row["dt"], values)
            times.append(table[table[:, 0] == n, 1][0])
        panels[eq] = (float(np.median(times)), in_step, final)
    return panels


def _run_losses(uri: str, df: pd.DataFrame, methods) -> dict:
    """``{run_id: (loss table, (steps, step_loss))}`` of the sequential runs of ``methods``."""
    ids = list(df.loc[df["method"].isin(list(methods)), "run_id"])
    tables = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run_id, path in tracking.artifact_copies(uri, ids, "tables/losses.csv", Path(tmp)).items():
            table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
            if len(table) and np.isfinite(table[:, 1]).any():  # a global-in-time run has no t
                tables[run_id] = table
    step_loss = tracking.metric_curves(uri, list(tables), "step_loss")
    return {run_id: (table, step_loss[run_id]) for run_id, table in tables.items()}


def analyze(cfg: DictConfig, root: Path) -> Path:
    """Select, tabulate, plot, log (``cfg``: ``conf/analyze.yaml`` composed; ``root``:
    the repo root, where the default store and ``reports/`` are); the output folder.
    Bad input: ``SystemExit("error: …")``."""
    uri = cfg.tracking_uri or tracking.default_tracking_uri(root)
    sweep, exps, filter_string = _selection(cfg)
    try:
        parent = None
        if sweep is not None:
            parent = tracking.sweep_run(uri, tracking.latest_sweep(uri) if sweep == "latest" else sweep)
        sweep_id = None if parent is None else parent.info.run_id
        runs = tracking.load_runs(uri, experiments=exps, sweep=sweep_id, filter_string=filter_string)
    except tracking.SelectionError as err:
        _fail(str(err))
    name = _selection_name(sweep_id, exps, filter_string)
    jobs, n_other = (compare.select_jobs(runs) if len(runs) else (runs, 0))
    if n_other:
        print(f"excluded {n_other} job run(s) not FINISHED")
    if jobs.empty:
        _fail(f"no FINISHED job runs in selection {name} of {uri}")

    df = compare.tidy(jobs)
    df["pareto"] = compare.pareto_by_equation(df)
    curves = tracking.metric_curves(uri, list(df["run_id"]), "rel_l2")
    extra = {"est_rel_l2": tracking.metric_curves(uri, list(df["run_id"]), "est_rel_l2")}
    adaptive = list(df.loc[df["adaptive"], "run_id"])
    extra.update({key: tracking.metric_curves(uri, adaptive, key) for key in ("t", "dt")})
    out = Path(cfg.out).resolve() if cfg.out else root / "reports" / name
    losses = _run_losses(uri, df, cfg.loss_overlay or ())
    methods, equations = list(cfg.method_order or ()), list(cfg.equation_order or ())
    paths = write_report(df, curves, out, losses=losses, loss_time=cfg.loss_time, methods=methods,
                         equations=equations, extra=extra)
    target = None if cfg.get("target") is None else float(cfg.target)
    paths += write_frontier(df, jobs, runs, out, target)

    _print_summary(df, jobs, out, methods, equations, target)
    print(f"wrote {', '.join(p.name for p in paths)} to {out}")
    if cfg.mlflow:
        _log_analysis(cfg, uri, root, df, paths, parent, sweep_id, exps, filter_string, name, n_other)
    return out
