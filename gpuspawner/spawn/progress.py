"""Spawn progress in GPU words."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuspawner.capacity.model import PoolView, ScaleUp, Taint
from gpuspawner.capacity.node_resources import request_words, shortfall_words
from gpuspawner.capacity.taintrule import TaintExclusion, pod_taint_exclusion
from gpuspawner.kube import objects
from gpuspawner.spawn.scheduler_messages import (
    AFFINITY,
    CONDITION_TAINT,
    INSUFFICIENT,
    KARPENTER_FAILED,
    NODE_NAME,
    PERMANENT_KINDS,
    TAINT,
    UNSCHEDULABLE,
    UNBOUND_IMMEDIATE,
    VOLUME,
    VOLUME_ZONE,
    ReasonCount,
    SchedulingFailure,
    cuda_refusal,
    image_in,
    image_not_found,
    is_admission_failure,
    is_condition_taint,
    missing_claim,
    parse_no_scale_up,
    parse_scale_up,
    parse_scheduling_message,
    pull_duration,
    scheduled_node,
    taint_in,
)
from gpuspawner.spawn.pulltime import pull_estimate, same_image
from gpuspawner.spawn.tolerations import taint_key_allowed, taint_text

# Progress hints (percent) for the spawn page's bar.  KubeSpawner moves the bar
# a third of the way to 90 on every event whatever it says; these let the
# spawner move it by what happened instead (keep the larger of the two).
PROGRESS_SCHEDULING = 10
PROGRESS_SCALE_UP = 20
PROGRESS_SCHEDULED = 40
PROGRESS_PULLING = 50
PROGRESS_PULLED = 70
PROGRESS_CREATED = 80
PROGRESS_STARTED = 90

# Every Translation.kind that comes with fatal=True: a bounded set, so the
# spawner may use it as the ``reason`` label of failed spawns (metrics.py).
FATAL_KINDS = frozenset(
    {
        "too_many_gpus",
        "no_nodes",
        "pool_empty",
        "untolerated_taint",
        "volume_zone",
        "volume_missing",
        "no_matching_node",
        "image_not_found",
        "image_invalid",
        "cuda_mismatch",
        "gpu_allocation_failed",
        "node_out_of_resource",
        "preempted",
        "pod_failed",
        "gpu_class_missing",
        "no_free_gpu",
        "nodes_too_small",
    }
)

@dataclass(frozen=True, slots=True)
class SpawnContext:
    """What the spawner knows about the spawn when an event arrives.

    ``queued_before``: how many other Pending pods wait for the same pool and
    were created before this one (the spawner computes it from the capacity
    cache).  ``max_node_allocatable``: GPUs allocatable on the pool's largest
    node; None when unknown.  ``taints``: the pool's taints (``PoolView.taints``);
    ``tolerated_taint_keys``: ``GPUSpawner.gpu_tolerated_taint_keys`` (globs).
    ``excluded``: how many nodes of the whole cluster the pod's own tolerations leave it off
    for good or for now (``taintrule.taint_exclusion`` over the snapshot's ``node_taints``);
    None when unknown (no pod yet, no healthy snapshot).
    Numbers that are None are unknown, and nothing is concluded from them.
    """

    pool_id: str
    gpus: int
    resource: str = "nvidia.com/gpu"
    pool_name: str | None = None
    free: int | None = None
    total: int | None = None
    max_free_per_node: int | None = None
    max_node_allocatable: int | None = None
    nodes: int | None = None
    scale_up: ScaleUp | None = None
    queued_before: int = 0
    taints: tuple[Taint, ...] = ()
    tolerated_taint_keys: tuple[str, ...] = ()
    # what the server's pod asks of its node besides GPUs (CPU millicores, memory and ephemeral
    # storage bytes, pods; resource_requests.server_request) and the pool's largest node in the same terms
    # (PoolView.largest); None: unknown
    request: tuple[int, ...] | None = None
    largest: tuple[int, ...] | None = None
    # the server's image, its size as the nodes that hold it report it (bytes; None: no node holds
    # it) and the pull rate (MB/s, ``gpu_image_pull_mb_per_second``): a cold node's pull estimate
    image: str | None = None
    image_bytes: int | None = None
    pull_rate: float | None = None
    excluded: TaintExclusion | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.pool_id, str) or not self.pool_id:
            raise ValueError(f"SpawnContext.pool_id must be a non-empty pool id string, not {self.pool_id!r}")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise ValueError(f"SpawnContext.gpus must be a whole number of GPUs >= 1, not {self.gpus!r}")
        if isinstance(self.queued_before, bool) or not isinstance(self.queued_before, int) or self.queued_before < 0:
            raise ValueError(
                f"SpawnContext.queued_before must be a count of pods >= 0, not {self.queued_before!r}"
            )
        for name in ("free", "total", "max_free_per_node", "max_node_allocatable", "nodes"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"SpawnContext.{name} must be None (unknown) or a count >= 0, not {value!r}")
        if isinstance(self.tolerated_taint_keys, str):
            raise ValueError("SpawnContext.tolerated_taint_keys must be a list of keys, not one string")
        object.__setattr__(self, "tolerated_taint_keys", tuple(self.tolerated_taint_keys))
        object.__setattr__(self, "taints", tuple(self.taints))

    @classmethod
    def from_pool(
        cls,
        pool: PoolView | None,
        *,
        pool_id: str,
        gpus: int,
        queued_before: int = 0,
        tolerated_taint_keys: Iterable[str] = (),
        pool_name: str | None = None,
        resource: str | None = None,
        request: tuple[int, ...] | None = None,
        image: str | None = None,
        image_bytes: int | None = None,
        pull_rate: float | None = None,
        node_taints: Iterable[tuple[Any, int]] | None = None,
        pod: Any = None,
    ) -> SpawnContext:
        """The context for a spawn into ``pool`` (as the capacity cache sees it
        now; None when the pool is not in the snapshot, so nothing is known).
        ``node_taints``: the snapshot's (``CapacitySnapshot.node_taints``) and ``pod``: the
        server's pod as the API server has it, whose tolerations they are weighed with
        (``excluded``); either None: not known."""
        excluded = None
        if pool is not None and node_taints is not None and isinstance(pod, Mapping):
            excluded = pod_taint_exclusion(node_taints, pod)
        if pool is None:
            return cls(
                pool_id=pool_id,
                gpus=gpus,
                resource=resource or "nvidia.com/gpu",
                pool_name=pool_name,
                queued_before=queued_before,
                tolerated_taint_keys=tuple(tolerated_taint_keys),
                request=request,
                image=image,
                image_bytes=image_bytes,
                pull_rate=pull_rate,
            )
        # from the pool's driver groups, which the ledger keeps as it goes: not a walk over its nodes
        largest = pool.max_allocatable if pool.driver_groups else None
        return cls(
            pool_id=pool_id,
            gpus=gpus,
            resource=resource or pool.resource,
            pool_name=pool_name,
            free=pool.free,
            total=pool.total,
            max_free_per_node=pool.max_free_per_node,
            max_node_allocatable=largest,
            nodes=pool.nodes,
            scale_up=pool.scale_up,
            queued_before=queued_before,
            taints=pool.taints,
            tolerated_taint_keys=tuple(tolerated_taint_keys),
            request=request,
            largest=pool.largest,
            image=image,
            image_bytes=image_bytes,
            pull_rate=pull_rate,
            excluded=excluded,
        )

    @property
    def label(self) -> str:
        return self.pool_name or self.pool_id

    def hard_taints(self) -> tuple[Taint, ...]:
        """The pool's taints that keep this pod off its nodes for good: hard
        effects, not a node-condition taint, key not among the tolerated ones
        (the same rule as ``taints.untolerated_taints``)."""
        return tuple(
            t
            for t in self.taints
            if t.effect in ("NoSchedule", "NoExecute")
            and not is_condition_taint(t.key)
            and not taint_key_allowed(t.key, self.tolerated_taint_keys)
        )

    def can_grow(self) -> bool:
        """Whether a declared autoscaler may still add a node to the pool."""
        if self.scale_up is None:
            return False
        return self.nodes is None or self.nodes < self.scale_up.max_nodes


@dataclass(frozen=True, slots=True)
class Translation:
    """An event in the words of someone waiting for a GPU server.

    ``kind``: a short token for logs and metrics (``waiting_for_gpu``,
    ``scale_up``, ``untolerated_taint``, ``image_pull`` ...).  ``progress``: a
    hint for the progress bar, or None to leave it.  ``fatal``: the pod can
    never start; ``reason`` then says why and what to change, for the spawn's
    error message.
    """

    message: str
    kind: str
    progress: int | None = None
    fatal: bool = False
    reason: str | None = None


# ---------------------------------------------------------------------------
# wording
# ---------------------------------------------------------------------------


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def _queue(ctx: SpawnContext) -> str:
    if ctx.queued_before == 0:
        return "you are next in line"
    return f"{_n(ctx.queued_before, 'server')} {'is' if ctx.queued_before == 1 else 'are'} queued before you"


def _pool_state(ctx: SpawnContext) -> str | None:
    if ctx.free is None or ctx.total is None:
        return None
    if ctx.total == 0:
        return "it has no GPUs right now"
    if ctx.free == 0:
        return "its only GPU is in use" if ctx.total == 1 else f"all {ctx.total} of its GPUs are in use"
    if ctx.max_free_per_node is not None and ctx.max_free_per_node < ctx.gpus <= ctx.free:
        # NodeResourcesFit checks one node: a pod's GPUs must all be on one node
        return (
            f"{ctx.free} of its {ctx.total} GPUs are free, but no single node has {ctx.gpus} free "
            "(a server's GPUs must all be on one node)"
        )
    return f"{ctx.free} of its {ctx.total} GPUs {'is' if ctx.free == 1 else 'are'} free"


def _growth(ctx: SpawnContext) -> str | None:
    su = ctx.scale_up
    if su is None:
        return None
    if ctx.can_grow():
        return f"the pool can add nodes (up to {su.max_nodes}); a new GPU node takes about {su.minutes:g} minutes"
    return f"the pool is at its maximum of {_n(su.max_nodes, 'node')}"


def _waiting_for_gpu(ctx: SpawnContext, extra: str | None = None) -> str:
    what = "a free GPU" if ctx.gpus == 1 else f"{ctx.gpus} free GPUs on one node"
    parts = [p for p in (_pool_state(ctx), _queue(ctx), extra or _growth(ctx)) if p]
    return f"Waiting for {what} in pool {ctx.label}: " + "; ".join(parts) + "."


def _message_taint_text(key: str | None, reasons: Iterable[ReasonCount]) -> str:
    if key is None:
        return "a taint"
    for r in reasons:
        taint = taint_in(r.text)
        if taint is not None and taint[0] == key:
            return f"{key}={taint[1]}" if taint[1] else key
    return key


def _summary(reasons: Iterable[ReasonCount], limit: int = 3, excluded: TaintExclusion | None = None) -> str:
    """The largest ``limit`` reasons as the scheduler wrote them; with ``excluded``, a taint reason
    without its key (kube-scheduler 1.35+) is followed by the taints that keep the server off."""
    items = sorted(reasons, key=lambda r: -(r.count or 0))
    shown = []
    for r in items[:limit]:
        text = f"{r.count} {r.text}" if r.count is not None else r.text
        if r.kind == TAINT and r.detail is None and excluded is not None:
            text += _excluded_words(excluded)
        shown.append(text)
    return "; ".join(shown)


def _excluded_words(excluded: TaintExclusion, limit: int = 3) -> str:
    """What keeps the server off the nodes a keyless taint reason counts, in words:
    ``": sku=gpu:NoSchedule on 3 nodes and 1 node not ready or being removed for now"``; empty
    when nothing is known."""
    parts = [f"{taint_text(t)} on {_n(n, 'node')}" for t, n in excluded.taints[:limit]]
    if len(excluded.taints) > limit:
        parts.append(_n(len(excluded.taints) - limit, "other taint"))
    if excluded.passing:
        parts.append(f"{_n(excluded.passing, 'node')} not ready or being removed for now")
    if not parts:
        return ""
    return ": " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])


# ---------------------------------------------------------------------------
# the kube-scheduler's FailedScheduling
# ---------------------------------------------------------------------------


def _permanent_count(failure: SchedulingFailure, ctx: SpawnContext) -> int:
    """Nodes excluded for good.  Each node fails on the first filter that
    rejects it, and only NodeResourcesFit gives a node more than one reason, so
    the counts of single-reason kinds add up per node.  A taint without its key
    (the 1.35 wording) may be a passing node-condition taint (a NotReady node
    after a driver update, say): :func:`_keyless_lasting` counts those that stay."""
    n = 0
    for r in failure.reasons:
        count = r.count if r.count is not None else failure.total_nodes
        if r.kind == TAINT and r.detail is None:
            n += _keyless_lasting(count, ctx)
        elif r.kind in PERMANENT_KINDS:
            n += count
    return n


def _keyless_lasting(count: int, ctx: SpawnContext) -> int:
    """Of ``count`` nodes that kube-scheduler says had an untolerated taint, without naming it, how
    many stay out for good.  Known: every node's taints weighed with the pod's own tolerations
    (``ctx.excluded``, ``TaintExclusion.lasting_among``).  Else the old evidence: all of them when
    the cache shows the pool's nodes carrying a taint this pod does not tolerate
    (``PoolView.taints`` leaves node-condition taints out, docs/capacity.md), none otherwise."""
    if ctx.excluded is not None:
        return ctx.excluded.lasting_among(count)
    return count if ctx.hard_taints() else 0


def _pool_taint_evidence(ctx: SpawnContext, keys: set[str]) -> tuple[Taint, ...]:
    """The pool's own taints that keep this pod off its nodes: those the spawner does not tolerate
    (:meth:`SpawnContext.hard_taints`) that the scheduler names too.  When it names none (the 1.35
    wording) and every node's taints are known (``ctx.excluded``): those of the pool's taints the
    pod's own tolerations leave untolerated on some node."""
    if keys:
        return tuple(t for t in ctx.hard_taints() if t.key in keys)
    if ctx.excluded is not None:
        untolerated = {t for t, _ in ctx.excluded.taints}
        return tuple(t for t in ctx.taints if t in untolerated)
    return ctx.hard_taints()


def _too_big(ctx: SpawnContext) -> bool:
    """The request exceeds every node of the pool, now and after any scale-up."""
    largest = ctx.max_node_allocatable
    if largest is None or largest <= 0:  # unknown, or a device plugin that is down: not sure
        return False
    if ctx.gpus <= largest:
        return False
    return ctx.scale_up is None or ctx.scale_up.gpus_per_node < ctx.gpus


#: the scheduler's names of what NodeResourcesFit checks besides extended resources, in words
_BASE_WORDS = {"cpu": "CPU", "memory": "memory", "ephemeral-storage": "disk space", "pods": "room for another pod"}


def _base_shortfall(failure: SchedulingFailure) -> list[str]:
    """What the scheduler says the nodes lack of CPU, memory, disk or pod slots, in words."""
    lacking = {r.detail for r in failure.reasons if r.kind == INSUFFICIENT and r.detail in _BASE_WORDS}
    return [_BASE_WORDS[k] for k in _BASE_WORDS if k in lacking]


def _too_small(failure: SchedulingFailure, ctx: SpawnContext) -> Translation | None:
    """The pool's nodes can never hold this server's CPU, memory or disk (NodeResourcesFit)."""
    if not _base_shortfall(failure) or ctx.request is None or ctx.largest is None or not ctx.nodes:
        return None
    words = shortfall_words(ctx.request, ctx.largest, f"the nodes of pool {ctx.label}")
    if words is None:
        return None
    reason = f"{words}; choose another pool, or a smaller server"
    return Translation(f"Cannot start: {reason}.", "nodes_too_small", fatal=True, reason=reason)


def _never_fits(failure: SchedulingFailure, ctx: SpawnContext) -> Translation | None:
    if ctx.nodes is None:
        return None  # the pool is unknown to the cache: not sure of anything
    small = _too_small(failure, ctx)
    if small is not None:
        return small
    if failure.insufficient(ctx.resource) and _too_big(ctx):
        reason = (
            f"this server asks for {_n(ctx.gpus, 'GPU')} on one node, but the largest node of pool "
            f"{ctx.label} has {ctx.max_node_allocatable}; choose at most {ctx.max_node_allocatable} "
            "or another pool"
        )
        return Translation(f"Cannot start: {reason}.", "too_many_gpus", fatal=True, reason=reason)
    if ctx.scale_up is not None:
        return None  # a new node may change everything
    if failure.total_nodes == 0:
        if ctx.nodes:  # the cache sees nodes the scheduler does not: not sure
            return None
        reason = f"the cluster has no nodes and pool {ctx.label} cannot add any; ask your administrator"
        return Translation(f"Cannot start: {reason}.", "no_nodes", fatal=True, reason=reason)
    if _permanent_count(failure, ctx) < failure.total_nodes:
        return None
    if ctx.nodes == 0:
        reason = (
            f"pool {ctx.label} has no usable nodes now and cannot add any, and no other node may run this server; "
            "choose another pool or ask your administrator"
        )
        return Translation(f"Cannot start: {reason}.", "pool_empty", fatal=True, reason=reason)
    # Which filter rejects the pool's own nodes?  They pass NodeAffinity (the
    # spawner pins the pod to the pool's labels), and TaintToleration runs
    # before it while VolumeBinding runs after it (the default profile's filter
    # order, pkg/scheduler/apis/config/v1/default_plugins.go); other pools'
    # nodes add taint and affinity entries of their own.
    taints = [r for r in failure.reasons if r.kind == TAINT]
    keys = {r.detail for r in taints if r.detail}
    hard = _pool_taint_evidence(ctx, keys)
    if taints and (hard or not failure.count(AFFINITY, NODE_NAME, VOLUME_ZONE)):
        key = hard[0].key if hard else taints[0].detail
        shown = taint_text(hard[0]) if hard else _message_taint_text(key, taints)
        if key:
            reason = (
                f"the nodes of pool {ctx.label} carry the taint {shown}, which this server does not tolerate; "
                f"an administrator can allow it with c.GPUSpawner.gpu_tolerated_taint_keys "
                f"(add {key!r}) or remove the taint"
            )
        elif ctx.excluded is not None and ctx.excluded.taints:
            named = [t for t, _ in ctx.excluded.taints]
            add = " and ".join(repr(k) for k in dict.fromkeys(t.key for t in named))
            s, them = ("s", "them") if len(named) > 1 else ("", "it")
            reason = (
                f"every node that could run this server carries a taint it does not tolerate "
                f"({', '.join(taint_text(t) for t in named)}); an administrator can allow {them} with "
                f"c.GPUSpawner.gpu_tolerated_taint_keys (add {add}) or remove the taint{s}"
            )
        else:
            reason = (
                "every node that could run this server carries a taint it does not tolerate; "
                "an administrator can allow the taint's key with c.GPUSpawner.gpu_tolerated_taint_keys"
            )
        return Translation(f"Cannot start: {reason}.", "untolerated_taint", fatal=True, reason=reason)
    if failure.count(VOLUME_ZONE):
        reason = (
            f"this server's storage volume is bound to a zone where pool {ctx.label} has no node (your home "
            "volume was created in another zone than the pool's GPU nodes, node(s) had volume node affinity "
            "conflict); choose a GPU pool with nodes in that zone, or ask your administrator to move the volume "
            "to the pool's zone or to create home volumes with a StorageClass whose volumeBindingMode is "
            "WaitForFirstConsumer"
        )
        return Translation(f"Cannot start: {reason}.", "volume_zone", fatal=True, reason=reason)
    reason = (
        f"no node of pool {ctx.label} can ever take this server ({_summary(failure.reasons, excluded=ctx.excluded)}); "
        "the pool's labels or taints may have changed: reload the page and choose again, "
        "or ask your administrator"
    )
    return Translation(f"Cannot start: {reason}.", "no_matching_node", fatal=True, reason=reason)


_CLASS_MISSING = re.compile(r"device class (\S+) does not exist")


def _dra_scheduling(failure: SchedulingFailure, ctx: SpawnContext) -> Translation | None:
    """The dynamicresources plugin's reasons, for a server whose GPUs come from a ResourceClaim
    (``pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go``): Filter's
    ``cannot allocate all claims`` / ``resourceclaim not available on the node`` (no node has the
    devices free: the DRA ``Insufficient``), PreFilter's ``request <r>: device class <c> does not
    exist`` (nothing changes until an admin creates the class), and the claim not created or
    being allocated yet (``resourceclaim.Name``: "ResourceClaim not created yet")."""
    texts = " ".join(r.text for r in failure.reasons).lower()
    m = _CLASS_MISSING.search(" ".join(r.text for r in failure.reasons))
    if m:
        reason = (
            f"the cluster has no DeviceClass {m.group(1)}, which the GPUs of pool {ctx.label} are requested "
            "with (the GPU driver's classes may have been removed); ask your administrator"
        )
        return Translation(f"Cannot start: {reason}.", "gpu_class_missing", fatal=True, reason=reason)
    if "cannot allocate all claims" in texts or "resourceclaim not available on the node" in texts:
        if _too_big(ctx):
            reason = (
                f"this server asks for {_n(ctx.gpus, 'GPU')} on one node, but the largest node of pool "
                f"{ctx.label} has {ctx.max_node_allocatable}; choose at most {ctx.max_node_allocatable} "
                "or another pool"
            )
            return Translation(f"Cannot start: {reason}.", "too_many_gpus", fatal=True, reason=reason)
        return Translation(_waiting_for_gpu(ctx), "waiting_for_gpu", PROGRESS_SCHEDULING)
    if "resourceclaim not created yet" in texts or "in the process of being allocated" in texts:
        return Translation(f"Preparing the GPU claim of your server in pool {ctx.label}.", "waiting_for_claim",
                           PROGRESS_SCHEDULING)
    return None


def _storage(failure: SchedulingFailure, ctx: SpawnContext) -> Translation | None:
    """VolumeBinding's and VolumeZone's PreFilter verdicts, which speak for every node
    (``pkg/scheduler/framework/plugins/volumebinding/volume_binding.go``, ``volumezone``): a
    missing claim or volume is fatal (no node changes it, and KubeSpawner creates the claim
    before the pod, ``storage_pvc_ensure``); an unbound Immediate claim waits for the PV
    controller or the provisioner.  None for other reasons."""
    for r in failure.reasons:
        if r.kind != VOLUME or r.count is not None:
            continue
        missing = missing_claim(r.text)
        if missing is not None:
            what, name, deleting = missing
            if what == "volume":
                why = f"the volume {name} that holds this server's storage no longer exists"
            elif deleting:
                why = f"this server's storage claim {name} is being deleted"
            else:
                why = f"this server's storage claim {name} does not exist (it may have been deleted)"
            reason = f"{why}, so no node can mount it; ask your administrator to restore or recreate it"
            return Translation(f"Cannot start: {reason}.", "volume_missing", fatal=True, reason=reason)
        if r.text == UNBOUND_IMMEDIATE:
            return Translation(
                f"Waiting for this server's storage volume ({UNBOUND_IMMEDIATE}): its claim's StorageClass "
                "binds immediately, and the volume is still being created or no existing volume matches; "
                "if this lasts, ask your administrator to check the claim's events.",
                "waiting_for_storage",
                PROGRESS_SCHEDULING,
            )
    return None


def _storage_waiting(failure: SchedulingFailure, ctx: SpawnContext) -> Translation:
    """A volume rule excludes nodes, but not for good (an autoscaler may add a node in the
    volume's zone, a WaitForFirstConsumer claim may find a volume later)."""
    zone = failure.count(VOLUME_ZONE)
    if zone:
        what = (
            f"{_n(zone, 'node cannot', 'nodes cannot')} use this server's storage volume, which is bound to "
            "another zone (volume node affinity conflict); it starts only on a node of pool "
            f"{ctx.label} in the volume's zone"
        )
    else:
        what = _summary(r for r in failure.reasons if r.kind == VOLUME)
    return Translation(f"Waiting for this server's storage: {what}.", "waiting_for_storage", PROGRESS_SCHEDULING)


def _failed_scheduling(failure: SchedulingFailure, ctx: SpawnContext) -> Translation:
    fatal = _never_fits(failure, ctx)
    if fatal is not None:
        return fatal
    storage = _storage(failure, ctx)
    if storage is not None:
        return storage
    dra = _dra_scheduling(failure, ctx)
    if dra is not None:
        return dra
    if failure.insufficient(ctx.resource):
        return Translation(_waiting_for_gpu(ctx), "waiting_for_gpu", PROGRESS_SCHEDULING)
    if failure.count(UNSCHEDULABLE):
        return Translation(
            f"Waiting for pool {ctx.label}: {_n(failure.count(UNSCHEDULABLE), 'node is', 'nodes are')} "
            "cordoned for maintenance; your server starts when one is back or a GPU frees up elsewhere.",
            "nodes_cordoned",
            PROGRESS_SCHEDULING,
        )
    if failure.count(CONDITION_TAINT):
        keys = sorted({r.detail for r in failure.reasons if r.kind == CONDITION_TAINT and r.detail})
        what = f" ({', '.join(keys)})" if keys else ""
        return Translation(
            f"Waiting for pool {ctx.label}: {_n(failure.count(CONDITION_TAINT), 'node is', 'nodes are')} "
            f"not ready{what}; Kubernetes keeps servers off them until they recover.",
            "nodes_not_ready",
            PROGRESS_SCHEDULING,
        )
    others = [r for r in failure.reasons if r.kind == INSUFFICIENT]
    if others:
        names = " and ".join(_base_shortfall(failure)) or ", ".join(sorted({r.detail or "" for r in others}))
        asked = f" ({request_words(ctx.request)})" if ctx.request is not None else ""
        return Translation(
            f"Waiting in pool {ctx.label}: the nodes with a free GPU lack the {names} this server asks for{asked}, "
            f"taken by other workloads; {_queue(ctx)}.",
            "waiting_for_resources",
            PROGRESS_SCHEDULING,
        )
    if failure.count(VOLUME, VOLUME_ZONE):
        return _storage_waiting(failure, ctx)
    if ctx.can_grow() and _permanent_count(failure, ctx) >= failure.total_nodes:
        return Translation(
            f"No node of pool {ctx.label} can take this server now; waiting for the cluster autoscaler "
            f"to add one (about {ctx.scale_up.minutes:g} minutes).",
            "waiting_for_scale_up",
            PROGRESS_SCHEDULING,
        )
    summary = _summary(failure.reasons, excluded=ctx.excluded) or "no reason given"
    return Translation(
        f"Waiting for a node in pool {ctx.label} ({summary}); {_queue(ctx)}.",
        "waiting_for_node",
        PROGRESS_SCHEDULING,
    )


# ---------------------------------------------------------------------------
# cluster autoscaler and Karpenter
# ---------------------------------------------------------------------------


def _triggered_scale_up(message: str, ctx: SpawnContext) -> Translation:
    steps = parse_scale_up(message)
    minutes = f"about {ctx.scale_up.minutes:g} minutes" if ctx.scale_up else "a few minutes"
    if steps:
        groups = ", ".join(f"{s.group}: {s.current} -> {s.new} of at most {s.max}" for s in steps)
        what = f" (node group {groups})"
    else:
        what = ""
    return Translation(
        f"Adding a GPU node to pool {ctx.label} for your server{what}. A new GPU node usually takes "
        f"{minutes} to start and load its drivers; {_queue(ctx)}.",
        "scale_up",
        PROGRESS_SCALE_UP,
    )


def _no_scale_up(message: str, ctx: SpawnContext) -> Translation:
    reasons = parse_no_scale_up(message) or ()
    texts = {r.text for r in reasons}
    if message.rstrip(".").endswith("max total nodes in cluster reached") or any(
        t.startswith("max cluster ") for t in texts
    ):
        why = "the cluster has reached its autoscaling limit"
    elif "in backoff after failed scale-up" in texts:
        why = (
            "a recent attempt to add a node failed (the cloud may be out of this GPU type); "
            "the autoscaler will try again later"
        )
    elif "max node group size reached" in texts:
        why = "the pool is at its maximum size"
    elif "not ready for scale-up" in texts:
        why = "the autoscaler is not ready to add nodes to the pool yet"
    elif ctx.scale_up is None:
        why = "the cluster autoscaler does not add nodes to this pool"
    else:
        why = f"the cluster autoscaler found no node group to add ({_summary(reasons) or message})"
    return Translation(_waiting_for_gpu(ctx, extra=why), "no_scale_up", PROGRESS_SCHEDULING)


def _scale_up_failed(message: str, ctx: SpawnContext) -> Translation:
    return Translation(
        _waiting_for_gpu(ctx, extra=f"the autoscaler could not add a node ({message})"),
        "scale_up_failed",
        PROGRESS_SCHEDULING,
    )


def _karpenter_failed(message: str, ctx: SpawnContext) -> Translation:
    detail = message[len(KARPENTER_FAILED):].strip()
    return Translation(
        f"Waiting for pool {ctx.label}: the node autoscaler (Karpenter) cannot create a node for this "
        f"server yet: {detail}",
        "no_scale_up",
        PROGRESS_SCHEDULING,
    )


def _nominated(message: str, ctx: SpawnContext) -> Translation:
    target = message.split(":", 1)[1].strip() if ":" in message else ""
    return Translation(
        f"A new GPU node{f' ({target})' if target else ''} is starting for your server in pool {ctx.label}.",
        "scale_up",
        PROGRESS_SCALE_UP,
    )


# ---------------------------------------------------------------------------
# the scheduler's verdict
# ---------------------------------------------------------------------------


def _on_failed_scheduling(message: str, ctx: SpawnContext) -> Translation:
    failure = parse_scheduling_message(message)
    if failure is not None:
        return _failed_scheduling(failure, ctx)
    if message.startswith(KARPENTER_FAILED):
        return _karpenter_failed(message, ctx)
    return Translation(f"Waiting for a node in pool {ctx.label}: {message}", "waiting_for_node",
                       PROGRESS_SCHEDULING)


def _scheduled(message: str, ctx: SpawnContext) -> Translation:
    node = scheduled_node(message)
    where = f" on node {node}" if node else ""
    return Translation(
        f"Got {_n(ctx.gpus, 'GPU')} in pool {ctx.label}{where}; preparing your server.",
        "scheduled",
        PROGRESS_SCHEDULED,
    )


def _preempted(message: str, ctx: SpawnContext) -> Translation:
    why = "a higher-priority workload took this server's place on the node (preemption); start it again"
    return Translation(f"Cannot start: {why}.", "preempted", fatal=True, reason=why)


# ---------------------------------------------------------------------------
# kubelet
# ---------------------------------------------------------------------------


def _image(message: str) -> str:
    """The image an event names, or how to speak of it when it names none."""
    return image_in(message) or "the server image"


def _pulling(message: str, ctx: SpawnContext) -> Translation:
    image = _image(message)
    # the kubelet pulls only what the node lacks (IfNotPresent): this node is cold for the image
    estimate = pull_estimate(ctx.image_bytes, ctx.pull_rate) if same_image(image, ctx.image) else None
    if estimate:
        return Translation(f"Downloading the image {image}: pulling {estimate} on a node that does not have it "
                           "yet.", "image_pull", PROGRESS_PULLING)
    return Translation(
        f"Downloading the image {image}. GPU images are large: the first start on a node can take "
        "several minutes.",
        "image_pull",
        PROGRESS_PULLING,
    )


def _pulled(message: str, ctx: SpawnContext) -> Translation:
    image = _image(message)
    if "already present" in message:
        return Translation(f"The image {image} is already on the node.", "image_ready", PROGRESS_PULLED)
    took = pull_duration(message)
    return Translation(f"Downloaded the image {image}{f' in {took}' if took else ''}.", "image_ready",
                       PROGRESS_PULLED)


def _pull_failed(message: str, ctx: SpawnContext) -> Translation:
    image = _image(message)
    if image_not_found(message):
        reason = f"the image {image} does not exist; check its name and tag (or ask your administrator)"
        return Translation(f"Cannot start: {reason}.", "image_not_found", fatal=True, reason=reason)
    if "authoriz" in message or "denied" in message or "401" in message or "403" in message:
        return Translation(
            f"The node may not download the image {image} (access denied); retrying. "
            "If this persists, the image is private and the cluster needs a pull secret for it.",
            "image_pull_denied",
            PROGRESS_PULLING,
        )
    return Translation(f"Downloading the image {image} failed; retrying ({message}).", "image_pull_failed",
                       PROGRESS_PULLING)


def _container_failed(message: str, ctx: SpawnContext) -> Translation | None:
    if message.startswith("Failed to pull image"):
        return _pull_failed(message, ctx)
    if message in ("Error: ErrImagePull", "Error: ImagePullBackOff"):
        return Translation("Downloading the server image failed; Kubernetes is retrying.", "image_pull_failed",
                           PROGRESS_PULLING)
    cond = cuda_refusal(message)
    if cond is not None:
        reason = (
            f"the image requires {cond.replace('>=', ' >= ')}, newer than the NVIDIA driver on the nodes of pool "
            f"{ctx.label} supports (nvidia-container-cli refused it); choose an image built for an older "
            "CUDA or a pool with a newer driver"
        )
        return Translation(f"Cannot start: {reason}.", "cuda_mismatch", fatal=True, reason=reason)
    if "nvidia-container-cli" in message:
        return Translation(
            f"The node's NVIDIA container runtime could not set up the GPU for this server: {message}",
            "gpu_runtime_error",
            PROGRESS_CREATED,
        )
    return None


def _image_unusable(message: str, ctx: SpawnContext) -> Translation:
    # kubelet images/image_manager.go: an image reference that does not parse, or
    # imagePullPolicy: Never with the image absent from the node: retrying cannot help
    why = f"the node cannot use the server image ({message}); ask your administrator to fix the image"
    return Translation(f"Cannot start: {why}.", "image_invalid", fatal=True, reason=why)


def _back_off(message: str, ctx: SpawnContext) -> Translation:
    if message.startswith("Back-off pulling image"):
        return Translation(
            f"Downloading the image {_image(message)} failed; Kubernetes will retry shortly.",
            "image_pull_failed",
            PROGRESS_PULLING,
        )
    return Translation(
        "The server keeps exiting right after it starts; Kubernetes is restarting it. "
        "Check the image's start command (the server log has details).",
        "crash_loop",
        PROGRESS_STARTED,
    )


def _created(message: str, ctx: SpawnContext) -> Translation:
    return Translation("Creating your server's container.", "container_created", PROGRESS_CREATED)


def _started(message: str, ctx: SpawnContext) -> Translation:
    return Translation(
        "Your server's container started; waiting for Jupyter to answer.", "container_started", PROGRESS_STARTED
    )


def _waiting_for_storage(message: str, ctx: SpawnContext) -> Translation:
    m = re.search(r'volume "([^"]*)"', message) or re.search(r"unmounted volumes=\[([^\]]*)\]", message)
    vol = f" {m.group(1)}" if m else ""
    return Translation(
        f"Waiting for the storage volume{vol} to be attached to the node; Kubernetes is retrying.",
        "waiting_for_storage",
        PROGRESS_SCHEDULED,
    )


def _sandbox_failed(message: str, ctx: SpawnContext) -> Translation:
    if re.search(r'no runtime for "?nvidia"? is configured', message):
        return Translation(
            "The node has no NVIDIA container runtime configured yet (the GPU Operator may still be "
            "installing it); Kubernetes is retrying.",
            "gpu_runtime_missing",
            PROGRESS_SCHEDULED,
        )
    return Translation(
        f"The node could not set up the server's sandbox (network or runtime); Kubernetes is retrying "
        f"({message}).",
        "sandbox_failed",
        PROGRESS_SCHEDULED,
    )


def _admission(reason: str, message: str, ctx: SpawnContext) -> Translation:
    if reason == "UnexpectedAdmissionError":
        why = (
            f"the node's GPU device plugin could not hand out {_n(ctx.gpus, 'GPU')} ({message}); "
            "a GPU may have failed or the device plugin restarted. Start the server again"
        )
        kind = "gpu_allocation_failed"
    else:
        resource = reason[len("OutOf"):] or "a resource"
        why = (
            f"the node ran out of {resource} when the server arrived ({message}); "
            "Kubernetes does not retry such a pod. Start the server again"
        )
        kind = "node_out_of_resource"
    return Translation(f"Cannot start: {why}.", kind, fatal=True, reason=why)


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------

Handler = Callable[[str, SpawnContext], "Translation | None"]

#: Event reason -> what it means for the spawn.  The kubelet's admission refusals
#: (``OutOf<resource>`` is open-ended) are found by :func:`scheduler_messages.is_admission_failure`.
_HANDLERS: dict[str, Handler] = {
    # kube-scheduler (and Karpenter's FailedScheduling)
    "FailedScheduling": _on_failed_scheduling,
    "Scheduled": _scheduled,
    "Preempted": _preempted,
    # cluster autoscaler and Karpenter
    "TriggeredScaleUp": _triggered_scale_up,
    "NotTriggerScaleUp": _no_scale_up,
    "FailedScaling": _scale_up_failed,
    "FailedScaleUp": _scale_up_failed,
    "FailedToScaleUpGroup": _scale_up_failed,
    "Nominated": _nominated,
    # kubelet
    "Pulling": _pulling,
    "Pulled": _pulled,
    "Failed": _container_failed,
    "InspectFailed": _image_unusable,
    "ErrImageNeverPull": _image_unusable,
    "BackOff": _back_off,
    "Created": _created,
    "Started": _started,
    "FailedMount": _waiting_for_storage,
    "FailedAttachVolume": _waiting_for_storage,
    "FailedCreatePodSandBox": _sandbox_failed,
}


def translate(event: Any, ctx: SpawnContext) -> Translation | None:
    """Translate one core/v1 Event of the spawning pod.

    None when gpuspawner has nothing to add (the spawner then shows the event
    as KubeSpawner does).  Never raises on odd events: cluster objects are
    input, and a malformed one is just not translated.
    """
    if not isinstance(event, Mapping):
        return None
    reason = event.get("reason")
    message = event.get("message")
    if not isinstance(reason, str) or not isinstance(message, str):
        return None
    message = message.strip()
    handler = _HANDLERS.get(reason)
    if handler is not None:
        return handler(message, ctx)
    if is_admission_failure(reason):
        return _admission(reason, message, ctx)
    return None


def rewrite_progress_event(item: Any, ctx: SpawnContext) -> tuple[dict[str, Any], Translation | None]:
    """Rewrite one item that ``KubeSpawner.progress`` yields
    (``{"progress": int, "message": str, "raw_event": <Event dict>}``,
    kubespawner/spawner.py) with :func:`translate`.

    Returns the item to yield (a new dict; the raw event is kept for
    JupyterHub's event log) and the translation, or the item unchanged and
    None when there is nothing to translate (KubeSpawner's "slow spawn"
    notices carry no ``raw_event``).  The progress never goes backwards.
    """
    if not isinstance(item, Mapping):
        return {"message": str(item)}, None
    out = dict(item)
    t = translate(item.get("raw_event"), ctx)
    if t is None:
        return out, None
    out["message"] = t.message
    current = item.get("progress")
    if t.progress is not None:
        out["progress"] = max(t.progress, current) if isinstance(current, int) else t.progress
    return out, t


def _failed_pod(status: Mapping[str, Any], ctx: SpawnContext) -> Translation | None:
    reason, message = status.get("reason") or "", status.get("message") or ""
    if not isinstance(reason, str) or not isinstance(message, str):
        return None
    if is_admission_failure(reason):
        return _admission(reason, message, ctx)
    why = f"the pod failed ({reason or 'no reason given'}: {message or 'no message'}); start the server again"
    return Translation(f"Cannot start: {why}.", "pod_failed", fatal=True, reason=why)


def _not_scheduled(cond: Mapping[str, Any], ctx: SpawnContext) -> Translation | None:
    if cond.get("reason") == "SchedulingGated":
        return Translation(
            f"Waiting in a queue for pool {ctx.label} (the pod is held by a scheduling gate); {_queue(ctx)}.",
            "queued",
            PROGRESS_SCHEDULING,
        )
    message = cond.get("message")
    if isinstance(message, str) and message:
        return translate({"reason": "FailedScheduling", "message": message}, ctx)
    return None


def _waiting_container(cs: Mapping[str, Any], reason: str, message: str, ctx: SpawnContext) -> Translation | None:
    if reason in ("ErrImagePull", "ImagePullBackOff"):
        image = cs.get("image") if isinstance(cs.get("image"), str) else "the server image"
        text = message
        if not message.startswith("Failed to pull image"):
            text = f'Failed to pull image "{image}": {message}'
        return _pull_failed(text, ctx)
    if reason in ("CreateContainerError", "RunContainerError", "StartError", "CrashLoopBackOff"):
        return _container_failed(message, ctx)
    return None


def translate_pod(pod: Any, ctx: SpawnContext) -> Translation | None:
    """Translate the pod's own state (for when its events were missed or are
    aggregated): a ``Failed`` phase, the ``PodScheduled`` condition, the
    first container that waits with a reason.  None when it says nothing new."""
    if not isinstance(pod, Mapping) or not isinstance(pod.get("status"), Mapping):
        return None
    status = pod["status"]
    if status.get("phase") == "Failed":
        t = _failed_pod(status, ctx)
        if t is not None:
            return t
    cond = objects.condition(pod, "PodScheduled")
    if cond is not None and cond.get("status") == "False":
        t = _not_scheduled(cond, ctx)
        if t is not None:
            return t
    for cs, reason, message in objects.waiting_containers(pod):
        t = _waiting_container(cs, reason, message, ctx)
        if t is not None:
            return t
    return None
