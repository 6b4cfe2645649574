"""Pods stuck Pending on GPUs: finding ``pod-pending-on-gpu``, with a fix that follows the
scheduler's own words.  Pure.  Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.node_resources import request_words
from gpuspawner.capacity.node_taints import NodeTaintCounts, node_filter_taints
from gpuspawner.capacity.pod_requests import pod_base, pod_usage
from gpuspawner.capacity.taintrule import NodeTaints, TaintExclusion, pod_taint_exclusion
from gpuspawner.doctor.findings import Finding, ObjectRef
from gpuspawner.kube import objects
from gpuspawner.kube.times import format_duration
from gpuspawner.spawn.scheduler_messages import (
    AFFINITY,
    INSUFFICIENT,
    NODE_NAME,
    TAINT,
    UNBOUND_IMMEDIATE,
    UNSCHEDULABLE,
    VOLUME,
    VOLUME_ZONE,
    SchedulingFailure,
    missing_claim,
    parse_scheduling_message,
)
from gpuspawner.spawn.tolerations import taint_text

__all__ = ["check_pending_pods"]


def claim_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The PersistentVolumeClaims a pod mounts (``spec.volumes[].persistentVolumeClaim.claimName``),
    in its order, each once."""
    out: list[str] = []
    for volume in objects.section(pod, "spec").get("volumes") or ():
        claim = volume.get("persistentVolumeClaim") if isinstance(volume, Mapping) else None
        name = claim.get("claimName") if isinstance(claim, Mapping) else None
        if isinstance(name, str) and name and name not in out:
            out.append(name)
    return tuple(out)


def _storage_fix(failure: SchedulingFailure, ns: str, claims: Sequence[str], describe: str) -> str | None:
    """The fix for the scheduler's volume reasons (VolumeBinding, VolumeZone): a volume bound to
    a zone where no node the pod may use runs, a missing claim or volume, an unbound Immediate
    claim; None when the message names none of them."""
    shown = ", ".join(claims) or "CLAIM"
    inspect = f"kubectl get pvc -n {ns} {shown} -o wide; kubectl get pv VOLUME -o jsonpath='{{.spec.nodeAffinity}}'"
    if failure.count(VOLUME_ZONE):
        return (
            f"Its volume (claim {shown}) is bound to a zone where none of the GPU nodes it may use runs "
            "(volume node affinity conflict: the home volume was created in another zone than the GPU pool). "
            "Fixes: move the data to a volume in the GPU pool's zone (snapshot and restore, or a new claim), "
            "add GPU nodes in the volume's zone, or give home volumes a StorageClass with volumeBindingMode: "
            f"WaitForFirstConsumer so that new ones are created where the pod is scheduled; see the zones: "
            f"{inspect}; {describe}"
        )
    for r in failure.reasons:
        if r.kind != VOLUME:
            continue
        missing = missing_claim(r.text)
        if missing is not None and missing[0] == "claim":
            return (
                f"Its claim {missing[1]} {'is being deleted' if missing[2] else 'does not exist'}: recreate it, "
                "or let KubeSpawner create users' claims before their pods (c.KubeSpawner.storage_pvc_ensure = "
                f"True with pvc_name_template); {describe}"
            )
        if missing is not None:
            return (
                f"Its claim is bound to the volume {missing[1]}, which no longer exists: restore the volume "
                f"or give the user a new claim; {inspect}; {describe}"
            )
        if r.text == UNBOUND_IMMEDIATE:
            return (
                f"Its claim {shown} is not bound: its StorageClass binds immediately and no volume matches or the "
                f"provisioner made none (look for ProvisioningFailed in kubectl describe pvc -n {ns} {shown}); "
                "a WaitForFirstConsumer class also creates the volume in the GPU node's zone; " + describe
            )
    if failure.count(VOLUME):
        return f"Its volumes cannot be bound on the nodes it may use: kubectl describe pvc -n {ns} {shown}; {describe}"
    return None


_BASE_WORDS = {"cpu": "CPU", "memory": "memory", "ephemeral-storage": "disk space", "pods": "pod slots"}


def _base_fix(failure: Any, describe: str, request: tuple[int, ...] | None) -> str | None:
    """The fix when the nodes that pass the pod's taints and affinity lack CPU, memory, disk or pod
    slots (NodeResourcesFit): the same cause the spawn's progress names (``nodes_too_small``)."""
    lacking = [w for k, w in _BASE_WORDS.items()
               if any(r.kind == INSUFFICIENT and r.detail == k for r in failure.reasons)]
    if not lacking:
        return None
    asked = f" ({request_words(request)})" if request is not None and any(request[:3]) else ""
    return (
        f"The nodes it may use lack the {' and '.join(lacking)} it asks for{asked}: when no node of the pool "
        "is that big, lower the profile's cpu_limit/mem_limit (or cpu_guarantee/mem_guarantee) or offer a "
        f"pool with bigger nodes; otherwise other workloads hold it, and the server starts when they end; {describe}"
    )


def _taint_fix(failure: SchedulingFailure, excluded: TaintExclusion | None, describe: str) -> str | None:
    """The fix for the scheduler's taint reasons.  Its 1.35+ wording names no taint: with the nodes'
    taints weighed against the pod's tolerations (``excluded``, ``capacity.taintrule``, the rule the
    spawn's verdict uses) the fix names the taints that stay, and a reason whose nodes are only
    out for now (not ready, being removed) is no taint's to fix (None)."""
    count = failure.count(TAINT)
    if not count:
        return None
    keyless = not any(r.detail for r in failure.reasons if r.kind == TAINT)
    if not keyless or excluded is None:
        return (
            f"A taint keeps it off the GPU nodes: allow its key in c.GPUSpawner.gpu_tolerated_taint_keys "
            f"(see untolerated-gpu-taint) or remove the taint; details: {describe}"
        )
    lasting = excluded.lasting_among(count)
    if not lasting:
        return None
    named = ", ".join(f"{taint_text(t)} on {n} node{'s' if n != 1 else ''}" for t, n in excluded.taints[:3])
    others = ""
    if failure.count(AFFINITY, NODE_NAME):
        others = (" The other nodes do not match its node affinity/selector: check the profile's node_selector "
                  "and what a modify_pod_hook adds.")
    return (
        f"Taints it does not tolerate keep it off {lasting} of the {failure.total_nodes} nodes ({named}): if it "
        "should run there, allow the key in c.GPUSpawner.gpu_tolerated_taint_keys (see untolerated-gpu-taint) or "
        f"remove the taint.{others} Details: {describe}"
    )


def _pending_fix(message: str, ns: str, name: str, usage: Mapping[str, int], claims: Sequence[str] = (),
                 request: tuple[int, ...] | None = None, excluded: TaintExclusion | None = None) -> str:
    """The fix for what the scheduler's ``FailedScheduling`` message (the ``PodScheduled``
    condition's) names, read with the spawner's own parser (``spawn.schedmsg``); the first of
    a taint, a volume problem (``claims``: the claims the pod mounts), too few free resources,
    node affinity, cordoned nodes wins.  A volume conflict goes before ``Insufficient``: the
    nodes without GPUs say ``Insufficient`` while the GPU nodes are excluded by the volume.
    ``excluded``: the nodes' taints against the pod's tolerations (:func:`_taint_fix`)."""
    describe = f"kubectl describe pod -n {ns} {name}"
    failure = parse_scheduling_message(message)
    if failure is None:
        return describe
    # the nodes that report CPU or memory passed the taint and affinity filters: they are the pool's
    base = _base_fix(failure, describe, request)
    if base is not None:
        return base
    taint = _taint_fix(failure, excluded, describe)
    if taint is not None:
        return taint
    storage = _storage_fix(failure, ns, claims, describe)
    if storage is not None:
        return storage
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
    if failure.count(TAINT):
        return (f"The nodes it may use are not ready or are being removed (their node.kubernetes.io/* or "
                f"autoscaler taints keep pods off until they recover; see gpu-node-not-ready): {describe}")
    return describe


def _stuck(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``PodScheduled=False`` condition of a Pending pod that has no node, else None."""
    if objects.section(pod, "status").get("phase") != "Pending" or objects.section(pod, "spec").get("nodeName"):
        return None
    cond = objects.condition(pod, "PodScheduled")
    return cond if cond is not None and cond.get("status") == "False" else None


def _pending(pod: Mapping[str, Any], cond: Mapping[str, Any], usage: Mapping[str, int],
             age: float | None, node_taints: tuple[tuple[NodeTaints, int], ...] | None = None) -> Finding:
    meta = objects.section(pod, "metadata")
    ns = meta.get("namespace") or "default"
    name = objects.name(pod) or "?"
    message = str(cond.get("message") or cond.get("reason") or "no message from the scheduler")
    wanted = ", ".join(f"{n} x {r}" for r, n in sorted(usage.items()))
    age_text = f"for {format_duration(age)}" if age is not None else "(age unknown)"
    excluded = pod_taint_exclusion(node_taints, pod) if node_taints is not None else None
    return Finding(
        "pod-pending-on-gpu",
        "warning",
        f"Pod {ns}/{name} asks for {wanted} and has been Pending {age_text}: {message}",
        _pending_fix(message, ns, name, usage, claim_names(pod), (*pod_base(objects.section(pod, "spec")), 1),
                     excluded),
        (ObjectRef("Pod", name, ns),),
        {"requests": dict(usage), "age_seconds": round(age, 1) if age is not None else None,
         "reason": cond.get("reason"), "message": message},
    )


def node_taint_sets(nodes: Sequence[Mapping[str, Any]]) -> tuple[tuple[NodeTaints, int], ...]:
    """Each distinct set of cordon and hard taints among ``nodes``, with how many nodes have it (the
    capacity cache's own count, ``capacity.node_taints``)."""
    counts = NodeTaintCounts()
    for node in nodes:
        name = objects.name(node)
        if name:
            counts.put(name, node_filter_taints(node))
    return counts.summary()


def check_pending_pods(
    pods: Sequence[Mapping[str, Any]],
    config: CapacityConfig,
    now: float,
    pending_after: float,
    nodes: Sequence[Mapping[str, Any]] | None = None,
) -> list[Finding]:
    """``pod-pending-on-gpu``: Pending pods that request GPUs, have
    ``PodScheduled=False`` and are older than ``pending_after`` seconds.  ``nodes`` (None: not
    listed): every node, whose taints a taint reason without its key is weighed with."""
    out: list[Finding] = []
    node_taints = node_taint_sets(nodes) if nodes is not None else None
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
        out.append(_pending(pod, cond, usage, age, node_taints))
    return out
