"""What the culler reads from Kubernetes: the server pods and the DCGM exporter pods.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

__all__ = ["KubeError", "PodLister", "load_config"]


class KubeError(Exception):
    """The Kubernetes API cannot be read; the message says why and what to do."""


async def load_config(kubeconfig: str | None = None) -> Any:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg, persist_config=False)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=cfg)
        else:
            await config.load_kube_config(client_configuration=cfg, persist_config=False)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise KubeError(f"cannot load Kubernetes credentials from {where}: {reason}; pass --kubeconfig PATH "
                        "or run the culler in the hub's pod") from None
    return cfg


class PodLister:
    """Lists pods by label selector, as plain dicts."""

    def __init__(self, cfg: Any, *, timeout: float = 30.0):
        from kubernetes_asyncio import client

        self.api_client = client.ApiClient(cfg)
        self.core = client.CoreV1Api(self.api_client)
        self.server = cfg.host
        self.timeout = timeout

    async def close(self) -> None:
        await self.api_client.close()

    async def list(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        import aiohttp

        kw = {"label_selector": selector, "_preload_content": False, "_request_timeout": self.timeout}
        try:
            if namespace:
                resp = await self.core.list_namespaced_pod(namespace, **kw)
            else:
                resp = await self.core.list_pod_for_all_namespaces(**kw)
            try:
                body, status = await resp.read(), resp.status
            finally:
                resp.release()
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as e:
            raise KubeError(f"cannot reach the Kubernetes API at {self.server}: {e or type(e).__name__}") from None
        if status != 200:
            raise KubeError(f"listing pods ({selector}) at {self.server}: HTTP {status} "
                            f"{body[:200].decode('utf-8', 'replace')}; the culler needs to list pods "
                            "(deploy/rbac.yaml)")
        try:
            return [p for p in json.loads(body).get("items") or [] if isinstance(p, dict)]
        except ValueError:
            raise KubeError(f"listing pods at {self.server}: the answer is not JSON") from None
