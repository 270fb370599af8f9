"""A real PostgreSQL server for a test: Debian's server binaries (``apt-get install
postgresql``; .ci/run installs them where they are missing), a cluster of its own in a
fresh folder, on a free loopback port, started and stopped by the test's fixture.

``initdb`` and ``postgres`` refuse to run as root: as root the cluster belongs to the
``postgres`` user (which Debian's package creates) and its commands run as that user
(``runuser``); an ordinary user runs them as themself. Connections are trusted on
127.0.0.1 only, and the server listens nowhere else (a test's server, gone with it)."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from helpers.mlflow_store import free_port

#: The database role the tests connect as (the cluster's superuser).
USER = "teng"


def server_binaries() -> Path | None:
    """The folder of ``pg_ctl`` and ``initdb``: Debian's newest ``/usr/lib/postgresql/<v>/bin``,
    else the one on ``PATH``; None when there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def need_server_binaries() -> Path:
    """:func:`server_binaries`, or the test skipped (failed under CI, whose .ci/run installs them)."""
    folder = server_binaries()
    if folder is None:
        why = "PostgreSQL's server binaries are missing (apt-get install postgresql; .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return folder


class Postgres:
    """One PostgreSQL cluster: :meth:`start`, :meth:`database` (a new database's URL for
    SQLAlchemy, ``postgresql+psycopg://``), :meth:`stop` (and its folder removed)."""

    def __init__(self) -> None:
        self.bin = need_server_binaries()
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="teng-pg-"))  # not under pytest's root-only folder
        self.data = self.folder / "data"
        self.as_root = os.geteuid() == 0
        if self.as_root:
            owner = pwd.getpwnam("postgres")
            os.chown(self.folder, owner.pw_uid, owner.pw_gid)

    def _run(self, *cmd: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_root else []
        proc = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, f"{Path(cmd[0]).name} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"

    def start(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust",
                  "--encoding=UTF8", "--no-sync")
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} -c fsync=off "
                   "-c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{database}"

    def database(self, name: str) -> str:
        """Create database ``name``; its URL."""
        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        path = self.folder / "server.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def stop(self) -> None:
        if self.data.exists():
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
