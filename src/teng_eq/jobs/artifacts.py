"""What a finished job writes to its MLflow run (:func:`finish`): the end-of-run metrics and
tags (:func:`log_result`, with the one line :func:`summary_line`) and its artifacts: the
config, the loss table, θ and the plots (:func:`log_artifacts`, whose snapshots
:func:`snapshot_plan` chooses)."""

from __future__ import annotations

import functools
import importlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from teng_eq import tracking
from teng_eq.errors import Overfit, WriteFailed
from teng_eq.estimate.defect import transport_refused
from teng_eq.run.checkpoint import save_network
from teng_eq.run.result import RunResult


def spread(n: int, parts: int, first: int = 1) -> list[int]:
    """Up to ``parts`` steps spread evenly over ``first..n``."""
    return sorted({max(first, round(n * i / parts)) for i in range(first, parts + 1)})


#: Fields kept along a 1-D run for its x–t images (:func:`teng_eq.analysis.plots.line_fields`).
LINE_SNAPSHOTS = 200


def snapshot_plan(run_cfg) -> dict[str, list]:
    """The density plot's times: the start, a third, two thirds and the end, as steps
    (fixed Δt) or as the first steps at or after those times (``dt: auto``); on a line
    :data:`LINE_SNAPSHOTS` + 1 of them, the rows of its x–t images."""
    parts = LINE_SNAPSHOTS if run_cfg.equation.dim == 1 else 3
    if run_cfg.adaptive:
        return {"snapshot_times": [run_cfg.t_final * i / parts for i in range(parts)] + [run_cfg.t_final]}
    return {"snapshot_steps": spread(run_cfg.n_steps, parts, first=0)}


def finish(run: tracking.RunLogger, cfg: DictConfig, run_cfg, result: RunResult, name: str, output_dir: Path,
           job_start: float) -> None:
    """A run that reached its end: its metrics, tags, artifacts and tracking overhead (MLflow
    calls and plots against the job's time); a failed held-out check then ends it FAILED."""
    log_result(run, result, name, run_cfg)
    log_artifacts(run, cfg, run_cfg, result, name, output_dir)
    run.flush()
    job_s = time.perf_counter() - job_start
    run.metric("tracking_s", run.seconds)
    run.metric("job_s", job_s)
    run.metric("tracking_fraction", run.seconds / job_s)
    if result.holdout_flag == "fail":
        raise Overfit(f"{name}: held-out loss exceeds the training loss more than "
                      f"holdout.fail={result.holdout.fail:g} times: the fits overfit the quadrature nodes")


def log_result(run: tracking.RunLogger, result: RunResult, name: str, run_cfg) -> None:
    """The end-of-run metrics and tags; what went wrong without failing the run
    (solver events, the held-out check's warning, θ₀ above its tolerance) is also
    printed at the end."""
    if result.rel_l2 is not None:  # against the reference, where the run has one
        if not result.sequential:  # a global-in-time method's error curve exists only now
            run.curve("rel_l2", range(len(result.rel_l2)), result.rel_l2)
        run.metric("global_rel_l2", result.global_rel_l2)
        run.metric("final_rel_l2", result.rel_l2[-1])
    for key in ("runtime_s", "eval_s", "compile_s", "reference_s", "checkpoint_s"):
        run.metric(key, getattr(result, key))
    run.tags({"reference": "yes" if result.rel_l2 is not None else "none", "estimate_used": result.estimate})
    for key, value in result.scalars.items():  # est_global_rel_l2, steps_accepted, steps_rejected, …
        run.metric(key, value)
    for key, count in result.events.items():
        run.metric(f"{key}_total", count)
    if result.resumed_from:
        run.tags({"resumed_from_step": result.resumed_from})
    fit = result.fit_report
    if fit is not None:
        run.metric("fit_s", fit.seconds)
        run.tags({"theta0_cached": fit.cached, "theta0_loss": f"{fit.stage2_loss:.3e}",
                  "theta0_rel_loss": f"{fit.stage2_rel_loss:.3e}", "theta0_converged": fit.converged})
    ratios = result.metrics.get("holdout_ratio")
    if ratios is not None:
        run.metric("holdout_ratio_max", float(np.nanmax(ratios)))
        run.tags({"holdout_flag": result.holdout_flag})
    if "iterations" in result.metrics:
        run.metric("iterations_mean", float(np.mean(result.metrics["iterations"])))
    warn = []
    if any(result.events.values()):
        warn.append("solver events: " + ", ".join(f"{k}={v}" for k, v in result.events.items()))
    if result.holdout_flag != "ok":
        warn.append(f"held-out check: {result.holdout_flag} (max held-out/training loss ratio "
                    f"{np.nanmax(ratios):.3g}; holdout.warn={result.holdout.warn:g}, "
                    f"holdout.fail={result.holdout.fail:g}): the fits may overfit the quadrature nodes")
    if fit is not None and not fit.converged:
        warn.append(fit.advice or
                    f"θ₀ fit ended above fit.stage2_tol (relative loss {fit.stage2_rel_loss:.2e})")
    if result.estimate not in (run_cfg.estimate, "none"):
        why = (transport_refused(run_cfg.equation) if run_cfg.estimate == "transport" else
               f"needs derivatives of twice the operator's order ({2 * run_cfg.equation.order})")
        print(f"note: {name}: estimate={run_cfg.estimate} {why}: the run's estimate is {result.estimate}",
              file=sys.stderr)
    for msg in warn:
        print(f"warning: {name}: {msg}", file=sys.stderr)
    if result.sequential and "est_global_rel_l2" in result.scalars:
        print(summary_line(result, name))


def summary_line(result: RunResult, name: str) -> str:
    """One line on what a run reached and what it estimates of its own error, e.g.
    ``teng_heun-heat-dtauto: t=1 in 61 steps (3 rejected), Δt 0.0031–0.026;
    error 1.1e-07 (estimate 2.3e-07), global 9.8e-08 (estimate 1.9e-07)``; without a
    reference, ``…; no reference: estimated error 2.3e-07, global 1.9e-07``."""
    s = result.scalars
    steps = f"t={result.times[-1]:.6g} in {len(result.times) - 1} steps"
    if "steps_rejected" in s:
        dt = np.diff(result.times)
        steps += f" ({int(s['steps_rejected'])} rejected), Δt {dt.min():.2g}–{dt.max():.2g}"
    if result.rel_l2 is None:
        return (f"{name}: {steps}; no reference: estimated error {result.est_rel_l2[-1]:.2g}, "
                f"global {s['est_global_rel_l2']:.2g}")
    return (f"{name}: {steps}; error {result.rel_l2[-1]:.2g} (estimate {result.est_rel_l2[-1]:.2g}), "
            f"global {result.global_rel_l2:.2g} (estimate {s['est_global_rel_l2']:.2g})")


def log_artifacts(run: tracking.RunLogger, cfg: DictConfig, run_cfg, result: RunResult, name: str,
                  output_dir: Path) -> None:
    """Config (resolved, and Hydra's .hydra/), plots, the per-iteration loss table, θ.
    A file that cannot be written (a full disk) ends the run FAILED
    (:class:`~teng_eq.errors.WriteFailed`): its checkpoint after the last step stays,
    and running the same command again logs the results from it."""
    try:
        _write_artifacts(run, cfg, run_cfg, result, name, output_dir)
    except OSError as err:
        raise WriteFailed(f"{name}: an artifact could not be written ({err.strerror or err}: "
                          f"{getattr(err, 'filename', None) or 'unknown file'}); the checkpoint after step "
                          f"{len(result.step_loss)} is kept: the same command logs the results") from err


def _write_artifacts(run: tracking.RunLogger, cfg: DictConfig, run_cfg, result: RunResult, name: str,
                     output_dir: Path) -> None:
    plots = importlib.import_module("teng_eq.analysis.plots")  # loaded in the background at the job's start
    with tempfile.TemporaryDirectory() as tmp, run.timed():
        tmp = Path(tmp)
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
        run.artifact(tmp / "config.yaml", "config")
        if (output_dir / ".hydra").is_dir():
            run.artifact(output_dir / ".hydra", "config/.hydra")
        table = result.loss_table()
        np.savetxt(tmp / "losses.csv", table, delimiter=",",
                   header=f"step,t,stage,iteration,loss,{result.inner_measure}", comments="",
                   fmt=["%d", "%.10g", "%d", "%d", "%.17g", "%.17g"])
        run.artifact(tmp / "losses.csv", "tables")
        run.artifact(save_network(tmp / "theta.eqx", result.network), "params")
        step_times = result.times[1:] if result.sequential else np.arange(1, len(result.step_loss) + 1)
        plots.error_curve(tmp / "error.png", result.times, result.rel_l2, result.step_loss, title=name,
                          step_times=step_times, estimate=result.est_rel_l2)
        plots.loss_iterations(tmp / "loss_iterations.png", table, spread(len(result.step_loss), 5),
                              result.step_loss, step_times, title=name)
        for png in ("error.png", "loss_iterations.png"):
            run.artifact(tmp / png, "plots")
        if result.snapshots:
            eq = run_cfg.equation
            draw = plots.line_fields if eq.dim == 1 else functools.partial(plots.density,
                                                                           edges=eq.domain.edges())
            evaluation = eq.evaluation(run_cfg.eval_grid)
            for suffix, snapshots, points in plots.by_component(result.snapshots, evaluation):
                draw(tmp / f"density{suffix}.png", snapshots, result.times, points,
                     title=name + suffix.replace("_", " "))
                run.artifact(tmp / f"density{suffix}.png", "plots")
