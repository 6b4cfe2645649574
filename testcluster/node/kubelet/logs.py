"""Container logs as the kubelet serves them (``GET pods/{name}/log``).
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, AsyncIterator, Callable, Mapping

__all__ = ["LOG_LINES", "LogLine", "ContainerLog", "LogOptions", "LogError", "rfc3339nano", "select_lines",
           "render", "validate_status"]

LOG_LINES = 10_000
STDOUT, STDERR = "stdout", "stderr"


@dataclass(frozen=True, slots=True)
class LogLine:
    ts_ns: int
    stream: str
    data: bytes            # without its newline
    partial: bool = False  # the output ended without a newline (a CRI "P" record): none is added


def rfc3339nano(ts_ns: int) -> str:
    """Go's ``time.RFC3339Nano`` in UTC: ``2024-05-01T10:20:30.123456789Z``, trailing zeros cut."""
    sec, ns = divmod(ts_ns, 1_000_000_000)
    base = datetime.fromtimestamp(sec, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{ns:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"


class ContainerLog:
    """One container instance's output: complete lines with their time and stream, and live
    listeners (``kubectl attach``) that get the raw bytes as they come."""

    def __init__(self, max_lines: int = LOG_LINES, clock: Callable[[], int] = time.time_ns):
        self.lines: deque[LogLine] = deque(maxlen=max_lines)
        self.first_seq = 0  # sequence number of lines[0]
        self.ended = False
        self._clock = clock
        self._partial: dict[str, bytes] = {}
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[str, bytes], None]] = []

    @property
    def next_seq(self) -> int:
        return self.first_seq + len(self.lines)

    def write(self, stream: str, data: bytes) -> None:
        for listener in list(self._listeners):
            listener(stream, data)
        buf = self._partial.get(stream, b"") + data
        *complete, rest = buf.split(b"\n")
        self._partial[stream] = rest
        now = self._clock()
        for line in complete:
            self._append(LogLine(now, stream, line))

    def _append(self, line: LogLine) -> None:
        if len(self.lines) == self.lines.maxlen:
            self.first_seq += 1
        self.lines.append(line)
        self._changed.set()

    def close(self) -> None:
        """The instance ended: a last line without its newline is kept; followers stop."""
        for stream, rest in sorted(self._partial.items()):
            if rest:
                self._append(LogLine(self._clock(), stream, rest, partial=True))
        self._partial.clear()
        self.ended = True
        self._changed.set()

    def listen(self, listener: Callable[[str, bytes], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def text(self) -> str:
        return b"".join(render(line, False) for line in self.lines).decode("utf-8", "replace")

    def since(self, seq: int) -> list[LogLine]:
        start = max(seq, self.first_seq) - self.first_seq
        return list(self.lines)[start:]

    async def wait_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()


@dataclass(frozen=True)
class LogOptions:
    """The kubelet's view of ``PodLogOptions``."""
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_ns: int | None = None
    limit_bytes: int | None = None


class LogError(Exception):
    """The kubelet's refusal; the API server answers 400 BadRequest with this message."""

    code = 400


def select_lines(lines: list[LogLine], opts: LogOptions) -> list[LogLine]:
    """``tailLines`` first, then ``since`` (``kuberuntime/logs.ReadLogs`` seeks the tail, then
    skips older lines as it reads)."""
    if opts.tail_lines is not None:
        lines = lines[-opts.tail_lines:] if opts.tail_lines > 0 else []
    if opts.since_ns is not None:
        lines = [line for line in lines if line.ts_ns >= opts.since_ns]
    return lines


def render(line: LogLine, timestamps: bool) -> bytes:
    prefix = (rfc3339nano(line.ts_ns) + " ").encode() if timestamps else b""
    return prefix + line.data + (b"" if line.partial else b"\n")


async def stream_log(log: ContainerLog, opts: LogOptions, running: Callable[[], bool]) -> AsyncIterator[bytes]:
    """The bytes of ``GET pods/{name}/log``: the selected lines, then (``follow``) new ones until
    the instance ends, stops running, or ``limitBytes`` is reached."""
    left = opts.limit_bytes
    async with contextlib.aclosing(_lines(log, opts, running)) as lines:
        async for line in lines:
            chunk = render(line, opts.timestamps)
            if left is not None:
                chunk, left = chunk[:left], left - len(chunk[:left])
            yield chunk
            if left is not None and left <= 0:
                return


async def _lines(log: ContainerLog, opts: LogOptions, running: Callable[[], bool]) -> AsyncIterator[Any]:
    """The selected lines, then (``follow``) each new one (from ``sinceTime`` on) as it comes."""
    seq = log.next_seq
    for line in select_lines(log.since(0), opts):
        yield line
    while opts.follow and not log.ended and running():
        waiter = asyncio.ensure_future(log.wait_change())
        try:
            await asyncio.wait_for(asyncio.shield(waiter), 1.0)
        except asyncio.TimeoutError:
            pass
        finally:
            waiter.cancel()
        new = log.since(seq)
        seq = log.next_seq
        for line in new:
            if opts.since_ns is None or line.ts_ns >= opts.since_ns:
                yield line


def _status_of(statuses: list[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((s for s in statuses if s.get("name") == name), None)


def validate_status(pod: Mapping[str, Any], container: str, previous: bool) -> str:
    """Which instance's log to read: ``"current"`` or ``"previous"``; raises ``LogError`` with the
    kubelet's words when there is none (``validateContainerLogStatus``)."""
    name = (pod.get("metadata") or {}).get("name", "")
    st = pod.get("status") or {}
    cs = (_status_of(st.get("containerStatuses") or [], container)
          or _status_of(st.get("initContainerStatuses") or [], container)
          or _status_of(st.get("ephemeralContainerStatuses") or [], container))
    if cs is None:
        raise LogError(f'container "{container}" in pod "{name}" is not available')
    last = (cs.get("lastState") or {}).get("terminated")
    state = cs.get("state") or {}
    if previous:
        if not last or not last.get("containerID"):
            raise LogError(f'previous terminated container "{container}" in pod "{name}" not found')
        return "previous"
    if "running" in state:
        return "current"
    if "terminated" in state:
        if state["terminated"].get("containerID"):
            return "current"
        if last and last.get("containerID"):
            return "previous"
        raise LogError(f'container "{container}" in pod "{name}" is terminated')
    if last:
        if not last.get("containerID"):
            raise LogError(f'container "{container}" in pod "{name}" is terminated')
        return "previous"
    if "waiting" in state:
        reason = (state["waiting"] or {}).get("reason", "")
        words = {"ErrImagePull": "image can't be pulled",
                 "ImagePullBackOff": "trying and failing to pull image"}.get(reason, reason)
        raise LogError(f'container "{container}" in pod "{name}" is waiting to start: {words}')
    raise LogError(f'container "{container}" in pod "{name}" is waiting to start - no logs yet')
