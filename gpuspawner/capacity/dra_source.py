"""The DRA source of the capacity cache: discovery, three more informers, the DRA accounts of its ``Ledger``.
Design notes: docs/dra.md.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Awaitable, Callable

from gpuspawner.capacity import steps
from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import claim_record, class_record, dra_node, slice_record
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.capacity.model import PoolView
from gpuspawner.capacity.pod_requests import pod_key
from gpuspawner.kube.api_errors import DRA_GROUP, dra_missing_rules_message

log = logging.getLogger(__name__)

__all__ = ["DRA_KINDS", "DraSource"]

# kind -> the ResourceV1Api list method its informer calls
DRA_KINDS: dict[str, str] = {
    "resourceslices": "list_resource_slice",
    "resourceclaims": "list_resource_claim_for_all_namespaces",
    "deviceclasses": "list_device_class",
}

NOT_CHECKED, SERVED, NOT_SERVED, OFF = "not checked yet", "served", "not served", "off (no DRA drivers configured)"


class DraSource:
    """Discovery, informers and accounting of DRA GPUs for one capacity cache."""

    #: the kinds whose informers this source owns (their list methods); it also reads the device-plugin
    #: source's nodes (a DRA pool's node group) and pods (a reservation ends with its pod)
    kinds = DRA_KINDS
    reads: frozenset[str] = frozenset({*DRA_KINDS, "nodes", "pods"})

    def __init__(
        self,
        config: CapacityConfig,
        make_informer: Callable[[str, str], Any],
        resource_api: Callable[[], Awaitable[Any]],
        sleep: Callable[[float], Awaitable[None]],
        backoff: Callable[[int], float],
        *,
        on_change: Callable[[], None] = lambda: None,
        rediscover_after: float = 600.0,
        rediscover_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        request_timeout: float = 60.0,
    ) -> None:
        self.config = config
        self.accounts = DraAccounts()
        self.ledger = self.accounts.ledger
        self.api_state = NOT_CHECKED
        self.discovery_error: str | None = None
        self.informers: dict[str, Any] = {}
        self._make_informer = make_informer
        self._resource_api = resource_api
        self._sleep = sleep
        self._backoff = backoff
        self._on_change = on_change
        self._rediscover_after = rediscover_after
        self._rediscover_sleep = rediscover_sleep
        self._request_timeout = request_timeout
        self._served = asyncio.Event()

    # -- discovery -------------------------------------------------------------

    async def discover(self) -> None:
        """Find out whether ``resource.k8s.io/v1`` is served; once it is, create the informers
        (the caller starts their ``run``).  Re-checked every ``rediscover_after`` seconds while
        the group is absent (a cluster upgraded under a running hub); failures back off."""
        if not self.config.dra_drivers:
            self.api_state = OFF  # c.GPUSpawner.gpu_dra_drivers = []: nothing to count, nothing to watch
            self._on_change()
            return
        failures = 0
        while True:
            try:
                resources = await self._api_resources()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # network errors, 5xx: back off, as the informers do
                failures += 1
                self.discovery_error = f"{type(e).__name__}: {e}".strip()
                log.warning("capacity: discovering %s/v1 failed (%d in a row): %s", DRA_GROUP, failures,
                            self.discovery_error)
                await self._sleep(self._backoff(failures))
                continue
            failures, self.discovery_error = 0, None
            if resources is not None and all(k in resources for k in DRA_KINDS):
                self.api_state = SERVED
                self.informers = {k: self._make_informer(k, m) for k, m in DRA_KINDS.items()}
                self._served.set()
                self._on_change()
                log.info("capacity: the cluster serves %s/v1; counting DRA GPUs of drivers %s", DRA_GROUP,
                         ", ".join(self.config.dra_drivers))
                return
            if self.api_state != NOT_SERVED:
                log.info("capacity: the cluster does not serve %s/v1; only device-plugin GPUs are counted", DRA_GROUP)
            self.api_state = NOT_SERVED
            self._on_change()
            # not a failure: a slow re-check (its own wait, so it is no backoff step)
            await self._rediscover_sleep(self._rediscover_after)

    async def _api_resources(self) -> set[str] | None:
        """The resource names ``GET /apis/resource.k8s.io/v1`` lists; None on 404."""
        api = await self._resource_api()
        resp = await api.get_api_resources(_preload_content=False, _request_timeout=self._request_timeout)
        try:
            body = await resp.read()
        finally:
            resp.release()
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status} from GET /apis/{DRA_GROUP}/v1")
        doc = json.loads(body)
        return {r.get("name") for r in doc.get("resources") or () if isinstance(r, dict)}

    async def wait_served(self) -> None:
        await self._served.wait()

    # -- state -----------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self.api_state == SERVED and all(i.synced for i in self.informers.values())

    @property
    def may_serve(self) -> bool:
        """Whether DRA pools may exist: served, or not known yet (a node's images are kept meanwhile;
        once DRA is known absent, each node's next status report drops them)."""
        return self.api_state not in (NOT_SERVED, OFF)

    def settled(self) -> bool:
        """Nothing more to wait for before serving pools: DRA absent, synced, or forbidden."""
        if self.api_state in (NOT_SERVED, OFF):
            return True
        if self.api_state != SERVED:
            return False
        return all(i.synced or i.forbidden for i in self.informers.values())

    def pools(self) -> tuple[PoolView, ...]:
        """The DRA pools, once every DRA informer has listed (a partial view is never served)."""
        return self.ledger.pools() if self.synced else ()

    def error(self) -> str | None:
        forbidden = [k for k, i in self.informers.items() if i.forbidden]
        if forbidden:
            return dra_missing_rules_message(forbidden)
        errors = [f"{k}: {i.error}" for k, i in self.informers.items() if i.error]
        if self.discovery_error:
            errors.insert(0, f"discovery: {self.discovery_error}")
        return "; ".join(errors) or None

    def health(self) -> dict[str, Any]:
        return {
            "api": self.api_state,
            "synced": self.synced,
            "error": self.error(),
            "drivers": list(self.config.dra_drivers),
            "resource_slices": self.accounts.slice_count,
            "resource_claims": self.accounts.claim_count,
            "device_classes": self.accounts.class_count,
            "incomplete_pools": [f"{d}/{p}" for d, p in self.accounts.incomplete_pools()],
            "reservations": len(self.ledger.reservations()),
            "generation": self.ledger.generation,
            "informers": {k: i.health() for k, i in self.informers.items()},
        }

    # -- events (called by the informers) ----------------------------------------

    def apply(self, kind: str, obj: dict) -> str | None:
        """Record one listed or watched object; returns its key for the re-list's retain."""
        if kind == "pods":
            key = pod_key(obj)
            if key is not None:
                self.pod_changed(key, obj)
            return None
        meta = obj.get("metadata") or {}
        if kind == "nodes":
            rec = dra_node(obj, self.config.node_group_labels, self.config.is_gpu_resource,
                           self.config.tolerated_taint_keys)
            if rec is not None:
                self.accounts.upsert_node(rec)
            return rec.name if rec is not None else None
        if kind == "resourceslices":
            rec = slice_record(obj, self.config.dra_drivers)
            if rec is None:  # another driver's slice (or unreadable): not counted
                if meta.get("name"):
                    self.accounts.remove_slice(meta["name"])
                return None
            self.accounts.upsert_slice(rec)
            return rec.name
        if kind == "resourceclaims":
            claim = claim_record(obj)
            if claim is not None:
                self.accounts.upsert_claim(claim)
            return claim.key if claim is not None else None
        cls = class_record(obj)
        if cls is not None:
            self.accounts.upsert_class(cls)
        return cls.name if cls is not None else None

    def remove(self, kind: str, obj: dict) -> None:
        if kind == "pods":
            key = pod_key(obj)
            if key is not None:
                self.pod_gone(key)
            return
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            return
        if kind == "nodes":
            self.accounts.remove_node(name)
        elif kind == "resourceslices":
            self.accounts.remove_slice(name)
        elif kind == "resourceclaims":
            self.accounts.remove_claim(f"{meta.get('namespace') or 'default'}/{name}")
        else:
            self.accounts.remove_class(name)

    def retain_steps(self, kind: str, keep: set[str]) -> steps.Steps[int]:
        """``retain`` as steps: one, its work is per node, slice, claim and class."""
        return steps.of(self.retain(kind, keep))

    def retain(self, kind: str, keep: set[str]) -> int:
        if kind == "pods":
            return 0  # nothing kept per pod: a reservation ends when its pod does
        return {
            "nodes": self.accounts.retain_nodes,
            "resourceslices": self.accounts.retain_slices,
            "resourceclaims": self.accounts.retain_claims,
            "deviceclasses": self.accounts.retain_classes,
        }[kind](keep)

    def pod_changed(self, key: str, obj: dict) -> None:
        """A pod's DRA reservation ends when the pod has ended."""
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self.ledger.release(key)

    def pod_gone(self, key: str) -> None:
        self.ledger.release(key)
