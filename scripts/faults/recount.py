"""GPU pools counted from scratch, for comparing with the incremental ledger.

The same reading of one node and one pod as the capacity cache (``labels.node_record``,
``pod_requests.pod_record``: what those say is tested on its own), but none of the ledger's
incremental bookkeeping: a plain loop over every object, as if the hub had just started.

Device-plugin pools only: DRA pools (``allocation == "dra"``, counted from ResourceSlices and
ResourceClaims, not Nodes and Pods) are left out on both sides of the comparison.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.model import CapacitySnapshot
from gpuspawner.capacity.pod_requests import pod_record

Counts = tuple[int, int, int, int]  # nodes, total, free, max_free_per_node


def recount(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
            config: CapacityConfig) -> dict[str, Counts]:
    """Pool id -> (contributing nodes, total GPUs, free GPUs, most free on one node)."""
    used: dict[tuple[str, str], int] = {}
    for obj in pods:
        rec = pod_record(obj, config.is_gpu_resource)
        if rec is None or rec.node is None:
            continue
        for resource, n in rec.usage:
            used[(rec.node, resource)] = used.get((rec.node, resource), 0) + n
    pools: dict[str, list[int]] = {}
    for obj in nodes:
        rec = node_record(obj, config)
        if rec is None:
            continue
        for g in rec.gpus:
            p = pools.setdefault(g.pool_id, [0, 0, 0, 0])
            if not rec.contributes:
                continue
            free = max(0, g.allocatable - used.get((rec.name, g.resource), 0))
            p[0] += 1
            p[1] += g.allocatable
            p[2] += free
            p[3] = max(p[3], free)
    return {k: (v[0], v[1], v[2], v[3]) for k, v in pools.items()}


def counted(snapshot: CapacitySnapshot) -> dict[str, Counts]:
    """The snapshot's device-plugin pools in :func:`recount`'s shape (declared pools without nodes
    left out)."""
    return {
        p.id: (p.nodes, p.total, p.free, p.max_free_per_node)
        for p in snapshot.pools
        if (p.node_views or p.nodes or p.total) and p.allocation != "dra"
    }


def from_api(pools: Iterable[Mapping[str, Any]]) -> dict[str, Counts]:
    """``GET /hub/api/gpus``'s device-plugin pools in :func:`recount`'s shape (declared pools without
    nodes left out)."""
    return {
        p["id"]: (p["nodes"], p["total"], p["free"], p["max_free_per_node"])
        for p in pools
        if (p["nodes"] or p["total"]) and p.get("allocation") != "dra"
    }


def differences(expected: Mapping[str, Counts], got: Mapping[str, Counts]) -> list[str]:
    """What differs, one line per pool; empty when the counts agree.  Pools whose nodes are all
    out of service (0 everywhere) may be present on one side only."""
    lines = []
    for pid in sorted(set(expected) | set(got)):
        e, g = expected.get(pid, (0, 0, 0, 0)), got.get(pid, (0, 0, 0, 0))
        if e != g:
            lines.append(f"{pid}: recount (nodes, total, free, max per node) = {e}, incremental = {g}")
    return lines
