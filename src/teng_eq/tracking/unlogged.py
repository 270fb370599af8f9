"""What a run could not log because its store never came back, kept beside its
checkpoint, and the command that logs it later.

:func:`write_unlogged` writes ``<folder>/run.json`` — the store, the run id, the
status the run ended with, and every param, tag and metric point it had not
written (``[key, value, timestamp ms, step]``, the timestamp as first logged) —
and ``<folder>/artifacts/`` (files it could not upload, under their artifact
folders). ``python -m teng_eq.tracking.unlogged <folder>/run.json`` logs them
into that run once the store answers (:func:`import_unlogged`): metric steps the
run already holds are not written again, the status is set last, and the folder
(and, for a FINISHED run, its checkpoint) is removed.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import sys
from pathlib import Path

from teng_eq.cache.files import write_atomic
from teng_eq.tracking.store import open_client

#: Bumped when the layout of ``run.json`` changes.
FORMAT = "teng-eq-unlogged-v1"


def import_command(record: Path) -> str:
    """The shell command that imports ``record``."""
    return f"{shlex.quote(sys.executable)} -m teng_eq.tracking.unlogged {shlex.quote(str(record))}"


def write_unlogged(folder: Path, *, uri: str, run_id: str, status: str, batches: list[tuple[str, list]],
                   artifacts: list[tuple[str, str | None]]) -> Path:
    """Write ``folder/run.json`` from the writer's unwritten ``batches`` (MLflow
    entities) and spooled ``artifacts`` (paths relative to ``folder``); its path.
    Several writes for one run (a second attempt that also lost its store) merge."""
    record = Path(folder) / "run.json"
    old = json.loads(record.read_text()) if record.is_file() else {}
    content = {"format": FORMAT, "tracking_uri": uri, "run_id": run_id, "status": status,
               "params": dict(old.get("params", {})), "tags": dict(old.get("tags", {})),
               "metrics": list(old.get("metrics", [])), "artifacts": list(old.get("artifacts", []))}
    for kind, batch in batches:
        for item in batch:
            if kind == "metrics":
                content["metrics"].append([item.key, item.value, item.timestamp, item.step])
            else:
                content[kind][item.key] = item.value
    content["artifacts"] += [[path, folder_] for path, folder_ in artifacts
                             if [path, folder_] not in content["artifacts"]]
    write_atomic(record, lambda f: f.write(json.dumps(content, indent=1).encode()))
    return record


def import_unlogged(record: Path, tracking_uri: str | None = None) -> str:
    """Log what ``record`` (a ``run.json``) holds into its run, in the store it
    names (or ``tracking_uri``); a one-line summary."""
    from mlflow.entities import Metric, Param, RunTag

    record = Path(record)
    content = json.loads(record.read_text())
    if content.get("format") != FORMAT:
        raise ValueError(f"{record}: not a {FORMAT} record")
    client = open_client(tracking_uri or content["tracking_uri"])
    run_id = content["run_id"]
    run = client.get_run(run_id)
    have = {key: {m.step for m in client.get_metric_history(run_id, key)} for key in run.data.metrics}
    metrics = [Metric(k, v, t, s) for k, v, t, s in content["metrics"] if s not in have.get(k, set())]
    metrics = list({(m.key, m.step): m for m in metrics}.values())  # a point kept twice is logged once
    params = [Param(k, v) for k, v in content["params"].items() if k not in run.data.params]
    tags = [RunTag(k, v) for k, v in content["tags"].items()]
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i : i + 1000])
    for i in range(0, len(params), 100):
        client.log_batch(run_id, params=params[i : i + 100])
    if tags:
        client.log_batch(run_id, tags=tags)
    for path, folder in content["artifacts"]:
        local = record.parent / path
        if local.is_dir():
            client.log_artifacts(run_id, str(local), folder)
        else:
            client.log_artifact(run_id, str(local), folder)
    client.set_terminated(run_id, status=content["status"])
    shutil.rmtree(record.parent)
    checkpoint = record.parent.with_suffix(".npz")
    if content["status"] == "FINISHED":
        checkpoint.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            checkpoint.parent.rmdir()  # once empty, as CheckpointStore.clear leaves it
    return (f"run {run_id}: logged {len(metrics)} metric points, {len(params)} params, {len(tags)} tags, "
            f"{len(content['artifacts'])} artifacts; ended {content['status']}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m teng_eq.tracking.unlogged <run.json> [tracking_uri]", file=sys.stderr)
        return 2
    print(import_unlogged(Path(args[0]), *args[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
