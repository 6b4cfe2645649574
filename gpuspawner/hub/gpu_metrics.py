"""Prometheus metrics of gpuspawner, served with JupyterHub's on ``/hub/metrics``."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuspawner.capacity.model import CapacitySnapshot
from gpuspawner.spawn.pending_verdicts import gpu_wait_seconds
from gpuspawner.spawn.progress import FATAL_KINDS

log = logging.getLogger(__name__)

PREFIX = "gpuspawner"

STARTED = "started"
REFUSED = "refused"
FAILED = "failed"
SPAWN_OUTCOMES = (STARTED, REFUSED, FAILED)

OTHER = "other"
# Why a spawn request was refused before any pod existed (HTTP 4xx/503).
REFUSAL_REASONS = frozenset(
    {
        "unknown_pool",  # the pool id is not one the profile offers
        "bad_count",  # the GPU count is not a whole number >= 1
        "too_many_gpus",  # more than the pool (or the profile's max_gpus) can give
        "forbidden_option",  # a user option that may not be set (a trait name, a GPU option on a CPU profile)
        "capacity_unknown",  # the capacity cache has not synced or is unhealthy
        "cuda_mismatch",  # the image's CUDA needs a newer driver than the pool has
        "quota",  # a per-user or per-group GPU quota
        "not_allowed",  # the user may not use this profile or pool
        "untolerated_taint",  # every node of the pool carries a taint no server tolerates
        "budget",  # the user's GPU-hour budget cannot cover the minimum (gpu_hour_budgets)
        OTHER,
    }
)
# Why a started spawn failed: progress.py's fatal kinds, the start timeout, other errors.
FAILURE_REASONS = frozenset(FATAL_KINDS | {"timeout", "error", OTHER})

# Seconds from pod creation to PodScheduled: from "a GPU was free" (seconds)
# to "waited for a scale-up" (minutes) to "queued behind others" (an hour).
GPU_WAIT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf"))

_MAX_LABEL = 200  # pool ids are short; a longer value is a caller bug, not a new series

SnapshotSource = Callable[[], "CapacitySnapshot | None"]


def _pool_label(pool: Any) -> str:
    if pool is None:
        return ""
    text = str(pool)
    return text[:_MAX_LABEL]


class GPUMetrics(Collector):
    """The collector of every gpuspawner metric (one per registry; see :func:`install`)."""

    def __init__(self, snapshot: SnapshotSource | None = None) -> None:
        # Unregistered children: this collector yields them, so the registry
        # sees one collector whatever it holds.
        self._spawns = Counter(
            "spawns",
            "GPU server spawns by pool and outcome (started, refused, failed) and a bounded reason",
            ["pool", "outcome", "reason"],
            namespace=PREFIX,
            registry=None,
        )
        self._gpu_wait = Histogram(
            "gpu_wait_seconds",
            "Seconds a GPU server's pod waited from creation until the scheduler bound it to a node",
            ["pool"],
            namespace=PREFIX,
            buckets=GPU_WAIT_BUCKETS,
            registry=None,
        )
        self._orphans = Counter(
            "orphan_pods_deleted",
            "Pods of the hub's servers deleted because no server of the hub owned them (left by a cancelled "
            "spawn or a stop that did not delete them)",
            namespace=PREFIX,
            registry=None,
        )
        # the GPU-hour ledger (docs/usage.md): closed holdings' weighted GPU-hours, budget refusals
        self._gpu_hours = Counter(
            "gpu_hours",
            "Weighted GPU-hours of GPU servers that stopped, by pool and by each JupyterHub group of their user "
            "(group empty: in none)",
            ["pool", "group"],
            namespace=PREFIX,
            registry=None,
        )
        self._budget_refusals = Counter(
            "budget_refusals",
            "GPU server launches refused because the user's GPU-hour budget could not cover the minimum",
            ["pool"],
            namespace=PREFIX,
            registry=None,
        )
        self._snapshot = snapshot
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    # -- configuration ---------------------------------------------------------

    def set_snapshot(self, snapshot: SnapshotSource | None) -> None:
        """Read capacity from ``snapshot`` (a no-argument callable returning a
        ``CapacitySnapshot``, or None) at each scrape; None stops the capacity series."""
        if snapshot is not None and not callable(snapshot):
            raise TypeError(
                f"the capacity snapshot source must be a callable such as CapacityCache.snapshot, not {snapshot!r}"
            )
        self._snapshot = snapshot

    # -- recording -------------------------------------------------------------

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning(msg, *args)

    def _bounded(self, reason: Any, allowed: frozenset[str], outcome: str) -> str:
        if isinstance(reason, str) and reason in allowed:
            return reason
        self._warn_once(
            f"{outcome}:{reason!r}",
            "gpuspawner metrics: %r is not a known reason for %s spawns (%s); counted as %r",
            reason,
            outcome,
            ", ".join(sorted(allowed)),
            OTHER,
        )
        return OTHER

    def spawn_started(self, pool: str | None) -> None:
        """A GPU server's pod is running (count it once per spawn)."""
        self._spawns.labels(_pool_label(pool), STARTED, "").inc()

    def spawn_refused(self, pool: str | None, reason: str) -> None:
        """A request refused before any pod existed; ``reason`` from :data:`REFUSAL_REASONS`.

        With ``unknown_pool`` the pool label is left empty: the id came from
        the request, and a label per made-up id would grow without bound."""
        reason = self._bounded(reason, REFUSAL_REASONS, REFUSED)
        label = "" if reason == "unknown_pool" else _pool_label(pool)
        self._spawns.labels(label, REFUSED, reason).inc()

    def spawn_failed(self, pool: str | None, reason: str | None = None) -> None:
        """A spawn whose pod never became ready; ``reason`` from :data:`FAILURE_REASONS`
        (a fatal ``Translation.kind``, ``timeout``, ``error``); None counts as ``error``."""
        reason = self._bounded("error" if reason is None else reason, FAILURE_REASONS, FAILED)
        self._spawns.labels(_pool_label(pool), FAILED, reason).inc()

    def orphan_pod_deleted(self) -> None:
        """The reaper deleted a server pod that no server of the hub owned."""
        self._orphans.inc()

    def gpu_hours_used(self, pool: str | None, groups: Iterable[str], hours: float) -> None:
        """Count a stopped server's weighted GPU-hours once per group of its user ("" for none)."""
        if not isinstance(hours, (int, float)) or not math.isfinite(hours) or hours <= 0:
            return
        for group in list(groups) or [""]:
            self._gpu_hours.labels(_pool_label(pool), _pool_label(group)).inc(hours)

    def budget_refused(self, pool: str | None) -> None:
        """A launch refused for its GPU-hour budget (also ``spawns_total{outcome="refused",reason="budget"}``)."""
        self._budget_refusals.labels(_pool_label(pool)).inc()

    def observe_gpu_wait(self, pool: str | None, seconds: float) -> None:
        """Record how long a pod waited for its GPUs (see :func:`pending.gpu_wait_seconds`)."""
        number = isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        if not number or not math.isfinite(seconds) or seconds < 0:
            self._warn_once(f"wait:{seconds!r}", "gpuspawner metrics: ignoring GPU wait of %r seconds", seconds)
            return
        self._gpu_wait.labels(_pool_label(pool)).observe(float(seconds))

    def observe_pod_scheduled(self, pool: str | None, pod: Any) -> float | None:
        """Record the GPU wait of a scheduled pod (a core/v1 Pod dict); returns
        the seconds, or None (nothing recorded) while it is not scheduled."""
        seconds = gpu_wait_seconds(pod)
        if seconds is not None:
            self.observe_gpu_wait(pool, seconds)
        return seconds

    # -- Collector -------------------------------------------------------------

    @staticmethod
    def _capacity_families() -> dict[str, GaugeMetricFamily]:
        return {
            "total": GaugeMetricFamily(
                f"{PREFIX}_pool_gpus",
                "GPUs allocatable in a GPU pool (nodes with the same GPU resource, product and node group)",
                labels=["pool", "resource", "product"],
            ),
            "free": GaugeMetricFamily(
                f"{PREFIX}_pool_free_gpus",
                "GPUs of a pool that no pod requests (nor a spawn has just reserved)",
                labels=["pool", "resource", "product"],
            ),
            "nodes": GaugeMetricFamily(
                f"{PREFIX}_pool_nodes",
                "Nodes contributing GPUs to a pool",
                labels=["pool", "resource", "product"],
            ),
            "age": GaugeMetricFamily(
                f"{PREFIX}_capacity_cache_age_seconds",
                "Seconds since the GPU capacity cache last heard from the Kubernetes API server",
            ),
            "synced": GaugeMetricFamily(
                f"{PREFIX}_capacity_cache_synced",
                "1 when the GPU capacity cache has completed its first list of nodes and pods",
            ),
            "healthy": GaugeMetricFamily(
                f"{PREFIX}_capacity_cache_healthy",
                "1 when the GPU capacity cache's watches are current (not stale, not failing)",
            ),
        }

    def describe(self) -> Iterable[Metric]:
        yield from self._capacity_families().values()
        yield from self._spawns.describe()
        yield from self._gpu_wait.describe()
        yield from self._gpu_hours.describe()
        yield from self._budget_refusals.describe()

    def _read_snapshot(self) -> CapacitySnapshot | None:
        source = self._snapshot
        if source is None:
            return None
        try:
            snap = source()
        except Exception as e:  # a scrape must never fail because the cache did
            self._warn_once(f"snapshot:{type(e).__name__}", "gpuspawner metrics: capacity snapshot failed: %s", e)
            return None
        if snap is not None and not isinstance(snap, CapacitySnapshot):
            self._warn_once(
                "snapshot:type", "gpuspawner metrics: capacity source returned %r, not a CapacitySnapshot", type(snap)
            )
            return None
        return snap

    def collect(self) -> Iterable[Metric]:
        fams = self._capacity_families()
        snap = self._read_snapshot()
        if snap is not None:
            for pool in snap.pools:
                labels = [pool.id, pool.resource, pool.product or "unknown"]
                fams["total"].add_metric(labels, pool.total)
                fams["free"].add_metric(labels, pool.free)
                fams["nodes"].add_metric(labels, pool.nodes)
            fams["age"].add_metric([], snap.age_seconds)
        # no source, or it failed: capacity is unknown, which is "not synced, not healthy"
        fams["synced"].add_metric([], 1.0 if snap is not None and snap.synced else 0.0)
        fams["healthy"].add_metric([], 1.0 if snap is not None and snap.healthy else 0.0)
        yield from fams.values()
        yield from self._spawns.collect()
        yield from self._gpu_wait.collect()
        yield from self._orphans.collect()
        yield from self._gpu_hours.collect()
        yield from self._budget_refusals.collect()


# The collector lives on the registry object itself, so a re-imported copy of
# this module (importlib.reload, a second hub in one test process) finds the
# one already registered instead of registering a duplicate.
_ATTR = "_gpuspawner_metrics"
_install_lock = threading.Lock()


def install(registry: CollectorRegistry | None = None, snapshot: SnapshotSource | None = None) -> GPUMetrics:
    """The gpuspawner collector of ``registry`` (default: prometheus_client's
    ``REGISTRY``, the one ``/hub/metrics`` serves), registered on first call.

    ``snapshot``: when given, the capacity source from now on (the last hub to
    install wins; hubs in one process share the capacity cache anyway).
    Never raises for a repeated install; a collector left by an older copy of
    this module is replaced (its counts restart, as after a hub restart).
    """
    registry = REGISTRY if registry is None else registry
    with _install_lock:
        current = getattr(registry, _ATTR, None)
        if type(current) is GPUMetrics:
            if snapshot is not None:
                current.set_snapshot(snapshot)
            return current
        metrics = GPUMetrics(snapshot)
        if current is not None:
            try:
                registry.unregister(current)
            except KeyError:
                pass
        try:
            registry.register(metrics)
        except ValueError as e:  # DuplicateTimeseries: someone else registered our names
            log.warning("gpuspawner metrics not registered, their names are taken: %s", e)
            return metrics
        setattr(registry, _ATTR, metrics)
        return metrics


def uninstall(registry: CollectorRegistry | None = None) -> None:
    """Remove the gpuspawner collector from ``registry`` (a no-op when absent)."""
    registry = REGISTRY if registry is None else registry
    with _install_lock:
        current = getattr(registry, _ATTR, None)
        if current is None:
            return
        try:
            registry.unregister(current)
        except KeyError:
            pass
        delattr(registry, _ATTR)
