"""The kubelet's streaming server for ``pods/exec`` and ``pods/attach`` (WebSocket).
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from typing import Any, Callable

from aiohttp import web

from .. import websocket_stream
from . import runtime
from .logs import STDOUT
from .worker import ExecError

__all__ = ["serve_exec", "serve_attach"]


def _drop(_data: bytes) -> None:
    return None


def _sizes(data: bytes) -> list[tuple[int, int]]:
    """The ``TerminalSize`` objects in a resize message (``{"Width":80,"Height":24}``, any case)."""
    out, text, i = [], data.decode(errors="replace"), 0
    decoder = json.JSONDecoder()
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        try:
            obj, i = decoder.raw_decode(text, i)
        except ValueError:
            break
        if isinstance(obj, dict):
            keys = {k.lower(): v for k, v in obj.items()}
            with contextlib.suppress(TypeError, ValueError):
                out.append((int(keys.get("width", 0)), int(keys.get("height", 0))))
    return out


async def _upgrade(request: web.Request, protocol: str) -> websocket_stream.Channels:
    resp = web.WebSocketResponse(protocols=(protocol,) if protocol else (), max_msg_size=0)
    await resp.prepare(request)
    return websocket_stream.Channels(resp, protocol)


async def _send_all(ch: websocket_stream.Channels, queue: asyncio.Queue) -> None:
    while True:
        channel, data = await queue.get()
        if channel is None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ch.send(channel, data)


async def _read_input(ch: websocket_stream.Channels, write: Callable[[bytes], None], close: Callable[[], None],
                      tty_fd: Callable[[], int | None]) -> None:
    async for channel, data in ch.messages():
        if channel == websocket_stream.STDIN:
            write(data)
        elif channel == websocket_stream.RESIZE:
            for width, height in _sizes(data):
                runtime.resize(tty_fd(), width, height)
        elif channel == websocket_stream.CLOSE and ch.protocol == websocket_stream.V5 and data[:1] == bytes([websocket_stream.STDIN]):
            close()


def _first_channel(opts: dict[str, bool]) -> int:
    return websocket_stream.STDOUT if opts["stdout"] else websocket_stream.STDERR if opts["stderr"] else websocket_stream.ERROR


async def _open(request: web.Request, kubelet: Any, pod: dict, container: str,
                opts: dict[str, bool]) -> web.Response | tuple[str, Any]:
    """The refusal (403: no subprotocol both sides speak; 500: the container is not running, where
    the subprotocol predates v5), or the subprotocol and the upgraded channel, its first frame sent."""
    protocol = websocket_stream.negotiate(request.headers.get("Sec-WebSocket-Protocol"))
    if protocol is None:
        return web.Response(status=403)
    if protocol != websocket_stream.V5:
        try:
            kubelet.running_container(pod, container)
        except ExecError as e:
            return web.Response(status=500, text=str(e))
    ch = await _upgrade(request, protocol)
    await ch.send(_first_channel(opts), b"")
    return protocol, ch


async def serve_exec(request: web.Request, kubelet: Any, pod: dict, container: str, argv: list[str],
                     opts: dict[str, bool]) -> web.StreamResponse:
    """``opts``: stdin, stdout, stderr, tty (PodExecOptions after defaulting)."""
    opened = await _open(request, kubelet, pod, container, opts)
    if isinstance(opened, web.Response):
        return opened
    protocol, ch = opened
    queue: asyncio.Queue = asyncio.Queue()
    tty = opts["tty"]
    emit = (lambda c: (lambda d: queue.put_nowait((c, d))))
    try:
        proc = await kubelet.exec(pod, container, argv, tty=tty, stdin=opts["stdin"],
                                  on_stdout=emit(websocket_stream.STDOUT) if opts["stdout"] else _drop,
                                  on_stderr=emit(websocket_stream.STDERR) if opts["stderr"] and not tty else _drop)
    except ExecError as e:
        await ch.finish(websocket_stream.internal_error(f"unable to upgrade connection: {e}"))
        return ch.ws
    except runtime.StartError as e:
        words = (f'error executing command in container: failed to exec in container: failed to start exec '
                 f'"{kubelet.new_exec_id()}": OCI runtime exec failed: exec failed: unable to start container '
                 f"process: {e}: unknown")
        status = websocket_stream.internal_error(words)
        if protocol == websocket_stream.V5:  # the translator wraps the kubelet's InternalError once more
            status = websocket_stream.internal_error(status["message"])
        await ch.finish(status)
        return ch.ws
    sender = asyncio.create_task(_send_all(ch, queue))
    reader = asyncio.create_task(_read_input(ch, proc.write_stdin, proc.close_stdin, lambda: proc.tty_fd))
    waiter = asyncio.ensure_future(proc.wait())
    await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
    if not waiter.done():  # the client left first
        proc.close_stdin()
        if tty:
            proc.signal(signal.SIGHUP)
        sender.cancel()
        return ch.ws
    queue.put_nowait((None, b""))
    await sender
    code = waiter.result()
    await ch.finish(websocket_stream.success() if code == 0 else websocket_stream.exit_status(code, argv, protocol))
    reader.cancel()
    return ch.ws


async def serve_attach(request: web.Request, kubelet: Any, pod: dict, container: str,
                       opts: dict[str, bool]) -> web.StreamResponse:
    """``opts``: stdin, stdout, stderr, tty (PodAttachOptions after defaulting)."""
    opened = await _open(request, kubelet, pod, container, opts)
    if isinstance(opened, web.Response):
        return opened
    _, ch = opened
    queue: asyncio.Queue = asyncio.Queue()
    try:
        c = kubelet.running_container(pod, container)
    except ExecError as e:
        await ch.finish(websocket_stream.internal_error(f"unable to upgrade connection: {e}"))
        return ch.ws
    tty, instance, proc = bool(c.spec.get("tty")), c.log, c.process

    def on_output(stream: str, data: bytes) -> None:
        if (stream == STDOUT or tty) and opts["stdout"]:
            queue.put_nowait((websocket_stream.STDOUT, data))
        elif stream != STDOUT and opts["stderr"]:
            queue.put_nowait((websocket_stream.STDERR, data))

    detach = instance.listen(on_output)
    takes_stdin = opts["stdin"] and bool(c.spec.get("stdin")) and proc is not None
    sender = asyncio.create_task(_send_all(ch, queue))
    reader = asyncio.create_task(_read_input(
        ch, proc.write_stdin if takes_stdin else _drop, proc.close_stdin if takes_stdin else (lambda: None),
        lambda: proc.tty_fd if proc is not None else None))
    ended = asyncio.ensure_future(_ended(instance))
    await asyncio.wait({ended, reader}, return_when=asyncio.FIRST_COMPLETED)
    detach()
    if takes_stdin and c.spec.get("stdinOnce"):
        proc.close_stdin()
    if not ended.done():  # the client detached
        ended.cancel()
        sender.cancel()
        return ch.ws
    queue.put_nowait((None, b""))
    await sender
    await ch.finish(websocket_stream.success())
    reader.cancel()
    return ch.ws


async def _ended(log: Any) -> None:
    while not log.ended:
        await log.wait_change()
