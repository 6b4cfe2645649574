"""Objects on the session's control plane, read by capacity caches through the fault proxy (its injected
answers, stalls, refused connections, cut watches and request counts); written by the admin directly,
so the proxy counts only what the caches ask."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any, AsyncIterator

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.config import CapacityConfig
from testcluster.faultproxy import FaultProxy
from testcluster.node.loader import KINDS
from testcluster.nodeagent.client import ApiError, Client, Resource, path_for

BY_PLURAL = {k.plural: (kind, k) for kind, k in KINDS.items()}
NAMESPACE = "jhub"


class ProxiedCluster:
    """``create``/``patch``/``delete`` as the admin; ``make_cache(config, **kw)`` a started cache
    through ``proxy``; everything created is deleted again on exit."""

    def __init__(self, kubeconfig: str, proxy: FaultProxy, client: Client):
        self.kubeconfig = kubeconfig
        self.proxy = proxy
        self.client = client
        self.caches: list[CapacityCache] = []
        self.created: list[tuple[Resource, str, str | None]] = []
        self._conf: k8s.Configuration | None = None

    async def resource(self, plural: str) -> Resource:
        kind, k = BY_PLURAL[plural]
        return await self.client.resource(k.api_version, kind)

    async def create(self, plural: str, obj: dict, namespace: str | None = None, *, status: bool = False) -> dict:
        """Create ``obj``; ``status``: then write its status as its controller does (``/status``)."""
        res = await self.resource(plural)
        body = {k: v for k, v in obj.items() if k != "status"} if status else obj
        made = await self.client.create(res, body, namespace=namespace)
        self.created.append((res, made["metadata"]["name"], namespace))
        if status or plural == "nodes":  # a node's status is the kubelet's: posted after it registers
            made = await self.client.patch(res, made["metadata"]["name"], {"status": obj.get("status") or {}},
                                           namespace=namespace, subresource="status")
        return made

    async def patch(self, plural: str, name: str, patch: dict, namespace: str | None = None) -> dict:
        return await self.client.patch(await self.resource(plural), name, patch, namespace=namespace)

    async def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        await self.client.delete(await self.resource(plural), name, namespace=namespace,
                                 options={"gracePeriodSeconds": 0})

    async def token(self, service_account: str) -> str:
        """A token of ``service_account`` (created in ``jhub`` with no rights) from the TokenRequest API."""
        sa = await self.resource("serviceaccounts")
        try:
            await self.client.create(sa, {"metadata": {"name": service_account}}, namespace=NAMESPACE)
        except ApiError as e:
            if e.code != 409:
                raise
        got = await self.client.request("POST", path_for(sa, NAMESPACE, service_account, "token"),
                                        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                              "spec": {"expirationSeconds": 3600}})
        return got["status"]["token"]

    def api(self, token: str | None = None) -> k8s.CoreV1Api:
        """A client of the proxy, as the cache makes one per connection: the admin, or ``token``'s account."""
        conf = self._conf
        if token is not None:
            conf = copy.copy(conf)
            conf.cert_file = conf.key_file = None
            conf.api_key = {"BearerToken": f"Bearer {token}"}
        return k8s.CoreV1Api(k8s.ApiClient(conf))

    def restart_proxy(self) -> int:
        """Stop the proxy (its connections die, new ones are refused); ``start_proxy()`` brings it back."""
        self.proxy.stop()
        return self.proxy.port

    def start_proxy(self, port: int) -> None:
        self.proxy = FaultProxy(self.proxy.data_dir, port).start()

    def make_cache(self, config: CapacityConfig | None = None, *, token: str | None = None,
                   **kw: Any) -> CapacityCache:
        kw.setdefault("backoff_base", 0.02)
        kw.setdefault("backoff_cap", 0.1)
        c = CapacityCache(config or CapacityConfig(), api_factory=lambda: self.api(token), **kw)
        self.caches.append(c)
        c.start()
        return c

    async def _open(self) -> None:
        conf = k8s.Configuration()
        await k8s_config.load_kube_config(config_file=str(self.proxy.kubeconfig), client_configuration=conf)
        self._conf = conf


@contextlib.asynccontextmanager
async def ticking(cluster: ProxiedCluster, objects: list[tuple[str, str, str | None]],
                  every: float = 0.2) -> AsyncIterator[None]:
    """A label of each ``(plural, name, namespace)`` changed every ``every`` s: each watch of those kinds
    has something to deliver (kube-apiserver's own bookmarks come about once a minute)."""
    async def tick() -> None:
        n = 0
        while True:
            n += 1
            for plural, name, namespace in objects:
                await cluster.patch(plural, name, {"metadata": {"labels": {"tick": str(n)}}}, namespace)
            await asyncio.sleep(every)

    task = asyncio.ensure_future(tick())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def no_nodes(client: Client, timeout: float = 60.0) -> None:
    """The pools count every node of the cluster: wait until other tests' nodes have gone."""
    end = asyncio.get_running_loop().time() + timeout
    nodes_res = await client.resource("v1", "Node")
    while True:
        _, nodes = await client.list(nodes_res)
        if not nodes:
            return
        if asyncio.get_running_loop().time() > end:
            names = ", ".join(sorted(n["metadata"]["name"] for n in nodes))
            raise AssertionError(f"the shared control plane still has nodes of other tests: {names}")
        await asyncio.sleep(0.5)


@contextlib.asynccontextmanager
async def proxied(control_plane: Any) -> AsyncIterator[ProxiedCluster]:
    """The session's control plane (no node on it yet), the namespace ``jhub``, and a fault proxy."""
    client = await Client(control_plane.kubeconfig).open()
    proxy = FaultProxy(control_plane.data_dir).start()
    cluster = ProxiedCluster(str(control_plane.kubeconfig), proxy, client)
    try:
        await no_nodes(client)
        ns = await client.resource("v1", "Namespace")
        try:
            await client.create(ns, {"metadata": {"name": NAMESPACE}})
        except ApiError as e:
            if e.code != 409:
                raise
        sa = await client.resource("v1", "ServiceAccount")
        for _ in range(300):  # pods wait for the namespace's default ServiceAccount (its admission plugin)
            try:
                await client.get(sa, "default", namespace=NAMESPACE)
                break
            except ApiError as e:
                if e.code != 404:
                    raise
                await asyncio.sleep(0.1)
        await cluster._open()
        yield cluster
    finally:
        for c in cluster.caches:
            await c.stop()
        proxy.stop()
        for res, name, namespace in reversed(cluster.created):
            try:
                await client.delete(res, name, namespace=namespace, options={"gracePeriodSeconds": 0})
            except ApiError as e:
                if e.code != 404:
                    raise
        await client.close()
