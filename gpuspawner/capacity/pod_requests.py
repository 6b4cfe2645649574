"""What a pod holds on its node, counted the way the kube-scheduler counts it.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, NamedTuple

from gpuspawner.capacity.node_resources import base_of
from gpuspawner.capacity.quantity import QuantityError, parse_count
from gpuspawner.capacity.warnonce import warn_once

log = logging.getLogger(__name__)

__all__ = ["PodRecord", "pod_key", "container_requests", "pod_usage", "pod_base", "pod_counts", "pod_record",
           "base_record"]

_TERMINAL = ("Succeeded", "Failed")


class PodRecord(NamedTuple):
    """A GPU pod as the ledger keeps it (pods without GPUs are not stored).

    Pods without GPUs get none, so a hub watching 150,000 pods keeps only its GPU pods' records;
    what the cyclic garbage collector makes of them is docs/capacity.md's "Garbage collection"."""

    key: str  # "<namespace>/<name>"
    node: str | None  # spec.nodeName: bound to a node
    usage: tuple[tuple[str, int], ...]  # (resource, count), sorted, positive
    # CPU (millicores), memory and ephemeral storage (bytes) it requests (pod_base)
    base: tuple[int, int, int] = (0, 0, 0)


def pod_key(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    return f"{meta.get('namespace') or 'default'}/{name}"


def container_requests(container: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, int]:
    """GPU requests of one container (requests, else limits)."""
    res = container.get("resources") or {}
    requests = res.get("requests") or {}
    limits = res.get("limits") or {}
    out: dict[str, int] = {}
    for source in (limits, requests):  # requests win: written last
        if not isinstance(source, dict):
            continue
        for resource, raw in source.items():
            if not is_gpu(resource):
                continue
            try:
                out[resource] = parse_count(raw, round_up=True)
            except QuantityError as e:
                warn_once(log, ("container", container.get("name"), resource, str(raw)),
                          "container %s: its %s %r is not counted: %s", container.get("name"), resource, raw, e)
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _base_requests(container: Mapping[str, Any]) -> dict[str, int]:
    """CPU, memory and ephemeral storage of one container (requests, else limits), as ints."""
    res = container.get("resources") or {}
    merged: dict[str, Any] = {}
    for source in (res.get("limits"), res.get("requests")):  # requests win: written last
        if isinstance(source, dict):
            merged.update(source)
    cpu, memory, ephemeral = base_of(merged)
    return {"cpu": cpu, "memory": memory, "ephemeral-storage": ephemeral}


def _pod_totals(spec: Mapping[str, Any], read: Callable[[Mapping[str, Any]], dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        if isinstance(c, dict):
            _add(total, read(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        if not isinstance(c, dict):
            continue
        req = read(c)
        if c.get("restartPolicy") == "Always":
            # a sidecar keeps running next to the app containers
            _add(total, req)
            _add(sidecars, req)
            _max(init_peak, sidecars)
        else:
            step = dict(req)
            _add(step, sidecars)
            _max(init_peak, step)
    _max(total, init_peak)
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        _add(total, read({"resources": {"requests": overhead}}))
    return {k: v for k, v in total.items() if v > 0}


def pod_usage(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, int]:
    """The GPU resources the scheduler reserves for a pod spec (zeros dropped)."""
    return _pod_totals(spec, lambda c: container_requests(c, is_gpu))


def pod_base(spec: Mapping[str, Any]) -> tuple[int, int, int]:
    """CPU (millicores), memory and ephemeral storage (bytes) the scheduler reserves for a pod spec,
    by the same rule as GPUs (NodeResourcesFit)."""
    total = _pod_totals(spec, _base_requests)
    return (total.get("cpu", 0), total.get("memory", 0), total.get("ephemeral-storage", 0))


def pod_counts(obj: Mapping[str, Any]) -> bool:
    """Whether a pod holds its resources on a node.

    Bound (``spec.nodeName``) and not Succeeded/Failed; a pod being deleted
    (``deletionTimestamp`` set) still holds them until it is gone, as in the
    scheduler's cache, which drops a pod only on its DELETE event.
    """
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return bool(spec.get("nodeName")) and status.get("phase") not in _TERMINAL


def pod_record(obj: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> PodRecord | None:
    """The record of a pod that holds or will hold GPUs; None for any other pod.

    Unbound GPU pods are kept (with ``node=None``, counting nothing) so that a
    reservation knows its pod exists; terminal pods give None: they hold nothing.
    """
    key = pod_key(obj)
    if key is None:
        return None
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        return None
    status = obj.get("status") or {}
    if status.get("phase") in _TERMINAL:
        return None
    usage = pod_usage(spec, is_gpu)
    if not usage:
        return None
    node = spec.get("nodeName") or None
    return PodRecord(key=key, node=node, usage=tuple(sorted(usage.items())), base=pod_base(spec))


def base_record(obj: Mapping[str, Any]) -> tuple[str, int, int, int] | None:
    """``(node, cpu, memory, ephemeral storage)`` of a pod without GPUs that holds room on its node
    (bound, not Succeeded/Failed); None otherwise. A plain tuple of atoms: a hub watching 150,000
    pods keeps one small record per bound pod, which the cyclic garbage collector does not track."""
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict) or not pod_counts(obj):
        return None
    node = spec.get("nodeName")
    if not isinstance(node, str):
        return None
    return (node, *pod_base(spec))
