"""The architecture holds: the import-linter contracts of pyproject.toml (layers,
every module in one; only tracking/ imports MLflow; only the preflight imports
Hydra; the sweep callback and analyze.py never load JAX), no module dodges
them by importing the library inside a function, the package's top level holds its
public entry and leaves alone, and ruff passes with the project's line length."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.configs import ROOT

#: The project's code: the library, the entry scripts, the benchmarks' timings.
CODE = ("src", "pipeline", "benchmarks")


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_no_library_import_inside_a_function():
    """An import of the library inside a function hides a dependency from the
    contracts (the way to dodge a cycle); lazy imports of heavy third-party
    packages (MLflow in tracking/) are another matter."""
    hidden = []
    for path in sorted((ROOT / "src" / "teng_eq").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(fn):
                names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                         else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                hidden += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names
                           if n == "teng_eq" or n.startswith("teng_eq.")]
    assert not hidden, hidden


def test_importing_the_package_loads_nothing_heavy():
    """``import teng_eq`` and the sweep callback's and analyze.py's modules run without
    JAX; the package still switches float64 on for whoever loads JAX after it."""
    code = ("import sys, teng_eq, teng_eq.tracking, teng_eq.analysis.report; "
            "assert 'jax' not in sys.modules, 'jax'; import jax.numpy as jnp; "
            "assert jnp.zeros(1).dtype == jnp.float64")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_top_level_holds_the_entry_and_the_leaves_alone():
    """Every module of the library lives in a folder named for its responsibility but the
    Python API (``api``), what can go wrong (``errors``) and the process's signal state
    (``interrupts``, read by the sweep callback below the jobs that set it)."""
    top = {p.stem for p in (ROOT / "src" / "teng_eq").glob("*.py")}
    assert top == {"__init__", "api", "errors", "interrupts"}, top


def test_ruff_passes():
    """``ruff check`` on the library, the entry scripts and the tests, with the line length
    of pyproject.toml (``[tool.ruff]``)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    proc = subprocess.run([ruff, "check", *CODE, "tests"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _functions():
    for path in sorted(p for folder in CODE for p in (ROOT / folder).rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            yield path.relative_to(ROOT), fn


def test_no_function_is_long_and_none_hides_state():
    """No function of the library or an entry script over 60 lines (one that long does
    several things), and no
    ``nonlocal``: traced code that changes a variable of the function around it hides state."""
    long = [f"{path}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
            for path, fn in _functions() if fn.end_lineno - fn.lineno + 1 > 60]
    hidden = [f"{path}:{node.lineno}" for path, fn in _functions() for node in ast.walk(fn)
              if isinstance(node, ast.Nonlocal)]
    assert not long and not hidden, (long, hidden)


def test_the_run_state_is_made_in_the_run_loop_alone():
    """The run loop's state is made (a new one per accepted step) in ``run/loop.py`` only:
    one module decides how a step is accepted."""
    makers = {str(path) for path, fn in _functions() for node in ast.walk(fn)
              if isinstance(node, ast.Call)
              and getattr(node.func, "id", getattr(node.func, "attr", "")) == "RunState"}
    assert makers == {"src/teng_eq/run/loop.py"}, makers
