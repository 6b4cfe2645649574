"""Server-side printing: ``meta.k8s.io/v1`` Table responses for kubectl.
Design notes: docs/simulated-apiserver.md.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable

from . import storage_api

__all__ = ["human_duration", "table_for", "table_columns", "table_row"]


def human_duration(seconds: float) -> str:
    """duration.HumanDuration, to the same rounding."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def _since(ts: str | None, now: float) -> str:
    # printers.go translateTimestampSince: "<unknown>" for a zero time.
    if not ts:
        return "<unknown>"
    try:
        t = _dt.datetime.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=_dt.timezone.utc).timestamp()
    except ValueError:
        return "<unknown>"
    return human_duration(now - t)


def _col(name: str, typ: str, description: str, priority: int = 0, fmt: str = "") -> dict[str, Any]:
    return {"name": name, "type": typ, "format": fmt, "description": description, "priority": priority}


_NAME = _col("Name", "string", "Name must be unique within a namespace.", 0, "name")
_AGE = _col("Age", "string", "CreationTimestamp is a timestamp representing the server time when this "
            "object was created.")

_COLUMNS: dict[str, list[dict[str, Any]]] = {
    "pods": [
        _NAME,
        _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
        _col("Status", "string", "The aggregate status of the containers in this pod."),
        _col("Restarts", "string", "The number of times the containers in this pod have been restarted "
             "and when the last container in this pod has restarted."),
        _AGE,
        _col("IP", "string", "IP address allocated to the pod. Routable at least within the cluster.", 1),
        _col("Node", "string", "NodeName is a request to schedule this pod onto a specific node.", 1),
        _col("Nominated Node", "string", "nominatedNodeName is set when this pod preempts other pods on "
             "the node.", 1),
        _col("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod "
             "readiness.", 1),
    ],
    "nodes": [
        _NAME,
        _col("Status", "string", "The status of the node"),
        _col("Roles", "string", "The roles of the node"),
        _AGE,
        _col("Version", "string", "Kubelet Version reported by the node."),
        _col("Internal-IP", "string", "List of internal IPs.", 1),
        _col("External-IP", "string", "List of external IPs.", 1),
        _col("OS-Image", "string", "OS Image reported by the node from /etc/os-release.", 1),
        _col("Kernel-Version", "string", "Kernel Version reported by the node.", 1),
        _col("Container-Runtime", "string", "Container Runtime Version reported by the node.", 1),
    ],
    "events": [
        _col("Last Seen", "string", "The time at which the most recent occurrence of this event was "
             "recorded."),
        _col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the "
             "future."),
        _col("Reason", "string", "This should be a short, machine understandable string that gives the "
             "reason for the transition into the object's current status."),
        _col("Object", "string", "The object that this event is about."),
        _col("Subobject", "string", "The subobject that this event is about.", 1),
        _col("Source", "string", "The component reporting this event.", 1),
        _col("Message", "string", "A human-readable description of the status of this operation."),
        _col("First Seen", "string", "The time at which the event was first recorded.", 1),
        _col("Count", "string", "The number of times this event has occurred.", 1),
        _col("Name", "string", "Name must be unique within a namespace.", 1, "name"),
    ],
    "namespaces": [
        _NAME,
        _col("Status", "string", "The status of the namespace"),
        _AGE,
    ],
    # resource.k8s.io (printers.go: deviceClassColumnDefinitions, resourceClaimColumnDefinitions,
    # resourceClaimTemplateColumnDefinitions, resourceSliceColumnDefinitions)
    "deviceclasses": [_NAME, _AGE],
    "resourceclaims": [
        _NAME,
        _col("State", "string", "A summary of the current state (allocated, pending, reserved, etc.)."),
        _AGE,
    ],
    "resourceclaimtemplates": [_NAME, _AGE],
    "resourceslices": [
        _NAME,
        _col("Node", "string", "NodeName identifies the node which provides the resources in this pool."),
        _col("Driver", "string", "Driver identifies the DRA driver providing the capacity information."),
        _col("Pool", "string", "Name is used to identify the pool."),
        _AGE,
    ],
}
_COLUMNS.update({
    "services": [
        _NAME,
        _col("Type", "string", "type determines how the Service is exposed."),
        _col("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly."),
        _col("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will "
             "also accept traffic for this service."),
        _col("Port(s)", "string", "The list of ports that are exposed by this service."),
        _AGE,
        _col("Selector", "string", "Route service traffic to pods with label keys and values matching this "
             "selector.", 1),
    ],
    "secrets": [
        _NAME,
        _col("Type", "string", "Used to facilitate programmatic handling of secret data."),
        _col("Data", "string", "Data contains the secret data."),
        _AGE,
    ],
    "configmaps": [
        _NAME,
        _col("Data", "string", "Data contains the configuration data."),
        _AGE,
    ],
    "serviceaccounts": [
        _NAME,
        _col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using "
             "this ServiceAccount are allowed to use."),
        _AGE,
    ],
    "persistentvolumes": [
        _NAME,
        _col("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity."),
        _col("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
        _col("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume "
             "when released from its claim."),
        _col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a "
             "claim."),
        _col("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and "
             "PersistentVolumeClaim."),
        _col("StorageClass", "string", "StorageClass of the pv"),
        _col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
        _col("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for "
             "machine parsing and tidy display in the CLI."),
        _AGE,
        _col("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted "
             "filesystem or to remain in raw block state.", 1),
    ],
    "persistentvolumeclaims": [
        _NAME,
        _col("Status", "string", "phase represents the current phase of PersistentVolumeClaim."),
        _col("Volume", "string", "volumeName is the binding reference to the PersistentVolume backing this claim."),
        _col("Capacity", "string", "capacity represents the actual resources of the underlying volume."),
        _col("Access Modes", "string", "accessModes contains the actual access modes the volume backing the PVC "
             "has."),
        _col("StorageClass", "string", "StorageClass of the pvc"),
        _col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pvc"),
        _AGE,
        _col("VolumeMode", "string", "volumeMode defines what type of volume is required by the claim.", 1),
    ],
    "leases": [
        _NAME,
        _col("Holder", "string", "holderIdentity contains the identity of the holder of a current lease."),
        _AGE,
    ],
    "storageclasses": [
        _NAME,
        _col("Provisioner", "string", "provisioner indicates the type of the provisioner."),
        _col("ReclaimPolicy", "string", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned "
             "PersistentVolumes of this storage class."),
        _col("VolumeBindingMode", "string", "volumeBindingMode indicates how PersistentVolumeClaims should be "
             "provisioned and bound."),
        _col("AllowVolumeExpansion", "string", "allowVolumeExpansion shows whether the storage class allow volume "
             "expand."),
        _AGE,
    ],
})
_DEFAULT_COLUMNS = [
    _NAME,
    _col("Created At", "date", "CreationTimestamp is a timestamp representing the server time when this "
         "object was created."),
]


def table_columns(plural: str) -> list[dict[str, Any]]:
    return _COLUMNS.get(plural, _DEFAULT_COLUMNS)


def _pod_cells(pod: dict[str, Any], now: float) -> list[Any]:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    total = len(spec.get("containers") or [])
    ready = 0
    restarts = 0
    last_restart: str | None = None
    reason = status.get("reason") or status.get("phase") or ""
    initializing = False
    inits = status.get("initContainerStatuses") or []
    for i, cs in enumerate(inits):
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        term = state.get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        if term:
            reason = "Init:" + (term.get("reason") or f"ExitCode:{term.get('exitCode')}")
        elif (state.get("waiting") or {}).get("reason") and state["waiting"]["reason"] != "PodInitializing":
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        initializing = True
        break
    if not initializing:
        restarts = 0
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            last = ((cs.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
            if last and (last_restart is None or last > last_restart):
                last_restart = last
            state = cs.get("state") or {}
            waiting, term = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif term and term.get("reason"):
                reason = term["reason"]
            elif term:
                reason = (f"Signal:{term['signal']}" if term.get("signal")
                          else f"ExitCode:{term.get('exitCode')}")
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
            reason = "Running" if conditions.get("Ready") == "True" else "NotReady"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restarts_cell = str(restarts)
    if restarts and last_restart:
        restarts_cell = f"{restarts} ({_since(last_restart, now)} ago)"
    gates = spec.get("readinessGates") or []
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        true = sum(1 for g in gates if conditions.get(g.get("conditionType")) == "True")
        gates_cell = f"{true}/{len(gates)}"
    else:
        gates_cell = "<none>"
    return [
        meta.get("name", ""),
        f"{ready}/{total}",
        reason,
        restarts_cell,
        _since(meta.get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]


def _node_cells(node: dict[str, Any], now: float) -> list[Any]:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    ready = conds.get("Ready")
    states = ["Ready" if ready == "True" else ("NotReady" if ready == "False" else "Unknown")]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = sorted(
        {k[len("node-role.kubernetes.io/"):] for k in (meta.get("labels") or {})
         if k.startswith("node-role.kubernetes.io/") and k != "node-role.kubernetes.io/"}
        | ({(meta.get("labels") or {})["kubernetes.io/role"]} if "kubernetes.io/role" in (meta.get("labels") or {}) else set())
    )
    info = status.get("nodeInfo") or {}

    def addr(kind: str) -> str:
        for a in status.get("addresses") or []:
            if a.get("type") == kind:
                return a.get("address") or "<none>"
        return "<none>"

    return [
        meta.get("name", ""),
        ",".join(states),
        ",".join(roles) if roles else "<none>",
        _since(meta.get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        addr("InternalIP"),
        addr("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


def _event_cells(ev: dict[str, Any], now: float) -> list[Any]:
    meta = ev.get("metadata") or {}
    inv = ev.get("involvedObject") or {}
    first = ev.get("firstTimestamp") or ev.get("eventTime") or meta.get("creationTimestamp")
    last = ev.get("lastTimestamp") or (ev.get("series") or {}).get("lastObservedTime") or first
    source = (ev.get("source") or {}).get("component") or ev.get("reportingComponent") or ""
    host = (ev.get("source") or {}).get("host")
    if host:
        source = f"{source}, {host}"
    kind = str(inv.get("kind") or "").lower()
    return [
        _since(last, now),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{kind}/{inv.get('name', '')}",
        inv.get("fieldPath", ""),
        source,
        str(ev.get("message") or "").strip(),
        _since(first, now),
        str(ev.get("count") or 1),
        meta.get("name", ""),
    ]


def _namespace_cells(ns: dict[str, Any], now: float) -> list[Any]:
    meta = ns.get("metadata") or {}
    return [meta.get("name", ""), (ns.get("status") or {}).get("phase", ""),
            _since(meta.get("creationTimestamp"), now)]


def _name_age_cells(obj: dict[str, Any], now: float) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), _since(meta.get("creationTimestamp"), now)]


def resource_claim_state(claim: dict[str, Any]) -> str:
    """printers.go ``resourceClaimState``: deleted, pending, allocated, reserved."""
    meta, status = claim.get("metadata") or {}, claim.get("status") or {}
    states = []
    if meta.get("deletionTimestamp"):
        states.append("deleted")
    if not status.get("allocation"):
        if not meta.get("deletionTimestamp"):
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _resource_claim_cells(claim: dict[str, Any], now: float) -> list[Any]:
    meta = claim.get("metadata") or {}
    return [meta.get("name", ""), resource_claim_state(claim), _since(meta.get("creationTimestamp"), now)]


def _resource_slice_cells(rs: dict[str, Any], now: float) -> list[Any]:
    meta, spec = rs.get("metadata") or {}, rs.get("spec") or {}
    return [meta.get("name", ""), spec.get("nodeName") or "", spec.get("driver", ""),
            (spec.get("pool") or {}).get("name", ""), _since(meta.get("creationTimestamp"), now)]


def _service_cells(svc: dict[str, Any], now: float) -> list[Any]:
    """printService (server-side printing is always wide)."""
    meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
    stype = spec.get("type") or ""
    external = ",".join(spec.get("externalIPs") or []) or "<none>"
    if stype == "LoadBalancer":
        ingress = ",".join(i.get("ip") or i.get("hostname") or ""
                           for i in ((svc.get("status") or {}).get("loadBalancer") or {}).get("ingress") or [])
        external = ",".join(x for x in (ingress, ",".join(spec.get("externalIPs") or [])) if x) or "<pending>"
    elif stype == "ExternalName":
        external = spec.get("externalName") or ""
    ports = ",".join(
        f"{p.get('port')}:{p['nodePort']}/{p.get('protocol') or 'TCP'}" if p.get("nodePort")
        else f"{p.get('port')}/{p.get('protocol') or 'TCP'}" for p in spec.get("ports") or [])
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [meta.get("name", ""), stype, (spec.get("clusterIPs") or ["<none>"])[0], external, ports or "<none>",
            _since(meta.get("creationTimestamp"), now), selector]


def _secret_cells(obj: dict[str, Any], now: float) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), obj.get("type", ""), len(obj.get("data") or {}),
            _since(meta.get("creationTimestamp"), now)]


def _configmap_cells(obj: dict[str, Any], now: float) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
            _since(meta.get("creationTimestamp"), now)]


def _serviceaccount_cells(obj: dict[str, Any], now: float) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), len(obj.get("secrets") or []), _since(meta.get("creationTimestamp"), now)]


def _pv_cells(pv: dict[str, Any], now: float) -> list[Any]:
    """printPersistentVolume."""
    meta, spec, status = pv.get("metadata") or {}, pv.get("spec") or {}, pv.get("status") or {}
    ref = spec.get("claimRef")
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else ""
    phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "")
    return [meta.get("name", ""), str((spec.get("capacity") or {}).get("storage", "")),
            storage_api.access_modes_string(spec.get("accessModes")), spec.get("persistentVolumeReclaimPolicy", ""),
            phase, claim, storage_api.volume_class(pv), spec.get("volumeAttributesClassName") or "<unset>",
            status.get("reason", ""), _since(meta.get("creationTimestamp"), now), spec.get("volumeMode") or "<unset>"]


def _pvc_cells(pvc: dict[str, Any], now: float) -> list[Any]:
    """printPersistentVolumeClaim: capacity and access modes only once bound to a volume."""
    meta, spec, status = pvc.get("metadata") or {}, pvc.get("spec") or {}, pvc.get("status") or {}
    phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "")
    capacity = modes = ""
    if spec.get("volumeName"):
        capacity = str((status.get("capacity") or {}).get("storage", ""))
        modes = storage_api.access_modes_string(status.get("accessModes"))
    return [meta.get("name", ""), phase, spec.get("volumeName", ""), capacity, modes, storage_api.claim_class(pvc),
            spec.get("volumeAttributesClassName") or "<unset>", _since(meta.get("creationTimestamp"), now),
            spec.get("volumeMode") or "<unset>"]


def _storageclass_cells(sc: dict[str, Any], now: float) -> list[Any]:
    """printStorageClass: the default class is named ``<name> (default)``."""
    meta = sc.get("metadata") or {}
    name = meta.get("name", "") + (" (default)" if storage_api.is_default_class(sc) else "")
    return [name, sc.get("provisioner", ""), sc.get("reclaimPolicy") or "Delete",
            sc.get("volumeBindingMode") or "Immediate", bool(sc.get("allowVolumeExpansion")),
            _since(meta.get("creationTimestamp"), now)]


def _lease_cells(obj: dict[str, Any], now: float) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), (obj.get("spec") or {}).get("holderIdentity") or "",
            _since(meta.get("creationTimestamp"), now)]


def _default_cells(obj: dict[str, Any], now: float) -> list[Any]:
    meta = obj.get("metadata") or {}
    return [meta.get("name", ""), meta.get("creationTimestamp")]


_CELLS: dict[str, Callable[[dict[str, Any], float], list[Any]]] = {
    "pods": _pod_cells,
    "nodes": _node_cells,
    "events": _event_cells,
    "namespaces": _namespace_cells,
    "deviceclasses": _name_age_cells,
    "resourceclaims": _resource_claim_cells,
    "resourceclaimtemplates": _name_age_cells,
    "resourceslices": _resource_slice_cells,
    "services": _service_cells,
    "secrets": _secret_cells,
    "configmaps": _configmap_cells,
    "serviceaccounts": _serviceaccount_cells,
    "persistentvolumes": _pv_cells,
    "persistentvolumeclaims": _pvc_cells,
    "storageclasses": _storageclass_cells,
    "leases": _lease_cells,
}


def _row_object(obj: dict[str, Any], kind: str, include: str, api_version: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return dict(obj, kind=kind, apiVersion=api_version)
    # "Metadata" (the default): a PartialObjectMetadata.
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata") or {}}


def table_row(plural: str, kind: str, obj: dict[str, Any], now: float, include: str = "Metadata",
              api_version: str = "v1") -> dict[str, Any]:
    row: dict[str, Any] = {"cells": _CELLS.get(plural, _default_cells)(obj, now)}
    o = _row_object(obj, kind, include, api_version)
    if o is not None:
        row["object"] = o
    return row


def table_for(plural: str, kind: str, items: list[dict[str, Any]], list_meta: dict[str, Any], now: float,
              include: str = "Metadata", headers: bool = True, api_version: str = "v1") -> dict[str, Any]:
    """A Table for ``items`` (a list response, or one object in a list of one)."""
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": table_columns(plural) if headers else [],
        "rows": [table_row(plural, kind, o, now, include, api_version) for o in items],
    }
