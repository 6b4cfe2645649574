"""Starts a ``gpuspawner-cluster`` command (``controlplane``) in its own process group, waits for
its ``READY`` line, and ends the whole group on stop, at interpreter exit, or when this process dies."""

from __future__ import annotations

import asyncio
import atexit
import collections
import json
import os
import pathlib
import selectors
import shutil
import socket
import subprocess
import time
from typing import Any, TypeVar

from .processes import start_session, stop_process

#: The environment variable that names the binary (else ``gpuspawner-cluster`` on PATH).
BINARY_ENV = "GPUSPAWNER_CLUSTER_BIN"
BINARY_NAME = "gpuspawner-cluster"
LOG_NAME = "controlplane.log"
_TAIL_LINES = 40
_GRACE = 15.0


class ControlPlaneError(RuntimeError):
    """The control plane could not be started (the message carries its last output)."""


def find_binary() -> str:
    """The ``gpuspawner-cluster`` binary: ``$GPUSPAWNER_CLUSTER_BIN``, else the one on PATH."""
    named = os.environ.get(BINARY_ENV)
    if named:
        if not os.access(named, os.X_OK):
            raise ControlPlaneError(f"{BINARY_ENV}={named} is not an executable file")
        return named
    found = shutil.which(BINARY_NAME)
    if not found:
        raise ControlPlaneError(
            f"{BINARY_NAME} is not on PATH: run `bash scripts/setup.sh` (it builds it with Go >= 1.26 "
            f"into .venv/bin), or set {BINARY_ENV} to the binary"
        )
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _last_words(path: pathlib.Path, lines: int = _TAIL_LINES) -> str:
    """The program's own messages in its log (why it stopped), then the log's last lines."""
    try:
        with path.open(errors="replace") as f:
            own: collections.deque[str] = collections.deque(maxlen=5)
            tail: collections.deque[str] = collections.deque(maxlen=lines)
            for line in f:
                tail.append(line)
                if "gpuspawner-cluster" in line:
                    own.append(line)
    except OSError:
        return ""
    return "".join(own) + "...\n" + "".join(tail)


_L = TypeVar("_L", bound="Launched")


class Launched:
    """One ``gpuspawner-cluster`` command in its own process group, ready once it prints
    ``READY <server>``; its stderr goes to ``<data_dir>/<log_name>``.  Subclasses say the command."""

    #: what the messages call the program
    what = "gpuspawner-cluster"
    log_name = "gpuspawner-cluster.log"

    def __init__(self, data_dir: str | os.PathLike[str], port: int | None = None, *, ready_timeout: float = 90.0,
                 binary: str | None = None, niceness: int = 0) -> None:
        self.data_dir = pathlib.Path(data_dir).resolve()
        #: the CPU priority it runs at (``processes.start_session``): 0, this process's; more, lower
        self.niceness = niceness
        self.port = port or free_port()
        self.ready_timeout = ready_timeout
        self.binary = binary
        self.log_path = self.data_dir / self.log_name
        self.ready_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The process's environment: this one's unless a subclass says otherwise."""
        return None

    def spawn(self) -> None:
        """Start the process without waiting for it to be ready."""
        if self._proc is not None:
            raise ControlPlaneError(f"{self.what} in {self.data_dir} is already started")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        with self.log_path.open("ab") as log:
            self._proc = start_session(
                cmd,
                self.niceness,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=self.environment(),
            )
        self._started_at = time.monotonic()
        atexit.register(self.stop)

    def wait_ready(self) -> None:
        """Block until the ``READY`` line (or raise with the process's last output)."""
        assert self._proc is not None and self._proc.stdout is not None
        # the program gives up by itself after ready_timeout and says why: leave it time to
        deadline = self._started_at + self.ready_timeout + _GRACE
        buf = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            while True:
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.startswith(b"READY "):
                        self.ready_seconds = time.monotonic() - self._started_at
                        announced = line.decode(errors="replace").split(" ", 1)[1]
                        if announced != self.server:
                            self._fail(f"announced {announced}, not {self.server}")
                        return
                left = deadline - time.monotonic()
                if left <= 0:
                    self._fail(f"was not ready after {self.ready_timeout:g}s")
                if not sel.select(timeout=min(left, 1.0)):
                    continue
                chunk = os.read(self._proc.stdout.fileno(), 4096)
                if not chunk:
                    self._fail(f"exited with status {self._proc.wait()} before it was ready")
                buf += chunk

    def _fail(self, why: str) -> None:
        self.stop()
        raise ControlPlaneError(
            f"{self.what} ({self.server}, data in {self.data_dir}) {why}; "
            f"its last output ({self.log_path}):\n{_last_words(self.log_path)}"
        )

    def start(self: _L) -> _L:
        self.spawn()
        self.wait_ready()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """End the process group: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        atexit.unregister(self.stop)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
        stop_process(proc, timeout, group=True, kill_wait=None)

    def __enter__(self: _L) -> _L:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self: _L) -> _L:
        self.spawn()
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.wait_ready)
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.stop)


class ControlPlane(Launched):
    """One ``gpuspawner-cluster controlplane`` process serving ``https://127.0.0.1:<port>``.

    ``with ControlPlane(dir) as cp:`` or ``async with ControlPlane(dir) as cp:`` start it and stop
    it; ``start()``/``stop()`` do the same by hand.  Its log is ``<data_dir>/controlplane.log``.
    """

    what = "gpuspawner-cluster controlplane"
    log_name = LOG_NAME

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        *,
        kubeconfig: str | os.PathLike[str] | None = None,
        feature_gates: str = "",
        ready_timeout: float = 90.0,
        binary: str | None = None,
        memory_limit: int | None = None,
        niceness: int = 0,
    ) -> None:
        super().__init__(data_dir, port, ready_timeout=ready_timeout, binary=binary, niceness=niceness)
        self.kubeconfig = pathlib.Path(kubeconfig).resolve() if kubeconfig else self.data_dir / "admin.kubeconfig"
        self.feature_gates = feature_gates
        if memory_limit is not None and memory_limit <= 0:
            raise ValueError(f"memory_limit must be a positive number of bytes, not {memory_limit}")
        #: the Go runtime's soft memory limit for the process (``GOMEMLIMIT``, bytes); ``None``: Go's
        #: default, none. Etcd, the API server's watch cache, the scheduler's and the controllers'
        #: informers all live in this one process, so its heap grows with every object they cache.
        self.memory_limit = memory_limit

    @property
    def cluster_info(self) -> dict[str, Any]:
        """``<data_dir>/cluster.json``: the server, the CA and the kubelet-client certificates."""
        return json.loads((self.data_dir / "cluster.json").read_text())

    def command(self) -> list[str]:
        cmd = [
            self.binary or find_binary(),
            "controlplane",
            f"--data-dir={self.data_dir}",
            f"--port={self.port}",
            f"--kubeconfig={self.kubeconfig}",
            f"--ready-timeout={self.ready_timeout:g}s",
            # Stops when this process dies, however it dies: the pipe on its stdin closes.
            "--exit-on-stdin-close",
        ]
        if self.feature_gates:
            cmd.append(f"--feature-gates={self.feature_gates}")
        return cmd

    def environment(self) -> dict[str, str] | None:
        if self.memory_limit is None:
            return None
        return {**os.environ, "GOMEMLIMIT": str(self.memory_limit)}
