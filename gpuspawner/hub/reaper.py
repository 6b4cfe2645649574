"""The hub's reaper of orphaned server pods: every ``gpu_orphan_pod_interval`` it deletes the
server pods that no server of the hub owns (``spawn.orphans``), with a log line and a counter."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from typing import Any, Awaitable, Callable

from traitlets import Float, TraitError, validate
from traitlets.config import Configurable

from gpuspawner.hub import hub_log, gpu_metrics
from gpuspawner.spawn.orphans import Orphan, orphans

log = logging.getLogger(__name__)

__all__ = ["OrphanPodSettings", "Reaper", "hub_owned", "ensure_running"]

# one reaper per hub process and event loop, started by the first spawner that asks
_running: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Reaper]" = weakref.WeakKeyDictionary()


class OrphanPodSettings(Configurable):
    """The reaper's two knobs (GPUSpawner inherits them)."""

    gpu_orphan_pod_interval = Float(
        60.0,
        config=True,
        help="""
        Seconds between two sweeps for server pods that no server of the hub
        owns (left behind by a spawn cancelled while its pod was being
        created, or by a stop the hub could not see through): each such pod
        is deleted, with a log line and ``gpuspawner_orphan_pods_deleted_total``
        counted, so no GPU stays held by nobody. The sweeps start with the
        hub's first spawn, stop or poll of a server (JupyterHub polls every
        running server when it starts). 0 turns them off.

            c.GPUSpawner.gpu_orphan_pod_interval = 60
        """,
    )
    gpu_orphan_pod_grace = Float(
        120.0,
        config=True,
        help="""
        Seconds a server pod must have existed before the reaper may delete
        it as orphaned, so a pod whose spawn is just being recorded is left
        alone.

            c.GPUSpawner.gpu_orphan_pod_grace = 120
        """,
    )

    @validate("gpu_orphan_pod_interval", "gpu_orphan_pod_grace")
    def _validate_orphan_seconds(self, proposal):
        value = proposal.value
        if not 0 <= value < float("inf"):
            raise TraitError(f"{proposal.trait.name} must be a number of seconds >= 0, not {value!r}")
        return value


def hub_owned(db: Any) -> set[tuple[str, str]]:
    """(user, server name) of every server the hub's database says exists: running, starting or
    stopping (JupyterHub records a server before it calls ``start`` and forgets it after ``stop``)."""
    from jupyterhub import orm

    rows = (
        db.query(orm.User.name, orm.Spawner.name)
        .join(orm.Spawner, orm.Spawner.user_id == orm.User.id)
        .filter(orm.Spawner.server_id.isnot(None))
        .all()
    )
    return {(user, server or "") for user, server in rows}


class Reaper:
    """Lists the hub's server pods, deletes those no server owns. The I/O is handed in."""

    def __init__(
        self,
        *,
        list_pods: Callable[[], Awaitable[list[dict]]],
        delete_pod: Callable[[Orphan], Awaitable[bool]],
        owned: Callable[[], set[tuple[str, str]]],
        interval: float,
        grace: float,
        counter: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._list_pods = list_pods
        self._delete_pod = delete_pod
        self._owned = owned
        self.interval = interval
        self.grace = grace
        self._counter = counter
        self._clock = clock
        self._sleep = sleep
        self.deleted = 0
        self._failed_before = False
        self.task: asyncio.Task | None = None

    async def sweep(self) -> list[Orphan]:
        """One pass: the orphans deleted (none when the pods or the owners cannot be read)."""
        pods = await self._list_pods()
        # owners read after the list, with no await before the deletes are decided: a server the
        # hub records meanwhile owns its pod already
        owned = self._owned()
        found = orphans(pods, owned, self._clock(), self.grace)
        done = []
        for orphan in found:
            if await self._delete_pod(orphan):
                self.deleted += 1
                self._counter()
                done.append(orphan)
                log.warning(
                    "Deleted pod %s/%s of %s's server %r: no server of the hub owns it (created %.0f s ago; "
                    "left by a cancelled spawn or a stop that did not delete it)",
                    orphan.namespace, orphan.name, orphan.user, orphan.server, orphan.age_seconds,
                )
        return done

    async def run(self) -> None:
        while True:
            await self._sleep(self.interval)
            try:
                await self.sweep()
                if self._failed_before:
                    log.info("The sweep for orphaned server pods works again")
                self._failed_before = False
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the hub goes on; the next sweep tries again
                if not self._failed_before:
                    log.warning("The sweep for orphaned server pods failed (retried every %g s): %s: %s",
                                self.interval, type(e).__name__, e)
                self._failed_before = True


def _selector(spawner: Any) -> str:
    labels = {**spawner.common_labels, "component": spawner.component_label}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def for_spawner(spawner: Any) -> Reaper:
    """A reaper of the server pods of ``spawner``'s hub: its namespace (every namespace with
    ``enable_user_namespaces``), its common labels and component label, its API client."""
    from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions
    from kubernetes_asyncio.client.exceptions import ApiException

    api = spawner.api
    selector = _selector(spawner)
    everywhere = bool(getattr(spawner, "enable_user_namespaces", False))
    namespace = spawner.namespace
    timeout = spawner.k8s_api_request_timeout
    grace_period = spawner.delete_grace_period
    db = spawner.user.db

    async def list_pods() -> list[dict]:
        if everywhere:
            resp = await api.list_pod_for_all_namespaces(label_selector=selector, _preload_content=False,
                                                         _request_timeout=timeout)
        else:
            resp = await api.list_namespaced_pod(namespace, label_selector=selector, _preload_content=False,
                                                 _request_timeout=timeout)
        try:
            body = await resp.read()
        finally:
            resp.release()
        if resp.status != 200:
            raise RuntimeError(f"listing server pods answered HTTP {resp.status}")
        return list(json.loads(body).get("items") or ())

    async def delete_pod(orphan: Orphan) -> bool:
        options = V1DeleteOptions(grace_period_seconds=grace_period,
                                  preconditions=V1Preconditions(uid=orphan.uid) if orphan.uid else None)
        try:
            await api.delete_namespaced_pod(orphan.name, orphan.namespace, body=options,
                                            grace_period_seconds=grace_period, _request_timeout=timeout)
        except ApiException as e:
            if e.status in (404, 409):  # gone already, or a new pod of that name (uid precondition)
                return False
            raise
        return True

    return Reaper(
        list_pods=list_pods,
        delete_pod=delete_pod,
        owned=lambda: hub_owned(db),
        interval=spawner.gpu_orphan_pod_interval,
        grace=spawner.gpu_orphan_pod_grace,
        counter=gpu_metrics.install(spawner.metrics_registry).orphan_pod_deleted,
    )


def ensure_running(spawner: Any) -> Reaper | None:
    """Start the process's reaper on the running loop (once; the first spawner's settings win).
    None when sweeps are off or the spawner has no hub behind it."""
    if spawner.gpu_orphan_pod_interval <= 0 or getattr(spawner.user, "db", None) is None:
        return None
    hub_log.adopt(spawner.log)  # its lines in the hub's log, with time and level
    loop = asyncio.get_running_loop()
    reaper = _running.get(loop)
    if reaper is None or reaper.task is None or reaper.task.done():
        reaper = for_spawner(spawner)
        reaper.task = loop.create_task(reaper.run(), name="gpuspawner-orphan-pod-reaper")
        _running[loop] = reaper
    return reaper
