"""The kubelet's resource admission of a pod bound to its node, and its words: pure.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, NamedTuple

from .. import pod_resources
from ..pod_resources import CPU, EPHEMERAL, MEMORY, PODS

__all__ = ["REJECTED", "Rejection", "admit"]

# Kubelet.rejectPod (k8s.io/kubernetes/pkg/kubelet/kubelet.go) starts the status message so
REJECTED = "Pod was rejected: "


class Rejection(NamedTuple):
    """Why the kubelet rejects a pod: the event's reason and message (its status message is
    ``REJECTED + message``)."""

    reason: str
    message: str


def _extended(resource: str) -> bool:
    # v1helper.IsExtendedResourceName: a domain-qualified name outside kubernetes.io
    return "/" in resource and not resource.startswith("kubernetes.io/") and not resource.startswith("requests.")


def admit(pod: Mapping[str, Any], allocatable: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> Rejection | None:
    """None when ``pod`` fits its node beside ``others`` (the pods already admitted there), else the
    first shortfall as the kubelet's predicate admission names it: pods, cpu, memory,
    ephemeral-storage, then the other resources in name order.  The order and words of
    ``fitsRequest`` (k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources/fit.go) and
    ``predicateAdmitHandler.Admit`` (k8s.io/kubernetes/pkg/kubelet/lifecycle/predicate.go); extended
    resources the node does not have are not checked (``removeMissingExtendedResources``).
    Raises ``pod_resources.QuantityError`` on a quantity that is not one."""
    alloc = pod_resources.resource_list(allocatable)
    others = list(others)
    used: dict[str, int] = {}
    for o in others:
        pod_resources.add_into(used, pod_resources.pod_requests(o))
    want = {r: n for r, n in pod_resources.pod_requests(pod).items()
            if n > 0 and r != PODS and not (_extended(r) and r not in alloc)}
    checks = [(PODS, 1, len(others))]
    checks += [(r, want[r], used.get(r, 0)) for r in (CPU, MEMORY, EPHEMERAL) if r in want]
    checks += [(r, want[r], used.get(r, 0)) for r in sorted(want) if r not in (CPU, MEMORY, EPHEMERAL)]
    for resource, requested, in_use in checks:
        capacity = alloc.get(resource, 0)
        if requested > capacity - in_use:
            return Rejection(f"OutOf{resource}", f"Node didn't have enough resource: {resource}, "
                                                 f"requested: {requested}, used: {in_use}, capacity: {capacity}")
    return None
