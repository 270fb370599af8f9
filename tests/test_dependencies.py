"""Every third-party import of ``src/`` and ``pipeline/`` is declared in
pyproject.toml, and nothing declared goes unused: ``deptry`` (missing DEP001,
unused DEP002, transitive-only DEP003), configured in pyproject.toml. An
undeclared import works wherever someone installed the package by hand and fails
on a fresh machine (diffrax did), which is what this check catches first."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.configs import ROOT


def deptry(root: Path) -> subprocess.CompletedProcess:
    """``deptry src pipeline benchmarks`` in the project at ``root``, against the running environment."""
    return subprocess.run([sys.executable, "-m", "deptry", "src", "pipeline", "benchmarks", "--no-ansi"],
                          cwd=root, capture_output=True, text=True, timeout=300)


def check_dependencies(root: Path) -> None:
    """Raise ``AssertionError`` with deptry's findings unless it finds none."""
    proc = deptry(root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_every_import_is_declared_and_every_dependency_used():
    check_dependencies(ROOT)


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of what the check reads: the code and pyproject.toml."""
    for folder in ("src", "pipeline", "benchmarks"):
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


@pytest.mark.parametrize("line, rule", [
    ("import yaml", "DEP003"),  # installed (hydra needs PyYAML), not declared: as diffrax was
    ("import surely_not_a_package_here", "DEP001"),  # not installed at all
])
def test_the_check_fails_on_a_planted_undeclared_import(project, line, rule):
    module = project / "src" / "teng_eq" / "domains" / "quadrature.py"
    module.write_text(module.read_text() + f"\n{line}\n")
    with pytest.raises(AssertionError) as err:
        check_dependencies(project)
    message = str(err.value)
    assert f"{rule} '{line.split()[1]}'" in message and "teng_eq/domains/quadrature.py" in message


def test_the_check_fails_on_a_declared_dependency_nothing_imports(project):
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"tqdm>=4.60",', '"tqdm>=4.60", "requests>=2",'))
    with pytest.raises(AssertionError, match="DEP002 'requests' defined as a dependency but not used"):
        check_dependencies(project)
