"""Dynamic Resource Allocation objects as compact records: slices, claims, classes, nodes.
Design notes: docs/dra.md.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from gpuspawner.capacity.labels import node_group, node_is_ready, node_taints
from gpuspawner.capacity.model import Taint
from gpuspawner.capacity.node_resources import node_base
from gpuspawner.capacity.quantity import QuantityError, parse_count, parse_quantity
from gpuspawner.capacity.sharing import class_sharing
from gpuspawner.capacity.taintrule import DEFAULT_TOLERATED_TAINT_KEYS, refuses_servers

__all__ = [
    "DevKey",
    "DraDevice",
    "SliceRecord",
    "ClaimRecord",
    "ClassRecord",
    "DraNode",
    "slice_record",
    "claim_record",
    "class_record",
    "dra_node",
    "parse_class_selector",
    "class_matches",
    "choose_class",
    "semver_text",
    "short_version",
]

# NVIDIA's attribute and capacity names (deviceinfo.go); other drivers in ``dra_drivers`` are
# read with the same names, the common vocabulary of GPU DRA drivers
ATTR_TYPE = "type"
ATTR_PRODUCT = "productName"
ATTR_PROFILE = "profile"
ATTR_DRIVER = "driverVersion"
ATTR_CUDA = "cudaDriverVersion"
ATTR_CC = "cudaComputeCapability"
CAP_MEMORY = "memory"

# device taint effects that keep a claim from getting the device (types.go DeviceTaintEffect)
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


class DevKey(NamedTuple):
    """``<driver>/<pool>/<device>``: a device's identity (types.go, ResourceSlice)."""

    driver: str
    pool: str
    device: str


class DraDevice(NamedTuple):
    name: str
    # string attributes by fully qualified name ("gpu.nvidia.com/productName"), sorted
    strings: tuple[tuple[str, str], ...]
    device_type: str | None
    product: str | None
    profile: str | None
    driver_version: str | None  # "535.183.1": the semver as published
    cuda_version: str | None  # "12.4": major.minor of cudaDriverVersion
    compute_capability: str | None  # "8.0"
    memory_mib: int | None
    usable: bool  # False: a device gpuspawner does not offer (see the module docstring)

    def attribute(self, qualified: str) -> str | None:
        for k, v in self.strings:
            if k == qualified:
                return v
        return None


class SliceRecord(NamedTuple):
    name: str
    driver: str
    pool: str
    generation: int
    count: int  # resourceSliceCount
    node: str | None  # spec.nodeName; None: not node-local (nodeSelector, allNodes, per device)
    devices: tuple[DraDevice, ...]


class ClaimRecord(NamedTuple):
    key: str  # "<namespace>/<name>"
    owner: str | None  # "<namespace>/<pod>" when a Pod is its controller (template-generated claims)
    allocated: bool
    devices: tuple[DevKey, ...]  # what its allocation takes (adminAccess results left out)


class ClassRecord(NamedTuple):
    name: str
    # None: the selectors are not a conjunction of equalities gpuspawner can read
    driver: str | None
    equalities: tuple[tuple[str, str], ...]  # (qualified attribute, value)
    extended_resource_name: str | None
    # the sharing strategy its ``spec.config`` sets for its driver's devices (sharing.class_sharing)
    sharing: str | None = None

    @property
    def readable(self) -> bool:
        return self.driver is not None


class DraNode(NamedTuple):
    name: str
    ready: bool
    schedulable: bool
    group_label: str | None
    group: str | None
    taints: tuple[Taint, ...]
    hostname: str | None  # kubernetes.io/hostname
    device_plugin: bool  # a positive allocatable amount of a device-plugin GPU resource
    refused: bool = False  # a hard taint no server tolerates (taintrule.refuses_servers)
    # allocatable CPU (millicores), memory, ephemeral storage (bytes) and pods (noderes.node_base)
    base: tuple[int, ...] = ()

    @property
    def contributes(self) -> bool:
        return self.ready and self.schedulable and not self.refused


# ---------------------------------------------------------------------------
# versions


_SEMVER = re.compile(r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[-+].*)?$")


def semver_text(value: Any) -> str | None:
    """``"535.183.01"`` / ``"12.4"`` / ``"12.4.0-rc1"`` -> ``"535.183.1"`` / ``"12.4.0"``:
    the strict three-part form Kubernetes' CEL ``semver()`` parses (blang/semver; leading zeros
    are not allowed there, ``staging/src/k8s.io/apiserver/pkg/cel/library/semverlib.go``)."""
    if not isinstance(value, str):
        return None
    m = _SEMVER.match(value.strip())
    if m is None:
        return None
    return ".".join(str(int(p or 0)) for p in m.groups())


def short_version(value: Any, parts: int = 2) -> str | None:
    """The first ``parts`` numbers of a version: ``"12.4.0"`` -> ``"12.4"`` (the form GPU
    Feature Discovery's ``cuda.runtime-version`` has, which the CUDA rules compare)."""
    full = semver_text(value)
    return ".".join(full.split(".")[:parts]) if full else None


# ---------------------------------------------------------------------------
# devices and slices


def _qualified(driver: str, name: str) -> str:
    # types.go QualifiedName: names without a domain are in the driver's domain
    return name if "/" in name else f"{driver}/{name}"


def _attr_values(driver: str, attrs: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(string attributes, version attributes) by qualified name."""
    strings: dict[str, str] = {}
    versions: dict[str, str] = {}
    if not isinstance(attrs, Mapping):
        return strings, versions
    for name, value in attrs.items():
        if not isinstance(name, str) or not isinstance(value, Mapping):
            continue
        key = _qualified(driver, name)
        if isinstance(value.get("string"), str):
            strings[key] = value["string"]
        elif isinstance(value.get("version"), str):
            versions[key] = value["version"]
    return strings, versions


def _memory_mib(driver: str, capacity: Any) -> int | None:
    if not isinstance(capacity, Mapping):
        return None
    entry = capacity.get(CAP_MEMORY) or capacity.get(f"{driver}/{CAP_MEMORY}")
    raw = entry.get("value") if isinstance(entry, Mapping) else None
    if raw is None:
        return None
    try:
        return int(parse_quantity(raw) / (1 << 20)) or None
    except QuantityError:
        return None


def _usable(device: Mapping[str, Any]) -> bool:
    if device.get("consumesCounters") or device.get("allowMultipleAllocations"):
        return False
    if device.get("nodeName") or device.get("nodeSelector") or device.get("allNodes"):
        return False
    for taint in device.get("taints") or ():
        if isinstance(taint, Mapping) and taint.get("effect") in _BLOCKING_EFFECTS:
            return False
    return True


def device_record(driver: str, device: Mapping[str, Any]) -> DraDevice | None:
    name = device.get("name")
    if not isinstance(name, str) or not name:
        return None
    strings, versions = _attr_values(driver, device.get("attributes"))

    def own(table: dict[str, str], attr: str) -> str | None:
        return table.get(f"{driver}/{attr}")

    return DraDevice(
        name=name,
        strings=tuple(sorted(strings.items())),
        device_type=own(strings, ATTR_TYPE),
        product=own(strings, ATTR_PRODUCT),
        profile=own(strings, ATTR_PROFILE),
        driver_version=semver_text(own(versions, ATTR_DRIVER)),
        cuda_version=short_version(own(versions, ATTR_CUDA)),
        compute_capability=short_version(own(versions, ATTR_CC)),
        memory_mib=_memory_mib(driver, device.get("capacity")),
        usable=_usable(device),
    )


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def slice_record(obj: Mapping[str, Any], drivers: Sequence[str]) -> SliceRecord | None:
    """The record of a ResourceSlice of a GPU driver (``drivers``); None for any other slice
    and for one too malformed to count (it is then treated as absent)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name or not isinstance(spec, Mapping):
        return None
    driver = spec.get("driver")
    pool = spec.get("pool") or {}
    if driver not in drivers or not isinstance(pool, Mapping) or not isinstance(pool.get("name"), str):
        return None
    generation, count = _int(pool.get("generation")), _int(pool.get("resourceSliceCount"))
    if generation is None or count is None or count < 1:
        return None
    node = spec.get("nodeName") if isinstance(spec.get("nodeName"), str) and spec.get("nodeName") else None
    devices = tuple(
        d for d in (device_record(driver, raw) for raw in spec.get("devices") or () if isinstance(raw, Mapping))
        if d is not None
    )
    return SliceRecord(name, driver, pool["name"], generation, count, node, devices)


# ---------------------------------------------------------------------------
# claims


def _key(meta: Mapping[str, Any]) -> str | None:
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        return None
    return f"{meta.get('namespace') or 'default'}/{name}"


def _owner_pod(meta: Mapping[str, Any]) -> str | None:
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("kind") == "Pod" and ref.get("controller") and ref.get("name"):
            return f"{meta.get('namespace') or 'default'}/{ref['name']}"
    return None


def claim_record(obj: Mapping[str, Any]) -> ClaimRecord | None:
    """What a ResourceClaim takes: the devices of its allocation (``status.allocation.devices.
    results``), which no other claim may get (the scheduler's ``ListAllAllocatedDevices``)."""
    meta = obj.get("metadata") or {}
    if not isinstance(meta, Mapping):
        return None
    key = _key(meta)
    if key is None:
        return None
    status = obj.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices: list[DevKey] = []
    if isinstance(allocation, Mapping):
        allocated = allocation.get("devices")
        results = allocated.get("results") if isinstance(allocated, Mapping) else None
        for r in results or ():
            if not isinstance(r, Mapping) or r.get("adminAccess"):
                continue
            parts = (r.get("driver"), r.get("pool"), r.get("device"))
            if all(isinstance(p, str) and p for p in parts):
                devices.append(DevKey(*parts))
    return ClaimRecord(key, _owner_pod(meta), isinstance(allocation, Mapping), tuple(devices))


# ---------------------------------------------------------------------------
# device classes and their selectors

_STR = r"""(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")"""
_DRIVER_TERM = re.compile(rf"^device\.driver\s*==\s*{_STR}$|^{_STR}\s*==\s*device\.driver$")
_ATTR_REF = rf"device\.attributes\[{_STR}\](?:\.([A-Za-z_][A-Za-z0-9_]*)|\[{_STR}\])"
_ATTR_TERM = re.compile(rf"^{_ATTR_REF}\s*==\s*{_STR}$")
_ATTR_TERM_REVERSED = re.compile(rf"^{_STR}\s*==\s*{_ATTR_REF}$")


def _unquote(groups: Sequence[str | None]) -> list[str]:
    """The string literals a regex matched (each as a single- or double-quoted pair of groups)."""
    out = []
    for a, b in zip(groups[0::2], groups[1::2]):
        raw = a if a is not None else b
        if raw is not None:
            out.append(re.sub(r"\\(.)", r"\1", raw))
    return out


def _strip_parens(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _term(text: str) -> tuple[str, str] | None:
    """One ``==`` test as (qualified attribute or "driver", value)."""
    text = _strip_parens(text)
    m = _DRIVER_TERM.match(text)
    if m:
        return ("driver", _unquote(m.groups())[0])
    m = _ATTR_TERM.match(text)
    if m:
        g = m.groups()
        domain = _unquote(g[0:2])[0]
        attr = g[2] if g[2] is not None else _unquote(g[3:5])[0]
        return (f"{domain}/{attr}", _unquote(g[5:7])[0])
    m = _ATTR_TERM_REVERSED.match(text)
    if m:
        g = m.groups()
        value = _unquote(g[0:2])[0]
        domain = _unquote(g[2:4])[0]
        attr = g[4] if g[4] is not None else _unquote(g[5:7])[0]
        return (f"{domain}/{attr}", value)
    return None


def parse_class_selector(expression: str) -> list[tuple[str, str]] | None:
    """The equalities of a CEL selector that is a plain conjunction, or None.

    ``device.driver == 'd' && device.attributes['d'].type == 'gpu'`` ->
    ``[("driver", "d"), ("d/type", "gpu")]``.  Anything else (``||``, ``!``, other functions,
    comparisons) is not read: gpuspawner does not evaluate CEL.
    """
    if not isinstance(expression, str) or "||" in expression or re.search(r"!(?!=)", expression):
        return None
    terms = []
    for part in _strip_parens(expression).split("&&"):
        t = _term(part)
        if t is None:
            return None
        terms.append(t)
    return terms or None


def class_record(obj: Mapping[str, Any]) -> ClassRecord | None:
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return None
    spec = obj.get("spec") or {}
    ext = spec.get("extendedResourceName") if isinstance(spec, Mapping) else None
    ext = ext if isinstance(ext, str) and ext else None
    terms: list[tuple[str, str]] = []
    readable = isinstance(spec, Mapping)
    for sel in (spec.get("selectors") or ()) if readable else ():
        cel = sel.get("cel") if isinstance(sel, Mapping) else None
        parsed = parse_class_selector(cel.get("expression")) if isinstance(cel, Mapping) else None
        if parsed is None:
            readable = False
            break
        terms += parsed
    drivers = {v for k, v in terms if k == "driver"}
    if not readable or len(drivers) != 1:
        return ClassRecord(name, None, (), ext)
    equalities = tuple(sorted({(k, v) for k, v in terms if k != "driver"}))
    driver = drivers.pop()
    return ClassRecord(name, driver, equalities, ext, class_sharing(spec.get("config"), driver))


def class_matches(cls: ClassRecord, driver: str, device: DraDevice) -> bool:
    """Whether a readable class's selectors take ``device`` of ``driver``."""
    if cls.driver != driver:
        return False
    return all(device.attribute(attr) == value for attr, value in cls.equalities)


def choose_class(classes: Sequence[ClassRecord], driver: str, device: DraDevice) -> ClassRecord | None:
    """The DeviceClass a claim for ``device`` names: of the readable classes that take it,
    the most specific (most equalities), ties broken by name (``classes`` sorted by name)."""
    best: ClassRecord | None = None
    for cls in classes:
        if class_matches(cls, driver, device) and (best is None or len(cls.equalities) > len(best.equalities)):
            best = cls
    return best


# ---------------------------------------------------------------------------
# nodes

HOSTNAME_LABEL = "kubernetes.io/hostname"


def dra_node(
    obj: Mapping[str, Any], group_labels: Sequence[str], is_gpu_resource: Callable[[str], bool],
    tolerated_taint_keys: Sequence[str] = DEFAULT_TOLERATED_TAINT_KEYS,
) -> DraNode | None:
    """What DRA pools need of a Node (every node: DRA GPU nodes publish no extended resource);
    ``tolerated_taint_keys``: the taint keys a server tolerates (``CapacityConfig``)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        return None
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    allocatable = status.get("allocatable") if isinstance(status.get("allocatable"), Mapping) else {}
    device_plugin = False
    for resource, raw in allocatable.items():
        if isinstance(resource, str) and is_gpu_resource(resource):
            try:
                device_plugin = device_plugin or parse_count(raw) > 0
            except QuantityError:
                continue
    group_label, group = node_group(labels, tuple(group_labels))
    hostname = labels.get(HOSTNAME_LABEL)
    taints = node_taints(spec)
    return DraNode(
        name=name,
        ready=node_is_ready(status),
        schedulable=not spec.get("unschedulable", False),
        group_label=group_label,
        group=group,
        taints=taints,
        hostname=hostname if isinstance(hostname, str) else None,
        device_plugin=device_plugin,
        refused=refuses_servers(taints, tolerated_taint_keys),
        base=node_base(allocatable, name),
    )
