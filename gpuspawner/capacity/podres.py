"""What a pod holds on its node, counted the way the kube-scheduler counts it.

The rule is ``k8s.io/component-helpers/resource/helpers.go`` ``PodRequests``
(used by the scheduler's NodeResourcesFit plugin and by the kubelet's
admission), see also the Kubernetes docs page "Sidecar containers",
section "Resource sharing within containers":

* app containers and sidecar init containers (``restartPolicy: Always``) run
  together, so their requests add up;
* a regular init container runs alone, next to the sidecars started before
  it, so the pod needs at least ``its request + those sidecars``;
* the pod's request is the larger of the two, plus ``spec.overhead``.

For a container, the request of a resource is ``requests[r]`` or, when only
a limit is set, ``limits[r]``: the API server defaults requests to limits
(``pkg/apis/core/v1/defaults.go`` ``SetDefaults_ResourceRequirements``), and
extended resources cannot be overcommitted, so both are equal when both are set.

Pure: stdlib only.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Mapping, NamedTuple

from gpuspawner.capacity.quantity import QuantityError, parse_count
from gpuspawner.capacity.warnonce import warn_once

log = logging.getLogger(__name__)

__all__ = ["PodRecord", "pod_key", "container_requests", "pod_usage", "pod_counts", "pod_record"]

_TERMINAL = ("Succeeded", "Failed")


class PodRecord(NamedTuple):
    """A GPU pod as the ledger keeps it (pods without GPUs are not stored).

    Pods without GPUs get none, so a hub watching 150,000 pods keeps only its GPU pods' records;
    what the cyclic garbage collector makes of them is docs/capacity.md's "Garbage collection"."""

    key: str  # "<namespace>/<name>"
    node: str | None  # spec.nodeName: bound to a node
    usage: tuple[tuple[str, int], ...]  # (resource, count), sorted, positive


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


def pod_usage(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> dict[str, int]:
    """The GPU resources the scheduler reserves for a pod spec (zeros dropped)."""
    total: dict[str, int] = {}
    for c in spec.get("containers") or ():
        if isinstance(c, dict):
            _add(total, container_requests(c, is_gpu))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or ():
        if not isinstance(c, dict):
            continue
        req = container_requests(c, is_gpu)
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
        _add(total, container_requests({"resources": {"requests": overhead}}, is_gpu))
    return {k: v for k, v in total.items() if v > 0}


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
    return PodRecord(key=key, node=node, usage=tuple(sorted(usage.items())))
