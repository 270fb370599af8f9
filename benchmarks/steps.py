"""What ``pipeline/bench.py`` times (its entry script): TENG's whole steps against the naive
yardstick, the estimate's cost, one iteration part by part, larger and paper-size steps,
the d-cube and a system; each a median over repeats after a JIT warm-up (:mod:`.timing`).
See docs/performance.md for the results."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from benchmarks import authors, timing
from teng_eq.jobs.job import device_description
from teng_eq.jobs.preflight import key_namer
from teng_eq.methods.teng import TENG
from teng_eq.run.config import RunConfig
from teng_eq.run.simulation import build_method
from teng_eq.stepping.explicit import TENGStep
from teng_eq.tracking import default_tracking_uri, tracked_run

ROOT = Path(__file__).resolve().parents[1]
#: The command line's help: the entry script's docstring.
USAGE = (ROOT / "pipeline" / "bench.py").read_text().split('"""')[1]
#: Heat's paper horizon T = 4 at Δt = 0.005.
PAPER_STEPS = 800
#: θ₀ of the cube's step-time rows: a short fit (a step's work does not depend on θ₀'s accuracy).
SHORT_FIT = ["fit.stage1_max_iters=50", "fit.stage2_max_iters=2", "fit.stage2_tol=1.0"]


def machine() -> dict[str, str]:
    return {"device": device_description(), "load_avg_1m": f"{os.getloadavg()[0]:.2f}",
            "jax": jax.__version__, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "")}


def compose_config(overrides: list[str]) -> RunConfig:
    """conf/config.yaml with ``overrides``, composed by Hydra as pipeline/sweep.py does."""
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    return RunConfig.from_mapping(OmegaConf.to_container(cfg, resolve=True), rename=key_namer(cfg))


def step_at(method: TENG, cfg: RunConfig, grid: int, solver: str, first: int, rest: int) -> TENGStep:
    """``cfg``'s TENG step on the network of ``method`` (θ₀ as fitted there) on a
    ``grid``² grid, with another solver and subsample sizes."""
    options = dataclasses.replace(cfg.method.options, grid=grid, solver=solver, subsample_first=first,
                                  subsample=rest)
    quadrature = cfg.equation.quadrature(grid)
    return TENG.parts(options, cfg.problem, method.space, quadrature)["advance"]


COLUMNS = ["grid", "N", "n", "solver", "operator_ms", "jacobian_ms", "solve_ms", "update_ms",
           "iteration_ms", "solve_GFLOP", "GFLOP_s", "iter_over_solve"]


def row(grid, t) -> dict:
    return {"grid": f"{grid}²", "N": t.grid_points, "n": t.subsample, "solver": t.solver,
            "operator_ms": t.operator_ms, "jacobian_ms": t.jacobian_ms, "solve_ms": t.solve_ms,
            "update_ms": t.update_ms, "iteration_ms": t.iteration_ms, "solve_GFLOP": t.flops / 1e9,
            "GFLOP_s": t.gflops, "iter_over_solve": t.ratio}


def fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def print_table(rows: list[dict], columns: list[str], header: bool = True) -> None:
    """``rows`` as markdown table rows (with the header, unless ``header`` is False)."""
    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(columns)]
    if header:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for x in cells:
        print("| " + " | ".join(v.rjust(w) for v, w in zip(x, widths)) + " |", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line's options (the module docstring shows them), parsed from ``argv``."""
    ap = argparse.ArgumentParser(description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grids", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--subsamples", type=int, nargs="+", default=[256, 512, 1024, 1536])
    ap.add_argument("--solvers", nargs="+", default=["cholesky", "qr", "svd"])
    ap.add_argument("--max-gflop", type=float, default=12.0,
                    help="skip qr/svd solves above this many GFLOP (cholesky always runs)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per measurement (3 for slow ones)")
    ap.add_argument("--naive-rounds", type=int, default=3)
    ap.add_argument("--paper", action="store_true", help="also time a paper-size step (512², 1536/1024)")
    ap.add_argument("--devices", default=None,
                    help="also time the paper-size step with this devices setting (all, or N: its points "
                         "split over the local devices; needs solver=cholesky)")
    ap.add_argument("--skip-table", action="store_true", help="only the step comparison (and --paper)")
    ap.add_argument("--cube-dims", type=int, nargs="*", default=[],
                    help="also time a whole step of heat_cube at its preset sizes in each of these "
                         "dimensions")
    ap.add_argument("--systems", action="store_true",
                    help="also time a step of the wave system (2 components) against heat's on the same grid")
    ap.add_argument("--vs-authors", metavar="CHECKOUT", type=Path, default=None,
                    help="only: the authors' code (a checkout of github.com/pde-sim/teng) against ours, "
                         "each to its horizon (benchmarks/authors.py)")
    ap.add_argument("--authors-python", type=Path, default=None,
                    help="the Python that runs the authors' code (default: CHECKOUT/.venv/bin/python)")
    ap.add_argument("--cases", nargs="+", choices=list(authors.CASES), default=list(authors.CASES),
                    help="--vs-authors: the comparisons to run")
    ap.add_argument("--mlflow", action="store_true", help="log the tables as an MLflow run")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("overrides", nargs="*", help="conf/ overrides, e.g. stopping=fixed (after --)")
    return ap.parse_args(argv)


def time_default_step(method: TENG, cfg: RunConfig, theta, key, rounds: int):
    """Time the config's whole step against the naive one, print them, return ``(step, cmp, d, n, rows)``."""
    o = cfg.method.options
    # Whole steps: the default config against the naive yardstick.
    print(f"\n## Whole TENG-{o.integrator} step ({o.iters}+{o.iters_later} iterations), "
          f"grid {o.grid}², subsample {o.subsample_first}/{o.subsample}, {o.solver} vs naive")
    step = step_at(method, cfg, o.grid, o.solver, o.subsample_first, o.subsample)
    cmp = timing.compare_with_naive(step, theta, key, rounds=rounds)
    d, n = statistics.median(cmp.default_s), statistics.median(cmp.naive_s)
    step_rows = [{"variant": "default", "grid": f"{o.grid}²", "step_s": d, "final_loss": cmp.default_loss},
                 {"variant": "naive", "grid": f"{o.grid}²", "step_s": n, "final_loss": cmp.naive_loss}]
    print_table(step_rows, ["variant", "grid", "step_s", "final_loss"])
    print(f"naive / default = {cmp.ratio:.1f}x   (max |Δθ| between the two after one step: "
          f"{cmp.max_theta_diff:.1e}, null-space directions of the damped vs minimum-norm solve)")
    print(f"default step times: {', '.join(f'{t:.3f}' for t in cmp.default_s)} s; "
          f"naive: {', '.join(f'{t:.2f}' for t in cmp.naive_s)} s", flush=True)
    return step, cmp, d, n, step_rows


def time_estimates(method: TENG, cfg: RunConfig, step: TENGStep, theta, key, step_s: float,
                   repeats: int) -> None:
    """Print each kind of error estimate's time per accepted step, against ``step_s``, the step's."""
    # The a-posteriori estimate's share of an accepted step, each kind against the same step.
    print("\n## The error estimate per accepted step (medians), against the default step above")
    theta_next = jax.block_until_ready(timing.compiled_step(step, theta, key)(theta, key)[0])
    estimate_rows = []
    for kind in ("transport", "hermite", "trapezoid"):
        t = timing.estimate_seconds(method.defect(kind), kind, theta, theta_next, cfg.dt or 0.005,
                                        repeats=repeats)
        estimate_rows.append({"estimate": kind, "ms": 1e3 * t, "of_step": t / step_s})
    print_table(estimate_rows, ["estimate", "ms", "of_step"])


def time_iteration_table(args: argparse.Namespace, method: TENG, cfg: RunConfig, theta, key) -> list[dict]:
    """Time one iteration part by part per grid, subsample and solver; print and return the rows."""
    o = cfg.method.options
    rows: list[dict] = []
    print("\n## One iteration, part by part (ms, medians); operator = L[û] + target, once per stage")
    for grid in args.grids:
        step = step_at(method, cfg, grid, o.solver, o.subsample_first, o.subsample)
        quadrature = cfg.equation.quadrature(grid)
        for n_sub in args.subsamples:
            N = grid * grid
            solvers = tuple(s for s in args.solvers if s == "cholesky"
                            or timing.solve_flops(s, N, n_sub) / 1e9 <= args.max_gflop)
            slow = timing.solve_flops("cholesky", N, n_sub) > 2e10
            timings = timing.time_iterations(step, quadrature, theta, key, n_sub, solvers,
                                                 repeats=3 if slow else args.repeats)
            new = [row(grid, t) for t in timings]
            for r, t in zip(new, timings):
                if not t.finite:
                    r["solver"] += " (non-finite)"
            print_table(new, COLUMNS, header=not rows)
            rows += new
    print(f"(qr/svd skipped above {args.max_gflop:g} GFLOP)")
    return rows


def time_larger_steps(grids: list[int], method: TENG, cfg: RunConfig, theta, key,
                      step_rows: list[dict]) -> None:
    """Time a whole default step at each of ``grids`` but the config's, appending a row to ``step_rows``."""
    o = cfg.method.options
    # Whole default steps at the larger grids.
    for grid in grids:
        if grid == o.grid:
            continue
        step = step_at(method, cfg, grid, o.solver, o.subsample_first, o.subsample)
        fn = timing.compiled_step(step, theta, key)
        t = timing.median_seconds(fn, theta, key, repeats=3)
        step_rows.append({"variant": "default", "grid": f"{grid}²", "step_s": t,
                          "final_loss": float(fn(theta, key)[1].metrics["step_loss"])})
        print(f"whole default step at {grid}²: {t:.3f} s", flush=True)


def time_paper_step(method: TENG, cfg: RunConfig, theta, key) -> tuple[dict, dict]:
    """Time a paper-size step (512², 1536/1024), print it, return its step row and its iteration row."""
    o = cfg.method.options
    print("\n## Paper-size step: grid 512², subsample 1536/1024, "
          f"TENG-{o.integrator} {o.iters}+{o.iters_later}, {o.solver}")
    step = step_at(method, cfg, 512, o.solver, 1536, 1024)
    t0 = time.perf_counter()
    fn = timing.compiled_step(step, theta, key)
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, record = jax.block_until_ready(fn(theta, key))
    step_s = time.perf_counter() - t0
    loss = float(record.metrics["step_loss"])
    timings = timing.time_iterations(step, cfg.equation.quadrature(512), theta, key, 1024, (o.solver,),
                                         repeats=1)[0]
    print_table([row(512, timings)], COLUMNS)
    print(f"one step: {step_s:.1f} s (compile {compile_s:.1f} s), final loss {loss:.2e}; "
          f"projected {PAPER_STEPS} steps (heat, T=4, Δt=0.005): {PAPER_STEPS * step_s / 3600:.1f} h")
    return {"variant": "default", "grid": "512²", "step_s": step_s, "final_loss": loss}, row(512, timings)


def time_sharded_paper_step(devices: str, method: TENG, cfg: RunConfig, theta, key) -> dict:
    """Time the paper-size step (512², 1536/1024) with ``devices`` (``all`` or N: its points split over
    the local devices, :mod:`teng_eq.fit.mesh`); print it, return its step row."""
    value = devices if devices == "all" else int(devices)
    sharded = dataclasses.replace(cfg, devices=value)
    sharded.validate()
    o = cfg.method.options
    step = step_at(method, sharded, 512, o.solver, 1536, 1024)
    mesh = step.solver.mesh
    count = 1 if mesh is None else mesh.size
    print(f"\n## Paper-size step, devices={devices} ({count} {jax.local_devices()[0].platform} "
          f"device(s)): grid 512², subsample 1536/1024, TENG-{o.integrator} {o.iters}+{o.iters_later}, "
          f"{o.solver}")
    theta = theta if mesh is None else mesh.replicated(theta)
    t0 = time.perf_counter()
    fn = timing.compiled_step(step, theta, key)
    compile_s = time.perf_counter() - t0
    step_s = timing.median_seconds(fn, theta, key, repeats=3)
    loss = float(fn(theta, key)[1].metrics["step_loss"])
    print(f"one step: {step_s:.2f} s (median of 3, compile {compile_s:.1f} s) on {count} device(s), final "
          f"loss {loss:.2e}; projected {PAPER_STEPS} steps: {PAPER_STEPS * step_s / 3600:.2f} h", flush=True)
    return {"variant": f"devices={devices} ({count})", "grid": "512²", "step_s": step_s, "final_loss": loss}


def time_cube_steps(args: argparse.Namespace, key) -> list[dict]:
    """Time a whole step of heat_cube in each of ``--cube-dims``' dimensions; print and return the rows."""
    cube_rows = []
    print("\n## Whole step on the d-cube (heat_cube at its preset sizes, points moved each step)")
    for dim in args.cube_dims:
        c = compose_config(["equation=heat_cube", f"equation.dim={dim}", *SHORT_FIT, *args.overrides])
        co = c.method.options
        m = build_method(c, cache_dir=args.cache_dir)
        fn = timing.compiled_step(step_at(m, c, co.grid, co.solver, co.subsample_first, co.subsample),
                                      m.theta0, key)
        cube_rows.append({"d": dim, "parameters": m.theta0.size, "N": co.grid,
                          "step_s": timing.median_seconds(fn, m.theta0, key, repeats=args.repeats)})
        print_table(cube_rows[-1:], ["d", "parameters", "N", "step_s"], header=len(cube_rows) == 1)
    return cube_rows


def time_systems(args: argparse.Namespace, cfg: RunConfig, key) -> list[dict]:
    """Time an iteration and a step of the wave system against heat's; print and return the two rows."""
    o = cfg.method.options
    system_rows = []
    print(f"\n## A system against a scalar: TENG-{o.integrator} on {o.grid}², subsample "
          f"{o.subsample_first}/{o.subsample}, {o.solver}; rows = points × components")
    for choice in ("equation=heat", "equation=wave"):
        c = compose_config([choice, f"grid={o.grid}", "dt=0.01", *SHORT_FIT, *args.overrides])
        m = build_method(c, cache_dir=args.cache_dir)
        step = step_at(m, c, o.grid, o.solver, o.subsample_first, o.subsample)
        it = timing.time_iterations(step, c.equation.quadrature(o.grid), m.theta0, key, o.subsample,
                                        (o.solver,), repeats=args.repeats)[0]
        fn = timing.compiled_step(step, m.theta0, key)
        system_rows.append({"equation": c.equation.name, "components": c.equation.outputs,
                            "parameters": m.theta0.size, "rows": it.grid_points,
                            "operator_ms": it.operator_ms, "jacobian_ms": it.jacobian_ms,
                            "solve_ms": it.solve_ms, "iteration_ms": it.iteration_ms,
                            "step_s": timing.median_seconds(fn, m.theta0, key, repeats=args.repeats)})
    columns = ["equation", "components", "parameters", "rows", "operator_ms", "jacobian_ms", "solve_ms",
               "iteration_ms", "step_s"]
    print_table(system_rows, columns)
    scalar, system = system_rows
    print(f"wave / heat: iteration {system['iteration_ms'] / scalar['iteration_ms']:.2f}x, solve "
          f"{system['solve_ms'] / scalar['solve_ms']:.2f}x, step {system['step_s'] / scalar['step_s']:.2f}x",
          flush=True)
    return system_rows


def log_to_mlflow(info: dict[str, str], cmp, d: float, n: float, total: float, rows: list[dict],
                  step_rows: list[dict], cube_rows: list[dict], system_rows: list[dict]) -> None:
    """Log the machine, the step times and the tables as an MLflow run of the experiment ``bench``."""
    with tracked_run(default_tracking_uri(ROOT), "bench", artifact_root=ROOT / "mlruns",
                     run_name="bench", tags={"kind": "benchmark"}) as run:
        run.params({**info, "argv": " ".join(sys.argv[1:])})
        for key, value in (("naive_over_default", cmp.ratio), ("default_step_s", d), ("naive_step_s", n),
                           ("bench_total_s", total)):
            run.metric(key, value)
        for r in rows:
            tag = f"g{r['grid'].rstrip('²')}_n{r['n']}_{r['solver'].split()[0]}"
            for key in ("iteration_ms", "solve_ms", "iter_over_solve"):
                run.metric(f"{key}.{tag}", r[key])
        for r in cube_rows:
            run.metric(f"cube_step_s.d{r['d']}", r["step_s"])
        for r in system_rows:
            run.metric(f"system_step_s.{r['equation']}", r["step_s"])
        with tempfile.TemporaryDirectory() as tmp:
            for name, table, cols in (("iterations.csv", rows, COLUMNS),
                                      ("steps.csv", step_rows, ["variant", "grid", "step_s", "final_loss"])):
                with open(Path(tmp) / name, "w", newline="") as fh:
                    w = csv.DictWriter(fh, fieldnames=cols)
                    w.writeheader()
                    w.writerows({c: r.get(c) for c in cols} for r in table)
            run.artifact(Path(tmp), "bench")


def main(argv=None) -> int:
    """Run the benchmarks that ``argv`` asks for, print their tables (and log them); return 0."""
    args = parse_args(argv)
    np.set_printoptions(precision=3)

    start = time.perf_counter()
    info = machine()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()), flush=True)
    if args.vs_authors is not None:
        folder = args.vs_authors.resolve()
        authors.compare(args.cases, folder, args.authors_python or authors.default_python(folder),
                        args.overrides, args.cache_dir)
        return 0
    cfg = compose_config(args.overrides)
    method = build_method(cfg, cache_dir=args.cache_dir, log=lambda m: print(m, flush=True))
    theta, key = method.theta0, jax.random.PRNGKey(0)

    step, cmp, d, n, step_rows = time_default_step(method, cfg, theta, key, args.naive_rounds)
    time_estimates(method, cfg, step, theta, key, d, args.repeats)

    rows: list[dict] = []
    if not args.skip_table:
        rows = time_iteration_table(args, method, cfg, theta, key)
        time_larger_steps(args.grids, method, cfg, theta, key, step_rows)

    if args.paper:
        paper_step, paper_iteration = time_paper_step(method, cfg, theta, key)
        step_rows.append(paper_step)
        rows.append(paper_iteration)
    if args.devices is not None:
        step_rows.append(time_sharded_paper_step(args.devices, method, cfg, theta, key))

    cube_rows = time_cube_steps(args, key) if args.cube_dims else []
    system_rows = time_systems(args, cfg, key) if args.systems else []

    total = time.perf_counter() - start
    print(f"\nbench total: {total:.0f} s (load average now {os.getloadavg()[0]:.2f})")

    if args.mlflow:
        log_to_mlflow(info, cmp, d, n, total, rows, step_rows, cube_rows, system_rows)
        print("logged to MLflow experiment 'bench'")
    return 0
