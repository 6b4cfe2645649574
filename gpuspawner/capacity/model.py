"""The records the capacity layer hands to the rest of gpuspawner.

Pure data: no JupyterHub, no Kubernetes client.  The spawner, the REST handler
and the spawn page read only these; the ledger (``gpuspawner.capacity.ledger``)
and the informer cache (``gpuspawner.capacity.cache``) produce them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Taint(NamedTuple):
    """A node taint. A tuple of strings: the cyclic garbage collector stops tracking records
    made only of such values, which keeps its full passes short on hubs watching big clusters."""

    key: str
    value: str | None
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def to_k8s(self) -> dict[str, Any]:
        d: dict[str, Any] = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            d["value"] = self.value
        return d


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """A pool that the cluster autoscaler can grow (declared by the admin)."""

    max_nodes: int
    gpus_per_node: int
    minutes: float

    def to_json(self) -> dict[str, Any]:
        return {
            "max_nodes": self.max_nodes,
            "gpus_per_node": self.gpus_per_node,
            "minutes": self.minutes,
        }


@dataclass(frozen=True, slots=True)
class NodeView:
    """One contributing node of a pool: what steering by driver needs."""

    name: str
    allocatable: int
    free: int
    driver_version: str | None  # "535.183.01", from GFD labels
    cuda_version: str | None  # "12.2": the newest CUDA the driver supports
    compute_capability: str | None  # "8.0"
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PoolView:
    """One GPU pool: nodes with the same GPU resource, product and node group."""

    id: str  # see pool_id()
    resource: str  # "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"
    product: str | None
    memory_mib: int | None
    node_group_label: str | None  # e.g. "cloud.google.com/gke-nodepool"
    node_group: str | None  # its value
    nodes: int
    total: int
    free: int
    max_free_per_node: int
    driver_version: str | None  # the lowest driver among the pool's nodes
    cuda_version: str | None  # the lowest driver CUDA among the pool's nodes
    scale_up: ScaleUp | None
    # labels every node of the pool carries and that define it (group label,
    # product label): what a required node affinity keeps a pod inside with
    defining_labels: tuple[tuple[str, str], ...]
    # the union of the taints on the pool's nodes (discovered or declared)
    taints: tuple[Taint, ...]
    node_views: tuple[NodeView, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The exact object of ``GET /hub/api/gpus`` (issue #2, section 4)."""
        return {
            "id": self.id,
            "resource": self.resource,
            "product": self.product,
            "memory_mib": self.memory_mib,
            "nodes": self.nodes,
            "total": self.total,
            "free": self.free,
            "max_free_per_node": self.max_free_per_node,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "scale_up": self.scale_up.to_json() if self.scale_up else None,
        }


@dataclass(frozen=True, slots=True)
class CapacitySnapshot:
    pools: tuple[PoolView, ...]
    synced: bool  # the first list of nodes and pods has completed
    age_seconds: float  # time since the cache last heard from the API server
    generation: int  # bumps on every change that alters a pool
    healthy: bool = True
    error: str | None = None  # e.g. "forbidden: list nodes at the cluster scope"
    pools_by_id: dict[str, PoolView] = field(default_factory=dict, compare=False)

    def pool(self, pool_id: str) -> PoolView | None:
        if not self.pools_by_id and self.pools:
            for p in self.pools:
                self.pools_by_id[p.id] = p
        return self.pools_by_id.get(pool_id)

    def to_json(self, pools: tuple[PoolView, ...] | None = None) -> dict[str, Any]:
        """The body of ``GET /hub/api/gpus``.  ``healthy`` is true (and ``error`` null) only
        while the figures are live; otherwise ``error`` says why in plain words and
        ``age_seconds`` how old the figures served are."""
        return {
            "pools": [p.to_json() for p in (self.pools if pools is None else pools)],
            "synced": self.synced,
            "healthy": bool(self.healthy and self.synced and not self.error),
            "error": self.error or (None if self.healthy and self.synced else "GPU capacity is unknown"),
            "age_seconds": round(self.age_seconds, 3),
        }


def _slug(value: str) -> str:
    out = []
    for ch in value.lower():
        if ch.isascii() and (ch.isalnum() or ch in "-."):
            out.append(ch)
        else:
            out.append("-")
    return "".join(out).strip("-.") or "x"


def pool_id(node_group: str | None, product: str | None, resource: str) -> str:
    """The stable id of a pool: ``<group>:<product>:<resource>``.

    Each part is lowercased and reduced to ``[a-z0-9.-]`` (the resource name
    keeps its ``/``), e.g. ``gpu-a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu``.
    A node with no group label is in group ``default``; an unknown product is
    ``unknown``.
    """
    res = "/".join(_slug(part) for part in resource.split("/", 1))
    return f"{_slug(node_group or 'default')}:{_slug(product or 'unknown')}:{res}"
