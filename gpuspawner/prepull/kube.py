"""The pre-puller's DaemonSet calls, through the hub's Kubernetes client (kubernetes_asyncio)."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.rest import ApiException

from gpuspawner.prepull.plan import SPEC_ANNOTATION
from gpuspawner.prepull.reconcile import SELECTOR


class KubeDaemonSets:
    """``reconcile.DaemonSets`` in one namespace; needs the rights deploy/rbac.yaml grants."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self._apps = client.AppsV1Api(api_client)
        self.namespace = namespace

    async def list(self) -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        token = None
        while True:
            page = await self._apps.list_namespaced_daemon_set(
                self.namespace, label_selector=SELECTOR, limit=500, _continue=token
            )
            for item in page.items:
                annotations = item.metadata.annotations or {}
                found[item.metadata.name] = annotations.get(SPEC_ANNOTATION)
            token = page.metadata._continue
            if not token:
                return found

    async def create(self, manifest: dict[str, Any]) -> None:
        try:
            await self._apps.create_namespaced_daemon_set(self.namespace, manifest)
        except ApiException as e:
            if e.status != 409:  # made by another hub replica meanwhile: the next pass compares it
                raise

    async def replace(self, manifest: dict[str, Any], attempts: int = 5) -> None:
        """Replace the object as it is now; the DaemonSet controller writes its status meanwhile,
        so a 409 Conflict is met by reading it again (a few times)."""
        name = manifest["metadata"]["name"]
        for attempt in range(attempts):
            current = await self._apps.read_namespaced_daemon_set(name, self.namespace)
            body = {**manifest, "metadata": {**manifest["metadata"],
                                             "resourceVersion": current.metadata.resource_version}}
            try:
                await self._apps.replace_namespaced_daemon_set(name, self.namespace, body)
                return
            except ApiException as e:
                if e.status != 409 or attempt == attempts - 1:
                    raise

    async def delete(self, name: str) -> None:
        try:
            await self._apps.delete_namespaced_daemon_set(
                name, self.namespace, propagation_policy="Background"
            )
        except ApiException as e:
            if e.status != 404:
                raise


async def owner_reference(api_client: client.ApiClient, namespace: str, owner: str) -> dict[str, str]:
    """The ownerReference of ``owner`` ("Deployment/hub", "StatefulSet/x" or "ConfigMap/x") in
    ``namespace``: the pre-pull DaemonSets are deleted with it."""
    kind, _, name = owner.partition("/")
    if kind in ("Deployment", "StatefulSet"):
        api = client.AppsV1Api(api_client)
        read = api.read_namespaced_deployment if kind == "Deployment" else api.read_namespaced_stateful_set
        version = "apps/v1"
    elif kind == "ConfigMap":
        read = client.CoreV1Api(api_client).read_namespaced_config_map
        version = "v1"
    else:
        raise ValueError(f"gpu_prepull_owner: kind {kind!r} is not Deployment, StatefulSet or ConfigMap")
    obj = await read(name, namespace)
    return {"apiVersion": version, "kind": kind, "name": name, "uid": obj.metadata.uid}
