"""A throwaway PostgreSQL cluster (Debian's ``postgresql`` package) for the tests that need one.

``initdb`` and ``pg_ctl`` run as a non-root user (PostgreSQL refuses root): the test user, or
``postgres`` when the tests run as root. The cluster listens on a free port on 127.0.0.1 only,
trusts local connections, and is removed when the session ends.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time


def _bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    """``start()`` a cluster; ``url(db)`` for SQLAlchemy (psycopg 3); ``create_database(name)``; ``stop()``."""

    def __init__(self):
        self.initdb, self.pg_ctl = _bin("initdb"), _bin("pg_ctl")
        self.port = _free_port()
        self.dir = tempfile.mkdtemp(prefix="gpuspawner-pg-")
        self.data = os.path.join(self.dir, "data")
        self.user = None
        if os.geteuid() == 0:
            self.user = pwd.getpwnam("postgres")
            os.chown(self.dir, self.user.pw_uid, self.user.pw_gid)
        self.started = False

    @property
    def available(self) -> bool:
        return bool(self.initdb and self.pg_ctl)

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", self.user.pw_name, "--"] if self.user is not None else []
        return subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120, cwd=self.dir)

    def start(self) -> "Postgres":
        out = self._run(self.initdb, "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
                        "--no-locale")
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr}")
        options = f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.dir} -c fsync=off"
        out = self._run(self.pg_ctl, "-D", self.data, "-o", options, "-l", os.path.join(self.dir, "log"), "-w",
                        "start")
        if out.returncode != 0:
            log = open(os.path.join(self.dir, "log")).read() if os.path.exists(os.path.join(self.dir, "log")) else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stderr}\n{log}")
        self.started = True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("PostgreSQL did not listen in time")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.started:
            self._run(self.pg_ctl, "-D", self.data, "-m", "immediate", "-w", "stop")
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)
