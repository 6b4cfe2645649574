"""Server-side printing: ``meta.k8s.io/v1`` Table responses for kubectl.

kubectl asks for ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and
prints the columns the server chooses.  The columns and cell rules follow
``pkg/printers/internalversion/printers.go`` (printPod, printNode,
printEvent, printNamespace); other kinds get the apiserver's default table
(``k8s.io/apiserver/pkg/registry/rest/table.go``: Name, Created At).
Ages use ``k8s.io/apimachinery/pkg/util/duration.HumanDuration``.
Pure stdlib.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Callable

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
