"""Compare the runs of a sweep (or any selection) from MLflow: figures and a Table-1.

    python pipeline/analyze.py                                # the latest sweep
    python pipeline/analyze.py sweep=<parent run id>
    python pipeline/analyze.py experiments=[heat,burgers] "filter=\"params.iters = '7'\""
    python pipeline/analyze.py mlflow=false out=reports/mine

What it writes: teng_eq.analysis.report (and docs/guides/analysis.md).
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from teng_eq.analysis.report import analyze

ROOT = Path(__file__).resolve().parents[1]


@hydra.main(version_base="1.3", config_path="../conf", config_name="analyze")
def main(cfg: DictConfig) -> None:
    analyze(cfg, ROOT)


if __name__ == "__main__":
    main()
