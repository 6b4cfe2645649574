"""Hub glue of the GPU-hour ledger: holdings recorded as GPU servers start and stop, open ones closed
from what the cluster says, a launch checked against the user's budget, a user's standing."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from datetime import datetime
from typing import Any

from gpuspawner.hub import gpu_metrics
from gpuspawner.spawn.access import principal_of
from gpuspawner.usage import clock
from gpuspawner.usage.accounting import Holding, Verdict, runs_out_at, used, verdict
from gpuspawner.usage.budgets import candidates, choose
from gpuspawner.spawn.pending_verdicts import GPUS_ANNOTATION, POOL_ANNOTATION
from gpuspawner.usage.pods import gpu_annotations, holding_end, started_at
from gpuspawner.usage.store import UsageStore
from gpuspawner.usage.weights import hourly_rate, is_shared, share_fraction
from gpuspawner.usage.windows import Window

log = logging.getLogger(__name__)

#: JupyterHub's spawn-metrics reason of a budget refusal (a handled rejection, never an error)
REFUSAL_REASON = "gpu-budget"
#: the label of the node's time-slicing replicas (GPU Feature Discovery, NVIDIA/k8s-device-plugin README)
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
SWEEP_INTERVAL = 60.0  # seconds between two sweeps of open holdings in one hub process

_problems: set[str] = set()


def _log_once(message: str, *args: Any) -> None:
    key = message % args if args else message
    if key not in _problems:
        _problems.add(key)
        log.error(message, *args)


def ledger(db: Any) -> UsageStore | None:
    """The ledger in the hub's database behind ``db`` (the hub's session), its tables made or
    brought up to date the first time; None (logged once) when there is no database or it fails."""
    if db is None:
        return None
    try:
        return UsageStore(db).ready()
    except Exception as e:
        _log_once("The GPU-hour ledger cannot use the hub's database: %s: %s", type(e).__name__, e)
        return None


def hub_db(spawner: Any) -> Any:
    """The hub's database session, as the spawner's user holds it (JupyterHub's ``User.db``; the
    spawner's own ``db`` is deprecated)."""
    return getattr(getattr(spawner, "user", None), "db", None)


# --- a user's standing ---------------------------------------------------------------------


@dataclass(frozen=True)
class Standing:
    """A user's GPU-hours against the budget that applies, and their holdings in its window."""

    verdict: Verdict
    holdings: tuple[Holding, ...]
    now: datetime

    @property
    def running_rate(self) -> float:
        return sum(h.rate for h in self.holdings if h.stop is None)

    def runs_out_at(self) -> datetime | None:
        v = self.verdict
        if v.budget is None:
            return None
        return runs_out_at(v.used, v.budget, self.running_rate, self.now)


def standing(settings: Any, store: UsageStore, user: str, groups: Iterable[str], need: float,
             now: datetime | None = None, *, for_page: bool = False) -> Standing:
    """``user``'s standing for a launch needing ``need`` weighted GPU-hours: one read of their
    holdings since the earliest window any candidate rule looks at. ``for_page``: a page's words
    (spawn and home pages), from the read an earlier view made while the ledger is unchanged
    (``UsageStore.recent_for_user``); a launch's check always reads the ledger."""
    now = now or clock.now()
    rules = candidates(settings.gpu_hour_budget_rules(), user, groups)
    windows = [r.window for r in rules] or [Window.parse("30d")]
    since = min(w.start(now) for w in windows)
    holdings = tuple(store.recent_for_user(user, since) if for_page else store.for_user(user, since))
    rule = choose(rules, lambda r: r.gpu_hours - used(holdings, r.window.start(now), now),
                  settings.gpu_hour_budget_groups)
    return Standing(verdict(holdings, rule, now, need), holdings, now)


def launch_rate(settings: Any, pool_id: str, product: str | None, resource: str, gpus: int,
                replicas: int | None = None) -> tuple[float, float, float]:
    """(share, weight, weighted GPU-hours per hour) of ``gpus`` units of a pool."""
    share = share_fraction(resource, product, replicas)
    weight = settings.gpu_hour_weights_rules().weight(pool_id, product)
    return share, weight, hourly_rate(gpus, share, weight)


def minimum_need(settings: Any, rate: float) -> float:
    """The GPU-hours a launch at ``rate`` must have left: ``gpu_hour_minimum_minutes`` of it."""
    return rate * settings.gpu_hour_minimum_minutes / 60.0


# pools whose time-slicing replicas a recorded server's node told (for the spawn page's rates)
known_replicas: dict[str, int] = {}


def check_launch(spawner: Any, pool: Any, gpus: int) -> Verdict | None:
    """The verdict on launching ``gpus`` of ``pool`` for the spawner's user; None when no budget
    rule exists or the ledger cannot be read (logged: a broken ledger never stops a spawn)."""
    if not spawner.gpu_hour_budgets:
        return None
    store = ledger(hub_db(spawner))
    if store is None:
        return None
    who = principal_of(spawner.user)
    _share, _weight, rate = launch_rate(spawner, pool.id, pool.product, pool.resource, gpus,
                                        known_replicas.get(pool.id))
    try:
        return standing(spawner, store, who.name, who.groups, minimum_need(spawner, rate)).verdict
    except Exception as e:
        _log_once("The GPU-hour budget of %s could not be read; the spawn is not checked: %s: %s",
                  who.name, type(e).__name__, e)
        return None


# --- recording -----------------------------------------------------------------------------


def _pod_facts(pod: Any) -> tuple[str | None, str | None, str | None, str | None]:
    """(namespace, name, uid, node) of a reflected pod dict."""
    if not isinstance(pod, Mapping):
        return None, None, None, None
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    return meta.get("namespace"), meta.get("name"), meta.get("uid"), spec.get("nodeName")


async def _node_replicas(spawner: Any, node: str | None) -> int | None:
    """The time-slicing replicas of ``node`` (one API read, 3 s at most; None when unknown)."""
    if not node:
        return None
    try:
        obj = await asyncio.wait_for(spawner.api.read_node(node), 3)
        labels = obj.metadata.labels or {}
        value = int(labels.get(REPLICAS_LABEL, "0"))
    except Exception as e:  # unknown: the share counts as a whole GPU
        log.info("Could not read %s of node %s: %s", REPLICAS_LABEL, node, e)
        return None
    return value if value > 1 else None


async def record_start(spawner: Any, info: Any, start: datetime | None = None) -> int | None:
    """Record the holding of a GPU server whose pod now runs (``info``: its ``GPUSpawnInfo``; ``start``:
    when it began, default now)."""
    store = ledger(hub_db(spawner))
    if store is None:
        return None
    start = start or clock.now()  # the pod runs now (before the node's replicas are read)
    pod = spawner._reflected_pod()
    namespace, name, uid, node = _pod_facts(pod)
    replicas = await _node_replicas(spawner, node) if is_shared(info.resource, info.product) else None
    if replicas:
        known_replicas[info.pool_id] = replicas
    share, weight, _rate = launch_rate(spawner, info.pool_id, info.product, info.resource, info.gpus, replicas)
    holding = Holding(
        user=spawner.user.name, server=spawner.name or "", pool=info.pool_id, product=info.product,
        resource=info.resource, gpus=info.gpus, share=share, weight=weight, start=start,
    )
    try:
        hid = store.open(holding, namespace=namespace or spawner.namespace, pod_name=name or spawner.pod_name,
                         pod_uid=uid)
    except Exception as e:
        _log_once("Could not record the GPU holding of %s: %s: %s", spawner._log_name, type(e).__name__, e)
        return None
    schedule_sweep(spawner)
    return hid


async def adopt(spawner: Any) -> int | None:
    """Record the holding of a running GPU server that has none: the hub stopped between its pod
    running and the record (a crash, a restart mid-start). From the pod: GPUSpawner's pool and GPU
    annotations, the pool's resource and product as the capacity cache knows it, the containers'
    ``startedAt``. A pod already recorded (by its uid) is left alone."""
    store = ledger(hub_db(spawner))
    pod = spawner._reflected_pod()
    if store is None or not isinstance(pod, Mapping):
        return None
    found = gpu_annotations(pod, POOL_ANNOTATION, GPUS_ANNOTATION)
    namespace, name, uid, node = _pod_facts(pod)
    if found is None or not uid:
        return None
    pool_id, gpus = found
    try:
        if store.open_for_server(spawner.user.name, spawner.name or "") or store.has_pod(uid):
            return None
        pool = spawner.shared_capacity_cache().snapshot().pool(pool_id)
    except Exception as e:
        _log_once("Could not check the GPU holding of %s: %s: %s", spawner._log_name, type(e).__name__, e)
        return None
    if pool is None:
        log.warning("The running GPU server %s has no GPU holding and its pool %s is not known now; "
                    "it is recorded once the pool is", spawner._log_name, pool_id)
        return None
    info = SimpleNamespace(pool_id=pool_id, resource=pool.resource, product=pool.product, gpus=gpus)
    hid = await record_start(spawner, info, start=started_at(pod))
    log.info("Recorded the GPU holding of %s from its running pod %s/%s (the hub stopped before recording it)",
             spawner._log_name, namespace, name)
    return hid


def pod_end_now(pod: Any, uid: str | None = None) -> tuple[datetime, str] | None:
    """When ``pod`` (a reflected pod dict, None: gone) stopped holding its GPUs, if it has."""
    return holding_end(pod if isinstance(pod, Mapping) else None, uid, clock.now())


def record_stop(spawner: Any, ended: tuple[datetime, str] | None, reason: str = "stopped") -> int:
    """Close the server's open holdings at ``ended`` (the pod's end, when it had ended before the
    stop) or now. Returns how many were closed (0 when another path closed them first)."""
    store = ledger(hub_db(spawner))
    if store is None:
        return 0
    stop, why = ended if ended is not None else (clock.now(), reason)
    closed = 0
    try:
        for hid, *_pod in store.open_for_server(spawner.user.name, spawner.name or ""):
            if store.close(hid, stop, why):
                closed += 1
                _count_closed(spawner, store, hid, spawner.user)
    except Exception as e:
        _log_once("Could not close the GPU holding of %s: %s: %s", spawner._log_name, type(e).__name__, e)
    return closed


def _count_closed(spawner: Any, store: UsageStore, hid: int, user: Any = None) -> None:
    """Add a closed holding's GPU-hours to ``gpuspawner_gpu_hours_total`` (per pool and group)."""
    try:
        h = next((h for h in store.for_ids([hid])), None)
        if h is None or h.stop is None:
            return
        groups = _groups_of(user, h.user, store)
        registry = getattr(spawner, "metrics_registry", None)
        gpu_metrics.install(registry).gpu_hours_used(h.pool, groups, h.hours(None, h.stop))
    except Exception as e:  # metrics never stop the books
        log.warning("Could not count GPU-hours in the metrics: %s", e)


def _groups_of(user: Any, name: str, store: UsageStore) -> list[str]:
    if user is None:
        from jupyterhub import orm

        user = orm.User.find(store.db, name)
    return sorted(principal_of(user).groups) if user is not None else []


# --- sweeping: close what the cluster says ended -------------------------------------------

_sweep_state: dict[str, Any] = {"last": None, "task": None}


def schedule_sweep(spawner: Any, force: bool = False) -> asyncio.Task | None:
    """Sweep the open holdings in the background, at most once per :data:`SWEEP_INTERVAL`."""
    task = _sweep_state["task"]
    if task is not None and not task.done():
        return task
    last = _sweep_state["last"]
    if not force and last is not None and time.monotonic() - last < SWEEP_INTERVAL:
        return None
    _sweep_state["last"] = time.monotonic()
    task = asyncio.ensure_future(_sweep_logged(spawner))
    _sweep_state["task"] = task
    return task


async def _sweep_logged(spawner: Any) -> None:
    try:
        await sweep(spawner)
    except Exception as e:
        log.warning("Sweeping the open GPU holdings failed (the next poll retries): %s: %s", type(e).__name__, e)
        _sweep_state["last"] = None


async def _read_pod(spawner: Any, namespace: str, name: str) -> tuple[bool, Any]:
    """(known, pod dict or None) of one pod: KubeSpawner's reflector for its namespace, else one read."""
    reflector = getattr(spawner, "pod_reflector", None)
    loaded = getattr(reflector, "first_load_future", None)
    if namespace == spawner.namespace and loaded is not None and loaded.done() and not loaded.cancelled() \
            and loaded.exception() is None:
        return True, reflector.pods.get(f"{namespace}/{name}")
    try:
        pod = await asyncio.wait_for(spawner.api.read_namespaced_pod(name, namespace, _preload_content=False), 10)
        body = await pod.json()
        return True, body
    except Exception as e:
        status = getattr(e, "status", None)
        if status == 404:
            return True, None
        log.info("Could not read pod %s/%s for the GPU ledger: %s", namespace, name, e)
        return False, None


async def sweep(spawner: Any) -> int:
    """Close every open holding whose pod has ended or is gone (its containers' finishedAt, else the
    time it was seen gone). Each close is conditional on the holding being open, so a holding
    closed meanwhile by its server's stop is never closed twice. Returns how many were closed."""
    store = ledger(hub_db(spawner))
    if store is None:
        return 0
    closed = 0
    for holding, namespace, name, uid in store.open_holdings():
        if not namespace or not name:
            continue
        known, pod = await _read_pod(spawner, namespace, name)
        if not known:
            continue
        ended = holding_end(pod, uid, clock.now())
        if ended is not None and store.close(holding.id, ended[0], ended[1]):
            closed += 1
            _count_closed(spawner, store, holding.id)
            log.info("GPU holding of %s/%s (pod %s/%s) closed at %s: %s", holding.user, holding.server,
                     namespace, name, ended[0].isoformat(), ended[1])
    return closed
