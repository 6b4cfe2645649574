"""Pods stuck Pending on GPUs: finding ``pod-pending-on-gpu``, with a fix that follows the
scheduler's own words.  Pure.

The scheduler's verdict is the ``PodScheduled=False`` condition; its message is read with the
spawner's parser (``spawn.schedmsg``), so doctor and the spawn page sort a stuck pod alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.podres import pod_usage
from gpuspawner.doctor.findings import Finding, ObjectRef
from gpuspawner.kube import objects
from gpuspawner.kube.times import format_duration
from gpuspawner.spawn.schedmsg import AFFINITY, INSUFFICIENT, NODE_NAME, TAINT, UNSCHEDULABLE, parse_scheduling_message

__all__ = ["check_pending_pods"]


def _pending_fix(message: str, ns: str, name: str, usage: Mapping[str, int]) -> str:
    """The fix for what the scheduler's ``FailedScheduling`` message (the ``PodScheduled``
    condition's) names, read with the spawner's own parser (``spawn.schedmsg``); the first of
    a taint, too few free resources, node affinity, cordoned nodes wins."""
    describe = f"kubectl describe pod -n {ns} {name}"
    failure = parse_scheduling_message(message)
    if failure is None:
        return describe
    if failure.count(TAINT):
        return (
            f"A taint keeps it off the GPU nodes: allow its key in c.GPUSpawner.gpu_tolerated_taint_keys "
            f"(see untolerated-gpu-taint) or remove the taint; details: {describe}"
        )
    if failure.count(INSUFFICIENT):
        wanted = ", ".join(f"{n} x {r}" for r, n in sorted(usage.items()))
        return (
            f"No node has {wanted} free: wait for GPUs to be released, stop idle servers "
            f"(jupyterhub-idle-culler), add GPU nodes or let the cluster autoscaler scale the pool; {describe}"
        )
    if failure.count(AFFINITY, NODE_NAME):
        return (
            f"No GPU node matches the pod's node affinity/selector: check the pool's labels "
            f"(kubectl get nodes -L nvidia.com/gpu.product) and the profile's node_selector; {describe}"
        )
    if failure.count(UNSCHEDULABLE):
        return f"The GPU nodes it fits are cordoned (see gpu-node-cordoned): kubectl uncordon NODE; {describe}"
    return describe


def _stuck(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``PodScheduled=False`` condition of a Pending pod that has no node, else None."""
    if objects.section(pod, "status").get("phase") != "Pending" or objects.section(pod, "spec").get("nodeName"):
        return None
    cond = objects.condition(pod, "PodScheduled")
    return cond if cond is not None and cond.get("status") == "False" else None


def _pending(pod: Mapping[str, Any], cond: Mapping[str, Any], usage: Mapping[str, int],
             age: float | None) -> Finding:
    meta = objects.section(pod, "metadata")
    ns = meta.get("namespace") or "default"
    name = objects.name(pod) or "?"
    message = str(cond.get("message") or cond.get("reason") or "no message from the scheduler")
    wanted = ", ".join(f"{n} x {r}" for r, n in sorted(usage.items()))
    age_text = f"for {format_duration(age)}" if age is not None else "(age unknown)"
    return Finding(
        "pod-pending-on-gpu",
        "warning",
        f"Pod {ns}/{name} asks for {wanted} and has been Pending {age_text}: {message}",
        _pending_fix(message, ns, name, usage),
        (ObjectRef("Pod", name, ns),),
        {"requests": dict(usage), "age_seconds": round(age, 1) if age is not None else None,
         "reason": cond.get("reason"), "message": message},
    )


def check_pending_pods(
    pods: Sequence[Mapping[str, Any]],
    config: CapacityConfig,
    now: float,
    pending_after: float,
) -> list[Finding]:
    """``pod-pending-on-gpu``: Pending pods that request GPUs, have
    ``PodScheduled=False`` and are older than ``pending_after`` seconds."""
    out: list[Finding] = []
    for pod in pods:
        cond = _stuck(pod)
        if cond is None:
            continue
        usage = pod_usage(objects.section(pod, "spec"), config.is_gpu_resource)
        if not usage:
            continue
        created = objects.created(pod)
        age = (now - created.timestamp()) if created is not None else None
        if age is not None and age < pending_after:
            continue
        out.append(_pending(pod, cond, usage, age))
    return out
