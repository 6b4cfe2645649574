"""What the capacity layer counts, and the pools an admin declares.  Design notes: docs/capacity.md."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.capacity.labels import NODE_GROUP_PROVIDERS, product_label_for
from gpuspawner.capacity.model import Taint, pool_id
from gpuspawner.capacity.taintrule import DEFAULT_TOLERATED_TAINT_KEYS, check_tolerated_keys

__all__ = [
    "DEFAULT_GPU_RESOURCES",
    "DEFAULT_GPU_RESOURCE_PREFIXES",
    "DEFAULT_NODE_GROUP_LABELS",
    "DEFAULT_DRA_DRIVERS",
    "DeclaredPool",
    "CapacityConfig",
    "check_device_resource",
    "check_names",
]

#: Extended resources that are GPUs (device plugins): NVIDIA full or MIG-single
#: GPUs, NVIDIA shared GPUs with ``renameByDefault: true``, AMD GPUs
#: (NVIDIA/k8s-device-plugin README; ROCm/k8s-device-plugin README).
DEFAULT_GPU_RESOURCES: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "amd.com/gpu")
#: MIG mixed strategy: one resource per profile, ``nvidia.com/mig-1g.10gb``
#: (NVIDIA/k8s-device-plugin, MIG support).
DEFAULT_GPU_RESOURCE_PREFIXES: tuple[str, ...] = ("nvidia.com/mig-",)
#: Node-group labels of the managed Kubernetes offerings, first present wins
#: (see ``labels.NODE_GROUP_PROVIDERS`` for their sources).
DEFAULT_NODE_GROUP_LABELS: tuple[str, ...] = tuple(p.label for p in NODE_GROUP_PROVIDERS)

#: DRA drivers whose devices are GPUs (``ResourceSlice.spec.driver``): NVIDIA's GPU driver
#: (kubernetes-sigs/dra-driver-nvidia-gpu, formerly NVIDIA/k8s-dra-driver-gpu; docs/dra.md).
DEFAULT_DRA_DRIVERS: tuple[str, ...] = ("gpu.nvidia.com",)

_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# a qualified name (label key / resource name): optional DNS prefix + "/" + name
_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# an extended resource that names a device: a vendor's domain (with a dot) + "/" + a name (Kubernetes:
# extended resources are fully qualified names outside kubernetes.io); a prefix may end anywhere in the name
_DEVICE = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DEVICE_PREFIX = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?/[A-Za-z0-9][-A-Za-z0-9_.]*$")
# a DRA driver's name: a DNS subdomain with a dot, e.g. gpu.nvidia.com
_DRIVER = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?\.)+[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NOT_DEVICES = "cpu, memory, ephemeral-storage, pods, hugepages-* and kubernetes.io/* are not devices"


def check_device_resource(value: Any, *, prefix: bool = False) -> str:
    """``value`` when it looks like a device's extended resource (``nvidia.com/gpu``; with ``prefix``, the
    start of such names, ``nvidia.com/mig-``), else ValueError saying what to write."""
    ok = isinstance(value, str) and len(value) <= 316 and (_DEVICE_PREFIX if prefix else _DEVICE).match(value)
    domain = value.split("/", 1)[0] if isinstance(value, str) else ""
    if not ok or domain == "kubernetes.io" or domain.endswith(".kubernetes.io") or domain.startswith("requests."):
        example = "'nvidia.com/mig-'" if prefix else "'nvidia.com/gpu'"
        raise ValueError(f"{value!r} is not {'the start of ' if prefix else ''}a device's extended resource: write "
                         f"<vendor domain>/<name>, e.g. {example} ({_NOT_DEVICES})")
    return value


def check_names(field_name: str, values: Any) -> tuple[str, ...]:
    """One of CapacityConfig's lists of names, checked: a list (or tuple) of names of their kind."""
    if isinstance(values, str) or not isinstance(values, (tuple, list)):
        raise ValueError(f"{field_name} must be a list of names, e.g. [{_EXAMPLES[field_name]!r}], not {values!r}")
    for v in values:
        if field_name == "gpu_resources":
            check_device_resource(v)
        elif field_name == "gpu_resource_prefixes":
            check_device_resource(v, prefix=True)
        elif field_name == "dra_drivers":
            if not isinstance(v, str) or len(v) > 253 or not _DRIVER.match(v):
                raise ValueError(f"{v!r} is not a DRA driver's name: write a DNS name such as 'gpu.nvidia.com'")
        elif not isinstance(v, str) or not v or len(v) > 316 or not _NAME.match(v):
            raise ValueError(f"{v!r} is not a node label key: write e.g. 'cloud.google.com/gke-nodepool'")
    return tuple(values)


_EXAMPLES = {"gpu_resources": "nvidia.com/gpu", "gpu_resource_prefixes": "nvidia.com/mig-",
             "node_group_labels": "cloud.google.com/gke-nodepool", "dra_drivers": "gpu.nvidia.com"}


def _err(where: str, msg: str) -> ValueError:
    return ValueError(f"{where}: {msg}")


def _check_name(where: str, what: str, value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 316 or not _NAME.match(value):
        raise _err(where, f"{what} must be a Kubernetes qualified name like 'nvidia.com/gpu', got {value!r}")
    return value


def _check_label_value(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _VALUE.match(value):
        raise _err(
            where,
            f"label {key!r} must have a string value of at most 63 characters "
            f"([A-Za-z0-9], '-', '_', '.'), got {value!r}",
        )
    return value


def _positive_int(where: str, key: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _err(where, f"'{key}' must be an integer >= {minimum}, got {value!r}")
    return value


def _parse_taint(where: str, raw: Any) -> Taint:
    if isinstance(raw, Taint):
        return raw
    if isinstance(raw, str):
        # kubectl's "key=value:Effect" / "key:Effect" form
        m = re.match(r"^([^=:]+)(?:=([^:]*))?:(\w+)$", raw)
        if m is None:
            raise _err(where, f"taint {raw!r} must look like 'key=value:NoSchedule' or 'key:NoSchedule'")
        raw = {"key": m.group(1), "value": m.group(2), "effect": m.group(3)}
    if not isinstance(raw, dict):
        raise _err(where, f"a taint must be a dict with key/value/effect or 'key=value:Effect', got {raw!r}")
    unknown = set(raw) - {"key", "value", "effect"}
    if unknown:
        raise _err(where, f"unknown taint field(s) {sorted(unknown)}; use key, value, effect")
    key = _check_name(where, "taint key", raw.get("key"))
    value = raw.get("value")
    if value is not None:
        _check_label_value(where, key, value)
    effect = raw.get("effect")
    if effect not in _EFFECTS:
        raise _err(where, f"taint {key!r} effect must be one of {', '.join(_EFFECTS)}, got {effect!r}")
    return Taint(key=key, value=value or None, effect=effect)


@dataclass(frozen=True)
class DeclaredPool:
    """A pool the cluster autoscaler can create from zero (admin-declared).

    Its id is :func:`model.pool_id` of (node_group, product, resource), so
    once real nodes with those labels register they merge into it.
    """

    resource: str
    product: str | None
    node_group_label: str | None
    node_group: str | None
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    gpus_per_node: int
    max_nodes: int
    minutes: float
    memory_mib: int | None = None
    driver_version: str | None = None
    cuda_version: str | None = None

    @property
    def id(self) -> str:
        return pool_id(self.node_group, self.product, self.resource)

    @classmethod
    def from_config(cls, d: dict) -> "DeclaredPool":
        """Validate one admin dict, e.g.::

            {"resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3",
             "node_group_label": "cloud.google.com/gke-nodepool", "node_group": "h100-spot",
             "taints": ["nvidia.com/gpu=present:NoSchedule"],
             "gpus_per_node": 8, "max_nodes": 4, "minutes": 6}

        ``labels`` defaults to the group label and the product label
        (``nvidia.com/gpu.product`` / ``amd.com/gpu.product-name``); labels
        given explicitly are kept and must agree with node_group/product.
        """
        if not isinstance(d, dict):
            raise ValueError(f"a declared GPU pool must be a dict, got {type(d).__name__}: {d!r}")
        name = d.get("node_group") or d.get("product") or d.get("resource") or "?"
        where = f"declared GPU pool {name!r}"
        _check_fields(where, d, set(cls.__dataclass_fields__))
        resource = _check_name(where, "'resource'", d["resource"])
        product = d.get("product")
        if product is not None and (not isinstance(product, str) or not product):
            raise _err(where, f"'product' must be a non-empty string such as 'NVIDIA-A100-SXM4-80GB', got {product!r}")
        group_label, group = _node_group(where, d)
        raw_taints = d.get("taints") or ()
        labels = _declared_labels(where, d.get("labels"), resource, product, group_label, group)
        if not isinstance(raw_taints, (list, tuple)):
            raise _err(where, f"'taints' must be a list, got {raw_taints!r}")
        taints = tuple(_parse_taint(where, t) for t in raw_taints)
        gpus = _positive_int(where, "gpus_per_node", d["gpus_per_node"])
        max_nodes = _positive_int(where, "max_nodes", d["max_nodes"])
        minutes = d["minutes"]
        if isinstance(minutes, bool) or not isinstance(minutes, (int, float)) or not math.isfinite(minutes) or minutes < 0:
            raise _err(where, f"'minutes' (typical scale-up time) must be a number >= 0, got {minutes!r}")
        memory = d.get("memory_mib")
        if memory is not None:
            memory = _positive_int(where, "memory_mib", memory)
        return cls(
            resource=resource,
            product=product,
            node_group_label=group_label,
            node_group=group,
            labels=labels,
            taints=taints,
            gpus_per_node=gpus,
            max_nodes=max_nodes,
            minutes=float(minutes),
            memory_mib=memory,
            **_versions(where, d),
        )


def _check_fields(where: str, d: dict, allowed: set[str]) -> None:
    unknown = set(d) - allowed
    if unknown:
        raise _err(where, f"unknown field(s) {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
    for req in ("resource", "gpus_per_node", "max_nodes", "minutes"):
        if req not in d:
            raise _err(where, f"'{req}' is required")


def _node_group(where: str, d: dict) -> tuple[str | None, str | None]:
    group_label = d.get("node_group_label")
    group = d.get("node_group")
    if (group_label is None) != (group is None):
        raise _err(where, "'node_group_label' and 'node_group' must be given together")
    if group_label is not None:
        _check_name(where, "'node_group_label'", group_label)
        _check_label_value(where, group_label, group)
    return group_label, group


def _declared_labels(where: str, raw: Any, resource: str, product: str | None, group_label: str | None,
                     group: str | None) -> dict[str, str]:
    """The labels a declared pool's nodes will carry: the admin's, plus the node-group and
    product labels its node_group and product imply (which the admin's must agree with)."""
    raw_labels = raw or {}
    if not isinstance(raw_labels, dict):
        raise _err(where, f"'labels' must be a dict of label -> value, got {raw_labels!r}")
    labels: dict[str, str] = {}
    for k, v in raw_labels.items():
        labels[_check_name(where, "label key", k)] = _check_label_value(where, k, v)
    if group_label is not None:
        if labels.setdefault(group_label, group) != group:
            raise _err(where, f"labels[{group_label!r}] = {labels[group_label]!r} contradicts node_group {group!r}")
    product_label = product_label_for(resource)
    if product is not None and product_label is not None:
        if labels.setdefault(product_label, product) != product:
            raise _err(where, f"labels[{product_label!r}] = {labels[product_label]!r} contradicts product {product!r}")
    return labels


def _versions(where: str, d: dict) -> dict[str, str | None]:
    versions = {}
    for key in ("driver_version", "cuda_version"):
        v = d.get(key)
        if v is not None and (not isinstance(v, str) or not re.fullmatch(r"\d+(\.\d+)*", v)):
            raise _err(where, f"'{key}' must be a dotted version string such as '535.183.01', got {v!r}")
        versions[key] = v
    return versions


@dataclass(frozen=True)
class CapacityConfig:
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    gpu_resource_prefixes: tuple[str, ...] = DEFAULT_GPU_RESOURCE_PREFIXES
    node_group_labels: tuple[str, ...] = DEFAULT_NODE_GROUP_LABELS
    dra_drivers: tuple[str, ...] = DEFAULT_DRA_DRIVERS
    # a node with a hard taint whose key is not one of these takes no server: its GPUs are not counted
    tolerated_taint_keys: tuple[str, ...] = DEFAULT_TOLERATED_TAINT_KEYS
    declared_pools: tuple[DeclaredPool, ...] = ()
    reservation_ttl: float = 300.0
    # seconds a watch may stay silent (and figures go unrefreshed) before they are
    # stale; each watch asks the server to end it within half of it, and its end is the server's word
    stall_timeout: float = 90.0
    _gpu_set: frozenset = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("gpu_resources", "gpu_resource_prefixes", "node_group_labels", "dra_drivers"):
            object.__setattr__(self, name, check_names(name, getattr(self, name)))
        try:
            keys = check_tolerated_keys(self.tolerated_taint_keys)
        except ValueError as e:
            raise ValueError(f"tolerated_taint_keys: {e}") from None
        object.__setattr__(self, "tolerated_taint_keys", keys)
        pools = tuple(
            p if isinstance(p, DeclaredPool) else DeclaredPool.from_config(p) for p in self.declared_pools
        )
        seen: set[str] = set()
        for p in pools:
            if p.id in seen:
                raise ValueError(f"declared GPU pool {p.id!r} is declared twice")
            seen.add(p.id)
            if p.resource not in self.gpu_resources and not p.resource.startswith(self.gpu_resource_prefixes):
                raise ValueError(
                    f"declared GPU pool {p.id!r}: resource {p.resource!r} is not a GPU resource; "
                    f"add it to gpu_resources"
                )
        object.__setattr__(self, "declared_pools", pools)
        ttl = self.reservation_ttl
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not math.isfinite(ttl) or ttl <= 0:
            raise ValueError(f"CapacityConfig.reservation_ttl must be a number of seconds > 0, got {ttl!r}")
        stall = self.stall_timeout
        if isinstance(stall, bool) or not isinstance(stall, (int, float)) or not math.isfinite(stall) or stall <= 0:
            raise ValueError(f"CapacityConfig.stall_timeout must be a number of seconds > 0, got {stall!r}")
        object.__setattr__(self, "_gpu_set", frozenset(self.gpu_resources))

    def is_gpu_resource(self, name: str) -> bool:
        """Whether an extended-resource name is a GPU resource (exact name or prefix)."""
        return name in self._gpu_set or name.startswith(self.gpu_resource_prefixes)
