"""Benchmark of TENG iterations and steps (a benchmark, not a test).

    python pipeline/bench.py                 # the table, ≤ 10 min on 2 cores
    python pipeline/bench.py --paper         # also a paper-size step (512², 1536/1024)
    python pipeline/bench.py --skip-table --paper --devices all   # … and the same step on every local device
    python pipeline/bench.py --mlflow        # also log the tables as an MLflow run
    python pipeline/bench.py --skip-table --cube-dims 4 6 8 10   # also a step on the d-cube, per d
    python pipeline/bench.py -- stopping=fixed damping=1e-6   # conf/ overrides
    python pipeline/bench.py --vs-authors ../teng --cases heat   # the authors' code, then ours, to t = 0.2

The configuration is conf/config.yaml composed by Hydra (with the overrides
given after ``--``), exactly as pipeline/sweep.py composes it. Every time is a
median over repeats after a JIT warm-up call. The network and θ₀ are that
config's (θ₀ fitted on its grid, from the cache; the network is the same
function on any grid). See docs/performance.md for the results.
"""

import os

# One OpenBLAS thread, as in pipeline/sweep.py (jax's CPU LAPACK runs on it); before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# The timings live beside tests/, in benchmarks/ (not the library's: nothing of src/ imports them).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.steps import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
