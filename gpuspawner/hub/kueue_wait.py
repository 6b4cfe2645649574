"""The spawner's side of queueing through Kueue: labels, the wait in the queue, its progress messages."""

from __future__ import annotations

import asyncio
import html
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpuspawner.hub.errors import spawn_error
from gpuspawner.kube import objects
from gpuspawner.queue.kube import KueueView
from gpuspawner.queue.rules import QueueRule, may_queue, pod_labels, queue_for
from gpuspawner.queue.status import ADMITTED, QueueState

# Kueue's scheduling gate on a plain pod until it is admitted [Kueue site, plain_pods.md]
ADMISSION_GATE = "kueue.x-k8s.io/admission"

_clock = time.monotonic  # a seam for tests


@dataclass(frozen=True)
class QueuedSpawn:
    """One spawn's place in a Kueue LocalQueue (part of its ``SpawnRecord``: replaced, never changed in place)."""

    rule: QueueRule
    resource: str
    base_timeout: float  # the admin's start_timeout: counted from admission
    wait_limit: float  # gpu_kueue_queue_wait_limit: counted from the pod's creation
    began: float = field(default_factory=lambda: _clock())
    pod_uid: str | None = None
    admitted_at: float | None = None
    state: QueueState | None = None

    def message(self) -> str:
        if self.state is not None:
            return self.state.message
        return f"Queued in {self.rule.queue}: waiting for Kueue to take the server in"


def extend_start_timeout(spawner: Any) -> None:
    """Before a start: when this server may be queued, JupyterHub's start timeout is the admin's
    ``start_timeout`` plus the queue-wait limit; :func:`check_pod` ends a wait that passes either part."""
    base = spawner.start_timeout
    spawner._spawn = replace(spawner._spawn, queue_base_timeout=base, queued=None)
    spawner.gpu_stop_message = None
    options = spawner.user_options if isinstance(spawner.user_options, Mapping) else {}
    profile = options.get("profile") if isinstance(options.get("profile"), str) else None
    if may_queue(spawner.queue_rules(), profile):
        spawner.start_timeout = base + spawner.gpu_kueue_queue_wait_limit


def restore_start_timeout(spawner: Any) -> None:
    base = spawner._spawn.queue_base_timeout
    if base is not None:
        spawner.start_timeout = base
        spawner._spawn = replace(spawner._spawn, queue_base_timeout=None)


def apply_selection(spawner: Any, profile: str, pool_id: str, resource: str) -> None:
    """The chosen pool queues: label the pod for Kueue, and let Kueue rather than gpuspawner's
    reservation hold its place."""
    rule = queue_for(spawner.queue_rules(), profile, pool_id)
    spawner._spawn = replace(spawner._spawn, queued=None)
    if rule is None:
        return
    spawner.extra_labels = {**spawner.extra_labels, **pod_labels(rule)}
    spawner.release_gpus()
    spawner.log.info("%s is queued in Kueue LocalQueue %s%s", spawner._log_name, rule.queue,
                     f" (priority {rule.priority_class})" if rule.priority_class else "")
    spawner._spawn = replace(spawner._spawn, queued=QueuedSpawn(
        rule=rule, resource=resource, base_timeout=spawner._spawn.queue_base_timeout or spawner.start_timeout,
        wait_limit=spawner.gpu_kueue_queue_wait_limit,
    ))
    spawner.kueue_view().poke()


def _gated(pod: Mapping[str, Any]) -> bool:
    gates = objects.items(objects.section(pod, "spec").get("schedulingGates"))
    return any(isinstance(g, Mapping) and g.get("name") == ADMISSION_GATE for g in gates)


def check_pod(spawner: Any, pod: Any) -> None:
    """One poll of the start's wait (``is_pod_running``): the queue's state of the pod; raise when the
    spawn can never start this way or a wait ran past its limit."""
    record = spawner._spawn
    base, queued, began = record.queue_base_timeout, record.queued, record.began
    now = _clock()
    if queued is None:
        # not queued after all: the admin's own start_timeout, counted as KubeSpawner would
        if base is not None and began is not None and spawner.start_timeout > base and now - began > base:
            raise TimeoutError(f"pod {spawner.namespace}/{spawner.pod_name} did not start in {base} seconds!")
        return
    view = spawner.kueue_view()
    seen = queued
    if isinstance(pod, Mapping):
        uid = objects.section(pod, "metadata").get("uid")
        if isinstance(uid, str):
            queued = replace(queued, pod_uid=uid)
        if queued.pod_uid is not None:
            state = view.state_of(queued.pod_uid, queued.rule.queue, queued.resource)
            if state is not None:
                queued = replace(queued, state=state)
                if state.fatal:
                    _keep(spawner, seen, queued)
                    raise _failure(spawner, state)
        if queued.admitted_at is None and (not _gated(pod) or (queued.state and queued.state.kind == ADMITTED)):
            queued = replace(queued, admitted_at=now)
        _keep(spawner, seen, queued)
    elif queued.pod_uid is not None:
        # the pod is gone while it waited: Kueue preempted or evicted it, or someone deleted it
        stopped = view.stop_reason(queued.pod_uid)
        if stopped is not None:
            raise _failure(spawner, stopped)
    if queued.admitted_at is None:
        if now - queued.began > queued.wait_limit:
            minutes = queued.wait_limit / 60
            raise spawn_error(
                f"Waited {minutes:g} minutes in queue {queued.rule.queue} without getting a GPU "
                f"({queued.message()}). Try again later, or choose another pool.",
                reason="kueue-queue-timeout", status_code=500,
            )
    elif now - queued.admitted_at > queued.base_timeout:
        raise TimeoutError(
            f"pod {spawner.namespace}/{spawner.pod_name} did not start in {queued.base_timeout} seconds "
            "after Kueue admitted it!"
        )


def _failure(spawner: Any, state: QueueState) -> Exception:
    spawner.log.warning("GPU server %s leaves its queue (%s): %s", spawner._log_name, state.kind, state.message)
    return spawn_error(state.message, reason=f"kueue-{state.kind}", status_code=500)


def current_message(spawner: Any) -> str | None:
    """The queue's words for this spawn now (None: not queued), from the shared view: no API call."""
    seen = queued = spawner._spawn.queued
    if queued is None:
        return None
    if queued.pod_uid is None:
        pod = spawner._reflected_pod()
        uid = objects.section(pod, "metadata").get("uid") if isinstance(pod, Mapping) else None
        if isinstance(uid, str):
            queued = replace(queued, pod_uid=uid)
    if queued.pod_uid is not None:
        state = spawner.kueue_view().state_of(queued.pod_uid, queued.rule.queue, queued.resource)
        if state is not None:
            queued = replace(queued, state=state)
    _keep(spawner, seen, queued)
    return queued.message()


def _keep(spawner: Any, seen: QueuedSpawn, queued: QueuedSpawn) -> None:
    """Put what was learnt of the queue into the spawn's record, unless the record moved on meanwhile."""
    if queued is not seen and spawner._spawn.queued is seen:
        spawner._spawn = replace(spawner._spawn, queued=queued)


async def with_queue_messages(spawner: Any, events: AsyncIterator[dict], interval: float = 1.0) -> AsyncIterator[dict]:
    """``events`` (the spawn's progress), with the queue's message each time it changes while the
    spawn is queued."""
    out: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump() -> None:
        try:
            async for item in events:
                await out.put(item)
        finally:
            await out.put(done)

    async def tick() -> None:
        last = None
        while True:
            message = current_message(spawner)
            if message is not None and message != last:
                last = message
                await out.put({"progress": 10 if not message.startswith("Admitted") else 40, "message": message})
            await asyncio.sleep(interval)

    pumping = asyncio.ensure_future(pump())
    ticking = asyncio.ensure_future(tick())
    try:
        while True:
            item = await out.get()
            if item is done:
                break
            yield item
    finally:
        ticking.cancel()
        pumping.cancel()
        for t in (ticking, pumping):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass


def note_stopped(spawner: Any) -> None:
    """The server's pod is gone: if Kueue stopped it (preempted, evicted), keep why for the spawn page."""
    queued: QueuedSpawn | None = spawner._spawn.queued
    if queued is None or queued.pod_uid is None:
        return
    state = spawner.kueue_view().stop_reason(queued.pod_uid)
    if state is not None:
        spawner.gpu_stop_message = state.message
        spawner.log.warning("Kueue stopped GPU server %s (%s): %s", spawner._log_name, state.kind, state.message)


#: the key of the stop reason in the spawner's state (JupyterHub's database): kept across hub restarts
STOP_STATE_KEY = "gpu_stop_message"
#: the longest stop reason kept (Kueue's condition messages are short; anything longer is cut)
MAX_STOP_MESSAGE = 1000


def save_stop(spawner: Any, state: dict) -> None:
    """``get_state``: keep why Kueue stopped the server, so the home page says it after a hub restart
    too (JupyterHub saves the state when it cleans up a stopped server) until the next start."""
    message = getattr(spawner, "gpu_stop_message", None)
    if message:
        state[STOP_STATE_KEY] = message


def load_stop(spawner: Any, state: Mapping[str, Any]) -> None:
    """``load_state``: the stop reason a state kept (anything but a string is not read)."""
    message = state.get(STOP_STATE_KEY)
    spawner.gpu_stop_message = message[:MAX_STOP_MESSAGE] if isinstance(message, str) and message else None


def stop_notice(spawner: Any) -> str:
    """The spawn page's notice of why Kueue stopped this server last ('' when it did not)."""
    message = getattr(spawner, "gpu_stop_message", None)
    if not message:
        return ""
    return f'<p class="gs-warning gs-queue-stopped" role="status">Your last server was stopped: {html.escape(message)}</p>\n'
