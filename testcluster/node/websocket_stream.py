"""The ``channel.k8s.io`` WebSocket protocols of ``pods/exec`` and ``pods/attach``.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, AsyncIterator

from aiohttp import WSMsgType, web

__all__ = ["V5", "V4", "PROTOCOLS", "STDIN", "STDOUT", "STDERR", "ERROR", "RESIZE", "CLOSE", "negotiate",
           "Channels", "success", "exit_status", "internal_error", "status_bytes"]

STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
V5, V4, V4_BASE64 = "v5.channel.k8s.io", "v4.channel.k8s.io", "v4.base64.channel.k8s.io"
V1, V1_BASE64 = "channel.k8s.io", "base64.channel.k8s.io"
PROTOCOLS = (V5, V4, V4_BASE64, V1, V1_BASE64)


def negotiate(header: str | None) -> str | None:
    """The protocol to speak: the first the client lists that is served; ``""`` when it lists
    none; ``None`` when it lists only protocols not served (refuse the handshake)."""
    asked = [p.strip() for p in (header or "").split(",") if p.strip()]
    if not asked:
        return ""
    return next((p for p in asked if p in PROTOCOLS), None)


def _status(status: str, message: str | None = None, reason: str | None = None,
            details: dict | None = None, code: int | None = None) -> dict[str, Any]:
    # json.Marshal(metav1.Status): TypeMeta empty, metadata always, then the set fields in order
    out: dict[str, Any] = {"metadata": {}, "status": status}
    for key, value in (("message", message), ("reason", reason), ("details", details), ("code", code)):
        if value:
            out[key] = value
    return out


def success() -> dict[str, Any]:
    return _status("Success")


def exit_status(code: int, argv: list[str], protocol: str) -> dict[str, Any]:
    """A non-zero exit as the error channel carries it.  v5 passes through the API server's stream
    translator, which words the exit as client-go decoded it from the kubelet; older protocols
    reach the runtime's words (containerd's ``error executing command [...], exit code N``)."""
    if protocol == V5:
        inner = f"command terminated with exit code {code}"
    else:
        inner = f"error executing command [{' '.join(argv)}], exit code {code}"
    return _status("Failure", f"command terminated with non-zero exit code: {inner}", "NonZeroExitCode",
                   {"causes": [{"reason": "ExitCode", "message": str(code)}]})


def internal_error(message: str) -> dict[str, Any]:
    """``api_errors.NewInternalError``."""
    return _status("Failure", f"Internal error occurred: {message}", "InternalError",
                   {"causes": [{"message": message}]}, 500)


def status_bytes(status: dict[str, Any], protocol: str) -> bytes | None:
    """What the error channel carries for ``status`` (None: nothing)."""
    if protocol in (V5, V4, V4_BASE64):
        text = json.dumps(status, separators=(",", ":"), ensure_ascii=False)
        # encoding/json escapes <, > and & for HTML
        return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()
    if status.get("status") == "Success":
        return None
    return str(status.get("message", "")).encode()


@dataclass
class Channels:
    """One upgraded connection: channel-numbered messages both ways."""
    ws: web.WebSocketResponse
    protocol: str

    @property
    def base64(self) -> bool:
        return self.protocol in (V4_BASE64, V1_BASE64)

    async def send(self, channel: int, data: bytes) -> None:
        if self.ws.closed:
            return
        if self.base64:
            await self.ws.send_str(chr(ord("0") + channel) + base64.b64encode(data).decode())
        else:
            await self.ws.send_bytes(bytes([channel]) + data)

    async def messages(self) -> AsyncIterator[tuple[int, bytes]]:
        """(channel, data) as the client sends them, until it closes."""
        async for msg in self.ws:
            if msg.type == WSMsgType.BINARY and msg.data:
                yield msg.data[0], bytes(msg.data[1:])
            elif msg.type == WSMsgType.TEXT and msg.data:
                channel = ord(msg.data[0]) - (ord("0") if self.base64 else 0)
                payload = msg.data[1:]
                try:
                    data = base64.b64decode(payload) if self.base64 else payload.encode()
                except ValueError:
                    continue
                yield channel, data
            elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE, WSMsgType.CLOSING):
                return

    async def finish(self, status: dict[str, Any]) -> None:
        """The status on the error channel, then the close frame (``conns.finish``)."""
        data = status_bytes(status, self.protocol)
        if data is not None:
            await self.send(ERROR, data)
        await self.ws.close()
