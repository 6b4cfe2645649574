"""A raw HTTP/1.1 exchange over a socket, for bodies no HTTP library sends as a hostile client
does: a ``Content-Length`` the client may never finish sending, chunked bodies, ``Expect:
100-continue`` without the body, and the answer read however early the server gives it."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from typing import Any


def chunked(parts: Iterable[bytes]) -> Iterable[bytes]:
    """``parts`` in the chunked transfer coding, with the last chunk."""
    for part in parts:
        yield b"%x\r\n%s\r\n" % (len(part), part)
    yield b"0\r\n\r\n"


def exchange(port: int, head: str, body: Iterable[bytes] = (), *, read_first: bool = False,
             timeout: float = 60) -> tuple[int, Any]:
    """Send ``head`` (request line and headers, lines ended by ``\\n``, without the blank line),
    then ``body``; return the answer's status and its JSON body (its text if it is not JSON).
    A server that answers and closes before the body is all sent ends the sending, not the
    exchange.  ``read_first``: send no body (the client waits for ``100 Continue``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall((head.rstrip("\n") + "\n\n").replace("\n", "\r\n").encode())
        if not read_first:
            try:
                for part in body:
                    s.sendall(part)
            except OSError:  # answered and closed while the body was still coming
                pass
        raw = b""
        try:
            while True:
                data = s.recv(1 << 16)
                if not data:
                    break
                raw += data
                if _complete(raw):
                    break
        except OSError:
            pass
    while raw.startswith(b"HTTP/1.1 100"):  # an interim answer before the real one
        raw = raw.partition(b"\r\n\r\n")[2]
    head_part, _, payload = raw.partition(b"\r\n\r\n")
    if not head_part:
        raise AssertionError("the server closed the connection without an answer")
    status = int(head_part.split()[1])
    if b"transfer-encoding: chunked" in head_part.lower():
        payload = _unchunk(payload)
    try:
        return status, json.loads(payload)
    except ValueError:
        return status, payload.decode(errors="replace")


def _complete(raw: bytes) -> bool:
    while raw.startswith(b"HTTP/1.1 100"):
        raw = raw.partition(b"\r\n\r\n")[2]
    head, sep, payload = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(payload) >= int(line.split(b":")[1])
    return payload.endswith(b"0\r\n\r\n")


def _unchunk(payload: bytes) -> bytes:
    out = b""
    while payload:
        size, _, rest = payload.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out, payload = out + rest[:n], rest[n + 2:]
    return out
