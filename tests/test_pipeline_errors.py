"""Bad configs stop the script before any compute, with one line naming the key,
and leave no run behind in MLflow. Every check is in test_config.py (through
the same entry point, in-process); these run the script for real on a few."""

import subprocess
import sys

import pytest
from helpers.processes import SWEEP, job_env, run_script

pytestmark = pytest.mark.e2e  # pipeline/sweep.py in a subprocess


def _sweep(tmp_path, *overrides, flags=()):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return run_script("sweep.py", *flags, f"tracking_uri={uri}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                      *overrides, cwd=tmp_path, env=job_env(TENG_EQ_CACHE=str(tmp_path / "cache")))


@pytest.mark.parametrize(
    "flags, override, needle",
    [
        ((), "foo=1", "'foo'"),  # Hydra's own error spans many lines
        ((), "subsample=10000", "subsample=10000"),
        (("-m",), "dt=0.02,-1", "dt=-1.0"),  # the second job of a sweep: the first never starts
        # Found by writing a file there, whoever runs it (as root os.access passes /proc).
        ((), "cache_dir=/proc/nope", "cache_dir='/proc/nope': cannot write in /proc/nope"),
        # Sizes the machine cannot hold (once: a traceback after 29 s, "Unable to allocate 74.5 GiB").
        ((), "eval_grid=100000", "eval_grid=100000: the error evaluation on 10,000,000,000 points needs"),
        ((), "t_final=1e9", "t_final=1000000000.0: the per-step record of 200,000,000,000 steps"),
    ],
)
def test_bad_config_one_line_no_run(tmp_path, flags, override, needle):
    proc = _sweep(tmp_path, override, flags=flags)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: invalid config:") and needle in lines[0], proc.stderr
    assert not (tmp_path / "cache").exists(), "compute started before validation"
    assert not (tmp_path / "mlflow.db").exists(), "an MLflow run (or store) was made for a bad config"


#: Runs pipeline/sweep.py as if ``diffrax`` were not installed: its import fails as a
#: missing package's does (ModuleNotFoundError, "No module named 'diffrax'").
_WITHOUT_DIFFRAX = """
import runpy, sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "diffrax":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_missing_dependency_is_named_with_what_to_do(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_DIFFRAX, str(SWEEP), "-m", "dt=0.005,0.02",
         f"tracking_uri={uri}", f"cache_dir={tmp_path / 'cache'}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=job_env(), check=False)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode != 0 and lines == [
        "error: invalid config: method.impl='teng_eq.methods.teng:TENG': cannot import it: No module named "
        "'diffrax' (pip install -e . installs the declared dependencies)"], proc.stderr
    assert not (tmp_path / "cache").exists() and not (tmp_path / "mlflow.db").exists()
