"""A spawn's Kubernetes requests whose reply may be lost on its way back (a timeout, a reply cut
mid-body, a connection closed after the request went out): the API server may have carried them
out. The server's pod is marked with a token of its start, so a creation tried again that finds a
pod under the server's name knows the one an earlier try made (the start goes on) from a stale
one, deleted before the pod is created again while the start keeps its GPUs and claim template.
Requests whose next try tells by itself (a delete's 404, a create's 409 for a volume or a claim
template) are simply tried again."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

__all__ = ["SPAWN_ANNOTATION", "LOST_REPLY", "mark", "token_of", "create", "again_if_lost"]

#: a pod's spawn token: which start of its server created it (a fresh one for each start)
SPAWN_ANNOTATION = "gpuspawner.io/spawn"

#: the request may have reached the API server, and its reply did not come back: the pod may
#: exist. A timeout (KubeSpawner's k8s_api_request_timeout), a reply cut mid-body, or a
#: connection closed after the request was sent. A refused connection is not one of these: the
#: request never left, and KubeSpawner's error stands.
LOST_REPLY = (asyncio.TimeoutError, aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)


def mark(pod: Any) -> str:
    """The spawn token of ``pod`` (a ``V1Pod`` manifest), added when it has none yet. KubeSpawner
    passes one manifest to every try of a start, so each try carries the same token."""
    meta = pod.metadata
    annotations = dict(meta.annotations or {})
    token = annotations.get(SPAWN_ANNOTATION)
    if not token:
        token = annotations[SPAWN_ANNOTATION] = uuid.uuid4().hex
        meta.annotations = annotations
    return token


def token_of(pod: Any) -> str | None:
    """The spawn token of a pod read from the API server (a ``V1Pod``), None when it has none."""
    meta = getattr(pod, "metadata", None)
    annotations = getattr(meta, "annotations", None)
    token = annotations.get(SPAWN_ANNOTATION) if isinstance(annotations, dict) else None
    return token if isinstance(token, str) and token else None


_GONE = object()


async def _existing_token(spawner: Any, name: str, timeout: float) -> Any:
    """The spawn token of the pod ``name`` as the API server has it now: ``_GONE`` when there is
    no such pod, None when it has no token; any other failure is raised."""
    try:
        pod = await spawner.api.read_namespaced_pod(name, spawner.namespace, _request_timeout=timeout)
    except ApiException as e:
        if e.status == 404:
            return _GONE
        raise
    return token_of(pod)


async def create(spawner: Any, pod: Any, timeout: float, remove_stale: Callable[[], Awaitable[Any]]) -> bool:
    """One try at creating ``pod`` for ``spawner``, for KubeSpawner's ``exponential_backoff``:
    True once the pod exists as this start's, False to try again. A lost reply is another try.
    ``409 AlreadyExists`` is this start's own pod when it carries this start's token (an earlier
    try created it and its reply was lost): done. Otherwise the pod is a stale one of an earlier
    start, and ``remove_stale`` deletes it before the next try."""
    token = mark(pod)
    name = pod.metadata.name
    try:
        await asyncio.wait_for(spawner.api.create_namespaced_pod(spawner.namespace, pod), timeout)
        return True
    except LOST_REPLY as e:
        spawner.log.warning("The reply to creating pod %s/%s did not come back (%s); trying again",
                            spawner.namespace, name, _said(e))
        return False
    except ApiException as e:
        if e.status != 409:
            spawner.log.error("Creating pod %s/%s failed: HTTP %s %s", spawner.namespace, name, e.status, e.reason)
            raise
    try:
        found = await _existing_token(spawner, name, timeout)
    except (*LOST_REPLY, ApiException) as e:  # whose pod it is stays unknown: nothing is deleted
        spawner.log.warning("Pod %s/%s exists and reading it back failed (%s); trying again",
                            spawner.namespace, name, _said(e))
        return False
    if found is _GONE:
        return False  # deleted since: the next try creates it
    if found == token:
        spawner.log.info("Pod %s/%s was created by an earlier try whose reply was lost", spawner.namespace, name)
        return True
    spawner.log.info("Found an earlier pod %s/%s; deleting it before this server's pod is created",
                     spawner.namespace, name)
    await remove_stale()
    return False


async def again_if_lost(spawner: Any, what: str, attempt: Awaitable[bool]) -> bool:
    """``attempt`` (one try, True when done: one of KubeSpawner's, for its ``exponential_backoff``),
    with a lost reply made another try (False) instead of an error. Only for a request whose next
    try tells that the first was carried out: a delete (``404 Not Found``: KubeSpawner's "already
    deleted"), a creation whose ``409`` means "already there" (a volume, a claim template)."""
    try:
        return await attempt
    except LOST_REPLY as e:
        spawner.log.warning("The reply to %s did not come back (%s); trying again", what, _said(e))
        return False


def _said(e: BaseException) -> str:
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
