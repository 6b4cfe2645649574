"""The scheduler's DynamicResources plugin (``pkg/scheduler/framework/plugins/dynamicresources``).
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from testcluster.node.controller import MERGE, informer, pod_key
from ..plugins import Status
from testcluster.node.pod_resources import container_requests, pod_requests
from . import api
from .allocator import AllocationError, SelectorCache, allocate, allocated_devices
from .pools import node_selector_matches

log = logging.getLogger(__name__)

PLUGIN = "DynamicResources"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
IN_USE = "resourceclaim in use"
NO_CLAIMS = "no new claims to deallocate"
STILL_NOT = "still not schedulable"
DEALLOCATED = "deallocation of ResourceClaim completed"
SPECIAL_CLAIM = "<extended-resources>"


class SchedulerError(Exception):
    """A filter error (not a rejection): the attempt fails with reason SchedulerError."""


@dataclass
class Cycle:
    """The plugin's CycleState for one pod."""

    pod: Mapping[str, Any]
    claims: list[dict[str, Any]] = field(default_factory=list)  # user claims, in spec order
    extended: dict[str, int] = field(default_factory=dict)  # DRA-backable extended resource -> count
    unavailable: set[int] = field(default_factory=set)
    allocations: dict[str, tuple[list[dict[str, Any]], dict[str, Any] | None]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.claims and not self.extended


def claim_name(pod: Mapping[str, Any], pod_claim: Mapping[str, Any]) -> tuple[str | None, bool]:
    """``resourceclaim.Name``: (name, must check owner); ValueError when not created yet."""
    if pod_claim.get("resourceClaimName"):
        return pod_claim["resourceClaimName"], False
    if pod_claim.get("resourceClaimTemplateName"):
        for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if st.get("name") == pod_claim.get("name"):
                return st.get("resourceClaimName"), True
        meta = pod.get("metadata") or {}
        raise ValueError(f'pod "{meta.get("namespace")}/{meta.get("name")}": ResourceClaim not created yet')
    meta = pod.get("metadata") or {}
    raise ValueError(f'pod "{meta.get("namespace")}/{meta.get("name")}", spec.resourceClaim '
                     f'"{pod_claim.get("name")}": none of the supported fields are set')


def is_controlled_by(obj: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    uid = (pod.get("metadata") or {}).get("uid")
    return any(r.get("controller") and r.get("uid") == uid for r in (obj.get("metadata") or {}).get("ownerReferences")
               or [])


def reserved_for(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    uid = (pod.get("metadata") or {}).get("uid")
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])


def class_mapping(classes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name -> DeviceClass (``extended.DeviceClassMapping``); an explicit
    ``extendedResourceName`` wins over the implicit one, the newest class over older ones."""
    out: dict[str, str] = {}
    for name, cls in sorted(classes.items(), key=lambda kv: (kv[1].get("metadata") or {}).get("creationTimestamp", "")):
        out.setdefault(api.IMPLICIT_EXTENDED_RESOURCE_PREFIX + name, name)
        ext = (cls.get("spec") or {}).get("extendedResourceName")
        if ext:
            out[ext] = name
    return out


class DynamicResources:
    """The plugin with its caches; ``on_change`` moves parked pods back to the active queue."""

    def __init__(self, store, on_change: Callable[[], None] = lambda: None):
        self.store = store
        self.on_change = on_change
        self.claims: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.selectors = SelectorCache()
        # Reserve's pending allocations, per pod key: claims as PreBind will write them
        self.in_flight: dict[str, list[dict[str, Any]]] = {}
        self.synced = [asyncio.Event() for _ in range(3)]

    # -- informers (the scheduler's shared informer factory) --

    def informers(self, stopping: asyncio.Event) -> list[Any]:
        """The coroutines that keep the caches; the scheduler runs them as tasks."""
        return [informer(self.store, plural, self._lister(cache), self._handler(cache), stopping, synced)
                for plural, cache, synced in ((api.RESOURCE_CLAIMS, self.claims, self.synced[0]),
                                              (api.RESOURCE_SLICES, self.slices, self.synced[1]),
                                              (api.DEVICE_CLASSES, self.classes, self.synced[2]))]

    def _lister(self, cache: dict[str, dict[str, Any]]) -> Callable[[list[dict]], None]:
        def on_list(items: list[dict]) -> None:
            cache.clear()
            for o in items:
                cache[pod_key(o) if (o.get("metadata") or {}).get("namespace") else o["metadata"]["name"]] = o
            self.on_change()
        return on_list

    def _handler(self, cache: dict[str, dict[str, Any]]) -> Callable[[str, dict], None]:
        def on_event(kind: str, obj: dict) -> None:
            meta = obj.get("metadata") or {}
            key = pod_key(obj) if meta.get("namespace") else meta["name"]
            if kind == "DELETED":
                cache.pop(key, None)
            else:
                old = cache.get(key)
                # the assume cache: never go back to an older version than one we wrote
                if old is None or int(meta.get("resourceVersion") or 0) >= \
                        int((old.get("metadata") or {}).get("resourceVersion") or 0):
                    cache[key] = obj
            self.on_change()
        return on_event

    def _assume(self, claim: dict[str, Any]) -> None:
        self.claims[pod_key(claim)] = claim

    # -- PreEnqueue / PreFilter --

    def pod_claims(self, pod: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``foreachPodResourceClaim``; ValueError with the real message when one is missing."""
        ns = (pod.get("metadata") or {}).get("namespace")
        out = []
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            name, check_owner = claim_name(pod, pc)
            if name is None:
                continue
            claim = self.claims.get(f"{ns}/{name}")
            if claim is None:
                raise ValueError(f'resourceclaim.resource.k8s.io "{name}" not found')
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                raise ValueError(f'resourceclaim "{name}" is being deleted')
            if check_owner and not is_controlled_by(claim, pod):
                raise ValueError(f"ResourceClaim {ns}/{name} was not created for pod {ns}/"
                                 f"{pod['metadata']['name']} (pod is not owner)")
            out.append(claim)
        return out

    def pre_enqueue(self, pod: Mapping[str, Any]) -> str | None:
        try:
            self.pod_claims(pod)
        except ValueError as e:
            return str(e)
        return None

    def backed_resources(self) -> dict[str, str]:
        return class_mapping(self.classes)

    def pre_filter(self, pod: Mapping[str, Any]) -> Cycle | str:
        """A :class:`Cycle`, or the UnschedulableAndUnresolvable message."""
        try:
            claims = self.pod_claims(pod)
        except ValueError as e:
            return str(e)
        cycle = Cycle(pod, claims)
        mapping = self.backed_resources()
        cycle.extended = {r: n for r, n in pod_requests(pod).items() if r in mapping and n > 0}
        for claim in claims:
            status = claim.get("status") or {}
            if status.get("allocation"):
                if len(status.get("reservedFor") or []) >= api.RESERVED_FOR_MAX and not reserved_for(claim, pod):
                    return IN_USE
                continue
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                for name, cls in self._request_classes(req):
                    if cls not in self.classes:
                        return f"request {name}: device class {cls} does not exist"
        return cycle

    @staticmethod
    def _request_classes(req: Mapping[str, Any]) -> list[tuple[str, str]]:
        if req.get("firstAvailable"):
            return [(f"{req['name']}/{s.get('name')}", s.get("deviceClassName", "")) for s in req["firstAvailable"]]
        return [(req.get("name", ""), (req.get("exactly") or {}).get("deviceClassName", ""))]

    # -- Filter --

    def filter(self, cycle: Cycle, node: Mapping[str, Any]) -> str | None:
        """None when the pod's claims fit ``node``; else the rejection (``SchedulerError`` on errors)."""
        if cycle.empty:
            return None
        special = self._extended_claim(cycle, node)
        if special is None and not cycle.claims:
            return None
        to_allocate: list[dict[str, Any]] = []
        for i, claim in enumerate(cycle.claims):
            alloc = (claim.get("status") or {}).get("allocation")
            if alloc:
                if alloc.get("nodeSelector") and not node_selector_matches(alloc["nodeSelector"], node):
                    cycle.unavailable.add(i)
                    return NOT_AVAILABLE
            else:
                to_allocate.append(claim)
        if special is not None:
            to_allocate.append(special)
        if not to_allocate:
            cycle.allocations[node["metadata"]["name"]] = ([], None)
            return None
        try:
            results = allocate(to_allocate, node, list(self.slices.values()), self.classes,
                               allocated_devices(self._holding_claims()), self.selectors)
        except AllocationError as e:
            raise SchedulerError(f'running "{PLUGIN}" filter plugin: {e}') from None
        if results is None:
            return CANNOT_ALLOCATE
        cycle.allocations[node["metadata"]["name"]] = (results, special)
        return None

    def _extended_claim(self, cycle: Cycle, node: Mapping[str, Any]) -> dict[str, Any] | None:
        """``filterExtendedResources``: the special claim for what the node's allocatable lacks."""
        if not cycle.extended:
            return None
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        wanted = {r: n for r, n in cycle.extended.items() if r not in allocatable}
        if not wanted:
            return None
        pod = cycle.pod
        meta = pod["metadata"]
        return {
            "apiVersion": api.API_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": SPECIAL_CLAIM, "namespace": meta.get("namespace"),
                         "generateName": f"{meta['name']}-extended-resources-",
                         "ownerReferences": [_owner(pod)],
                         "annotations": {api.EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}},
            "spec": {"devices": {"requests": self._extended_requests(pod, wanted)}},
        }

    def _extended_requests(self, pod: Mapping[str, Any], wanted: Mapping[str, int]) -> list[dict[str, Any]]:
        """``createDeviceRequests``: one request per (container, resource), named
        ``container-<index in init+app containers>-request-<index in its sorted requests>``."""
        mapping = self.backed_resources()
        spec = pod.get("spec") or {}
        containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
        out = []
        for resource in sorted(wanted):
            for i, c in enumerate(containers):
                reqs = container_requests(c)
                count = reqs.get(resource, 0)
                if count <= 0:
                    continue
                names = sorted(((c.get("resources") or {}).get("requests") or {}))
                j = names.index(resource) if resource in names else 0
                out.append({"name": f"container-{i}-request-{j}",
                            "exactly": {"deviceClassName": mapping[resource], "allocationMode": api.EXACT_COUNT,
                                        "count": int(count)}})
        return out

    # -- PostFilter --

    def post_filter(self, cycle: Cycle | None) -> str:
        if cycle is None or cycle.empty:
            return NO_CLAIMS
        uid = (cycle.pod.get("metadata") or {}).get("uid")
        for i in sorted(cycle.unavailable):
            claim = cycle.claims[i]
            users = (claim.get("status") or {}).get("reservedFor") or []
            if not users or (len(users) == 1 and users[0].get("uid") == uid):
                status = {k: v for k, v in (claim.get("status") or {}).items()
                          if k not in ("allocation", "reservedFor", "devices")}
                self._assume(self.store.replace(api.RESOURCE_CLAIMS, claim["metadata"]["name"],
                                                dict(claim, status=status),
                                                namespace=claim["metadata"]["namespace"], subresource="status"))
                return DEALLOCATED
        return STILL_NOT

    # -- Reserve / Unreserve --

    def _holding_claims(self) -> list[dict[str, Any]]:
        """The claims whose allocations hold devices: written ones and Reserve's pending ones."""
        return list(self.claims.values()) + [c for claims in self.in_flight.values() for c in claims]

    @staticmethod
    def _to_allocate(cycle: Cycle, node: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(claim, the allocation Filter found on ``node``) for each claim still to allocate,
        the special claim for DRA-backed extended resources last."""
        results, special = cycle.allocations.get(node, ([], None))
        pending = [c for c in cycle.claims if not (c.get("status") or {}).get("allocation")]
        if special is not None:
            pending.append(special)
        return list(zip(pending, results))

    def reserve(self, cycle: Cycle, node: str) -> None:
        """Reserve: the devices chosen for ``node`` are taken until PreBind or Unreserve."""
        claims = [dict(c, status=dict(c.get("status") or {}, allocation=a)) for c, a in self._to_allocate(cycle, node)]
        if claims:
            self.in_flight[pod_key(cycle.pod)] = claims

    def unreserve(self, cycle: Cycle) -> None:
        self.in_flight.pop(pod_key(cycle.pod), None)

    # -- PreBind --

    def pre_bind(self, cycle: Cycle, node: str) -> None:
        """Write what Reserve decided: allocation and reservation of every claim, before binding.
        The pending allocations end here, written or not (``bindClaim``'s deferred cleanup)."""
        try:
            self._write_claims(cycle, node)
        finally:
            self.unreserve(cycle)

    def _write_claims(self, cycle: Cycle, node: str) -> None:
        if cycle.empty:
            return
        special = cycle.allocations.get(node, ([], None))[1]
        allocation_of = {id(c): a for c, a in self._to_allocate(cycle, node)}
        for claim in cycle.claims:
            if not reserved_for(claim, cycle.pod):
                self._bind_claim(claim, cycle.pod, allocation_of.get(id(claim)))
        if special is not None:
            body = dict(special, metadata={k: v for k, v in special["metadata"].items() if k != "name"})
            created = self.store.create(api.RESOURCE_CLAIMS, body, namespace=body["metadata"]["namespace"])
            self._assume(created)
            self._bind_claim(created, cycle.pod, allocation_of.get(id(special)))
            self._patch_extended_status(cycle.pod, created)

    def _bind_claim(self, claim: dict[str, Any], pod: Mapping[str, Any], allocation: dict | None) -> None:
        """``bindClaim``: the finalizer first (a normal update), then allocation and reservedFor."""
        ns, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        current = self.store.get(api.RESOURCE_CLAIMS, name, namespace=ns)
        if current["metadata"].get("deletionTimestamp"):
            raise SchedulerError(f"claim {ns}/{name} got deleted in the meantime")
        if allocation is not None:
            if (current.get("status") or {}).get("allocation"):
                raise SchedulerError(f"claim {ns}/{name} got allocated elsewhere in the meantime")
            finalizers = list(current["metadata"].get("finalizers") or [])
            if api.FINALIZER not in finalizers:
                current["metadata"]["finalizers"] = finalizers + [api.FINALIZER]
                current = self.store.replace(api.RESOURCE_CLAIMS, name, current, namespace=ns)
        status = dict(current.get("status") or {})
        if allocation is not None:
            status["allocation"] = allocation
        meta = pod["metadata"]
        status["reservedFor"] = list(status.get("reservedFor") or []) + [
            {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}]
        self._assume(self.store.replace(api.RESOURCE_CLAIMS, name, dict(current, status=status), namespace=ns,
                                        subresource="status"))

    def _patch_extended_status(self, pod: Mapping[str, Any], claim: Mapping[str, Any]) -> None:
        """``createRequestMappings`` into ``status.extendedResourceClaimStatus``."""
        spec = pod.get("spec") or {}
        containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
        names = {r["name"] for r in claim["spec"]["devices"]["requests"]}
        mappings = []
        for i, c in enumerate(containers):
            keys = sorted(((c.get("resources") or {}).get("requests") or {}))
            for j, resource in enumerate(keys):
                if f"container-{i}-request-{j}" in names:
                    mappings.append({"containerName": c.get("name"), "resourceName": resource,
                                     "requestName": f"container-{i}-request-{j}"})
        meta = pod["metadata"]
        self.store.patch("pods", meta["name"], {"status": {"extendedResourceClaimStatus": {
            "requestMappings": mappings, "resourceClaimName": claim["metadata"]["name"]}}}, MERGE,
            namespace=meta.get("namespace"), subresource="status")


@dataclass
class FilterStage:
    """The plugin for one pod as ``plugins.evaluate`` runs it (``plugins.CyclePlugin``):
    its PreFilter's verdict, then its Filter on each node that passed NodeResourcesFit and the
    volume plugins."""

    dra: DynamicResources
    cycle: Cycle | None  # None when PreFilter rejected the pod
    message: str | None = None  # that rejection
    plugin: str = PLUGIN

    @classmethod
    def pre_filter(cls, dra: DynamicResources, pod: Mapping[str, Any]) -> FilterStage:
        verdict = dra.pre_filter(pod)
        return cls(dra, None, verdict) if isinstance(verdict, str) else cls(dra, verdict)

    def filter(self, node: Mapping[str, Any]) -> Status | None:
        if self.cycle is None:
            return None
        reason = self.dra.filter(self.cycle, node)
        return None if reason is None else Status(PLUGIN, (reason,), True)

    def post_filter(self) -> str | None:
        """PostFilter's message (None for a pod without claims: the style decides)."""
        if self.cycle is None:
            return self.dra.post_filter(None)
        return None if self.cycle.empty else self.dra.post_filter(self.cycle)


def _owner(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"], "controller": True,
            "blockOwnerDeletion": True}
