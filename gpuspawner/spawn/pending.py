"""A GPU server's pod while it is Pending: its place in the scheduler's queue,
whether it can ever start, and how long it waited for its GPUs.

Pure (stdlib, ``kube.objects`` to read the pod, ``progress`` for its words):
no JupyterHub, no Kubernetes client.  The pods and events are the core/v1
dicts KubeSpawner's pod and event reflectors keep; ``GPUSpawner`` passes them
in and raises ``errors.GPUSpawnFailure`` on a fatal verdict;
``metrics`` records :func:`gpu_wait_seconds`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuspawner.kube import objects
from gpuspawner.spawn.progress import SpawnContext, Translation, translate, translate_pod

__all__ = ["POOL_ANNOTATION", "GPUS_ANNOTATION", "queued_before", "fatal_verdict", "gpu_wait_seconds"]

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
