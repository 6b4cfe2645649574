"""Container probes: readiness, liveness and startup, as the kubelet's prober runs them.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping
from urllib.parse import urljoin, urlsplit

from .env import go_quote

__all__ = ["READINESS", "LIVENESS", "STARTUP", "ProbeConfig", "ProbeWorker", "probe_once", "USER_AGENT"]

log = logging.getLogger(__name__)

READINESS, LIVENESS, STARTUP = "Readiness", "Liveness", "Startup"
USER_AGENT = "kube-probe/1.32"
MAX_REDIRECTS = 10

# (argv, timeout seconds) -> (exit code, combined output); raises asyncio.TimeoutError on timeout
ExecFn = Callable[[list[str], float], Awaitable[tuple[int, str]]]


@dataclass(frozen=True)
class ProbeConfig:
    """A probe's handler and timing, with the API's defaults (``SetDefaults_Probe``)."""
    handler: Mapping[str, Any]
    kind: str  # httpGet, tcpSocket, exec, grpc
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace: float | None = None

    @classmethod
    def from_spec(cls, probe: Mapping[str, Any]) -> "ProbeConfig | None":
        kind = next((k for k in ("httpGet", "tcpSocket", "exec", "grpc") if probe.get(k) is not None), None)
        if kind is None:
            return None
        grace = probe.get("terminationGracePeriodSeconds")
        return cls(probe[kind], kind, float(probe.get("initialDelaySeconds") or 0),
                   float(probe.get("periodSeconds") or 10), float(probe.get("timeoutSeconds") or 1),
                   int(probe.get("successThreshold") or 1), int(probe.get("failureThreshold") or 3),
                   None if grace is None else float(grace))


def _port(port: Any, ports: Mapping[str, int]) -> int | None:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return int(port)
    return ports.get(str(port))


async def _http(h: Mapping[str, Any], pod_ip: str, ports: Mapping[str, int], timeout: float) -> tuple[bool, str]:
    import aiohttp

    host = h.get("host") or pod_ip
    port = _port(h.get("port"), ports)
    scheme = (h.get("scheme") or "HTTP").lower()
    path = h.get("path") or "/"
    url = f"{scheme}://{host}:{port}{path if path.startswith('/') else '/' + path}"
    headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    headers.update({x.get("name", ""): x.get("value", "") for x in h.get("httpHeaders") or []})
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            for _ in range(MAX_REDIRECTS + 1):
                async with session.get(url, headers=headers, allow_redirects=False, ssl=False) as r:
                    if r.status in (301, 302, 303, 307, 308) and r.headers.get("Location"):
                        target = urljoin(url, r.headers["Location"])
                        if urlsplit(target).hostname != urlsplit(url).hostname:
                            return True, "Probe terminated redirects"  # a Warning: counts as success
                        url = target
                        continue
                    if 200 <= r.status < 400:
                        return True, ""
                    return False, f"HTTP probe failed with statuscode: {r.status}"
            return False, "stopped after 10 redirects"
    except asyncio.TimeoutError:
        return False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
    except aiohttp.ClientConnectorError as e:
        return False, f'Get "{url}": dial tcp {host}:{port}: connect: {_connect_words(e)}'
    except aiohttp.ClientError as e:
        return False, f'Get "{url}": {e}'


def _connect_words(e: BaseException) -> str:
    errno_ = getattr(getattr(e, "os_error", None), "errno", None) or getattr(e, "errno", None)
    return {111: "connection refused", 113: "no route to host", 101: "network is unreachable"}.get(
        errno_, "connection refused")


async def _tcp(h: Mapping[str, Any], pod_ip: str, ports: Mapping[str, int], timeout: float) -> tuple[bool, str]:
    host = h.get("host") or pod_ip
    port = _port(h.get("port"), ports)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except asyncio.TimeoutError:
        return False, f"dial tcp {host}:{port}: i/o timeout"
    except OSError as e:
        return False, f"dial tcp {host}:{port}: connect: {_connect_words(e)}"
    writer.close()
    return True, ""


async def probe_once(cfg: ProbeConfig, *, pod_ip: str, ports: Mapping[str, int], exec_fn: ExecFn) -> tuple[bool, str]:
    """One try: (succeeded, output)."""
    if cfg.kind == "httpGet":
        return await _http(cfg.handler, pod_ip, ports, cfg.timeout)
    if cfg.kind == "tcpSocket":
        return await _tcp(cfg.handler, pod_ip, ports, cfg.timeout)
    if cfg.kind == "exec":
        argv = [str(a) for a in cfg.handler.get("command") or []]
        try:
            code, output = await exec_fn(argv, cfg.timeout)
        except asyncio.TimeoutError:
            return False, f"command {go_quote(' '.join(argv))} timed out"
        return code == 0, output
    return True, ""  # grpc: not run here


class ProbeWorker:
    """Runs one probe of one container instance until ``stop()``; reports result changes.

    ``on_result(kind, ok)`` is called when the result changes (thresholds met);
    ``on_failure(kind, output)`` for every failed try (the ``Unhealthy`` event);
    ``may_run(kind)`` says whether the startup gate lets this probe run now."""

    def __init__(self, kind: str, cfg: ProbeConfig, *, started_at: float, pod_ip: str, ports: Mapping[str, int],
                 exec_fn: ExecFn, on_result: Callable[[str, bool], None], on_failure: Callable[[str, str], None],
                 may_run: Callable[[str], bool], clock: Callable[[], float] = time.monotonic):
        self.kind, self.cfg = kind, cfg
        self.started_at, self.pod_ip, self.ports, self.exec_fn = started_at, pod_ip, ports, exec_fn
        self.on_result, self.on_failure, self.may_run, self.clock = on_result, on_failure, may_run, clock
        self.result: bool | None = {READINESS: False, LIVENESS: True, STARTUP: None}[kind]
        self._last: bool | None = None
        self._run = 0
        self.task: asyncio.Task | None = None

    def start(self) -> "ProbeWorker":
        self.task = asyncio.create_task(self._loop(), name=f"probe-{self.kind}")
        return self

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _loop(self) -> None:
        delay = self.started_at + self.cfg.initial_delay - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        while True:
            if self.may_run(self.kind):
                if not await self._once():
                    return
            await asyncio.sleep(self.cfg.period)

    async def _once(self) -> bool:
        """One probe and its bookkeeping; False once the worker must hold (liveness/startup
        failed: the container is restarted) or is done (startup succeeded)."""
        try:
            ok, output = await probe_once(self.cfg, pod_ip=self.pod_ip, ports=self.ports, exec_fn=self.exec_fn)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a prober error: the result is thrown away
            log.debug("%s probe errored: %s", self.kind, e)
            return True
        if not ok:
            self.on_failure(self.kind, output)
        if self._last == ok:
            self._run += 1
        else:
            self._last, self._run = ok, 1
        needed = self.cfg.success_threshold if ok else self.cfg.failure_threshold
        if self._run < needed:
            return True
        if self.result != ok:
            self.result = ok
            self.on_result(self.kind, ok)
        if not ok and self.kind in (LIVENESS, STARTUP):
            return False
        return not (ok and self.kind == STARTUP)
