"""``pipeline/bench.py --vs-authors DIR``: the authors' code and ours on the same problem,
configuration and horizon, one after the other in one invocation (so under one load).

``DIR`` is a checkout of the authors' code (https://github.com/pde-sim/teng) that the user
fetched; it is never vendored here (its licence is CC BY-NC-SA 4.0) and nothing of it is
imported: it runs as its own program (``teng.py``) in its own Python (``--authors-python``,
by default ``DIR/.venv/bin/python``; it was written for jax 0.4.23 and flax 0.7.5), and this
module reads the files it writes. Each side is timed by its own clock, stepping only: the
authors' ``training_time`` (the per-step sums of ``teng.py``) and our ``runtime_s``; neither
counts θ₀ (theirs is the checkout's ``init_model_state.pickle``, ours the cache's fit) nor the
error evaluations. Their first step also compiles, so their stepping time here is the sum of
their steps with the first one replaced by the median of the others (the figure with it is
printed too, beside ours with our ``compile_s``). Both errors are relative L² at the horizon
on the authors' own 512² grid against the authors' own reference data (the spectral
solutions in ``DIR``); ours against our own reference is printed beside it.

The authors' side runs at our CPU configuration: 4,096 trapezoid points (64²), 512 / 384
parameters drawn, 5 iterations per stage (7 in the first stage of a step, as theirs does),
Heun, the paper's Δt. Ours runs the route of :data:`CASES` (the fastest we know to reach
their error; overrides after ``--`` are appended to every route).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import statistics
import subprocess
from decimal import Decimal
from pathlib import Path

import numpy as np

#: The authors' program, and their reference folder per equation (spectral solutions, one file a time).
PROGRAM = "teng.py"
REFERENCE_FOLDER = {"heat": "heat_equation_2d_spectral_fourier",
                    "allen_cahn": "allen_cahn_equation_2d_spectral_fourier",
                    "burgers": "burgers_equation_2d_spectral_fourier"}
#: Points per axis of the authors' error evaluation ([0, 2π)², endpoint excluded).
EVAL_POINTS = 512
#: Our CPU configuration in the authors' options (their first stage runs ``nb_iters_per_step`` + 2).
AUTHORS_OPTIONS = ("--nb_samples", "4096", "--policy_grad_nb_params", "512", "--policy_grad2_nb_params",
                   "384", "--nb_iters_per_step", "5", "--integrator", "heun")


@dataclasses.dataclass(frozen=True)
class Case:
    """One comparison: ``equation`` (ours and theirs share the name) at diffusivity ``nu`` to
    ``horizon``; the authors' side at Δt ``dt``, ours by the overrides ``route``."""

    equation: str
    nu: str
    horizon: str
    dt: str
    route: tuple[str, ...]

    @property
    def steps(self) -> int:
        return int(Decimal(self.horizon) / Decimal(self.dt))


#: The comparisons of issue "time to accuracy": the paper's equations at their horizons.
CASES = {
    "heat": Case("heat", "0.1", "0.2", "0.005",
                 ("method=teng_bs3", "dt=0.02", "iters=6", "iters_later=4", "subsample_first=384",
                  "subsample=128")),
    "allen_cahn": Case("allen_cahn", "0.005", "0.5", "0.005",
                       ("method=teng_rk4", "dt=auto", "controller.rtol=1e-5")),
    "burgers_0.05": Case("burgers", "0.01", "0.05", "0.001", ("method=teng_heun", "dt=0.001")),
    "burgers_0.25": Case("burgers", "0.01", "0.25", "0.001", ("method=teng_heun", "dt=0.001")),
}


@dataclasses.dataclass(frozen=True)
class Side:
    """One side's numbers: ``steps_s`` stepping time (the authors': first step at the median),
    ``with_compile_s`` the same with the compilation, ``error`` at the horizon on the
    authors' grid against their data, ``steps`` taken."""

    steps_s: float
    with_compile_s: float
    error: float
    steps: int


def reference_on_grid(coefficients: np.ndarray, m: int = EVAL_POINTS) -> np.ndarray:
    """The field on the m × m grid of [0, 2π)² whose centred Fourier coefficients (``np.fft.fftshift``
    order, odd size M ≤ m, forward-normalised: u = Σ c_k e^{ik·x}) are ``coefficients``."""
    size = coefficients.shape[0]
    if coefficients.shape != (size, size) or size % 2 == 0 or size > m:
        raise ValueError(f"reference coefficients must be M × M with M odd and ≤ {m}, "
                         f"not {coefficients.shape}")
    half = size // 2
    padded = np.zeros((m, m), dtype=complex)
    k = np.r_[0:half + 1, m - half:m]  # the modes 0…half, −half…−1 in FFT order
    padded[np.ix_(k, k)] = np.fft.ifftshift(coefficients)
    return np.fft.ifft2(padded, norm="forward").real


def eval_points(m: int = EVAL_POINTS) -> np.ndarray:
    """The authors' evaluation points, (m², 2), first coordinate slowest."""
    axis = np.linspace(0.0, 2 * np.pi, m, endpoint=False)
    return np.stack(np.meshgrid(axis, axis, indexing="ij"), axis=-1).reshape(-1, 2)


def relative_error(values: np.ndarray, reference: np.ndarray) -> float:
    return float(np.linalg.norm(values.ravel() - reference.ravel()) / np.linalg.norm(reference))


#: One step's line of the authors' ``log.txt``: its index, time, (abs, rel) error, cumulative stepping time.
STEP_LINE = re.compile(r"step=(\d+), T=Decimal\('([^']+)'\), err=\(([^,]+), ([^)]+)\)"
                       r".*training_time=([-+.eE0-9]+)")


def parse_authors_log(text: str) -> tuple[list[float], float, Decimal]:
    """The authors' per-step stepping seconds, the last step's relative error and its time, from their log."""
    rows = [m.groups() for m in STEP_LINE.finditer(text)]
    if not rows:
        raise ValueError("the authors' log holds no step line (step=…, T=…, err=…, training_time=…)")
    cumulative = [float(r[4]) for r in rows]
    per_step = [b - a for a, b in zip([0.0, *cumulative[:-1]], cumulative)]
    return per_step, float(rows[-1][3]), Decimal(rows[-1][1])


def stepping_seconds(per_step: list[float]) -> float:
    """The steps' sum with the first one (which compiles) at the median of the others."""
    if len(per_step) < 2:
        return sum(per_step)
    return statistics.median(per_step[1:]) + sum(per_step[1:])


def check_checkout(folder: Path, python: Path) -> None:
    """One line (``SystemExit``) where ``folder`` is not the authors' checkout or ``python`` cannot run it."""
    needed = (PROGRAM, "init_model_state.pickle", *REFERENCE_FOLDER.values())
    missing = [p for p in needed if not (folder / p).exists()]
    if missing:
        raise SystemExit(f"error: --vs-authors {folder}: not a checkout of github.com/pde-sim/teng "
                         f"(no {', '.join(missing)})")
    probe = subprocess.run([str(python), "-c", "import jax, flax, numpy"], capture_output=True, text=True)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["it does not run"])[-1]
        raise SystemExit(f"error: --authors-python {python}: cannot import jax, flax and numpy ({last}); "
                         "see docs/performance.md, 'Against the authors' code'")


def run_authors(case: Case, folder: Path, python: Path) -> Side:
    """``teng.py`` on ``case`` at our CPU configuration, in ``folder``; its numbers from its log."""
    name = f"teng-eq-bench-{os.getpid()}-{case.equation}-{case.horizon}"
    out = folder / "results" / name  # teng.py writes under ./results/
    command = [str(python), PROGRAM, "--equation", case.equation, "--D", case.nu, "--dt", case.dt,
               "--nb_steps", str(case.steps), *AUTHORS_OPTIONS, "--save_dir", name]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "1")}
    try:
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise SystemExit(f"error: the authors' code failed on {case.equation} "
                             f"(rc {done.returncode}):\n{tail}")
        per_step, error, t = parse_authors_log((out / "log.txt").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if t != Decimal(case.horizon):
        raise SystemExit(f"error: the authors' log ends at t = {t}, not at the horizon {case.horizon}")
    return Side(stepping_seconds(per_step), sum(per_step), error, len(per_step))


def run_ours(case: Case, folder: Path, overrides: list[str], cache_dir: str | None) -> tuple[Side, float]:
    """Our route on ``case``; its numbers, and its error at the horizon against our own reference."""
    from teng_eq.api import run

    result = run(case.equation, f"equation.nu={case.nu}", f"t_final={case.horizon}", "progress=false",
                 *case.route, *overrides, cache_dir=cache_dir)
    data = np.load(folder / REFERENCE_FOLDER[case.equation] / f"T_{Decimal(case.horizon).normalize()}.npy")
    error = relative_error(result.field(eval_points()), reference_on_grid(data))
    ours_vs_ours = float(result.rel_l2[-1]) if result.rel_l2 is not None else float("nan")
    side = Side(result.runtime_s, result.runtime_s + result.compile_s, error, len(result.times) - 1)
    return side, ours_vs_ours


COLUMNS = ("case", "their steps", "their s", "their s (+compile)", "their error", "our steps", "our s",
           "our s (+compile)", "our error", "ours vs our reference", "ratio", "reached")


def compare(cases: list[str], folder: Path, python: Path, overrides: list[str],
            cache_dir: str | None) -> list[dict]:
    """Each of ``cases``: the authors' side, then ours; print a row each, return the rows."""
    from benchmarks.steps import print_table

    check_checkout(folder, python)
    rows = []
    for i, name in enumerate(cases):
        case = CASES[name]
        theirs = run_authors(case, folder, python)
        ours, own = run_ours(case, folder, overrides, cache_dir)
        rows.append({"case": f"{name} (t = {case.horizon})", "their steps": theirs.steps,
                     "their s": theirs.steps_s, "their s (+compile)": theirs.with_compile_s,
                     "their error": theirs.error, "our steps": ours.steps, "our s": ours.steps_s,
                     "our s (+compile)": ours.with_compile_s, "our error": ours.error,
                     "ours vs our reference": own, "ratio": theirs.steps_s / ours.steps_s,
                     "reached": "yes" if ours.error <= theirs.error else "no"})
        print_table(rows[-1:], list(COLUMNS), header=i == 0)
    print(f"(route per case: benchmarks/authors.py CASES, plus {overrides or 'no overrides'}; "
          f"load average now {os.getloadavg()[0]:.2f})", flush=True)
    return rows


def default_python(folder: Path) -> Path:
    """The authors' Python where the performance guide installs it: the checkout's own venv."""
    return folder / ".venv" / "bin" / "python"
