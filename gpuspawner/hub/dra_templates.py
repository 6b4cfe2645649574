"""A DRA spawn's ResourceClaimTemplate in the cluster: created or reused through ``modify_pod_hook``, deleted once unused."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

import aiohttp
from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client import CoreV1ResourceClaim, V1PodResourceClaim, V1ResourceRequirements
from kubernetes_asyncio.client.exceptions import ApiException
from kubespawner.clients import shared_client

from gpuspawner.hub.errors import spawn_error
from gpuspawner.hub.lost_replies import again_if_lost
from gpuspawner.kube.api_errors import DRA_GROUP, DRA_ROLE_NAME, DRA_ROLE_RULES, rules_text
from gpuspawner.spawn.dra_claim import CLAIM_NAME, TEMPLATE_LABELS, unused_templates

__all__ = ["hold", "release", "claim_hook", "remove_unused_templates", "resource_api", "GRACE_SECONDS"]

#: a template younger than this is never deleted (a spawn may not have created its pod yet)
GRACE_SECONDS = 10.0
_NOTEBOOK = "notebook"  # KubeSpawner's name for the server's container
# "<namespace>/<template>" -> servers of this hub process whose spawn uses it
_in_use: Counter = Counter()
_clock = time.time  # a seam for tests


def resource_api() -> Any:
    """KubeSpawner's shared client for ``resource.k8s.io/v1`` (same configuration as its CoreV1Api)."""
    return shared_client("ResourceV1Api")


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def hold(template: dict[str, Any], previous: str | None = None) -> str:
    """Count a spawn of this hub process as using ``template`` (giving back ``previous``, the one
    its last spawn held); the ``"<namespace>/<name>"`` key to give back with :func:`release`."""
    release(previous)
    key = _key(template["metadata"]["namespace"], template["metadata"]["name"])
    _in_use[key] += 1
    return key


def release(key: str | None) -> None:
    """A spawn no longer uses the template ``key`` (None: it used none)."""
    if key is not None and key in _in_use:
        _in_use[key] -= 1
        if _in_use[key] <= 0:
            del _in_use[key]


def claim_hook(admin_hook: Any, template: dict[str, Any]):
    """The spawn's ``modify_pod_hook``: the admin's own hook first (if any), then the template made
    sure of (``409 AlreadyExists``: another server made the same one, reused) and the claim appended
    to what the pod already has, never replacing an admin's claims."""

    async def add_gpu_claim(spawner, pod):
        if admin_hook is not None:
            pod = await maybe_future(admin_hook(spawner, pod))
        await ensure_template(spawner, template)
        add_claim(pod, template["metadata"]["name"])
        return pod

    return add_gpu_claim


#: tries at creating a template whose replies are lost (``lost_replies.LOST_REPLY``) before the spawn fails
LOST_REPLY_TRIES = 3


async def ensure_template(spawner: Any, template: dict[str, Any]) -> None:
    """Create the template unless it exists; a refusal is the spawn's error, said plainly. A reply
    lost on its way back is tried again (``lost_replies.again_if_lost``): the next try's ``409``
    says the first made it."""
    namespace, name = template["metadata"]["namespace"], template["metadata"]["name"]
    what = f"creating ResourceClaimTemplate {namespace}/{name}"
    for _ in range(LOST_REPLY_TRIES):
        if await again_if_lost(spawner, what, _create_template(spawner, template)):
            return
    raise spawn_error(f"Creating the GPU claim template {namespace}/{name} failed: the API server's reply "
                      f"did not come back {LOST_REPLY_TRIES} times. Try again in a minute; if it keeps failing, "
                      "an administrator should check the hub's connection to the Kubernetes API server.",
                      reason="dra-template", status_code=503)


async def _create_template(spawner: Any, template: dict[str, Any]) -> bool:
    """One try: True once the template exists (made now, or reused); a refusal is raised."""
    namespace, name = template["metadata"]["namespace"], template["metadata"]["name"]
    try:
        await resource_api().create_namespaced_resource_claim_template(namespace, template)
    except ApiException as e:
        _refused(spawner, e, namespace, name)
        return True
    spawner.log.info("Created ResourceClaimTemplate %s/%s for %s", namespace, name, spawner._log_name)
    return True


def _refused(spawner: Any, e: ApiException, namespace: str, name: str) -> None:
    """A template the API server did not create: reused when it exists, else the spawn's error."""
    if e.status == 409:
        return  # made by an earlier spawn with the same pool, count and CUDA requirement: reused
    detail = _reason(e)
    if e.status == 403:
        message = (
            f"The hub may not create ResourceClaimTemplates in namespace {namespace} ({detail}), so it "
            "cannot ask for DRA GPUs. An administrator must grant the hub's ServiceAccount the Role "
            f"{DRA_ROLE_NAME} of deploy/rbac.yaml ({DRA_GROUP} {rules_text(DRA_ROLE_RULES)})."
        )
    else:
        message = f"Creating the GPU claim template {namespace}/{name} failed: {detail} (HTTP {e.status})."
    raise spawn_error(message, reason="dra-template", status_code=500) from None


def _reason(e: ApiException) -> str:
    try:
        return json.loads(e.body).get("message") or e.reason
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)


def _name(entry: Any) -> str | None:
    return entry.get("name") if isinstance(entry, dict) else getattr(entry, "name", None)


def add_claim(pod: Any, template: str) -> None:
    """Append the GPU claim to the pod (a ``V1Pod``) and to its notebook container, keeping
    every other claim an admin put there."""
    spec = pod.spec
    spec.resource_claims = [c for c in spec.resource_claims or [] if _name(c) != CLAIM_NAME] + [
        V1PodResourceClaim(name=CLAIM_NAME, resource_claim_template_name=template)
    ]
    container = next((c for c in spec.containers if c.name == _NOTEBOOK), spec.containers[0])
    if container.resources is None:
        container.resources = V1ResourceRequirements()
    claims = [c for c in container.resources.claims or [] if _name(c) != CLAIM_NAME]
    container.resources.claims = claims + [CoreV1ResourceClaim(name=CLAIM_NAME)]


async def remove_unused_templates(spawner: Any) -> list[str]:
    """Delete the managed templates of the spawner's namespace that nothing uses any more;
    returns their names.  Errors are logged, never raised: cleaning up never fails a stop."""
    namespace = spawner.namespace
    api = resource_api()
    selector = ",".join(f"{k}={v}" for k, v in TEMPLATE_LABELS.items())
    try:
        resp = await api.list_namespaced_resource_claim_template(
            namespace, label_selector=selector, _preload_content=False
        )
        try:
            listed = json.loads(await resp.read()).get("items") or []
        finally:
            resp.release()
        pods = list(spawner.pod_reflector.pods.values()) if spawner.pod_reflector is not None else []
        in_use = {k.split("/", 1)[1] for k in _in_use if k.startswith(f"{namespace}/")}
        names = unused_templates(listed, pods, in_use, _clock(), GRACE_SECONDS)
        for name in names:
            try:
                await api.delete_namespaced_resource_claim_template(name, namespace)
            except ApiException as e:
                if e.status != 404:
                    raise
            spawner.log.info("Deleted unused ResourceClaimTemplate %s/%s", namespace, name)
        return names
    except (ApiException, OSError, ValueError, aiohttp.ClientError, asyncio.TimeoutError) as e:
        spawner.log.warning("Could not clean up GPU claim templates in namespace %s: %s", namespace, e)
        return []
