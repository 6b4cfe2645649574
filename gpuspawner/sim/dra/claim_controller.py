"""The resource claim controller (``pkg/controller/resourceclaim/controller.go``).
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Mapping

from testcluster.node.controller import MERGE, TERMINAL, EventRecorder, Tasks, code_of, informer, pod_key
from . import api
from .plugin import claim_name, is_controlled_by

log = logging.getLogger(__name__)

COMPONENT = "resource_claim"  # the controller's event source (controller-manager's name for it)
MAX_BASE = 57


def generate_name(pod_name: str, claim: str) -> str:
    """``<pod>-<claim>-``; when longer than 57, both parts are cut in proportion."""
    base = f"{pod_name}-{claim}-"
    if len(base) <= MAX_BASE:
        return base
    n = len(base)
    return pod_name[:len(pod_name) * MAX_BASE // n] + "-" + claim[:len(claim) * MAX_BASE // n]


def claim_from_template(pod: Mapping[str, Any], pod_claim: str, template: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    tmeta = ((template.get("spec") or {}).get("metadata")) or {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[api.POD_CLAIM_NAME_ANNOTATION] = pod_claim
    out_meta: dict[str, Any] = {
        "generateName": generate_name(meta["name"], pod_claim),
        "namespace": meta.get("namespace"),
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                             "controller": True, "blockOwnerDeletion": True}],
        "annotations": annotations,
    }
    if tmeta.get("labels"):
        out_meta["labels"] = dict(tmeta["labels"])
    return {"apiVersion": api.API_VERSION, "kind": "ResourceClaim", "metadata": out_meta,
            "spec": dict((template.get("spec") or {}).get("spec") or {})}


def is_pod_done(pod: Mapping[str, Any]) -> bool:
    """``isPodDone``: terminal, or deleted before it was scheduled."""
    return (pod.get("status") or {}).get("phase") in TERMINAL or bool(
        (pod.get("metadata") or {}).get("deletionTimestamp") and not (pod.get("spec") or {}).get("nodeName"))


def owning_pod(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    for ref in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and ref.get("apiVersion") == "v1" and ref.get("kind") == "Pod":
            return ref.get("name", ""), ref.get("uid", "")
    return None


class ResourceClaimController:
    """Watches pods, claims and templates; one work queue of ``pod:`` and ``claim:`` keys."""

    RETRY = 1.0

    def __init__(self, store):
        self.store = store
        self.recorder = EventRecorder(store, COMPONENT)
        self.pods: dict[str, dict[str, Any]] = {}  # only pods with resourceClaims
        self.claims: dict[str, dict[str, Any]] = {}
        self._queue: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self.synced = asyncio.Event()

    # -- informers --

    def _enqueue(self, key: str) -> None:
        self._queue[key] = None
        self._wake.set()

    def _pod_list(self, items: list[dict]) -> None:
        self.pods = {pod_key(p): p for p in items if (p.get("spec") or {}).get("resourceClaims")}
        for k in self.pods:
            self._enqueue("pod:" + k)

    def _pod_event(self, kind: str, pod: dict) -> None:
        key = pod_key(pod)
        if kind == "DELETED" or not (pod.get("spec") or {}).get("resourceClaims"):
            if self.pods.pop(key, None) is None and kind != "DELETED":
                return
        else:
            self.pods[key] = pod
            self._enqueue("pod:" + key)
        uid = (pod.get("metadata") or {}).get("uid")
        for ck, claim in self.claims.items():
            owner = owning_pod(claim)
            if (owner and owner[1] == uid) or any(r.get("uid") == uid for r in
                                                  (claim.get("status") or {}).get("reservedFor") or []):
                self._enqueue("claim:" + ck)

    def _claim_list(self, items: list[dict]) -> None:
        self.claims = {pod_key(c): c for c in items}
        for k in self.claims:
            self._enqueue("claim:" + k)

    def _claim_event(self, kind: str, claim: dict) -> None:
        key = pod_key(claim)
        if kind == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = claim
            self._enqueue("claim:" + key)
        owner = owning_pod(claim)
        if owner:
            self._enqueue(f"pod:{claim['metadata'].get('namespace')}/{owner[0]}")

    def _template_event(self, kind: str, template: dict) -> None:
        ns = (template.get("metadata") or {}).get("namespace")
        for k in self.pods:
            if k.startswith(f"{ns}/"):
                self._enqueue("pod:" + k)

    # -- lifecycle --

    async def start(self) -> None:
        pods_synced, claims_synced = asyncio.Event(), asyncio.Event()
        self._tasks.start(informer(self.store, api.RESOURCE_CLAIMS, self._claim_list, self._claim_event,
                                   self._stopping, claims_synced), "claims-claims")
        self._tasks.start(informer(self.store, api.RESOURCE_CLAIM_TEMPLATES, lambda items: None,
                                   self._template_event, self._stopping), "claims-templates")
        await asyncio.wait_for(claims_synced.wait(), 60)
        self._tasks.start(informer(self.store, "pods", self._pod_list, self._pod_event, self._stopping,
                                   pods_synced), "claims-pods")
        await asyncio.wait_for(pods_synced.wait(), 60)
        self._tasks.start(self._run(), "claims-loop")
        self.synced.set()

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        await self._tasks.stop()

    async def _run(self) -> None:
        while not self._stopping.is_set():
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            key = next(iter(self._queue))
            del self._queue[key]
            try:
                self.sync(key)
            except Exception as e:  # one object must not stop the controller: retry it later
                log.warning("resource claim controller: %s: %s", key, e)
                asyncio.get_running_loop().call_later(self.RETRY, self._enqueue, key)
            await asyncio.sleep(0)

    def sync(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        ns, _, name = rest.partition("/")
        if kind == "pod":
            self.sync_pod(ns, name)
        else:
            self.sync_claim(ns, name)

    # -- pods --

    def _get(self, plural: str, name: str, ns: str) -> dict[str, Any] | None:
        try:
            return self.store.get(plural, name, namespace=ns)
        except Exception as e:
            if code_of(e) == 404:
                return None
            raise

    def sync_pod(self, ns: str, name: str) -> None:
        pod = self._get("pods", name, ns)
        if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        created: dict[str, str] = {}
        for pc in (pod.get("spec") or {}).get("resourceClaims") or []:
            try:
                made = self._handle_claim(pod, pc)
            except _TemplateMissing as e:
                self.recorder.emit(pod, "Warning", "FailedResourceClaimCreation",
                                   f"PodResourceClaim {pc.get('name')}: {e}")
                raise
            if made:
                created[pc["name"]] = made
        if created:
            statuses = [s for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
                        if s.get("name") not in created]
            statuses += [{"name": k, "resourceClaimName": v} for k, v in created.items()]
            self.store.patch("pods", name, {"status": {"resourceClaimStatuses": statuses}}, MERGE,
                             namespace=ns, subresource="status")

    def _handle_claim(self, pod: dict[str, Any], pc: Mapping[str, Any]) -> str | None:
        """The generated claim's name when one had to be created or adopted, else None."""
        ns = pod["metadata"].get("namespace")
        try:
            name, check_owner = claim_name(pod, pc)
        except ValueError:
            name, check_owner = "", True  # not created yet
        if name:
            existing = self.claims.get(f"{ns}/{name}") or self._get(api.RESOURCE_CLAIMS, name, ns)
            if existing is not None and (not check_owner or is_controlled_by(existing, pod)):
                return None
        template_name = pc.get("resourceClaimTemplateName")
        if not template_name:
            return None
        orphan = next((c for c in self.claims.values() if c["metadata"].get("namespace") == ns
                       and is_controlled_by(c, pod)
                       and (c["metadata"].get("annotations") or {}).get(api.POD_CLAIM_NAME_ANNOTATION) == pc["name"]),
                      None)
        if orphan is not None:
            return orphan["metadata"]["name"]
        template = self._get(api.RESOURCE_CLAIM_TEMPLATES, template_name, ns)
        if template is None:
            raise _TemplateMissing(f'resource claim template "{template_name}": resourceclaimtemplate.resource.k8s.io '
                                   f'"{template_name}" not found')
        claim = self.store.create(api.RESOURCE_CLAIMS, claim_from_template(pod, pc["name"], template), namespace=ns)
        self.claims[pod_key(claim)] = claim
        return claim["metadata"]["name"]

    # -- claims --

    def _valid_reservations(self, claim: Mapping[str, Any]) -> list[dict[str, Any]]:
        ns = claim["metadata"].get("namespace")
        valid = []
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("apiGroup") or ref.get("resource") != "pods":
                valid.append(ref)
                continue
            pod = self._get("pods", ref.get("name", ""), ns)
            if pod is None or pod["metadata"].get("uid") != ref.get("uid") or is_pod_done(pod):
                continue
            valid.append(ref)
        return valid

    def sync_claim(self, ns: str, name: str) -> None:
        claim = self._get(api.RESOURCE_CLAIMS, name, ns)
        if claim is None:
            return
        valid = self._valid_reservations(claim)
        status = dict(claim.get("status") or {})
        finalizers = list(claim["metadata"].get("finalizers") or [])
        has_finalizer = api.FINALIZER in finalizers
        if len(valid) < len(status.get("reservedFor") or []) or (
                has_finalizer and claim["metadata"].get("deletionTimestamp") and not valid):
            status["reservedFor"] = valid
            if not valid and has_finalizer:
                status.pop("allocation", None)
                status.pop("devices", None)
            if not status["reservedFor"]:
                status.pop("reservedFor")
            claim = self.store.replace(api.RESOURCE_CLAIMS, name, dict(claim, status=status), namespace=ns,
                                       subresource="status")
            if has_finalizer and not status.get("allocation"):
                claim["metadata"]["finalizers"] = [f for f in finalizers if f != api.FINALIZER]
                claim = self.store.replace(api.RESOURCE_CLAIMS, name, claim, namespace=ns)
        if not valid:
            self._delete_if_unneeded(claim)

    def _delete_if_unneeded(self, claim: Mapping[str, Any]) -> None:
        owner = owning_pod(claim)
        if owner is None or (claim.get("metadata") or {}).get("deletionTimestamp"):
            return
        ns, name = claim["metadata"].get("namespace"), claim["metadata"]["name"]
        pod = self._get("pods", owner[0], ns)
        if pod is None:
            return  # "let the garbage collector handle the case that the pod is truly gone"
        if pod["metadata"].get("uid") != owner[1] or is_pod_done(pod):
            try:
                self.store.delete(api.RESOURCE_CLAIMS, name, namespace=ns)
            except Exception as e:
                if code_of(e) != 404:  # deleted meanwhile (by the garbage collector): nothing to do
                    raise


class _TemplateMissing(Exception):
    pass
