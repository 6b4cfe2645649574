"""The kubelet API of the agent's nodes: ``gpuspawner-kubelet-api`` started and stopped.

The Go program (``testcluster/kubelet``) serves the API server over HTTPS with Kubernetes' own
streaming server and asks the agent's socket (``kubeletsocket.py``) what only the agent knows.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .kubeletsocket import AgentSocket

log = logging.getLogger(__name__)

BINARY_ENV = "GPUSPAWNER_KUBELET_API_BIN"
BINARY_NAME = "gpuspawner-kubelet-api"
READY_TIMEOUT = 20.0


class KubeletApiError(RuntimeError):
    """The kubelet API program cannot be found or started (the message says what to do)."""


def find_binary() -> str:
    """``$GPUSPAWNER_KUBELET_API_BIN``, else ``gpuspawner-kubelet-api`` on PATH, else the newest
    build of ``scripts/kubelet-build.sh`` in the cache."""
    named = os.environ.get(BINARY_ENV)
    if named:
        if not os.access(named, os.X_OK):
            raise KubeletApiError(f"{BINARY_ENV}={named} is not an executable file")
        return named
    found = shutil.which(BINARY_NAME)
    if found:
        return found
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuspawner" / "kubelet"
    builds = sorted(cache.glob(f"*/{BINARY_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    if builds:
        return str(builds[0])
    raise KubeletApiError(f"{BINARY_NAME} is not built: run `bash scripts/kubelet-build.sh` (Go >= 1.26), "
                          f"or set {BINARY_ENV} to the binary")


@dataclass(frozen=True)
class Tls:
    """What the kubelet API needs to be trusted by and to trust the API server.

    ``client_ca``: the CA that signed the API server's kubelet client certificate;
    ``serving_ca_cert``/``serving_ca_key``: the CA the API server checks kubelets' serving
    certificates with (``--kubelet-certificate-authority``), made in the work directory when
    not given."""
    client_ca: str
    serving_ca_cert: str | None = None
    serving_ca_key: str | None = None

    @classmethod
    def from_cluster_info(cls, path: str | os.PathLike) -> "Tls":
        """From a control plane's ``cluster.json`` (``ca_file``, ``kubelet_ca_file``,
        ``kubelet_ca_key_file``)."""
        try:
            info = json.loads(Path(path).read_text())
            return cls(info["ca_file"], info["kubelet_ca_file"], info["kubelet_ca_key_file"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KubeletApiError(f"{path}: not a control plane's cluster.json with ca_file, kubelet_ca_file "
                                  f"and kubelet_ca_key_file: {e!r}") from None


# -- the program ------------------------------------------------------------------------

def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class KubeletApi:
    """``gpuspawner-kubelet-api`` on ``host:port`` for the agent's nodes, and the socket it asks."""

    def __init__(self, kubelet: Any, pod_of: Callable[[str, str], dict | None], *, port: int, tls: Tls,
                 workdir: str, host: str = "127.0.0.1", binary: str | None = None):
        self.port, self.host, self.tls = port, host, tls
        self.dir = Path(workdir)
        self.binary = binary
        self.socket = AgentSocket(kubelet, pod_of, str(self.dir / "agent.sock"))
        self.proc: asyncio.subprocess.Process | None = None
        self._drain: asyncio.Task | None = None

    def argv(self, binary: str) -> list[str]:
        d = self.dir
        args = [binary, "--listen", f"{self.host}:{self.port}", "--cert", str(d / "kubelet.crt"),
                "--key", str(d / "kubelet.key"), "--client-ca", self.tls.client_ca,
                "--agent-socket", self.socket.path,
                "--issue-ca-cert", self.tls.serving_ca_cert or str(d / "kubelet-ca.crt"),
                "--issue-ca-key", self.tls.serving_ca_key or str(d / "kubelet-ca.key")]
        return args

    async def start(self) -> None:
        binary = self.binary or find_binary()
        self.dir.mkdir(parents=True, exist_ok=True)
        await self.socket.start()
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv(binary), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), READY_TIMEOUT)
        except asyncio.TimeoutError:
            line = b""
        if not line.startswith(b"kubelet-api listening"):
            rest = b""
            with contextlib.suppress(asyncio.TimeoutError):
                rest = await asyncio.wait_for(self.proc.stdout.read(4096), 2)
            await self.stop()
            raise KubeletApiError(f"{binary} did not start: {(line + rest).decode(errors='replace').strip()}")
        self._drain = asyncio.create_task(self._log_output())

    async def _log_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        async for line in self.proc.stdout:
            log.info("kubelet-api: %s", line.decode(errors="replace").rstrip())

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 5)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            self._drain.cancel()
        await self.socket.stop()
