"""The MLflow store: where it is, whether it answers, experiments, and which
RUNNING runs are still alive.

**A store that goes away** (a server restarting, a network blip, SQLite's
"database is locked" while another process writes): :func:`is_transient` tells
such failures from the others, and :func:`retrying` repeats a call through them
with exponential backoff until a time budget is spent (then
:class:`StoreUnavailable`). MLflow's own HTTP retries are shortened
(:func:`open_client`) so that this one loop, with its budget, decides.

A run records the process that writes it (tags ``host``, ``pid``, ``pid_start``)
and refreshes a ``heartbeat`` tag (Unix time) while it is open. A RUNNING run
is *stale* when that process is gone: on the same host, its pid is not alive
with the same start time (so a recycled pid does not count); on another host,
its heartbeat is older than :data:`STALE_AFTER_S`. :func:`reap_stale` ends such
runs KILLED, so that no run stays RUNNING after its process died.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import random
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from teng_eq.cache.files import file_lock, probe_folder

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

#: Seconds between heartbeats of an open run.
HEARTBEAT_S = 30.0
#: A run on another host whose heartbeat is older than this is stale.
STALE_AFTER_S = 10 * HEARTBEAT_S

#: Backoff between tries of a call to a store that does not answer: the first
#: wait, and the longest.
BACKOFF_S = (0.5, 30.0)

#: MLflow's own HTTP retries (urllib3's, inside one call), shortened: 7 retries
#: with a factor of 2 hold one call for minutes and leave no room for a budget.
_MLFLOW_HTTP = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}

_log = logging.getLogger(__name__)
T = TypeVar("T")


class StoreUnavailable(RuntimeError):
    """The store did not answer within the retry budget."""


#: URI schemes MLflow's tracking client accepts for a store.
_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql", "databricks", "file")


def default_tracking_uri(root: Path) -> str:
    """``sqlite:///<root>/mlflow.db``: what a plain ``mlflow ui`` in ``root`` opens."""
    return f"sqlite:///{Path(root).resolve() / 'mlflow.db'}"


def active_tracking_uri(root: Path) -> str:
    """The store a reader looks in when none is named: MLflow's own, where it is set
    (``mlflow.set_tracking_uri(…)`` in this process, else ``$MLFLOW_TRACKING_URI``), else
    :func:`default_tracking_uri` of ``root``."""
    import mlflow

    return mlflow.get_tracking_uri() if mlflow.is_tracking_uri_set() else default_tracking_uri(root)


def artifact_root_for(tracking_uri: str, root: Path) -> Path | None:
    """Where a new experiment keeps its artifacts: ``mlruns/`` beside a SQLite store's
    file (the default store ``<root>/mlflow.db``: ``<root>/mlruns``), ``<root>/mlruns``
    for another local store, ``None`` (the server's own artifact store) for a remote
    ``http(s)://`` one."""
    if tracking_uri.startswith(("http://", "https://")):
        return None
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri.removeprefix("sqlite:///")).parent / "mlruns"
    return Path(root) / "mlruns"


def check_store(tracking_uri: str) -> None:
    """Fail fast, before any compute, on a store that is malformed or cannot be
    reached: an unknown scheme, a ``sqlite:///`` file whose folder is missing or
    read-only, or a server that does not answer. ``ValueError`` naming ``tracking_uri``."""
    if not isinstance(tracking_uri, str) or not tracking_uri.strip():
        raise ValueError(f"tracking_uri={tracking_uri!r}: must be a non-empty URI")
    scheme = urllib.parse.urlsplit(tracking_uri).scheme.split("+")[0]
    if scheme not in _SCHEMES:
        raise ValueError(f"tracking_uri={tracking_uri}: not a store URI (scheme {scheme or 'missing'!r}; "
                         f"known: {', '.join(_SCHEMES)})")
    if scheme == "sqlite":
        if not tracking_uri.startswith("sqlite:///") or tracking_uri == "sqlite:///":
            raise ValueError(f"tracking_uri={tracking_uri}: a SQLite store is sqlite:///<path to a file>")
        path = Path(tracking_uri.removeprefix("sqlite:///"))
        folder = path.parent
        if not folder.is_dir():
            raise ValueError(f"tracking_uri={tracking_uri}: folder {folder} does not exist")
        if path.exists() and not path.is_file():
            raise ValueError(f"tracking_uri={tracking_uri}: {path} is not a file")
        why = probe_folder(folder)
        if why is not None:
            raise ValueError(f"tracking_uri={tracking_uri}: {why}")
    elif scheme in ("http", "https"):
        if not urllib.parse.urlsplit(tracking_uri).hostname:
            raise ValueError(f"tracking_uri={tracking_uri}: no host")
        try:
            with urllib.request.urlopen(tracking_uri.rstrip("/") + "/health", timeout=10):
                pass
        except (OSError, ValueError) as err:
            raise ValueError(f"tracking_uri={tracking_uri}: no MLflow server answers ({err})") from None
        _check_credentials(tracking_uri)


#: Where MLflow's client reads a server's credentials (it sends them on every call).
CREDENTIALS = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
TOKEN = "MLFLOW_TRACKING_TOKEN"


def _check_credentials(tracking_uri: str) -> None:
    """A server that asks for credentials (``mlflow server --app-name basic-auth``)
    gets, before any compute, the ones MLflow's client will send: those of the
    environment (:data:`CREDENTIALS`, or a bearer :data:`TOKEN`). ``/health`` answers
    anyone; one search of the experiments tells whether the jobs will be let in."""
    user, password, token = (os.environ.get(k) for k in (*CREDENTIALS, TOKEN))
    request = urllib.request.Request(tracking_uri.rstrip("/")
                                     + "/api/2.0/mlflow/experiments/search?max_results=1")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    elif user and password:
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {basic}")
    try:
        with urllib.request.urlopen(request, timeout=30):
            return
    except urllib.error.HTTPError as err:
        if err.code == 401 and not (token or (user and password)):
            why = (f"the server asks for credentials: set {CREDENTIALS[0]} and {CREDENTIALS[1]} "
                   "in the environment")
        elif err.code in (401, 403):
            sent = f"{TOKEN}" if token else f"{CREDENTIALS[0]}={user}"
            why = f"the server refuses the credentials of {sent} (HTTP {err.code})"
        else:
            return  # a server error is the retry loop's business; this check is about access
    except (OSError, ValueError):
        return  # it answered /health a moment ago: an outage is the retry loop's business
    raise ValueError(f"tracking_uri={tracking_uri}: {why}")


def open_client(tracking_uri: str) -> MlflowClient:
    """An ``MlflowClient`` on ``tracking_uri``, the store itself made ready: a
    SQLite store is created (and its schema migrated) under a lock beside the
    file, so that two processes opening a fresh store at once (two sweeps, a job
    array) do not race on the migration. Quiets MLflow's logs of failures this
    module handles (it reports them itself, in one line)."""
    for key, value in _MLFLOW_HTTP.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient

    # MLflow logs every SQLite "database is locked" with a traceback, and urllib3
    # every retried connection; both are retried and reported here.
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    # "Creating initial MLflow database tables…": INFO noise (warnings still show).
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    if not tracking_uri.startswith("sqlite:///"):
        return MlflowClient(tracking_uri)
    db = Path(tracking_uri.removeprefix("sqlite:///"))
    with file_lock(db.with_name(db.name + "-lock")):  # the name matches .gitignore's mlflow.db-*
        # The client makes (and migrates) the store as it is built.
        client = retrying(MlflowClient, tracking_uri, budget_s=60.0, what=tracking_uri)
        retrying(client.search_experiments, max_results=1, budget_s=60.0, what=tracking_uri)
    return client


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the store is away for now (and a later try may work):
    no connection, a timeout, a 5xx or 429 answer, a locked or unavailable database;
    not a refusal of the request itself (a bad value, a missing run)."""
    from mlflow.exceptions import MlflowException, RestException

    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if isinstance(exc, RestException):
        status = exc.get_http_status_code()
        return status >= 500 or status == 429 or exc.error_code in ("TEMPORARILY_UNAVAILABLE",
                                                                    "REQUEST_LIMIT_EXCEEDED")
    if isinstance(exc, MlflowException):
        # MLflow wraps a failed HTTP call ("API request to … failed with exception …")
        # and SQLAlchemy's OperationalError (TEMPORARILY_UNAVAILABLE) in its own type.
        return (exc.error_code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED")
                or str(exc).startswith("API request to"))
    return False


#: What a failed call to a store says, in a few words, found in MLflow's long messages.
_CAUSES = ("Connection refused", "database is locked", "timed out", "Name or service not known",
           "Connection reset by peer", "Remote end closed connection")


def first_line(exc: BaseException) -> str:
    """``exc`` in one short line: the cause when it is one of :data:`_CAUSES`, else
    its type and first line."""
    text = str(exc).strip()
    for cause in _CAUSES:
        if cause in text:
            return cause
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:200]


def retrying(call: Callable[..., T], *args, budget_s: float, what: str,
             stop: threading.Event | None = None, **kwargs) -> T:
    """``call(*args, **kwargs)``, tried again after each transient failure
    (:func:`is_transient`) with exponential backoff (:data:`BACKOFF_S`, jittered)
    until ``budget_s`` seconds have passed (then :class:`StoreUnavailable`,
    naming ``what``) or ``stop`` is set. Other errors are raised at once.

    Hand-written rather than a retry library: a few lines, with the budget and
    the stop event this module needs and no new dependency."""
    start = time.monotonic()
    delay = BACKOFF_S[0]
    while True:
        try:
            return call(*args, **kwargs)
        except Exception as exc:
            if not is_transient(exc):
                raise
            left = budget_s - (time.monotonic() - start)
            if left <= 0 or (stop is not None and stop.is_set()):
                raise StoreUnavailable(f"the MLflow store {what} did not answer for {budget_s:g} s "
                                       f"({first_line(exc)})") from exc
            wait = min(delay * random.uniform(0.8, 1.2), left)
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(wait)
            delay = min(2 * delay, BACKOFF_S[1])


#: The experiment tag that says what kind of experiment it is; MLflow's UI reads it
#: to choose an experiment's first page where its "GenAI | Model training" switch is
#: off. From 3.16 on that switch decides (GenAI by default: an overview of traces,
#: "Traces 0"), so the address of our runs carries it too (:func:`ui_address`).
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def ui_address(tracking_uri: str, experiment_id: str, root: Path) -> str:
    """Where a person sees an experiment's runs table in MLflow's UI: the server's
    address, or for a SQLite store the ``mlflow ui`` that serves it and the address."""
    page = f"#/experiments/{experiment_id}?workflowType=machine_learning"
    if tracking_uri.startswith(("http://", "https://")):
        return f"{tracking_uri.rstrip('/')}/{page}"
    serve = (f"mlflow ui (in {Path(root).resolve()})" if tracking_uri == default_tracking_uri(root)
             else f"mlflow ui --backend-store-uri {tracking_uri}")
    return f"{serve}, then http://127.0.0.1:5000/{page}"


def ensure_experiment(client: MlflowClient, name: str, artifact_root: Path | None) -> str:
    """The id of experiment ``name``, created (artifacts under ``artifact_root``) if new,
    tagged :data:`EXPERIMENT_KIND` (an experiment made before that tag existed gets it)."""
    import mlflow

    exp = client.get_experiment_by_name(name)
    if exp is None:
        location = None if artifact_root is None else (Path(artifact_root).resolve() / name).as_uri()
        try:
            return client.create_experiment(name, artifact_location=location, tags=EXPERIMENT_KIND)
        except mlflow.exceptions.MlflowException:
            # Another process created it between our lookup and create.
            exp = client.get_experiment_by_name(name)
    for key, value in EXPERIMENT_KIND.items():
        if exp.tags.get(key) != value:
            client.set_experiment_tag(exp.experiment_id, key, value)
    return exp.experiment_id


def all_experiment_ids(client: MlflowClient) -> list[str]:
    return [e.experiment_id for e in client.search_experiments()]


def search(client: MlflowClient, experiment_ids: list[str], filter_string: str, max_results: int = 50000,
           **kw) -> list:
    """``client.search_runs`` over ``experiment_ids`` (none: no runs)."""
    if not experiment_ids:
        return []
    return client.search_runs(experiment_ids, filter_string, max_results=max_results, **kw)


def flatten(mapping: Mapping, prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}} -> {"a.b": "1"}``: a nested config as MLflow params."""
    out: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


def git_state(root: Path) -> tuple[str, bool]:
    """``(commit, dirty)`` of the checkout at ``root``; ``("unknown", False)`` outside git."""
    def git(*args):
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    try:
        return git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


# --- Liveness ----------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot, Linux), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def process_tags() -> dict[str, str]:
    """Tags naming this process: ``host``, ``pid``, ``pid_start``, and a fresh ``heartbeat``."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": str(pid), "pid_start": _start_time(pid) or "",
            "heartbeat": f"{time.time():.0f}"}


def is_stale(tags: Mapping[str, str], now: float | None = None) -> bool:
    """Whether the process that wrote a RUNNING run with ``tags`` is gone (see
    the module's docstring). A run without a heartbeat was opened by code that
    never wrote one, and is not being written now: stale."""
    now = time.time() if now is None else now
    if tags.get("host") == socket.gethostname() and tags.get("pid", "").isdigit():
        pid = int(tags["pid"])
        started = _start_time(pid)
        if started is None:
            if Path("/proc/self/stat").exists():
                return True  # Linux: no such process
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            except PermissionError:
                return False
            return False
        return bool(tags.get("pid_start")) and started != tags["pid_start"]
    try:
        return now - float(tags["heartbeat"]) > STALE_AFTER_S
    except (KeyError, ValueError):
        return True


def run_alive(client: MlflowClient, run_id: str) -> bool | None:
    """Whether run ``run_id`` is RUNNING and its process alive (not :func:`is_stale`);
    None when the store holds no such run."""
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    return run.info.status == "RUNNING" and not is_stale(run.data.tags)


def reap_stale(client: MlflowClient, experiment_ids: Iterable[str], keep: Iterable[str] = ()) -> list[str]:
    """End every stale RUNNING run in ``experiment_ids`` (except ids in ``keep``)
    KILLED, with the reason in ``killed_reason``; their ids."""
    keep, reaped = set(keep), []
    for run in search(client, list(experiment_ids), "attributes.status = 'RUNNING'"):
        if run.info.run_id in keep or not is_stale(run.data.tags):
            continue
        t = run.data.tags
        client.set_tag(run.info.run_id, "killed_reason",
                       f"its process (pid {t.get('pid', '?')} on {t.get('host', '?')}) is gone; "
                       f"last heartbeat {t.get('heartbeat', 'never')}")
        client.set_terminated(run.info.run_id, status="KILLED")
        reaped.append(run.info.run_id)
    return reaped
