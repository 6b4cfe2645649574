"""The records the capacity layer hands to the rest of gpuspawner.  Design notes: docs/capacity.md."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

from gpuspawner.capacity.names import pool_display_name
from gpuspawner.capacity.sharing import MIG, NONE, mig_profile_of

#: The node labels that name a node's NVIDIA driver and that a required node affinity can
#: steer by (GPU Feature Discovery, NVIDIA/k8s-device-plugin
#: ``docs/gpu-feature-discovery/README.md``): the full version, written since GFD v0.15.0, and the deprecated major version,
#: the only driver label older GFD releases write that one expression can match.
DRIVER_LABELS: tuple[str, ...] = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.driver.major")


class Taint(NamedTuple):
    """A node taint. Nodes with the same taint share one record (``labels.node_record``)."""

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


class NodeView(NamedTuple):
    """One contributing node of a pool: what steering by driver needs.

    Atoms only, like :class:`Taint`: the cyclic garbage collector stops tracking it, so a
    pool of thousands of nodes adds nothing to the collector's full passes."""

    name: str
    allocatable: int
    free: int
    driver_version: str | None  # "535.183.01", from GFD labels
    cuda_version: str | None  # "12.2": the newest CUDA the driver supports
    compute_capability: str | None  # "8.0"
    labels: tuple[tuple[str, str], ...] = ()
    # bit i set: the pool's i-th tracked server request (PoolView.requests) fits beside what the
    # node's pods request now (``fits``) / within its allocatable at all (``holds``)
    fits: int = 0
    holds: int = 0


class FitCount(NamedTuple):
    """A pool (or driver group) for one server request: the nodes it fits on now, the GPUs free on
    them, the most free on one of them, and the nodes big enough for it at all."""

    nodes: int
    free: int
    max_free_per_node: int
    holding: int


#: How a pool's GPUs reach a pod (``PoolView.allocation``, exact in ``GET /hub/api/gpus``).
DEVICE_PLUGIN = "device-plugin"  # an extended resource in node allocatable (``nvidia.com/gpu``)
DRA = "dra"  # devices in ResourceSlices, handed out through ResourceClaims (resource.k8s.io/v1)


@dataclass(frozen=True, slots=True)
class DraFacts:
    """What a claim for a DRA pool's devices must say (``gpuspawner.spawn.dra_claim`` builds it).

    ``device_class``: the DeviceClass whose selectors take the pool's devices (also the pool's
    ``resource``); ``driver``: ``spec.driver`` of their ResourceSlices; ``product_name``,
    ``profile`` (MIG), ``device_type``: the attribute values (``productName``, ``profile``,
    ``type``) every device of the pool has, which the claim's CEL selectors repeat.
    """

    driver: str
    device_class: str
    product_name: str | None
    profile: str | None = None
    device_type: str | None = None
    sharing: str | None = None  # the DeviceClass's sharing strategy (time-slicing, mps), if it sets one


class Pin(NamedTuple):
    """Labels that keep a pod among the nodes of a pool: those they carry (``In``) and those
    they do not (``DoesNotExist``): the node-group labels that would have put them in another
    group, the product labels their product is not read from. Nodes of one pool may be pinned
    differently (a MIG product read from its own label on some nodes, derived from the GPU's
    on others); a pool has one pin per way, and a pod may land on a node matching any."""

    present: tuple[tuple[str, str], ...]
    absent: tuple[str, ...] = ()


class DriverGroup(NamedTuple):
    """The contributing nodes of one pool that share a driver.

    What an image's CUDA fit depends on is the same for all of them (driver,
    the CUDA it supports, compute capability; the product is the pool's), so
    the CUDA check judges a group once, and a pod is steered off a group by
    its :data:`DRIVER_LABELS` values, not by node names. A pool of thousands
    of nodes has a handful of groups. Atoms only, so the cyclic GC does not
    track it.
    """

    driver_version: str | None
    cuda_version: str | None
    compute_capability: str | None
    labels: tuple[tuple[str, str], ...]  # the DRIVER_LABELS the group's nodes carry, with their values
    nodes: int
    total: int  # allocatable GPUs
    free: int
    max_free_per_node: int
    max_allocatable: int
    # one FitCount per tracked server request (PoolView.requests), empty when none is tracked
    fits: tuple[FitCount, ...] = ()

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes the group: :func:`driver_key` of each of its nodes."""
        return (self.driver_version, self.cuda_version, self.compute_capability, self.labels)


def driver_key(view: NodeView) -> tuple[Any, ...]:
    """The :class:`DriverGroup` key of one node."""
    labels = tuple(kv for kv in view.labels if kv[0] in DRIVER_LABELS)
    return (view.driver_version, view.cuda_version, view.compute_capability, labels)


def group_order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A total order on group keys (None first), so a pool lists its groups the same way every time."""
    return tuple("" if v is None else v for v in key)


def driver_groups(views: Iterable[NodeView], requests: int = 0) -> tuple[DriverGroup, ...]:
    """The groups of ``views``, counted from scratch (the ledger keeps the same incrementally), with
    a :class:`FitCount` for each of ``requests`` tracked server requests (``NodeView.fits``)."""
    acc: dict[tuple[Any, ...], list[Any]] = {}
    for v in views:
        a = acc.setdefault(driver_key(v), [0, 0, 0, 0, 0, [[0, 0, 0, 0] for _ in range(requests)]])
        a[0] += 1
        a[1] += v.allocatable
        a[2] += v.free
        a[3] = max(a[3], v.free)
        a[4] = max(a[4], v.allocatable)
        for i, f in enumerate(a[5]):
            if v.fits >> i & 1:
                f[0] += 1
                f[1] += v.free
                f[2] = max(f[2], v.free)
            if v.holds >> i & 1:
                f[3] += 1
    return tuple(
        DriverGroup(*k, *acc[k][:5], tuple(FitCount(*f) for f in acc[k][5])) for k in sorted(acc, key=group_order)
    )


@dataclass(frozen=True)
class PoolView:
    """One GPU pool: nodes with the same GPU resource, product and node group."""

    id: str  # see pool_id()
    resource: str  # "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "amd.com/gpu"; DRA: the DeviceClass name
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
    # set for a pool of DRA devices (ResourceSlices), None for a device-plugin pool
    dra: DraFacts | None = None
    # the ways its nodes are pinned by labels (one for a uniform pool); empty: by
    # ``defining_labels`` alone (declared pools, views made by hand)
    pins: tuple[Pin, ...] = ()
    # how its devices are shared (capacity.sharing: "none", "time-slicing", "mps", "mig") and how
    # many pods share one device (1: not shared); ``total`` and ``free`` count shares
    sharing: str = NONE
    replicas: int = 1
    # the server requests (CPU millicores, memory, ephemeral storage bytes, pods) whose fit the
    # ledger counts per driver group (DriverGroup.fits, same order); the largest allocatable of
    # its contributing nodes per dimension (None: unknown)
    requests: tuple[tuple[int, ...], ...] = ()
    largest: tuple[int, ...] | None = None

    def fit_for(self, request: tuple[int, ...] | None,
                groups: tuple[DriverGroup, ...] | None = None) -> FitCount | None:
        """The pool (or its ``groups``) for a server asking ``request`` of its node: summed over
        the driver groups, never the nodes. None when the request is not tracked (DRA pools, views
        made by hand): the caller counts without it."""
        if request is None:
            return None
        try:
            i = self.requests.index(request)
        except ValueError:
            return None
        nodes = free = most = holding = 0
        counted = False
        for g in self.driver_groups if groups is None else groups:
            if i < len(g.fits):
                counted = True
                f = g.fits[i]
                nodes += f.nodes
                free += f.free
                most = max(most, f.max_free_per_node)
                holding += f.holding
        if not counted and (groups or self.driver_groups):
            return None
        return FitCount(nodes, free, most, holding)

    @property
    def mig_profile(self) -> str | None:
        """The MIG profile of a pool of MIG slices (``1g.10gb``), else None."""
        if self.dra is not None:
            return self.dra.profile
        return mig_profile_of(self.resource, self.product)

    @property
    def display_name(self) -> str:
        """The pool's default name, the same for the same hardware however it is published
        (``NVIDIA A100 80GB``, ``NVIDIA A100 80GB MIG 1g.10gb``; ``capacity.names``)."""
        product = self.dra.product_name if self.dra is not None else self.product
        return pool_display_name(product, self.vendor, self.mig_profile)

    @property
    def shared(self) -> bool:
        """Whether several servers use one device (time-slicing or MPS)."""
        return self.replicas > 1

    @property
    def physical(self) -> int:
        """The devices behind ``total`` (GPUs, or MIG slices): shares divided by ``replicas``."""
        return self.total // self.replicas if self.replicas > 1 else self.total

    @property
    def vendor(self) -> str | None:
        """``"nvidia"``, ``"amd"`` or None: from the resource's domain (``nvidia.com/gpu``) or,
        for a DRA pool, from its driver's (``gpu.nvidia.com``)."""
        domain = self.resource.split("/", 1)[0] if self.dra is None else self.dra.driver
        for vendor in ("nvidia", "amd"):
            if domain == f"{vendor}.com" or domain.endswith(f".{vendor}.com"):
                return vendor
        return None

    @property
    def allocation(self) -> str:
        """``"device-plugin"`` or ``"dra"``: how a pod of this pool gets its GPUs."""
        return DEVICE_PLUGIN if self.dra is None else DRA

    @cached_property
    def driver_groups(self) -> tuple[DriverGroup, ...]:
        """The contributing nodes grouped by driver (:class:`DriverGroup`), sorted.

        Derived from :attr:`node_views`; the ledger hands out views with the
        groups it keeps incrementally already filled in (:func:`with_groups`),
        so reading them costs nothing per request. A view made by hand (or by
        ``dataclasses.replace``) counts them from its nodes on first use.
        """
        return driver_groups(self.node_views, len(self.requests))

    @property
    def max_allocatable(self) -> int:
        """The most GPUs one contributing node has (0: none)."""
        return max((g.max_allocatable for g in self.driver_groups), default=0)

    @property
    def driver_versions(self) -> tuple[str, ...]:
        """The distinct drivers of the contributing nodes, lowest first."""
        found = {g.driver_version for g in self.driver_groups if g.driver_version}
        return tuple(sorted(found, key=_version_order))

    @property
    def pinnable(self) -> bool:
        """Whether a pod can be kept inside the pool: by the labels that define it (present or
        absent), else by its nodes' names."""
        return bool(self.defining_labels or self.pins or self.node_views)

    def to_json(self) -> dict[str, Any]:
        """The exact object of ``GET /hub/api/gpus`` (docs/capacity.md, docs/dra.md)."""
        return {
            "id": self.id,
            "allocation": self.allocation,
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
            "display_name": self.display_name,
            "sharing": self.sharing if self.sharing != NONE or self.mig_profile is None else MIG,
            "replicas": self.replicas,
        }


def with_groups(view: PoolView, groups: tuple[DriverGroup, ...]) -> PoolView:
    """``view`` with its :attr:`PoolView.driver_groups` set to ``groups``, which
    must be what the property would count from ``view.node_views`` (the
    ledger's incremental copy of them)."""
    view.__dict__["driver_groups"] = groups
    return view


def _version_order(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


@dataclass(frozen=True, slots=True)
class CapacitySnapshot:
    pools: tuple[PoolView, ...]
    synced: bool  # the first list of nodes and pods has completed
    age_seconds: float  # time since the cache last heard from the API server
    generation: int  # bumps on every change that alters a pool
    healthy: bool = True
    error: str | None = None  # e.g. "forbidden: list nodes at the cluster scope"
    pools_by_id: dict[str, PoolView] = field(default_factory=dict, compare=False)
    # every node's cordon and NoSchedule/NoExecute taints: each distinct ``taintrule.NodeTaints``
    # with how many nodes have it (a handful of rows, whatever the size of the cluster)
    node_taints: tuple[tuple[Any, int], ...] = ()

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
