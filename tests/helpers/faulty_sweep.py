"""pipeline/sweep.py on a disk that fills up at a chosen write, for test_faults
(``python tests/helpers/faulty_sweep.py <sweep.py's arguments>``).

``FAULTY_WRITE=checkpoint:<n>``: the n-th checkpoint file this process writes gets
half its bytes, then ``OSError(ENOSPC)`` — at the write itself
(:func:`teng_eq.cache.files.write_atomic`'s), as a full disk would strike.
``FAULTY_WRITE=artifact:<n>``: the n-th artifact MLflow copies into the store
raises ``OSError(ENOSPC)``. Everything else is the real script."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Run as a script, this folder would be sys.path[0], its modules (configs, processes, …)
# importable under top-level names; the real script's folder takes its place, as when
# pipeline/sweep.py is run itself.
sys.path[0] = str(ROOT / "pipeline")

import errno  # noqa: E402
import io  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402

import mlflow.tracking  # noqa: E402

import teng_eq.cache.files  # noqa: E402

KIND, NTH = os.environ["FAULTY_WRITE"].split(":")
count = 0


def _full(path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _nth() -> bool:
    global count
    count += 1
    return count == int(NTH)


if KIND == "checkpoint":
    write_atomic = teng_eq.cache.files.write_atomic

    def faulty(path, write):
        if Path(path).parent.parent.name != "checkpoints" or not _nth():
            return write_atomic(path, write)

        def half(f):
            buffer = io.BytesIO()
            write(buffer)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            raise _full(path)

        return write_atomic(path, half)

    teng_eq.cache.files.write_atomic = faulty
elif KIND == "artifact":
    for name in ("log_artifact", "log_artifacts"):
        original = getattr(mlflow.tracking.MlflowClient, name)

        def faulty(self, run_id, local_path, *args, _original=original, **kwargs):
            if _nth():
                raise _full(local_path)
            return _original(self, run_id, local_path, *args, **kwargs)

        setattr(mlflow.tracking.MlflowClient, name, faulty)
else:
    raise SystemExit(f"FAULTY_WRITE={os.environ['FAULTY_WRITE']}: checkpoint:<n> or artifact:<n>")

sys.argv[0] = str(ROOT / "pipeline" / "sweep.py")
runpy.run_path(sys.argv[0], run_name="__main__")
