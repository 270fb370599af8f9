"""README's two commands are the ones that are run: CI runs its test command
verbatim (.ci/run), in a new virtual environment."""

from __future__ import annotations

import re

from helpers.configs import ROOT

MAIN_JOB = "pip install -e . && python pipeline/sweep.py -m dt=0.0016,0.005,0.02"
TESTS = 'pip install -e ".[dev]" && python -m pytest'


def test_readme_holds_the_two_commands_a_newcomer_needs():
    readme = (ROOT / "README.md").read_text()
    assert MAIN_JOB in readme.splitlines() and TESTS in readme.splitlines()


def test_ci_runs_readmes_test_command_in_a_new_environment():
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = re.findall(r"^TEST_COMMAND='(.*)'$", ci, flags=re.M)
    assert command == TESTS
    assert re.search(r"^python3 -m venv ", ci, flags=re.M) and "--system-site-packages" not in ci
    assert re.search(r'^eval "\$TEST_COMMAND"$', ci, flags=re.M)


def test_ci_then_runs_the_slow_cases_but_the_manual_ones():
    """After README's command, CI runs every `slow` test that fits its time; README names
    the `manual` ones (too long for CI) as checks by hand."""
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = re.findall(r"^SLOW_COMMAND=\"(.*)\"$", ci, flags=re.M)
    assert command == "python -m pytest -m 'slow and not manual'"
    assert ci.index('eval "$TEST_COMMAND"') < ci.index('eval "$SLOW_COMMAND"')
    assert "python -m pytest -m 'slow and manual'" in (ROOT / "README.md").read_text()
