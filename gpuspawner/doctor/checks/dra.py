"""Doctor's DRA checks: what keeps GPUs handed out through ResourceClaims from reaching notebooks.
Design notes: docs/dra.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import choose_class, class_record, dra_node, slice_record
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.doctor.dra_state import DRA_GROUP, DraState
from gpuspawner.doctor.findings import Finding, ObjectRef
from gpuspawner.kube.api_errors import (
    CLUSTER_ROLE_NAME,
    DRA_CLUSTER_ROLE_RULES,
    DRA_ROLE_NAME,
    DRA_ROLE_RULES,
    rules_text,
)
from gpuspawner.kube.times import format_duration, parse_time

__all__ = ["check_dra", "check_dra_rbac", "dra_gpu_nodes", "reconcile"]


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or "?")


def _names(items: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _ledger(dra: DraState, nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> DraAccounts:
    accounts = DraAccounts()
    for obj in dra.classes or ():
        rec = class_record(obj)
        if rec is not None:
            accounts.upsert_class(rec)
    for obj in nodes:
        rec = dra_node(obj, config.node_group_labels, config.is_gpu_resource)
        if rec is not None:
            accounts.upsert_node(rec)
    for obj in dra.slices or ():
        rec = slice_record(obj, config.dra_drivers)
        if rec is not None:
            accounts.upsert_slice(rec)
    return accounts


def dra_gpu_nodes(dra: DraState | None, config: CapacityConfig) -> set[str]:
    """Nodes with node-local devices of a GPU driver in some ResourceSlice."""
    out = set()
    for obj in (dra.slices or ()) if dra is not None else ():
        rec = slice_record(obj, config.dra_drivers)
        if rec is not None and rec.node is not None and rec.devices:
            out.add(rec.node)
    return out


def check_classes(dra: DraState, config: CapacityConfig) -> list[Finding]:
    """``dra-no-deviceclass``: per driver and device type, devices no readable class takes."""
    classes = sorted((c for c in (class_record(o) for o in dra.classes or ()) if c is not None), key=lambda c: c.name)
    readable = [c for c in classes if c.readable]
    orphans: dict[tuple[str, str], set[str]] = defaultdict(set)
    for obj in dra.slices or ():
        rec = slice_record(obj, config.dra_drivers)
        for d in rec.devices if rec is not None else ():
            if d.usable and choose_class(readable, rec.driver, d) is None:
                orphans[(rec.driver, d.device_type or "device")].add(rec.node or rec.pool)
    out = []
    unreadable = [c.name for c in classes if not c.readable]
    for (driver, kind), where in sorted(orphans.items()):
        note = (f" DeviceClasses whose selectors gpuspawner cannot read (not a conjunction of == tests on "
                f"device.driver and attributes): {_names(unreadable)}." if unreadable else "")
        out.append(Finding(
            "dra-no-deviceclass", "error",
            f"Driver {driver} publishes {kind} devices on {_names(sorted(where))} that no DeviceClass takes, "
            f"so no ResourceClaim can ask for them and the hub offers no pool for them.{note}",
            f"Install the driver's DeviceClasses (the NVIDIA DRA driver's Helm chart creates gpu.nvidia.com "
            f"and mig.nvidia.com), e.g. a class with the selector \"device.driver == '{driver}' && "
            f"device.attributes['{driver}'].type == '{kind}'\"; kubectl get deviceclasses",
            tuple(ObjectRef("Node", n) for n in sorted(where)),
            {"driver": driver, "type": kind, "unreadable_classes": unreadable},
        ))
    return out


def check_published_twice(dra: DraState, nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Finding]:
    """``dra-gpus-published-twice``: device-plugin GPUs and DRA GPUs on one node."""
    dra_nodes = dra_gpu_nodes(dra, config)
    twice = sorted(
        n.name for n in (dra_node(o, config.node_group_labels, config.is_gpu_resource) for o in nodes)
        if n is not None and n.device_plugin and n.name in dra_nodes
    )
    if not twice:
        return []
    return [Finding(
        "dra-gpus-published-twice", "error",
        f"{_names(twice)} publish GPUs both through a device plugin (an extended resource such as nvidia.com/gpu "
        "in status.allocatable) and through a DRA driver (ResourceSlices): both hand out the same GPUs, so "
        "two pods can get one GPU. The hub counts these nodes' device-plugin GPUs only.",
        "Run one of the two on each node: disable the device plugin where the DRA driver runs (NVIDIA GPU "
        "Operator: devicePlugin.enabled=false, or the node label nvidia.com/gpu.deploy.device-plugin=false), "
        "or the DRA driver's GPU kubelet plugin where the device plugin should stay.",
        tuple(ObjectRef("Node", n) for n in twice),
        {"nodes": twice},
    )]


def check_incomplete(dra: DraState, nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Finding]:
    """``dra-slices-incomplete``: resource pools whose newest generation is missing slices."""
    pools = _ledger(dra, nodes, config).incomplete_pools()
    if not pools:
        return []
    names = [f"{driver}/{pool}" for driver, pool in pools]
    return [Finding(
        "dra-slices-incomplete", "warning",
        f"Resource pools {_names(names)} lack some ResourceSlices of their newest generation (fewer than "
        "their resourceSliceCount, or duplicate device names): their devices are not counted or offered "
        "until the driver has published them all.",
        "kubectl get resourceslices -o wide; check the DRA driver's kubelet plugin on those nodes "
        "(its pod's logs); a stuck pool usually clears when the plugin restarts.",
        (),
        {"pools": names},
    )]


def check_claims(dra: DraState, now: float, pending_after: float) -> list[Finding]:
    """``dra-claim-unallocated``: claims older than ``pending_after`` with no allocation."""
    stuck = []
    for obj in dra.claims or ():
        meta = obj.get("metadata") or {}
        created = parse_time(meta.get("creationTimestamp"))
        if (obj.get("status") or {}).get("allocation") or created is None or meta.get("deletionTimestamp"):
            continue
        age = now - created.timestamp()
        if age >= pending_after:
            stuck.append((meta.get("namespace") or "default", _name(obj), age))
    if not stuck:
        return []
    shown = [f"{ns}/{name} ({format_duration(age)})" for ns, name, age in stuck]
    return [Finding(
        "dra-claim-unallocated", "warning",
        f"{len(stuck)} ResourceClaim{'s' if len(stuck) > 1 else ''} without devices for more than "
        f"{format_duration(pending_after)}: {_names(shown)}; their pods wait to be scheduled.",
        "kubectl describe pod of each claim's owner: the scheduler's event says why (\"cannot allocate all "
        "claims\": no node has the devices free; \"device class ... does not exist\": a missing class).",
        tuple(ObjectRef("ResourceClaim", name, ns) for ns, name, _ in stuck),
        {"claims": [{"namespace": ns, "name": name, "age_seconds": round(age)} for ns, name, age in stuck]},
    )]


def check_dra_rbac(dra: DraState, subject: str) -> list[Finding]:
    """``dra-rbac-missing``: DRA rules the hub lacks."""
    denied = [c for c in dra.rbac if c.allowed is False]
    if not denied:
        return []
    return [Finding(
        "dra-rbac-missing", "warning",
        f"{subject} may not: " + "; ".join(f"{DRA_GROUP} {c.rule}" for c in denied)
        + ". Without the cluster-wide rules the hub offers no DRA GPU pool (device-plugin pools are "
        "unaffected); without the namespaced ones it cannot start a server on one.",
        f"kubectl apply -f deploy/rbac.yaml (ClusterRole {CLUSTER_ROLE_NAME} with the {DRA_GROUP} rules "
        f"[{rules_text(DRA_CLUSTER_ROLE_RULES)}]; Role {DRA_ROLE_NAME} in the hub's namespace with "
        f"[{rules_text(DRA_ROLE_RULES)}]).",
        tuple(ObjectRef("ClusterRole" if c.namespace is None else "Role", c.rule) for c in denied),
        {"denied": [{"verb": c.verb, "resource": c.resource, "namespace": c.namespace, "how": c.how,
                     "reason": c.reason} for c in denied]},
    )]


def check_dra(
    dra: DraState | None,
    nodes: Sequence[Mapping[str, Any]] | None,
    *,
    config: CapacityConfig,
    subject: str,
    now: float,
    pending_after: float,
) -> list[Finding]:
    """Every DRA check; nothing on a cluster that does not serve ``resource.k8s.io/v1``."""
    if dra is None or not dra.served:
        return []
    out = check_dra_rbac(dra, subject) + check_classes(dra, config)
    if nodes is not None:
        out += check_published_twice(dra, nodes, config) + check_incomplete(dra, nodes, config)
    out += check_claims(dra, now, pending_after)
    return out


def reconcile(findings: list[Finding], dra: DraState | None, config: CapacityConfig) -> list[Finding]:
    """Drop device-plugin findings that DRA explains: ``gpu-node-no-allocatable`` for a node whose
    GPUs a DRA driver publishes, ``no-gpu-nodes`` when DRA GPU nodes exist."""
    dra_nodes = dra_gpu_nodes(dra, config)
    if not dra_nodes:
        return findings
    out = []
    for f in findings:
        if f.id == "no-gpu-nodes":
            continue
        if f.id == "gpu-node-no-allocatable" and all(o.name in dra_nodes for o in f.objects):
            continue
        out.append(f)
    return out
