"""Run jobs from the Hydra configs in conf/, one MLflow run per job.

    python pipeline/sweep.py                                   # one run, defaults
    python pipeline/sweep.py -m dt=0.0016,0.005,0.02           # a sweep
    python pipeline/sweep.py experiment=paper_heat2d           # the paper's setting
    python pipeline/sweep.py --config-dir my_conf equation=mine    # a user's own equation

Every job of the command line is checked before Hydra starts (teng_eq.jobs.preflight);
each job is teng_eq.jobs.job.main.
"""

import os

# One OpenBLAS thread (jax's CPU LAPACK): on a small machine its own threads fight
# XLA's (docs/performance.md). Must be set before numpy/jax load; an explicit value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from teng_eq.config.options import mark_launch_folder
from teng_eq.errors import ConfigError
from teng_eq.jobs.job import JobContext
from teng_eq.jobs.job import main as job
from teng_eq.jobs.preflight import preflight

ROOT = Path(__file__).resolve().parents[1]


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    return job(cfg, JobContext(root=ROOT, overrides=tuple(hc.overrides.task),
                               job_num=hc.job.num if hc.mode == RunMode.MULTIRUN else None,
                               output_dir=Path(hc.runtime.output_dir)))


if __name__ == "__main__":
    # A user's module next to where the command runs (equation.impl=my_pdes:Mine) is
    # importable here and in the jobs this starts, as under `python -m`.
    mark_launch_folder()
    try:
        preflight(sys.argv[1:], ROOT / "conf")
    except ConfigError as err:
        sys.exit(f"error: {err}")
    main()
