"""Kueue objects as the API sends them (kueue.x-k8s.io/v1beta2): Workloads, LocalQueues, pending lists."""

from __future__ import annotations

from typing import Any


def condition(kind: str, status: bool = True, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason, "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


def workload(name: str = "pod-jupyter-alice-1a2b3", *, pod_uid: str = "uid-alice", queue: str = "gpu-a100",
             conditions: list[dict] | None = None, flavors: dict[str, str] | None = None,
             priority_class: str | None = None, active: bool | None = None,
             namespace: str = "jhub") -> dict[str, Any]:
    spec: dict[str, Any] = {"queueName": queue, "podSets": [{"name": "main", "count": 1}]}
    if priority_class:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority_class}
    if active is not None:
        spec["active"] = active
    status: dict[str, Any] = {"conditions": conditions or []}
    if flavors is not None:
        status["admission"] = {"clusterQueue": "cq-a100",
                               "podSetAssignments": [{"name": "main", "flavors": flavors, "count": 1}]}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/job-uid": pod_uid}},
            "spec": spec, "status": status}


def pending(message: str = "couldn't assign flavors to pod set main: insufficient unused quota for "
            "nvidia.com/gpu in flavor a100, 1 more needed", **kw) -> dict[str, Any]:
    return workload(conditions=[condition("QuotaReserved", False, "Pending", message)], **kw)


def admitted(flavor: str = "a100", **kw) -> dict[str, Any]:
    return workload(conditions=[condition("QuotaReserved", True, "QuotaReserved"), condition("Admitted", True, "Admitted")],
                    flavors={"nvidia.com/gpu": flavor, "cpu": "default"}, **kw)


def evicted(reason: str, message: str = "", preempted_reason: str | None = None, **kw) -> dict[str, Any]:
    conds = [condition("Evicted", True, reason, message), condition("QuotaReserved", False, "Pending")]
    if preempted_reason:
        conds.append(condition("Preempted", True, preempted_reason, message))
    return workload(conditions=conds, **kw)


def local_queue(name: str = "gpu-a100", pending: int = 0, admitted: int = 0, cluster_queue: str = "cq-a100",
                namespace: str = "jhub") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue},
            "status": {"pendingWorkloads": pending, "admittedWorkloads": admitted, "reservingWorkloads": admitted}}


def pending_entry(name: str, position: int, queue: str = "gpu-a100", priority: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "jhub"}, "priority": priority, "localQueueName": queue,
            "positionInClusterQueue": position, "positionInLocalQueue": position}


def cluster_queue(name: str = "cq-a100", *, flavor: str = "a100", gpus: Any = 8, borrowing: Any = None,
                  stop_policy: str | None = None, active: bool | None = True) -> dict[str, Any]:
    gpu: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    spec: dict[str, Any] = {"namespaceSelector": {}, "resourceGroups": [{
        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
        # in the order of coveredResources, as Kueue's webhook wants
        "flavors": [{"name": flavor, "resources": [{"name": "cpu", "nominalQuota": "64"},
                                                   {"name": "memory", "nominalQuota": "512Gi"}, gpu]}]}]}
    if stop_policy:
        spec["stopPolicy"] = stop_policy
    status: dict[str, Any] = {}
    if active is not None:
        status["conditions"] = [condition("Active", active, "Ready" if active else "FlavorNotFound",
                                          "Can admit new workloads" if active else "Can't admit new workloads: "
                                          "references missing ResourceFlavor(s): a100")]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": spec, "status": status}


def resource_flavor(name: str = "a100", node_labels: dict[str, str] | None = None) -> dict[str, Any]:
    labels = node_labels if node_labels is not None else {"cloud.google.com/gke-nodepool": "a100"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": labels}}
