"""A GPU server's pod while it is Pending: its place in the scheduler's queue,
whether it can ever start, and how long it waited for its GPUs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuspawner.kube import objects
from gpuspawner.spawn.progress import SpawnContext, Translation, translate, translate_pod
from gpuspawner.capacity.taintrule import TaintExclusion
from gpuspawner.spawn.scheduler_messages import (
    CONDITION_TAINT,
    TAINT,
    UNSCHEDULABLE,
    SchedulingFailure,
    parse_scheduling_message,
)

__all__ = [
    "POOL_ANNOTATION",
    "GPUS_ANNOTATION",
    "queued_before",
    "fatal_verdict",
    "gpu_wait_seconds",
    "scheduling_failure",
    "short_of_gpus",
    "no_room_verdict",
]

# what GPUSpawner writes on a GPU server's pod; queued_before reads the pool back
POOL_ANNOTATION = "gpuspawner.io/pool"
GPUS_ANNOTATION = "gpuspawner.io/gpus"


def _pool_of(pod: Any) -> Any:
    return objects.section(objects.section(pod, "metadata"), "annotations").get(POOL_ANNOTATION)


def _key(pod: Any) -> tuple[Any, Any]:
    meta = objects.section(pod, "metadata")
    return meta.get("namespace"), meta.get("name")


def queued_before(pods: Iterable[Any], me: Any, pool_id: str) -> int:
    """How many other pods of ``pool_id`` wait for the scheduler ahead of ``me``.

    Pure; ``pods`` are core/v1 Pod dicts (KubeSpawner's pod reflector holds
    them), a pod's pool is its ``gpuspawner.io/pool`` annotation.  Counted:
    Pending pods with no node yet, not being deleted, that kube-scheduler's
    default queue sort (``PrioritySort``,
    ``pkg/scheduler/framework/plugins/queuesort/priority_sort.go``: higher
    ``spec.priority`` first, then the earlier one) puts first; the time is
    ``metadata.creationTimestamp``, whole seconds, so a pod created in the
    same second is not counted.  0 when ``me`` has no creation time yet.
    """
    if not isinstance(me, Mapping):
        return 0
    mine = objects.created(me)
    if mine is None:
        return 0
    my_priority = objects.pod_priority(me)
    me_key = _key(me)
    n = 0
    for pod in pods:
        if not isinstance(pod, Mapping) or _key(pod) == me_key:
            continue
        if _pool_of(pod) != pool_id or not objects.pod_waits_for_scheduler(pod):
            continue
        created = objects.created(pod)
        if created is None or created.tzinfo is None or mine.tzinfo is None:
            continue
        priority = objects.pod_priority(pod)
        if priority > my_priority or (priority == my_priority and created < mine):
            n += 1
    return n


def fatal_verdict(pod: Any, events: Iterable[Any], ctx: SpawnContext) -> Translation | None:
    """The fatal translation of a spawning pod's state, or None while it may still start.

    Pure.  The pod's own state first (a ``Failed`` phase, the scheduler's
    verdict in the ``PodScheduled`` condition, a waiting container); then its
    events (``events``: KubeSpawner's, for this pod name since the spawn
    began), skipping events of an older pod of the same name (another
    ``involvedObject.uid``).  Of the scheduler's ``FailedScheduling`` events
    only the newest counts, and none once the pod has a node: the scheduler
    retries, and its last word is the current one.
    """
    if not isinstance(pod, Mapping):
        return None
    t = translate_pod(pod, ctx)
    if t is not None and t.fatal:
        return t
    uid = objects.section(pod, "metadata").get("uid")
    bound = bool(objects.section(pod, "spec").get("nodeName"))
    last_scheduling = None
    for event in events:
        if not isinstance(event, Mapping):
            continue
        involved = objects.section(event, "involvedObject")
        if uid and involved.get("uid") and involved.get("uid") != uid:
            continue
        if event.get("reason") == "FailedScheduling":
            last_scheduling = event
            continue
        t = translate(event, ctx)
        if t is not None and t.fatal:
            return t
    if last_scheduling is not None and not bound:
        t = translate(last_scheduling, ctx)
        if t is not None and t.fatal:
            return t
    return None


def gpu_wait_seconds(pod: Any) -> float | None:
    """Seconds from the pod's creation to its ``PodScheduled=True`` condition
    (when the scheduler bound it to a node with free GPUs); None while it is
    not scheduled or the timestamps are missing.  Both are RFC 3339 seconds
    (``metav1.Time``), so the result is whole seconds."""
    if not isinstance(pod, Mapping):
        return None
    created = objects.created(pod)
    if created is None:
        return None
    scheduled = objects.scheduled_at(pod)
    if scheduled is None or scheduled.tzinfo is None or created.tzinfo is None:
        return None
    return max(0.0, (scheduled - created).total_seconds())


# ---------------------------------------------------------------------------
# admitted, but the pool's GPUs are gone: fail early instead of the start timeout
# ---------------------------------------------------------------------------


def scheduling_failure(pod: Any, events: Iterable[Any]) -> SchedulingFailure | None:
    """The scheduler's current verdict on an unbound pod, parsed: the message of its
    ``PodScheduled=False`` condition (which the scheduler rewrites on every attempt,
    ``pkg/scheduler/schedule_one.go`` ``handleSchedulingFailure``), else its newest
    ``FailedScheduling`` event of this pod's uid.  None once the pod has a node, or while
    the scheduler has said nothing parseable."""
    if not isinstance(pod, Mapping) or objects.section(pod, "spec").get("nodeName"):
        return None
    cond = objects.condition(pod, "PodScheduled")
    if cond is not None and cond.get("status") == "False" and cond.get("reason") == "Unschedulable":
        found = parse_scheduling_message(cond.get("message"))
        if found is not None:
            return found
    uid = objects.section(pod, "metadata").get("uid")
    newest = None
    for event in events:
        if not isinstance(event, Mapping) or event.get("reason") != "FailedScheduling":
            continue
        involved = event.get("involvedObject") or {}
        if uid and isinstance(involved, Mapping) and involved.get("uid") and involved.get("uid") != uid:
            continue
        newest = event
    return parse_scheduling_message(newest.get("message")) if newest is not None else None


def short_of_gpus(failure: SchedulingFailure | None, resource: str, excluded: TaintExclusion | None = None) -> bool:
    """Whether the scheduler turned the pod away for lack of ``resource`` (``Insufficient
    nvidia.com/gpu``), with no node out for a passing reason: a cordoned node
    (``node(s) were unschedulable``) or a not-ready one (a node-condition taint) may be back
    soon, and the scheduler's message does not say which pool such a node is in.  kube-scheduler
    1.35+ names no taint: with ``excluded`` (every node's taints against the pod's tolerations,
    ``SpawnContext.excluded``), a keyless taint reason that does not surely stay counts as a
    not-ready node."""
    if failure is None or not failure.insufficient(resource):
        return False
    if failure.count(UNSCHEDULABLE, CONDITION_TAINT):
        return False
    if excluded is not None:
        for r in failure.reasons:
            if r.kind == TAINT and r.detail is None:
                count = r.count if r.count is not None else failure.total_nodes
                if excluded.lasting_among(count) < count:
                    return False
    return True


def no_room_verdict(ctx: SpawnContext) -> Translation | None:
    """The fatal verdict for a pod the scheduler turned away for lack of GPUs, judged on the
    pool as a fresh re-list of the cluster shows it (``ctx``): no node of the pool has
    ``ctx.gpus`` free and no scale-up can add one.  None while it may still fit soon: the
    pool is unknown, a node has room (the scheduler retries when pods end), or a declared
    autoscaler may still add a node."""
    if ctx.nodes is None or ctx.max_free_per_node is None:
        return None
    if ctx.can_grow() or ctx.max_free_per_node >= ctx.gpus:
        return None
    what = "a free GPU" if ctx.gpus == 1 else f"{ctx.gpus} free GPUs on one node"
    if ctx.total == 0 or ctx.nodes == 0:
        state = "it has no usable node now"
    elif ctx.free == 0:
        state = f"all {ctx.total} of its GPUs are in use" if ctx.total != 1 else "its only GPU is in use"
    else:
        state = f"{ctx.free} of its {ctx.total} GPUs are free, at most {ctx.max_free_per_node} on one node"
    grow = "it is at its maximum size" if ctx.scale_up is not None else "it cannot add nodes"
    reason = (
        f"pool {ctx.label} has no node with {what} ({state}) and {grow}: the GPUs this server was "
        "counted on were taken after it was admitted; start it again later, or choose another pool"
    )
    return Translation(f"Cannot start: {reason}.", "no_free_gpu", fatal=True, reason=reason)
