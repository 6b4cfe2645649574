"""Whether a server's pod that KubeSpawner's pod reflector has not seen exists, asked of the API
server, so that a stop is not skipped while the reflector's watch lags or is stalled."""

from __future__ import annotations

from typing import Any

__all__ = ["still_there"]


async def still_there(spawner: Any) -> bool:
    """True when the API server has ``spawner``'s pod, not yet being deleted and not ended
    (JupyterHub must then call ``stop``, which deletes it); False when it is gone or going."""
    from kubernetes_asyncio.client.exceptions import ApiException

    try:
        pod = await spawner.api.read_namespaced_pod(
            spawner.pod_name, spawner.namespace, _request_timeout=spawner.k8s_api_request_timeout
        )
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    meta = getattr(pod, "metadata", None)
    status = getattr(pod, "status", None)
    if meta is not None and getattr(meta, "deletion_timestamp", None):
        return False
    return getattr(status, "phase", None) not in ("Succeeded", "Failed")
