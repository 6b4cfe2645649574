"""The pods' connect subresources as the API server serves them: ``log``, ``exec``, ``attach``.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any, Mapping

from aiohttp import web

from testcluster.node.kubelet.logs import LogError

from .errors import ApiError, bad_request, invalid

__all__ = ["STREAM_SUBRESOURCES", "pick_container", "log_options", "exec_options", "pod_log", "pod_exec",
           "pod_attach"]

# subresource -> the HTTP methods it takes (``ConnectMethods``)
STREAM_SUBRESOURCES = {"log": ("GET",), "exec": ("GET", "POST"), "attach": ("GET", "POST")}

_TRUE = ("1", "t", "T", "true", "TRUE", "True")
_FALSE = ("0", "f", "F", "false", "FALSE", "False")
_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


def _bool(query: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value in _TRUE or value == "":
        return True
    if value in _FALSE:
        return False
    raise bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax')


def _int(query: Mapping[str, str], name: str) -> int | None:
    value = query.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def _time_ns(query: Mapping[str, str], name: str) -> int | None:
    """``metav1.Time`` from a query parameter: RFC 3339 (``time.Parse(time.RFC3339, ...)``)."""
    value = query.get(name)
    if value is None or value == "":
        return None
    m = _RFC3339.match(value)
    try:
        if not m:
            raise ValueError
        stamp = value[:19] + (value[m.start(8):] if m.group(8) != "Z" else "+00:00")
        seconds = datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        raise bad_request(f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse '
                          f'"{value}" as "2006"') from None
    frac = m.group(7) or ""
    return int(seconds) * 1_000_000_000 + int((frac[1:] + "000000000")[:9] or 0)


def pick_container(pod: Mapping[str, Any], container: str | None) -> str:
    """``validateContainer``: the named one must exist; unnamed, the pod's only container."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    apps = [c.get("name") for c in spec.get("containers") or []]
    inits = [c.get("name") for c in spec.get("initContainers") or []]
    if not container:
        if len(apps) == 1:
            return str(apps[0])
        if not apps:
            raise bad_request(f"a container name must be specified for pod {name}")
        msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(apps)}]"
        if inits:
            msg += f" or one of the init containers: [{' '.join(inits)}]"
        raise bad_request(msg)
    if container not in apps and container not in inits:
        raise bad_request(f"container {container} is not valid for pod {name}")
    return container


def log_options(query: Mapping[str, str], name: str) -> tuple[str | None, dict[str, Any]]:
    """``PodLogOptions`` from the query, validated; (container, the kubelet's log options)."""
    opts = {"follow": _bool(query, "follow"), "previous": _bool(query, "previous"),
            "timestamps": _bool(query, "timestamps"), "tail_lines": _int(query, "tailLines"),
            "limit_bytes": _int(query, "limitBytes")}
    since_seconds, since_ns = _int(query, "sinceSeconds"), _time_ns(query, "sinceTime")
    causes = []
    if opts["tail_lines"] is not None and opts["tail_lines"] < 0:
        causes.append(("FieldValueInvalid", "tailLines",
                       f"Invalid value: {opts['tail_lines']}: must be greater than or equal to 0"))
    if opts["limit_bytes"] is not None and opts["limit_bytes"] < 1:
        causes.append(("FieldValueInvalid", "limitBytes", f"Invalid value: {opts['limit_bytes']}: must be greater than 0"))
    if since_seconds is not None and since_ns is not None:
        causes.append(("FieldValueForbidden", "",
                       "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"))
    elif since_seconds is not None and since_seconds < 1:
        causes.append(("FieldValueInvalid", "sinceSeconds", f"Invalid value: {since_seconds}: must be greater than 0"))
    if causes:
        raise invalid("PodLogOptions", name, causes)
    if since_seconds is not None:
        since_ns = time.time_ns() - since_seconds * 1_000_000_000
    opts["since_ns"] = since_ns
    return query.get("container") or None, opts


def _stream_flags(query: Mapping[str, str]) -> dict[str, bool]:
    # SetDefaults_PodExecOptions/PodAttachOptions: stdout and stderr are true whatever was asked
    return {"stdin": _bool(query, "stdin"), "stdout": True, "stderr": True, "tty": _bool(query, "tty")}


def exec_options(query: Any) -> tuple[str | None, list[str], dict[str, bool]]:
    """``PodExecOptions`` from the query: (container, command, stream flags)."""
    return query.get("container") or None, list(query.getall("command", [])), _stream_flags(query)


def _node_or_refuse(pod: Mapping[str, Any], kubelet: Any) -> None:
    if not (pod.get("spec") or {}).get("nodeName"):
        raise bad_request(f"pod {(pod.get('metadata') or {}).get('name', '')} does not have a host assigned")
    if kubelet is None:
        raise ApiError(503, "ServiceUnavailable", "no kubelet serves this node (the simulated cluster runs none)")


def _upgrade_or_refuse(request: web.Request) -> None:
    upgrade = request.headers.get("Upgrade", "").lower()
    if upgrade == "websocket" and "upgrade" in request.headers.get("Connection", "").lower():
        return
    if upgrade.startswith("spdy/"):
        raise bad_request("the simulated API server streams over WebSocket (v5.channel.k8s.io, "
                          "v4.channel.k8s.io), not SPDY/3.1")
    raise bad_request("Upgrade request required")


async def pod_log(request: web.Request, pod: Mapping[str, Any], kubelet: Any) -> web.StreamResponse:
    """``GET pods/{name}/log``: ``text/plain``, streamed (``follow``) until the container stops or
    the client leaves."""
    name = (pod.get("metadata") or {}).get("name", "")
    container, opts = log_options(request.query, name)
    container = pick_container(pod, container)
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
    if not (pod.get("spec") or {}).get("nodeName") or kubelet is None:
        await resp.prepare(request)  # no node, no location: an empty log
        await resp.write_eof()
        return resp
    try:
        chunks = kubelet.log_stream(dict(pod), container, **opts)
    except LogError as e:
        raise bad_request(str(e)) from None
    if opts["follow"]:
        resp.enable_chunked_encoding()
    await resp.prepare(request)
    try:
        async for chunk in chunks:
            await resp.write(chunk)
    except (ConnectionResetError, ConnectionError):
        return resp
    finally:
        await chunks.aclose()
    await resp.write_eof()
    return resp


async def pod_exec(request: web.Request, pod: Mapping[str, Any], kubelet: Any) -> web.StreamResponse:
    container, command, flags = exec_options(request.query)
    container = pick_container(pod, container)
    if not command:
        raise bad_request("you must specify at least one command for the container")
    _node_or_refuse(pod, kubelet)
    _upgrade_or_refuse(request)
    return await kubelet.serve_exec(request, dict(pod), container, command, flags)


async def pod_attach(request: web.Request, pod: Mapping[str, Any], kubelet: Any) -> web.StreamResponse:
    container = pick_container(pod, request.query.get("container") or None)
    _node_or_refuse(pod, kubelet)
    _upgrade_or_refuse(request)
    return await kubelet.serve_attach(request, dict(pod), container, _stream_flags(request.query))
