"""Whether a server's pod that KubeSpawner's pod reflector has not seen exists, asked of the API
server, so that a stop is not skipped while the reflector's watch lags or is stalled."""

from __future__ import annotations

from typing import Any

__all__ = ["poll_status", "still_there", "reflected_pod", "reflected_pods"]


def reflected_pods(spawner: Any) -> list[Any]:
    """Every pod KubeSpawner's pod reflector shows (no API call)."""
    reflector = spawner.pod_reflector
    return list(reflector.pods.values()) if reflector is not None else []


def reflected_pod(spawner: Any) -> Any:
    """This server's pod as KubeSpawner's pod reflector shows it (no API call), or None."""
    reflector = spawner.pod_reflector
    return reflector.pods.get(f"{spawner.namespace}/{spawner.pod_name}") if reflector is not None else None


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


async def poll_status(spawner: Any, status: int | None) -> int | None:
    """KubeSpawner's poll ``status`` of a spawner that asked for a pod, except None (running)
    while that pod exists though the pod reflector has not shown it, or the API server cannot
    say whether it does."""
    if status is None or spawner.pod_reflector.pods.get(f"{spawner.namespace}/{spawner.pod_name}") is not None:
        return status
    try:
        there = await still_there(spawner)
    except Exception as e:  # cannot tell: count it as running, so a stop deletes it (a 404 there is fine)
        spawner.log.warning("Could not ask for pod %s/%s (%s: %s); counted as running so that a stop deletes it",
                            spawner.namespace, spawner.pod_name, type(e).__name__, e)
        return None
    if not there:
        return status
    spawner.log.info("Pod %s/%s exists though the pod watch has not shown it; counted as running so that it "
                     "is stopped", spawner.namespace, spawner.pod_name)
    return None
