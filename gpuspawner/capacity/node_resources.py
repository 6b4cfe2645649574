"""CPU, memory, ephemeral storage and pod slots: what a node can hold and what a pod asks of it.

Pure: stdlib only. The rule is kube-scheduler's NodeResourcesFit (docs/capacity.md, "CPU and memory fit").
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

from gpuspawner.capacity.quantity import QuantityError, parse_quantity

log = logging.getLogger(__name__)

__all__ = ["DIMENSIONS", "NO_LIMIT", "KUBELET_MAX_PODS", "node_base", "base_of", "fits", "room",
           "add", "shortfall_words", "request_words"]

#: the resources NodeResourcesFit checks besides extended ones: a node's or a request's "base" is a plain
#: tuple of CPU in millicores, memory and ephemeral storage in bytes, and pods (a pod takes one)
DIMENSIONS = ("cpu", "memory", "ephemeral-storage", "pods")
#: the kubelet's default ``maxPods``, for a node object that reports no ``pods`` allocatable
KUBELET_MAX_PODS = 110
#: a node that reports no ``ephemeral-storage`` is not judged on it (the scheduler would refuse any request)
NO_LIMIT = 1 << 62


def _amount(raw: Any, scale: int, round_up: bool) -> int | None:
    try:
        q = parse_quantity(raw) * scale
    except QuantityError:
        return None
    n = math.ceil(q) if round_up else math.floor(q)
    return max(n, 0)


def node_base(allocatable: Mapping[str, Any], name: str = "") -> tuple[int, int, int, int]:
    """A node's ``status.allocatable`` CPU, memory, ephemeral storage and pods (down: promise nothing
    that is not there). Malformed values count as 0 and are logged; a missing ``pods`` is the
    kubelet's default, a missing ``ephemeral-storage`` :data:`NO_LIMIT`."""
    out = []
    for key, scale, missing in (("cpu", 1000, 0), ("memory", 1, 0), ("ephemeral-storage", 1, NO_LIMIT),
                                ("pods", 1, KUBELET_MAX_PODS)):
        raw = allocatable.get(key)
        if raw is None:
            out.append(missing)
            continue
        n = _amount(raw, scale, round_up=False)
        if n is None:
            log.warning("node %s: ignoring allocatable %s=%r", name, key, raw)
            n = 0
        out.append(n)
    return tuple(out)  # a plain tuple: thousands of nodes, untracked by the cyclic collector


def base_of(requests: Mapping[str, Any]) -> tuple[int, int, int]:
    """CPU (millicores, up), memory and ephemeral storage (bytes, up) of a requests mapping; malformed
    values count as 0 (the API server would have refused them)."""
    out = []
    for key, scale in (("cpu", 1000), ("memory", 1), ("ephemeral-storage", 1)):
        raw = requests.get(key)
        n = _amount(raw, scale, round_up=True) if raw is not None else 0
        out.append(n or 0)
    return tuple(out)


def add(into: list[int], more: tuple[int, ...], sign: int = 1) -> None:
    for i, v in enumerate(more):
        into[i] += sign * v


def room(allocatable: tuple[int, ...], requested: list[int] | tuple[int, ...]) -> tuple[int, ...]:
    """What is left of a node for one more pod, per dimension (never below 0)."""
    return tuple(max(a - r, 0) for a, r in zip(allocatable, requested))


def fits(request: tuple[int, ...], space: tuple[int, ...]) -> bool:
    """NodeResourcesFit: every requested amount within what is left (a pod takes one pod slot)."""
    return all(r <= s for r, s in zip(request, space))


def _cpus(milli: int) -> str:
    cores = milli / 1000
    return f"{cores:g}" if cores >= 10 or cores == int(cores) else f"{cores:.1f}"


def _bytes(n: int) -> str:
    gib = n / (1 << 30)
    return f"{gib:.0f} GiB" if gib >= 10 or gib == int(gib) else f"{gib:.1f} GiB"


def request_words(request: tuple[int, ...]) -> str:
    """``8 CPUs, 30 GiB of memory``: what a server asks of its node, for the page."""
    parts = []
    if request[0]:
        parts.append(f"{_cpus(request[0])} CPU{'' if request[0] == 1000 else 's'}")
    if request[1]:
        parts.append(f"{_bytes(request[1])} of memory")
    if len(request) > 2 and request[2]:
        parts.append(f"{_bytes(request[2])} of disk")
    return ", ".join(parts) or "no CPU or memory"


def shortfall_words(request: tuple[int, ...], largest: tuple[int, ...], nodes: str = "its nodes") -> str | None:
    """Why a server never fits nodes as big as ``largest``: ``T4 nodes have 3.9 CPUs; this server needs 8``
    (``nodes`` names them), or None when it does fit."""
    lacks = []
    if request[0] > largest[0]:
        lacks.append((f"{_cpus(largest[0])} CPUs", f"{_cpus(request[0])}"))
    if request[1] > largest[1]:
        lacks.append((f"{_bytes(largest[1])} of memory", _bytes(request[1])))
    if len(request) > 2 and request[2] > largest[2]:
        lacks.append((f"{_bytes(largest[2])} of disk", _bytes(request[2])))
    if len(request) > 3 and request[3] > largest[3]:
        lacks.append(("no room for another pod", "one"))
    if not lacks:
        return None
    have = " and ".join(h for h, _ in lacks)
    need = " and ".join(n for _, n in lacks)
    return f"{nodes} have {have}; this server needs {need}"
