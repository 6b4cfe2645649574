"""The wait for a GPU server's pod: the spawn's record, its progress in GPU words, and the verdicts that end the wait early."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuspawner.hub import capacity_access, gpu_metrics, kueue_wait, poolimages
from gpuspawner.hub.unseen_pod import reflected_pods
from gpuspawner.hub.errors import GPUSpawnFailure, spawn_error
from gpuspawner.spawn.pending_verdicts import (
    fatal_verdict,
    no_room_verdict,
    queued_before,
    scheduling_failure,
    short_of_gpus,
)
from gpuspawner.spawn.probe_container import probe_failure
from gpuspawner.spawn.progress import SpawnContext, rewrite_progress_event

__all__ = ["GPUSpawnInfo", "SpawnRecord", "renewed", "notes_known", "spawn_context", "check_running", "check_pod", "progress", "revive",
           "failure_reason", "count_failure"]

_clock = time.monotonic  # how long a start ran (a seam for tests)


@dataclass(frozen=True)
class GPUSpawnInfo:
    """The pool a GPU spawn was pinned to, for its progress and metrics."""

    pool_id: str
    pool_name: str
    resource: str
    gpus: int
    checked: bool = True  # admitted on counted capacity (not gpu_admit_without_capacity)
    product: str | None = None  # the pool's GPU product (the GPU-hour ledger's weights)
    request: tuple[int, ...] | None = None  # CPU, memory, disk, pods the pod asks (resource_requests)


@dataclass(frozen=True)
class SpawnRecord:
    """One spawn of a spawner, from its start to its stop (replaced, never changed in place;
    :func:`renewed` is where its fields are reset)."""

    # -- this start (reset by start())
    notes: asyncio.Future | None = None  # done once this spawn's warnings are known (progress waits)
    starting: bool = False  # while KubeSpawner's _start waits for the pod
    began: float | None = None  # when _start began (the clock above)
    # refused before any Kubernetes object existed: the stop JupyterHub then calls has nothing to
    # delete (no API call, no log line); form_choices: what the refused request chose, for the page
    refused: bool = False
    form_choices: Mapping[str, str] = field(default_factory=dict)
    queue_base_timeout: float | None = None  # the admin's start_timeout while a queue's wait stretches it
    # -- this start's plan (reset by each load_user_options)
    info: GPUSpawnInfo | None = None  # set for a GPU spawn
    warnings: tuple[str, ...] = ()  # the CUDA warning, first in the progress
    probe_image: str | None = None
    watch_probe: bool = False  # a failed probe ends the wait
    reservation: tuple[Any, str] | None = None  # (cache, owner) of the GPUs reserved for the pod
    wait_seen: bool = False  # the GPU wait metric has this spawn
    short: tuple[float, Any] | None = None  # (first seen, recheck token) while the scheduler finds no room
    queued: Any = None  # its place in a Kueue queue (kueue_wait.QueuedSpawn)
    # -- the server, until its stop (kept across starts)
    pod_requested: bool = False  # a pod create request was sent, until a stop has had it deleted
    dra_template: str | None = None  # "<namespace>/<name>" of its DRA claim template (in its state)


_PLAN_FIELDS = ("info", "warnings", "probe_image", "watch_probe", "reservation", "wait_seen", "short", "queued")


def renewed(record: SpawnRecord, *, start: bool, notes: asyncio.Future | None = None) -> SpawnRecord:
    """The record a new start (``start``: with its ``notes`` future) or a new plan of this start
    begins with: the one place a spawn's fields are reset. A start keeps what the server holds
    until its stop (a requested pod, a claim template); a plan also keeps what its start set."""
    if start:
        return SpawnRecord(notes=notes, pod_requested=record.pod_requested, dra_template=record.dra_template)
    fresh = SpawnRecord()
    return replace(record, **{name: getattr(fresh, name) for name in _PLAN_FIELDS})


def notes_known(spawner: Any) -> None:
    """This spawn's warnings are known: :func:`progress`, which waits for them, goes on."""
    notes = spawner._spawn.notes
    if notes is not None and not notes.done():
        notes.set_result(None)


def spawn_context(spawner: Any, pod: Any = None) -> SpawnContext | None:
    """What this GPU spawn's progress is translated with: the pool as the capacity cache sees it
    now and the pods queued before ``pod`` (default: this server's pod). None for a spawn without
    GPUs. A pool the cache cannot vouch for (not synced, stale) is passed as unknown."""
    info = spawner._spawn.info
    if info is None:
        return None
    pool = node_taints = None
    cache = spawner.capacity_cache()
    if cache is not None:
        snapshot = cache.snapshot()
        if snapshot.synced and snapshot.healthy:
            pool = snapshot.pool(info.pool_id)
            node_taints = snapshot.node_taints  # weighed with the pod's tolerations (SpawnContext.excluded)
    if pod is None:
        pod = spawner._reflected_pod()
    return SpawnContext.from_pool(
        pool,
        pool_id=info.pool_id,
        gpus=info.gpus,
        queued_before=queued_before(reflected_pods(spawner), pod, info.pool_id),
        tolerated_taint_keys=spawner.gpu_tolerated_taint_keys,
        pool_name=info.pool_name,
        resource=info.resource,
        request=info.request,
        node_taints=node_taints,
        pod=pod,
        **poolimages.pull_context(spawner),  # a cold node's pull estimate (hub/poolimages.py)
    )


def check_running(spawner: Any, pod: Any) -> None:
    """What ``is_pod_running`` checks first while a spawn waits: a failed probe ends the wait with
    the probe's own message (its init container would otherwise restart until the start timeout),
    then the wait in a Kueue queue, then the GPU pod's verdicts (:func:`check_pod`)."""
    record = spawner._spawn
    if record.watch_probe and pod is not None:
        failure = probe_failure(pod, record.probe_image)
        if failure:
            spawner.log.warning("GPU probe failed for %s: %s", spawner._log_name, failure)
            raise spawn_error(failure, reason="gpu-probe", status_code=500)
    if record.starting:
        kueue_wait.check_pod(spawner, pod)  # the wait in a Kueue queue, and its limits
    if record.starting and record.info is not None and isinstance(pod, Mapping):
        check_pod(spawner, pod)


def check_pod(spawner: Any, pod: Mapping[str, Any]) -> None:
    """Record the GPU wait once the pod is scheduled, and end the wait at once
    (``GPUSpawnFailure``) when the pod can never start, or when the scheduler finds no room for
    its GPUs and a fresh count agrees (:func:`_full_pool_verdict`)."""
    info = spawner._spawn.info
    if not spawner._spawn.wait_seen:
        if gpu_metrics.install(spawner.metrics_registry).observe_pod_scheduled(info.pool_id, pod) is not None:
            spawner._spawn = replace(spawner._spawn, wait_seen=True)
    ctx = spawn_context(spawner, pod)
    verdict = fatal_verdict(pod, spawner.events, ctx)
    if verdict is None and info.checked:
        verdict = _full_pool_verdict(spawner, pod, ctx)
    if verdict is not None:
        spawner.log.warning("GPU server %s cannot start (%s): %s", spawner._log_name, verdict.kind, verdict.reason)
        raise GPUSpawnFailure(verdict)


def _full_pool_verdict(spawner: Any, pod: Mapping[str, Any], ctx: Any) -> Any:
    """Admitted on counts with room, but the scheduler says ``Insufficient`` GPUs: the counts were
    out of date or the GPUs went elsewhere. The first time, give back the reservation and have the
    cache re-list; once ``gpu_full_pool_grace`` has passed and the re-list is done, fail when no
    node of the pool has room and it cannot grow (``no_room_verdict``); else keep waiting."""
    info = spawner._spawn.info
    if not short_of_gpus(scheduling_failure(pod, spawner.events), info.resource, ctx.excluded if ctx else None):
        spawner._spawn = replace(spawner._spawn, short=None)
        return None
    now = _clock()
    cache = spawner.capacity_cache()
    if cache is None:  # the start timeout still ends the wait
        return None
    try:
        if spawner._spawn.short is None:
            spawner.release_gpus()
            spawner._spawn = replace(spawner._spawn, short=(now, cache.recheck()))
            spawner.log.info("The scheduler finds no room for %d GPU(s) of %s in pool %s; re-checking capacity",
                             info.gpus, spawner._log_name, info.pool_id)
            return None
        since, token = spawner._spawn.short
        if now - since < spawner.gpu_full_pool_grace or not cache.rechecked_since(token):
            return None
    except Exception as e:  # the start timeout still ends the wait
        capacity_access.log_problem(spawner, f"the GPU capacity cache could not re-check: {e}")
        return None
    return no_room_verdict(ctx)


async def progress(spawner: Any, notes: asyncio.Future | None, events: AsyncIterator[dict]) -> AsyncIterator[dict]:
    """The CUDA warning of this spawn first, then KubeSpawner's events, for a GPU spawn in GPU words
    (waiting for a free GPU in pool X with n servers queued before, a scale-up, a taint nothing
    tolerates, the image pull...)."""
    if notes is not None:
        await asyncio.wait([notes], timeout=spawner.start_timeout)
    for warning in spawner._spawn.warnings:
        yield {"progress": 0, "message": warning}
    async for event in kueue_wait.with_queue_messages(spawner, events):
        ctx = spawn_context(spawner)
        if ctx is not None:
            event, _ = rewrite_progress_event(event, ctx)
        yield event


def revive(log: Any, reflector: Any) -> bool:
    """Whether KubeSpawner's reflector must be replaced: it has loaded (or failed to), has no running
    watch and was not stopped. KubeSpawner 7.1's reflector gives up for good once its retry delay
    passes 30 s (kubespawner/reflector.py ``_watch_and_update``), so after an API server outage the
    first spawn would otherwise hang."""
    if reflector is None or getattr(reflector, "_stopping", False):
        return False
    loaded = getattr(reflector, "first_load_future", None)
    if loaded is None or not loaded.done():
        return False  # still starting: KubeSpawner's own start waits for it
    task = getattr(reflector, "watch_task", None)
    if task is not None and not task.done():
        return False
    if not loaded.cancelled():
        loaded.exception()  # a failed first list, which KubeSpawner logged: retrieved here
    log.warning("KubeSpawner's %s watch is not running (after an API server outage?); restarting it",
                getattr(reflector, "kind", "reflector"))
    return True


def count_failure(spawner: Any, reason: str) -> None:
    """Count a failed start: only GPU spawns that got past their checks (refusals were counted as such)."""
    if spawner._spawn.info is not None:
        gpu_metrics.install(spawner.metrics_registry).spawn_failed(spawner._spawn.info.pool_id, reason)


def failure_reason(error: BaseException) -> str:
    """The reason label of a failed start."""
    if isinstance(error, GPUSpawnFailure):
        return error.kind
    if isinstance(error, TimeoutError):  # KubeSpawner's own wait: exponential_backoff's TimeoutError
        return "timeout"
    return "error"
