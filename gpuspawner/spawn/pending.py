"""A GPU server's pod while it is Pending: its place in the scheduler's queue,
and whether it can ever start.

Pure (stdlib and ``progress``): no JupyterHub, no Kubernetes client.  The
pods and events are the core/v1 dicts KubeSpawner's pod and event reflectors
keep; ``GPUSpawner`` passes them in and raises ``errors.GPUSpawnFailure`` on a
fatal verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# RFC 3339 (metav1.Time) parsing, shared with the GPU-wait metric
from gpuspawner.spawn.progress import SpawnContext, Translation, translate, translate_pod
from gpuspawner.kube.times import parse_time

# what GPUSpawner writes on a GPU server's pod; queued_before reads the pool back
POOL_ANNOTATION = "gpuspawner.io/pool"
GPUS_ANNOTATION = "gpuspawner.io/gpus"


def _priority(pod: Mapping[str, Any]) -> int:
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _waiting_unscheduled(pod: Mapping[str, Any]) -> bool:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return status.get("phase") == "Pending" and not spec.get("nodeName") and not meta.get("deletionTimestamp")


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
    my_meta = me.get("metadata") or {}
    mine = parse_time(my_meta.get("creationTimestamp"))
    if mine is None:
        return 0
    my_priority = _priority(me)
    me_key = (my_meta.get("namespace"), my_meta.get("name"))
    n = 0
    for pod in pods:
        if not isinstance(pod, Mapping):
            continue
        meta = pod.get("metadata") or {}
        if (meta.get("namespace"), meta.get("name")) == me_key:
            continue
        if (meta.get("annotations") or {}).get(POOL_ANNOTATION) != pool_id or not _waiting_unscheduled(pod):
            continue
        created = parse_time(meta.get("creationTimestamp"))
        if created is None or created.tzinfo is None or mine.tzinfo is None:
            continue
        priority = _priority(pod)
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
    uid = (pod.get("metadata") or {}).get("uid")
    bound = bool((pod.get("spec") or {}).get("nodeName"))
    last_scheduling = None
    for event in events:
        if not isinstance(event, Mapping):
            continue
        involved = event.get("involvedObject") or {}
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
