"""The kubelet side of the agent's nodes: pods bound to them, run by the simulated kubelet.

``AgentKubelet`` is ``testcluster.node.kubelet.Kubelet`` reading and writing through an
``ApiStore``; a container with no command (no image here to give it an entrypoint) is Running
with no process behind it, which costs nothing.  ``PodFeed`` hands it the pods the informer
sees, each new pod only after what it needs is in the caches (a real kubelet GETs what its
watches have not shown yet): its ConfigMaps, Secrets, ServiceAccount, claims and volumes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable

from testcluster.node.kubelet import Kubelet

from .apistore import ApiStore
from .client import KNOWN, ApiError, Client, path_for
from .informer import Informer, key_of

log = logging.getLogger(__name__)

TERMINAL = ("Succeeded", "Failed")


class AgentKubelet(Kubelet):
    """The simulated kubelet of every node of the agent."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tokens: dict[tuple[str, str], str] = {}  # (pod uid, audience) -> a token of the TokenRequest API

    def service_account_token(self, pod: dict, sa: dict, node: str, audience: str | None, expiration: int) -> str:
        got = self.tokens.get(((pod.get("metadata") or {}).get("uid") or "", audience or ""))
        return got or super().service_account_token(pod, sa, node, audience, expiration)

    def runs_processes(self, pod: dict) -> bool:
        if not self.run_pods:
            return False
        spec = pod.get("spec") or {}
        return any(c.get("command") or c.get("args")
                   for c in (spec.get("containers") or []) + (spec.get("initContainers") or []))


def token_sources(pod: dict[str, Any]) -> list[tuple[str, int]]:
    """(audience, expirationSeconds) of each projected ``serviceAccountToken`` source.  Pure."""
    out = []
    for v in (pod.get("spec") or {}).get("volumes") or []:
        for src in (v.get("projected") or {}).get("sources") or []:
            tp = src.get("serviceAccountToken")
            if tp is not None:
                out.append((str(tp.get("audience") or ""), int(tp.get("expirationSeconds") or 3600)))
    return out


def references(pod: dict[str, Any]) -> dict[str, set[str]]:
    """The objects of the pod's namespace it needs to start: plural -> names.  Pure."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    out: dict[str, set[str]] = {p: set() for p in ("configmaps", "secrets", "serviceaccounts",
                                                   "persistentvolumeclaims", "resourceclaims")}
    for v in spec.get("volumes") or []:
        if (v.get("configMap") or {}).get("name"):
            out["configmaps"].add(v["configMap"]["name"])
        if (v.get("secret") or {}).get("secretName"):
            out["secrets"].add(v["secret"]["secretName"])
        if (v.get("persistentVolumeClaim") or {}).get("claimName"):
            out["persistentvolumeclaims"].add(v["persistentVolumeClaim"]["claimName"])
        for src in (v.get("projected") or {}).get("sources") or []:
            if (src.get("configMap") or {}).get("name"):
                out["configmaps"].add(src["configMap"]["name"])
            if (src.get("secret") or {}).get("name"):
                out["secrets"].add(src["secret"]["name"])
            if src.get("serviceAccountToken") is not None:
                out["serviceaccounts"].add(spec.get("serviceAccountName") or "default")
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for e in c.get("env") or []:
            vf = e.get("valueFrom") or {}
            if (vf.get("configMapKeyRef") or {}).get("name"):
                out["configmaps"].add(vf["configMapKeyRef"]["name"])
            if (vf.get("secretKeyRef") or {}).get("name"):
                out["secrets"].add(vf["secretKeyRef"]["name"])
        for ef in c.get("envFrom") or []:
            if (ef.get("configMapRef") or {}).get("name"):
                out["configmaps"].add(ef["configMapRef"]["name"])
            if (ef.get("secretRef") or {}).get("name"):
                out["secrets"].add(ef["secretRef"]["name"])
    for rc in spec.get("resourceClaims") or []:
        if rc.get("resourceClaimName"):
            out["resourceclaims"].add(rc["resourceClaimName"])
    for s in status.get("resourceClaimStatuses") or []:
        if s.get("resourceClaimName"):
            out["resourceclaims"].add(s["resourceClaimName"])
    ext = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if ext:
        out["resourceclaims"].add(ext)
    return {k: v for k, v in out.items() if v}


class PodFeed:
    """Pods bound to the agent's nodes, from the informer to the kubelet."""

    def __init__(self, client: Client, kubelet: Kubelet, store: ApiStore, caches: dict[str, Informer],
                 nodes: Iterable[str], concurrency: int = 16):
        self.client = client
        self.kubelet = kubelet
        self.store = store
        self.caches = caches
        self.nodes = set(nodes)
        self._pending: dict[str, tuple[str, dict]] = {}  # pods being prepared -> their newest event
        self._sem = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task] = set()

    def mine(self, pod: dict) -> bool:
        return (pod.get("spec") or {}).get("nodeName") in self.nodes

    def on_list(self, items: list[dict]) -> None:
        for p in items:
            self.on_event("ADDED", p)

    def on_event(self, kind: str, pod: dict) -> None:
        key = key_of(pod)
        if kind == "DELETED" and isinstance(self.kubelet, AgentKubelet):
            uid = (pod.get("metadata") or {}).get("uid")
            for k in [k for k in self.kubelet.tokens if k[0] == uid]:
                del self.kubelet.tokens[k]
        if key in self._pending:
            self._pending[key] = (kind, pod)
            return
        k = self.kubelet
        new = (kind != "DELETED" and key not in k.workers and key not in k.static
               and not (pod.get("metadata") or {}).get("deletionTimestamp")
               and (pod.get("status") or {}).get("phase") not in TERMINAL)
        if not new:
            k.pod_event(kind, pod)
            return
        self._pending[key] = (kind, pod)
        t = asyncio.ensure_future(self._prepare(key, pod))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _prepare(self, key: str, pod: dict) -> None:
        try:
            async with self._sem:
                await self.prefetch(pod)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the worker reports what is missing, as a kubelet does
            log.warning("preparing pod %s: %r", key, e)
        kind, latest = self._pending.pop(key)
        self.kubelet.pod_event(kind, latest)

    async def prefetch(self, pod: dict) -> None:
        ns = (pod.get("metadata") or {}).get("namespace") or "default"
        gets = []
        for plural, names in references(pod).items():
            for name in names:
                cache = self.caches.get(plural)
                if plural in ("configmaps", "secrets") and cache is not None and cache.get(name, ns) is not None:
                    continue  # watched: the cache is current
                gets.append(self._fetch(plural, name, ns))
        for audience, expiration in token_sources(pod):
            gets.append(self._token(pod, audience, expiration))
        await asyncio.gather(*gets)

    async def _token(self, pod: dict, audience: str, expiration: int) -> None:
        """A token bound to the pod, from the TokenRequest API, as the kubelet asks for it."""
        meta = pod["metadata"]
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"audiences": [audience] if audience else [], "expirationSeconds": expiration,
                         "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"],
                                            "uid": meta.get("uid")}}}
        path = path_for(KNOWN["ServiceAccount"], meta.get("namespace"), sa, "token")
        try:
            got = await self.client.request("POST", path, body=body)
        except ApiError as e:
            if e.code in (404, 405):  # an API server without the TokenRequest API
                return
            raise
        token = (got.get("status") or {}).get("token")
        if token and isinstance(self.kubelet, AgentKubelet):
            self.kubelet.tokens[(meta.get("uid") or "", audience)] = token

    async def _fetch(self, plural: str, name: str, ns: str | None) -> None:
        res = next(r for r in KNOWN.values() if r.plural == plural)
        try:
            obj = await self.client.get(res, name, namespace=ns if res.namespaced else None)
        except ApiError as e:
            if e.code == 404:
                return
            raise
        cache = self.caches.get(plural)
        if cache is not None:
            cache.put(obj)
        else:
            self.store.fetched.setdefault(plural, {})[(ns if res.namespaced else None, name)] = obj
        if plural == "persistentvolumeclaims" and (obj.get("spec") or {}).get("volumeName"):
            await self._fetch("persistentvolumes", obj["spec"]["volumeName"], None)

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
