"""One node of the node agent on the session's control plane, whose kubelet runs real processes, for the
kubelet's tests: ``cluster.store`` reads and writes as the admin (synchronously, as the tests' conditions
poll), ``cluster.pod``, ``cluster.wait_for``, ``cluster.kubelet`` and ``cluster.logs``; what a test made
is deleted after it."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any, Callable

import pytest

from testcluster.node.loader import KINDS
from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import ApiError, path_for, read_kubeconfig, ssl_context
from tests.builders.kubelet import node_manifest
from tests.builders.nodeagent import write_cluster

BY_PLURAL = {k.plural: k for k in KINDS.values()}


class Store:
    """The admin's reads and writes, one blocking request each (a few ms on loopback)."""

    def __init__(self, kubeconfig: str, node: str):
        self.config = read_kubeconfig(kubeconfig)
        self.ssl = ssl_context(self.config)
        self.node = node
        self.made: list[tuple[str, str, str | None]] = []

    def _call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        req = urllib.request.Request(self.config["server"] + path, method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ssl, timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            status = json.load(e)
            raise ApiError(e.code, status.get("reason", ""), status.get("message", ""), status) from None

    def _path(self, plural: str, name: str | None = None, namespace: str | None = None) -> str:
        return path_for(BY_PLURAL[plural], namespace if BY_PLURAL[plural].namespaced else None, name)

    def create(self, plural: str, obj: dict, namespace: str | None = None) -> dict:
        if plural == "pods":  # the kubelet's tests: this node's pods, as the sim's one node had them
            spec = obj.setdefault("spec", {})
            spec.setdefault("nodeName", self.node)
            spec.setdefault("automountServiceAccountToken", False)
        made = self._call("POST", self._path(plural, namespace=namespace), obj)
        self.made.append((plural, made["metadata"]["name"], namespace))
        return made

    def get(self, plural: str, name: str, namespace: str | None = None) -> dict:
        return self._call("GET", self._path(plural, name, namespace))

    def list(self, plural: str, namespace: str | None = None) -> dict:
        return self._call("GET", self._path(plural, namespace=namespace))

    def patch(self, plural: str, name: str, patch: Any, content_type: str = "application/merge-patch+json",
              namespace: str | None = None) -> dict:
        body = json.loads(patch) if isinstance(patch, (bytes, str)) else patch
        return self._call("PATCH", self._path(plural, name, namespace), body, content_type)

    def delete(self, plural: str, name: str, namespace: str | None = None, grace_period_seconds: int | None = None) -> Any:
        body = {"gracePeriodSeconds": grace_period_seconds} if grace_period_seconds is not None else None
        return self._call("DELETE", self._path(plural, name, namespace), body)


class AgentCluster:
    def __init__(self, agent: NodeAgent, store: Store):
        self.agent = agent
        self.store = store
        self.kubelet = agent.kubelet
        self.kubeconfig = agent.kubeconfig
        self.node_name = store.node

    def pod(self, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get("pods", name, namespace)
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    async def wait_for(self, cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
        end = asyncio.get_running_loop().time() + timeout
        while True:
            got = await asyncio.to_thread(cond)
            if got:
                return got
            if asyncio.get_running_loop().time() > end:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
            await asyncio.sleep(0.1)

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        return self.kubelet.logs(namespace, name, container)

    async def stop(self) -> None:
        await self.agent.stop()


@pytest.fixture
async def cluster(api, tmp_path):
    node = api.name("node-a")
    agent = NodeAgent(api.kubeconfig, write_cluster(tmp_path / "cluster.yaml", [node_manifest(node)]),
                      restart_backoff=(0.2, 1.0), kubelet_port=0)
    store = Store(str(api.kubeconfig), node)
    await agent.start()
    try:
        yield AgentCluster(agent, store)
    finally:
        await agent.stop()
        for plural, name, namespace in reversed(store.made):
            try:
                await asyncio.to_thread(store.delete, plural, name, namespace, 0)
            except ApiError as e:
                if e.code != 404:
                    raise
