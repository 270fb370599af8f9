"""One writer of the load test (tests/test_many_writers.py), a process of its own that
loads MLflow's client only: ``python -m helpers.metric_writer <url> <run id> <writer>``
logs ``VALUES`` points of metric ``w<writer>`` (value = writer·10⁶ + step), ``BATCH`` per call."""

from __future__ import annotations

import sys

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

VALUES, BATCH = 500, 50


def write(url: str, run_id: str, writer: int) -> None:
    client = MlflowClient(url)
    for first in range(0, VALUES, BATCH):
        client.log_batch(run_id, metrics=[Metric(f"w{writer}", writer * 1e6 + step, 0, step)
                                          for step in range(first, first + BATCH)])


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], int(sys.argv[3]))
