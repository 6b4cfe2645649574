"""Reading GPU facts from a node: product, memory, driver, CUDA, node group.
Design notes: docs/capacity.md.
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Protocol, Sequence

from gpuspawner.capacity.model import Taint, pool_id
from gpuspawner.capacity.node_resources import node_base
from gpuspawner.capacity.quantity import QuantityError, parse_count
from gpuspawner.capacity.warnonce import warn_once
from gpuspawner.capacity.sharing import NOT_SHARED, Sharing, node_sharing
from gpuspawner.capacity.taintrule import refuses_servers



class NodeRules(Protocol):
    """What :func:`node_record` reads of the capacity settings (``config.CapacityConfig``)."""

    node_group_labels: Sequence[str]
    tolerated_taint_keys: Sequence[str]

    def is_gpu_resource(self, resource: str) -> bool: ...

log = logging.getLogger(__name__)

# a handful of distinct pools, thousands of nodes: slugging once per pool is enough
_pool_id = functools.lru_cache(maxsize=4096)(pool_id)


@functools.lru_cache(maxsize=4096)
def _shared(value: tuple) -> tuple:
    """One object for all equal values: the nodes of a pool have the same GPU entries and
    taints, so thousands of records share a handful of them. Named tuples stay tracked by the
    cyclic garbage collector (CPython untracks exact tuples only), so this keeps 10,000s of
    objects out of its full passes, as well as the memory."""
    return value

__all__ = [
    "NodeGroupProvider",
    "NODE_GROUP_PROVIDERS",
    "GpuVendor",
    "VENDORS",
    "GpuFacts",
    "NodeGpu",
    "NodeRecord",
    "node_group",
    "gpu_facts",
    "driver_versions",
    "product_label_for",
    "version_key",
    "node_record",
    "node_is_ready",
    "node_taints",
]


# ---------------------------------------------------------------------------
# node groups (the providers' node-label documentation, named per row)


@dataclass(frozen=True)
class NodeGroupProvider:
    label: str
    provider: str
    source: str


NODE_GROUP_PROVIDERS: tuple[NodeGroupProvider, ...] = (
    NodeGroupProvider("cloud.google.com/gke-nodepool", "GKE",
                      "https://cloud.google.com/kubernetes-engine/docs/how-to/gpus"),
    NodeGroupProvider("eks.amazonaws.com/nodegroup", "EKS managed node groups",
                      "https://docs.aws.amazon.com/eks/latest/userguide/managed-node-groups.html"),
    NodeGroupProvider("kubernetes.azure.com/agentpool", "AKS",
                      "https://learn.microsoft.com/azure/aks/use-labels"),
    NodeGroupProvider("karpenter.sh/nodepool", "Karpenter v1 (AWS, Azure NAP)",
                      "https://karpenter.sh/docs/concepts/nodepools/"),
    # Karpenter before v0.32 named node pools "provisioners" [S: Karpenter v1beta1 migration guide]
    NodeGroupProvider("karpenter.sh/provisioner-name", "Karpenter < v0.32", "Karpenter migration guide [S]"),
    # DigitalOcean Kubernetes [S: DOKS docs, "doks.digitalocean.com/node-pool"]
    NodeGroupProvider("doks.digitalocean.com/node-pool", "DigitalOcean DOKS", "DOKS docs [S]"),
)


def node_group(labels: Mapping[str, str], group_labels: tuple[str, ...]) -> tuple[str | None, str | None]:
    """(label, value) of the first configured node-group label present, else (None, None)."""
    for key in group_labels:
        value = labels.get(key)
        if value:
            return key, value
    return None, None


# ---------------------------------------------------------------------------
# GPU vendors (NVIDIA GPU Feature Discovery: NVIDIA/k8s-device-plugin
# docs/gpu-feature-discovery/README.md; AMD: ROCm/k8s-device-plugin
# cmd/k8s-node-labeller/main.go)


def _mib(value: str | None) -> int | None:
    """GFD memory labels are plain MiB counts (``GetMemoryInfo().Total/2^20``, GFD ``internal/lm``)."""
    if not value:
        return None
    try:
        n = parse_count(value)
    except QuantityError:
        return None
    return n or None


def _amd_vram_mib(value: str | None) -> int | None:
    """``amd.com/gpu.vram`` is e.g. ``"192G"`` (ROCm/k8s-device-plugin docs/user-guide/installation.md, MI300X).

    [I] The labeller divides the byte size by 2^30 and appends "G", so "G" is
    read as GiB (an MI300X has 192 GiB of HBM3); a bare number is taken as MiB.
    """
    if not value:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?\s*", value)
    if m is None:
        return None
    scale = {None: 1, "K": 1 / 1024, "Ki": 1 / 1024, "M": 1, "Mi": 1, "G": 1024, "Gi": 1024, "T": 1 << 20, "Ti": 1 << 20}
    return int(float(m.group(1)) * scale[m.group(2)]) or None


@dataclass(frozen=True)
class GpuFacts:
    product: str | None
    memory_mib: int | None
    product_label: str | None  # the label the product was read from, when it exists on the node
    # what keeps a pod among the nodes with this product: labels (and values) they carry, and
    # product labels they do not carry (a product read from another label, or no product)
    pins: tuple[tuple[str, str], ...] = ()
    absent: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuVendor:
    """How one vendor's resources map to product and memory labels."""

    name: str
    matches: Callable[[str], bool]
    facts: Callable[[str, Mapping[str, str]], GpuFacts]
    product_label: Callable[[str], str | None]


def _mig_profile(resource: str) -> str:
    return resource[len("nvidia.com/mig-"):]


def _nvidia_mig_facts(resource: str, labels: Mapping[str, str]) -> GpuFacts:
    # MIG mixed strategy: per-profile labels nvidia.com/mig-<profile>.{product,memory} (GFD)
    profile = _mig_profile(resource)
    key = f"nvidia.com/mig-{profile}.product"
    memory = _mib(labels.get(f"nvidia.com/mig-{profile}.memory"))
    product = labels.get(key)
    if product:
        return GpuFacts(product, memory, key, pins=((key, product),))
    base = labels.get("nvidia.com/gpu.product")
    if base:
        return GpuFacts(f"{base}-MIG-{profile}", memory, None, pins=(("nvidia.com/gpu.product", base),), absent=(key,))
    return GpuFacts(None, memory, None, absent=(key, "nvidia.com/gpu.product"))


def _nvidia_gpu_facts(resource: str, labels: Mapping[str, str]) -> GpuFacts:
    # full GPUs, time-sliced/MPS replicas (gpu.product gets "-SHARED") and MIG
    # single strategy (GFD rewrites gpu.product/gpu.memory)
    return _labelled(labels, "nvidia.com/gpu.product", _mib(labels.get("nvidia.com/gpu.memory")))


def _labelled(labels: Mapping[str, str], key: str, memory: int | None) -> GpuFacts:
    """The product named by the label ``key`` (absent: no product, and the pool needs ``key`` absent)."""
    product = labels.get(key) or None
    if product:
        return GpuFacts(product, memory, key, pins=((key, product),))
    return GpuFacts(None, memory, None, absent=(key,))


def _amd_facts(resource: str, labels: Mapping[str, str]) -> GpuFacts:
    return _labelled(labels, "amd.com/gpu.product-name", _amd_vram_mib(labels.get("amd.com/gpu.vram")))


def _unknown_facts(resource: str, labels: Mapping[str, str]) -> GpuFacts:
    return GpuFacts(None, None, None)


VENDORS: tuple[GpuVendor, ...] = (
    GpuVendor(
        "nvidia-mig",
        lambda r: r.startswith("nvidia.com/mig-"),
        _nvidia_mig_facts,
        lambda r: f"nvidia.com/mig-{_mig_profile(r)}.product",
    ),
    GpuVendor(
        "nvidia",
        lambda r: r.startswith("nvidia.com/"),
        _nvidia_gpu_facts,
        lambda r: "nvidia.com/gpu.product",
    ),
    GpuVendor(
        # amd.com/gpu and the partition resources (amd.com/cpx_nps4, ...) an admin may add
        "amd",
        lambda r: r.startswith("amd.com/"),
        _amd_facts,
        lambda r: "amd.com/gpu.product-name",
    ),
)


def _vendor(resource: str) -> GpuVendor | None:
    for v in VENDORS:
        if v.matches(resource):
            return v
    return None


def gpu_facts(resource: str, labels: Mapping[str, str]) -> GpuFacts:
    """Product and memory of one GPU resource of a node; unknown vendors give Nones."""
    v = _vendor(resource)
    return (v.facts if v else _unknown_facts)(resource, labels)


def product_label_for(resource: str) -> str | None:
    """The label that names the product of ``resource`` (for declared pools)."""
    v = _vendor(resource)
    return v.product_label(resource) if v else None


# ---------------------------------------------------------------------------
# driver / CUDA (NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md: current names
# since GFD v0.15.0, deprecated ones
# still written for compatibility; nodes with an older GFD only have the latter)


def _joined(labels: Mapping[str, str], *keys: str) -> str | None:
    parts = []
    for k in keys:
        v = labels.get(k)
        if v is None or v == "":
            break
        parts.append(v)
    if not parts or not all(p.isdigit() for p in parts):
        return None
    return ".".join(parts)


def _dotted(value: str | None) -> str | None:
    return value if value and re.fullmatch(r"\d+(\.\d+)*", value) else None


def driver_versions(labels: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """(driver version, driver CUDA version, compute capability) of a node.

    ``cuda.runtime*`` is, despite its name, ``nvmlSystemGetCudaDriverVersion``:
    the newest CUDA the driver supports (GFD's README).  AMD nodes carry
    ``amd.com/gpu.driver-version`` and no CUDA (AMD's node labeller).
    """
    driver = (
        _dotted(labels.get("nvidia.com/cuda.driver-version.full"))
        or _joined(
            labels,
            "nvidia.com/cuda.driver-version.major",
            "nvidia.com/cuda.driver-version.minor",
            "nvidia.com/cuda.driver-version.revision",
        )
        or _joined(labels, "nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev")
        or _dotted(labels.get("amd.com/gpu.driver-version"))
    )
    cuda = (
        _dotted(labels.get("nvidia.com/cuda.runtime-version.full"))
        or _joined(labels, "nvidia.com/cuda.runtime-version.major", "nvidia.com/cuda.runtime-version.minor")
        or _joined(labels, "nvidia.com/cuda.runtime.major", "nvidia.com/cuda.runtime.minor")
    )
    cc = _joined(labels, "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")
    return driver, cuda, cc


@functools.lru_cache(maxsize=1024)
def version_key(version: str) -> tuple[int, ...]:
    """Numeric order of dotted versions: ``12.10 > 12.9``, ``535.183.01 > 535.54.03``."""
    return tuple(int(p) for p in version.split("."))


# ---------------------------------------------------------------------------
# the compact node record


class NodeGpu(NamedTuple):
    """One GPU resource of a node: the node is in one pool per resource."""

    resource: str
    allocatable: int
    product: str | None
    memory_mib: int | None
    pool_id: str
    defining_labels: tuple[tuple[str, str], ...]
    # labels the node does not carry, and whose absence puts it in its pool: the node-group
    # labels that come before its own (the first one present wins) and the product labels
    # its product is not read from. A required node affinity pins a pod to the pool with
    # ``In`` on the defining labels and ``DoesNotExist`` on these, never with node names.
    absent_labels: tuple[str, ...] = ()
    # how the node's GPUs of this resource are shared (time-slicing, MPS, MIG; sharing.node_sharing)
    sharing: Sharing = NOT_SHARED


class NodeRecord(NamedTuple):
    name: str
    ready: bool
    schedulable: bool
    gpus: tuple[NodeGpu, ...]
    node_group_label: str | None
    node_group: str | None
    driver_version: str | None
    cuda_version: str | None
    compute_capability: str | None
    taints: tuple[Taint, ...]
    # the labels a NodeView carries: what pins a pod to this node or driver
    labels: tuple[tuple[str, str], ...]
    # allocatable CPU (millicores), memory, ephemeral storage (bytes) and pods (node_resources.node_base)
    base: tuple[int, ...] = ()
    # a hard taint no server tolerates (taintrule.refuses_servers): kube-scheduler keeps servers off
    refused: bool = False

    @property
    def contributes(self) -> bool:
        """Only Ready, schedulable nodes that a server may land on offer capacity."""
        return self.ready and self.schedulable and not self.refused


# labels copied into NodeView.labels, so steering by driver can build a node affinity
_VIEW_LABELS = (
    "kubernetes.io/hostname",
    "nvidia.com/cuda.driver-version.full",
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.runtime-version.full",
    "amd.com/gpu.driver-version",
)


def node_is_ready(status: Mapping[str, Any]) -> bool:
    """Whether a Node's ``status`` says Ready (for the device-plugin and the DRA records)."""
    # the node lifecycle controller's notion: condition Ready == "True"
    # (pkg/controller/nodelifecycle); an absent condition means not ready
    for cond in status.get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def node_taints(spec: Mapping[str, Any]) -> tuple[Taint, ...]:
    """The taints of a Node's ``spec`` as records (malformed entries are skipped)."""
    out = []
    for t in spec.get("taints") or ():
        if isinstance(t, dict) and isinstance(t.get("key"), str) and t.get("effect"):
            value = t.get("value")
            out.append(_shared(Taint(t["key"], value if value else None, str(t["effect"]))))
    return _shared(tuple(out))


def _gpu_allocatable(name: str, allocatable: Mapping[str, Any], config: NodeRules) -> list[tuple[str, int]]:
    """``(resource, count)`` of each GPU resource the node advertises a positive amount of."""
    found: list[tuple[str, int]] = []
    for resource, raw in allocatable.items():
        if not config.is_gpu_resource(resource):
            continue
        try:
            n = parse_count(raw)
        except QuantityError as e:
            # once per node, resource and value: the node's every status update repeats it
            warn_once(log, ("allocatable", name, resource, str(raw)),
                      "node %s is left out of the %s pool: its allocatable %s is not a count (%s)",
                      name, resource, resource, e)
            continue
        if n > 0:
            found.append((resource, n))
    return found


def _node_gpus(found: list[tuple[str, int]], labels: Mapping[str, Any], group_label: str | None,
               group: str | None, group_labels: Sequence[str]) -> tuple[NodeGpu, ...]:
    """One record per GPU resource, each with the pool it belongs to and the labels defining it
    (present) or keeping other nodes out of it (absent)."""
    # a node is in its group because no label before its own is set (node_group: first present wins)
    group_absent = tuple(itertools.takewhile(lambda k: k != group_label, group_labels))
    gpus = []
    for resource, n in sorted(found):
        facts = gpu_facts(resource, labels)
        defining = [(group_label, group)] if group_label is not None else []
        defining.extend(facts.pins)
        gpus.append(
            _shared(NodeGpu(
                resource=resource,
                allocatable=n,
                product=facts.product,
                memory_mib=facts.memory_mib,
                pool_id=_pool_id(group, facts.product, resource),
                defining_labels=tuple(defining),
                absent_labels=group_absent + facts.absent,
                sharing=_shared(node_sharing(resource, labels, n)),
            ))
        )
    return _shared(tuple(gpus))


def node_record(obj: Mapping[str, Any], config: NodeRules) -> NodeRecord | None:
    """The compact record of a Node object, or None when it is not a GPU node.

    A GPU node has a positive allocatable amount of a GPU resource.
    Quantities that do not parse count as 0 and are logged, never raised: a
    single odd node must not stop the informer.
    """
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    status = obj.get("status") or {}
    allocatable = status.get("allocatable") or {}
    if not isinstance(allocatable, dict):
        warn_once(log, ("allocatable-shape", name), "node %s is left out of the GPU pools: its status.allocatable "
                  "is not a map of resources (%s)", name, type(allocatable).__name__)
        return None
    found = _gpu_allocatable(name, allocatable, config)
    if not found:
        return None
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        warn_once(log, ("labels", name), "node %s: its labels are not a map of texts; it is counted as a GPU node "
                  "without labels (no product, driver or node group)", name)
        labels = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(labels, dict) else {}
    spec = obj.get("spec") or {}
    group_label, group = node_group(labels, config.node_group_labels)
    driver, cuda, cc = driver_versions(labels)
    taints = node_taints(spec)
    return NodeRecord(
        name=name,
        ready=node_is_ready(status),
        schedulable=not spec.get("unschedulable", False),
        gpus=_node_gpus(found, labels, group_label, group, config.node_group_labels),
        node_group_label=group_label,
        node_group=group,
        driver_version=driver,
        cuda_version=cuda,
        compute_capability=cc,
        taints=taints,
        labels=tuple((k, labels[k]) for k in _VIEW_LABELS if isinstance(labels.get(k), str)),
        base=_shared(node_base(allocatable, name)),
        refused=refuses_servers(taints, config.tolerated_taint_keys),
    )
