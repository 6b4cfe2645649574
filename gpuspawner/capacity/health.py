"""The capacity cache's troubles in plain words, for users and admins alike.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Mapping

from gpuspawner.kube.api_errors import REASONS, ApiStatus, explain

__all__ = ["KINDS", "describe_failure", "combine", "age_words", "figures_age", "silent_message", "stalled_message", "syncing_message"]

#: what the informers read, in the words a message uses
KINDS = {"nodes": "nodes", "pods": "pods"}

_MAX_DETAIL = 200  # characters of a server's own message kept in ours


def _detail(text: object) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= _MAX_DETAIL else s[: _MAX_DETAIL - 3] + "..."


def _connection(error: BaseException) -> str:
    code = getattr(error, "errno", None)
    os_error = getattr(error, "os_error", None)  # aiohttp's ClientConnectorError wraps the OSError
    if code is None and isinstance(os_error, OSError):
        code = os_error.errno
    if code == errno.ECONNREFUSED:
        why = "connection refused"
    elif code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        why = "no route to it"
    elif code == errno.ECONNRESET:
        why = "the connection was reset"
    elif "disconnect" in type(error).__name__.lower():
        why = "it closed the connection"
    else:
        why = "the connection failed"
    return f"cannot connect to the Kubernetes API server ({why})"


def describe_failure(error: BaseException, *, timeout: float | None = None) -> str:
    """What went wrong in talking to the Kubernetes API server, in a sentence without
    exception names.  ``timeout``: the seconds the request was given, for "did not answer"."""
    status = getattr(error, "status", None)
    if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
        message = _detail(getattr(error, "message", "") or "")
        return explain(ApiStatus(status, REASONS.get(status, ""), message))
    if isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        within = f" within {timeout:g} s" if timeout else " in time"
        return f"the Kubernetes API server did not answer{within}"
    if isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
        return "the Kubernetes API server sent a reply that is not valid JSON"
    if isinstance(error, (ConnectionError, OSError)) or "connect" in type(error).__name__.lower():
        return _connection(error)
    if "payload" in type(error).__name__.lower():  # aiohttp: a stream cut in the middle
        return "the connection to the Kubernetes API server broke in the middle of a reply"
    return "an unexpected error while reading from the Kubernetes API server (the hub's log has the details)"


def combine(errors: Mapping[str, str]) -> str | None:
    """One sentence for the informers' errors (``{"nodes": text, "pods": text}``):
    "the hub cannot read the cluster's nodes and pods: <text>", or one clause per kind."""
    errors = {k: v for k, v in errors.items() if v}
    if not errors:
        return None
    texts = set(errors.values())
    if len(texts) == 1:
        kinds = " and ".join(KINDS.get(k, k) for k in errors)
        return f"the hub cannot read the cluster's {kinds}: {texts.pop()}"
    return "; ".join(f"the hub cannot read the cluster's {KINDS.get(k, k)}: {v}" for k, v in errors.items())


def age_words(seconds: float) -> str:
    """``"45 s"``, ``"3 min"``, ``"2 h 5 min"``: how old figures are, for a sentence."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    h, m = divmod(s // 60, 60)
    return f"{h} h {m} min" if m else f"{h} h"


def figures_age(seconds: float) -> str:
    """The clause a "capacity is unknown" message ends with: how old the figures shown are."""
    return f"the last figures are {age_words(seconds)} old"


def silent_message(bound: float) -> str:
    """The cache heard nothing for longer than ``bound`` seconds although no request failed
    (a watch or a request that hangs): its figures may be out of date."""
    return (
        f"the hub has heard nothing from the Kubernetes API server for more than {bound:g} s "
        "(its watch on the cluster may be stuck; it is being restarted)"
    )


def stalled_message(kinds: list[str], bound: float) -> str:
    """A watch delivered nothing (no event, no bookmark) for longer than ``bound`` seconds: its
    figures are not trusted until it is listed afresh and a watch delivers again (a list that
    answers proves nothing about the watch)."""
    names = " and ".join(KINDS.get(k, k) for k in kinds)
    return (
        f"the hub's watch of the cluster's {names} delivered nothing for more than {bound:g} s "
        "(no event, no bookmark); the figures are not trusted until it is read afresh and the watch delivers again"
    )


def syncing_message() -> str:
    return "the hub has not finished reading the cluster's nodes and pods yet"
