"""The front door and the documentation site.

README fits on a screen or two, with the first command early; the site under ``docs/``
builds with ``mkdocs build --strict``, where a broken link or anchor, a docstring role
that names nothing, or a module that no layer of the importlinter contract names (and
that therefore has no API page) is an error; and the check does fail on each of those.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = "pip install -e . && python pipeline/sweep.py -m dt=0.0016,0.005,0.02"


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the project at ``root`` into ``site``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)


def modules(src: Path) -> list[str]:
    """Every module and package of the library, as dotted paths."""
    return sorted(".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
                  for p in (src / "teng_eq").rglob("*.py"))


def test_readme_fits_on_a_screen_with_its_first_command_early():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines, more than 200"
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    first_command = lines[fences[0] + 1]
    assert first_command == MAIN_JOB and fences[0] + 1 < 30, (fences[0] + 2, first_command)


def test_the_site_builds_strict_with_a_page_for_every_module(tmp_path):
    proc = build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    api = "".join(page.read_text() for page in (tmp_path / "site" / "api").rglob("*.html"))
    undocumented = [m for m in modules(ROOT / "src") if f'id="{m}"' not in api]
    assert not undocumented, f"no API entry for {undocumented}"


@pytest.fixture
def project(tmp_path) -> Path:
    """A copy of what the build reads: mkdocs.yml, docs/, src/, pyproject.toml."""
    for folder in ("docs", "src"):
        shutil.copytree(ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for file in ("mkdocs.yml", "pyproject.toml"):
        shutil.copy(ROOT / file, tmp_path)
    return tmp_path


def test_the_strict_build_fails_on_a_broken_link_a_stale_reference_and_a_module_without_a_page(project):
    guide = project / "docs" / "guides" / "analysis.md"
    guide.write_text(guide.read_text() + "\nSee [the estimate](error-control.md#no-such-section).\n")
    grid = project / "src" / "teng_eq" / "domains" / "quadrature.py"
    grid.write_text(grid.read_text().replace('"""', '"""See :func:`no_such_function`. ', 1))
    (project / "src" / "teng_eq" / "newcomer.py").write_text('"""A module no layer names."""\n')
    proc = build(project, project / "site")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert re.search(r"error-control\.md.*does not contain an anchor '#no-such-section'", out), out[-3000:]
    assert "teng_eq.domains.quadrature: :func:`no_such_function` names nothing in teng_eq" in out, out[-3000:]
    assert "teng_eq.newcomer is in no layer of the importlinter contract" in out, out[-3000:]
