"""The socket ``gpuspawner-kubelet-api`` asks: what only the agent knows about its pods.

One request per connection: a JSON line each way, then the log's bytes (``logs``) or frames both
ways (``exec``, ``attach``); the protocol is described in ``testcluster/kubelet/pkg/agent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import struct
import time
from datetime import datetime
from typing import Any, Callable

from testcluster.node.kubelet import ExecError
from testcluster.node.kubelet import runtime
from testcluster.node.kubelet.logs import STDOUT

STDIN, STDOUT_FRAME, STDERR_FRAME, EXIT, RESIZE, STDIN_CLOSE = range(6)
MAX_FRAME = 1 << 20


# -- frames -----------------------------------------------------------------------------

def frame(kind: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BI", kind, len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    kind, n = struct.unpack(">BI", await reader.readexactly(5))
    if n > MAX_FRAME:
        raise ValueError(f"frame of {n} bytes")
    return kind, await reader.readexactly(n)


def resize_sizes(payload: bytes) -> tuple[int, int] | None:
    """(width, height) of a resize frame (``{"Width":80,"Height":24}``), or None.  Pure."""
    try:
        obj = json.loads(payload)
        return int(obj.get("Width", 0)), int(obj.get("Height", 0))
    except (ValueError, TypeError, AttributeError):
        return None


def since_ns(req: dict[str, Any], now_ns: int) -> int | None:
    """The earliest log time asked for (``sinceSeconds`` or ``sinceTime``), in ns.  Pure."""
    if req.get("sinceSeconds"):
        return now_ns - int(req["sinceSeconds"]) * 1_000_000_000
    if req.get("sinceTime"):
        t = datetime.fromisoformat(str(req["sinceTime"]).replace("Z", "+00:00"))
        return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000
    return None


class Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


# -- the socket -------------------------------------------------------------------------

class AgentSocket:
    """Answers the kubelet API program for the pods of ``kubelet`` (an ``AgentKubelet``);
    ``pod_of(ns, name)`` is the informer's pod (for pods loaded from the file, which never ran)."""

    def __init__(self, kubelet: Any, pod_of: Callable[[str, str], dict | None], path: str):
        self.kubelet = kubelet
        self.pod_of = pod_of
        self.path = path
        self.server: asyncio.AbstractServer | None = None
        self._handlers: set[asyncio.Task] = set()

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.server = await asyncio.start_unix_server(self._serve, path=self.path)
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self._handlers):
            t.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._handlers.add(task)
        try:
            req = json.loads(await reader.readline())
            op = req.get("op")
            handler = {"check": self._check, "pod": self._pod, "logs": self._logs, "exec": self._exec,
                       "attach": self._attach}.get(op)
            if handler is None:
                raise Refused(400, f"unknown op {op!r}")
            await handler(req, reader, writer)
        except Refused as e:
            writer.write(json.dumps({"error": str(e), "code": e.code}).encode() + b"\n")
        except (ValueError, TypeError, AttributeError) as e:
            writer.write(json.dumps({"error": f"bad request: {e}", "code": 400}).encode() + b"\n")
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._handlers.discard(task)
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()

    # -- lookups, worded as the kubelet words them --

    def _worker(self, req: dict) -> Any:
        w = self.kubelet.workers.get(f"{req['namespace']}/{req['pod']}")
        if w is None or (req.get("uid") and w.pod["metadata"].get("uid") != req["uid"]):
            raise Refused(404, "pod does not exist")
        return w

    def _running(self, req: dict) -> Any:
        w = self._worker(req)
        c = w.container(req.get("container") or "")
        if c is None or not c.running:
            raise Refused(500, f'container not found ("{req.get("container")}")')
        return w, c

    @staticmethod
    def _ok(writer: asyncio.StreamWriter, **fields: Any) -> None:
        writer.write(json.dumps(fields).encode() + b"\n")

    async def _check(self, req: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w, c = self._running(req)
        if req.get("command") and c.process is None:
            raise Refused(500, f'container "{c.name}" runs no process here (it has no command): '
                               "there is nothing to exec into")
        self._ok(writer, uid=w.pod["metadata"].get("uid"), podIP=w.ip or "")

    async def _pod(self, req: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w = self._worker(req)
        self._ok(writer, uid=w.pod["metadata"].get("uid"), podIP=w.ip or "")

    async def _logs(self, req: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ns, name = req["namespace"], req["pod"]
        w = self.kubelet.workers.get(f"{ns}/{name}")
        pod = w.pod if w is not None else self.pod_of(ns, name)
        if pod is None:
            raise Refused(404, f'pod "{name}" does not exist')
        try:
            chunks = self.kubelet.log_stream(
                pod, req.get("container") or "", follow=bool(req.get("follow")),
                previous=bool(req.get("previous")), timestamps=bool(req.get("timestamps")),
                tail_lines=req.get("tailLines"), limit_bytes=req.get("limitBytes"),
                since_ns=since_ns(req, time.time_ns()))
        except Exception as e:
            if getattr(e, "code", None) is None:
                raise
            raise Refused(e.code, str(e)) from None
        self._ok(writer)
        gone = asyncio.ensure_future(reader.read())  # the client left: stop following

        async def send() -> None:
            async with contextlib.aclosing(chunks) as it:
                async for chunk in it:
                    writer.write(chunk)
                    await writer.drain()

        sending = asyncio.ensure_future(send())
        try:
            await asyncio.wait({gone, sending}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (gone, sending):
                t.cancel()
            await asyncio.gather(gone, sending, return_exceptions=True)

    async def _exec(self, req: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        w, _ = self._running(req)
        tty = bool(req.get("tty"))
        argv = [str(a) for a in req.get("command") or []]
        if not argv:
            raise Refused(400, "no command")
        early: list[tuple[int, bytes]] | None = []  # output before the reply went out

        def out(kind: int) -> Callable[[bytes], None]:
            def emit(data: bytes) -> None:
                if early is not None:
                    early.append((kind, data))
                else:
                    _send(writer, kind, data)
            return emit
        try:
            proc = await w.exec(req["container"], argv, tty=tty, stdin=bool(req.get("stdin")),
                                on_stdout=out(STDOUT_FRAME), on_stderr=out(STDERR_FRAME))
        except ExecError as e:
            raise Refused(500, str(e)) from None
        except runtime.StartError as e:
            raise Refused(500, f"failed to exec in container: OCI runtime exec failed: exec failed: "
                               f"unable to start container process: {e}: unknown") from None
        self._ok(writer)
        for kind, data in early:
            _send(writer, kind, data)
        early = None
        inputs = asyncio.ensure_future(_read_inputs(reader, proc.write_stdin, proc.close_stdin,
                                                    lambda: proc.tty_fd))
        waiter = asyncio.ensure_future(proc.wait())
        await asyncio.wait({waiter, inputs}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():  # the client left first: the command runs on, as on a real node
            proc.close_stdin()
            if tty:
                proc.signal(signal.SIGHUP)
            return
        inputs.cancel()
        writer.write(frame(EXIT, json.dumps({"exitCode": waiter.result()}).encode()))

    async def _attach(self, req: dict, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, c = self._running(req)
        tty, instance, proc = bool(c.spec.get("tty")), c.log, c.process

        def on_output(stream: str, data: bytes) -> None:
            _send(writer, STDOUT_FRAME if stream == STDOUT or tty else STDERR_FRAME, data)

        takes_stdin = bool(req.get("stdin")) and bool(c.spec.get("stdin")) and proc is not None
        self._ok(writer, tty=tty)
        detach = instance.listen(on_output)
        inputs = asyncio.ensure_future(_read_inputs(
            reader, proc.write_stdin if takes_stdin else _drop,
            # the end of one client's input ends the container's only with stdinOnce
            proc.close_stdin if takes_stdin and c.spec.get("stdinOnce") else (lambda: None),
            lambda: proc.tty_fd if proc is not None else None))
        ended = asyncio.ensure_future(_ended(instance))
        try:
            await asyncio.wait({ended, inputs}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            detach()
            if takes_stdin and c.spec.get("stdinOnce"):
                proc.close_stdin()
            for t in (ended, inputs):
                t.cancel()
        if ended.done() and not ended.cancelled():
            writer.write(frame(EXIT, json.dumps({"exitCode": 0}).encode()))


def _send(writer: asyncio.StreamWriter, kind: int, data: bytes) -> None:
    """One output frame, unless the kubelet API left (an exec runs on after its client)."""
    if not writer.is_closing():
        for i in range(0, len(data), MAX_FRAME):
            writer.write(frame(kind, data[i:i + MAX_FRAME]))


def _drop(_data: bytes) -> None:
    return None


async def _ended(log_: Any) -> None:
    while not log_.ended:
        await log_.wait_change()


async def _read_inputs(reader: asyncio.StreamReader, write: Callable[[bytes], None], close: Callable[[], None],
                       tty_fd: Callable[[], int | None]) -> None:
    """Stdin, its end and resizes from the kubelet API until it closes the connection."""
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            kind, data = await read_frame(reader)
            if kind == STDIN:
                write(data)
            elif kind == STDIN_CLOSE:
                close()
            elif kind == RESIZE:
                size = resize_sizes(data)
                if size is not None:
                    runtime.resize(tty_fd(), *size)
