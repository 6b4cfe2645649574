"""What a node's kubelet, device plugins and GPU Feature Discovery write about it.  Pure.

From a cluster file's Node: the Node the kubelet registers (labels, taints, capacity and
allocatable, conditions, addresses, the kubelet's port, node info, images), its Lease in
``kube-node-lease``, the status heartbeat, and the ResourceSlices its DRA kubelet plugin
publishes (owned by the Node, as ``k8s.io/dynamic-resource-allocation/resourceslice`` does).
"""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION = 40  # the kubelet's nodeLeaseDurationSeconds
MAX_IMAGES = 50  # the kubelet's nodeStatusMaxImages
# conditions the kubelet keeps besides Ready (pkg/kubelet/nodestatus/setters.go)
PRESSURE = (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
READY_REASON = {"True": ("KubeletReady", "kubelet is posting ready status"),
                "False": ("KubeletNotReady", "container runtime network not ready: NetworkReady=false"),
                "Unknown": ("NodeStatusUnknown", "Kubelet stopped posting node status.")}


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ready_status(node: Mapping[str, Any]) -> str:
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return str(c.get("status") or "Unknown")
    return "Unknown"


def conditions(file_conditions: list[Mapping[str, Any]], now: str) -> list[dict[str, Any]]:
    """The file's conditions (Ready as it says), the pressure conditions a kubelet adds, times set."""
    out: list[dict[str, Any]] = []
    have = {c.get("type") for c in file_conditions}
    for c in file_conditions:
        d = dict(c)
        if d.get("type") == "Ready":
            reason, message = READY_REASON.get(str(d.get("status")), READY_REASON["Unknown"])
            d.setdefault("reason", reason)
            d.setdefault("message", message)
        d["lastHeartbeatTime"] = now
        d.setdefault("lastTransitionTime", now)
        out.append(d)
    for type_, reason, message in PRESSURE:
        if type_ not in have:
            out.append({"type": type_, "status": "False", "reason": reason, "message": message,
                        "lastHeartbeatTime": now, "lastTransitionTime": now})
    return out


def node_status(file_node: Mapping[str, Any], *, kubelet_port: int, images: list[dict] | None = None,
                now: str | None = None) -> dict[str, Any]:
    """``status`` of the registered node: what the file gives, what a kubelet always reports."""
    now = now or now_rfc3339()
    st = copy.deepcopy(dict(file_node.get("status") or {}))
    name = file_node["metadata"]["name"]
    st["conditions"] = conditions(st.get("conditions") or [], now)
    st["addresses"] = st.get("addresses") or [{"type": "InternalIP", "address": "127.0.0.1"},
                                              {"type": "Hostname", "address": name}]
    st["daemonEndpoints"] = {"kubeletEndpoint": {"Port": int(kubelet_port)}}
    all_images = list(st.get("images") or []) + list(images or [])
    st["images"] = all_images[:MAX_IMAGES]
    if not st["images"]:
        del st["images"]
    st.pop("phase", None)
    return st


def node_object(file_node: Mapping[str, Any], *, kubelet_port: int, now: str | None = None) -> dict[str, Any]:
    """The Node the kubelet creates: metadata and spec from the file, status as a kubelet posts it."""
    meta = file_node["metadata"]
    keep = {k: copy.deepcopy(meta[k]) for k in ("name", "labels", "annotations") if meta.get(k)}
    spec = {k: copy.deepcopy(v) for k, v in (file_node.get("spec") or {}).items()
            if k in ("taints", "unschedulable", "providerID", "podCIDR", "podCIDRs")}
    return {"apiVersion": "v1", "kind": "Node", "metadata": keep, "spec": spec,
            "status": node_status(file_node, kubelet_port=kubelet_port, now=now)}


def heartbeat(node: Mapping[str, Any], now: str | None = None) -> dict[str, Any]:
    """The status patch of a heartbeat: every condition's ``lastHeartbeatTime`` set to now."""
    now = now or now_rfc3339()
    conds = [dict(c, lastHeartbeatTime=now) for c in (node.get("status") or {}).get("conditions") or []]
    return {"status": {"conditions": conds}}


def owner_ref(node: Mapping[str, Any]) -> dict[str, Any]:
    meta = node["metadata"]
    return {"apiVersion": "v1", "kind": "Node", "name": meta["name"], "uid": meta["uid"]}


def lease(node: Mapping[str, Any], renew: str | None = None) -> dict[str, Any]:
    """The node's Lease (``k8s.io/component-helpers/apimachinery/lease``), owned by the Node."""
    name = node["metadata"]["name"]
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner_ref(node)]},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION,
                     "renewTime": renew or now_micro()}}


def renewal(renew: str | None = None) -> dict[str, Any]:
    """The merge patch that renews a Lease."""
    return {"spec": {"renewTime": renew or now_micro()}}


def owned_slice(resource_slice: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """A node-scoped ResourceSlice as the DRA kubelet plugin publishes it: owned by its Node
    (deleted with it), without the file's server-set metadata."""
    meta = resource_slice["metadata"]
    keep = {k: copy.deepcopy(meta[k]) for k in ("name", "labels", "annotations") if meta.get(k)}
    keep["ownerReferences"] = [dict(owner_ref(node), controller=True)]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": keep,
            "spec": copy.deepcopy(resource_slice["spec"])}


def slice_node(resource_slice: Mapping[str, Any]) -> str | None:
    """The node a ResourceSlice belongs to (``spec.nodeName``), or None for a cluster-wide one."""
    return (resource_slice.get("spec") or {}).get("nodeName") or None


def pulled_images(images: set[str], size: Callable[[str], int] = lambda image: 0) -> list[dict[str, Any]]:
    """``status.images`` entries for images the node pulled, with the sizes the kubelet was given
    (``size``; 0: there are no real images here)."""
    return [{"names": [i], "sizeBytes": size(i)} for i in sorted(images)]
