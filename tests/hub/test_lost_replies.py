"""A server's pod creation when the API server's reply is lost (``gpuspawner.hub.lost_replies``): a
start goes on with the pod an earlier try of it created, a stale pod of an earlier start is
deleted first, and a GPU start keeps its reservation throughout.

No cluster: the API client is a stand-in that answers as the API server does (201, 409
AlreadyExists, 404) or loses the reply as the CI failure did (``aiohttp.ClientPayloadError``
after the pod was created). The pod is a real ``V1Pod`` manifest and the tries run under
KubeSpawner's own ``exponential_backoff``, as its ``_start`` runs them. The same path through a
real API server and a proxy that cuts the reply is tests/e2e/test_faults.py's."""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import replace
from functools import partial
from types import SimpleNamespace

import aiohttp
import kubespawner.spawner
import pytest
from jupyterhub.utils import exponential_backoff
from kubernetes_asyncio.client import V1Container, V1ObjectMeta, V1Pod, V1PodSpec
from kubernetes_asyncio.client.exceptions import ApiException

from gpuspawner.hub.lost_replies import SPAWN_ANNOTATION, create, mark
from tests.builders import FakeCache, make_spawner, pool_view

CUT = aiohttp.ClientPayloadError("Response payload is not completed: <TransferEncodingError: 400, message="
                                 "'Not enough data to satisfy transfer length header.'>")


class _Api:
    """An API server's pods in one namespace; ``lose`` lists what the next creates meet after the
    API server has acted on them: an exception raised instead of the reply."""

    def __init__(self, existing=None, lose=(), read_fails=()):
        self.pods = {} if existing is None else {existing.metadata.name: existing}
        self.lose = list(lose)
        self.read_fails = list(read_fails)
        self.creates = 0
        self.reads = 0

    async def create_namespaced_pod(self, namespace, pod):
        self.creates += 1
        if pod.metadata.name in self.pods:
            raise ApiException(status=409, reason="Conflict")
        self.pods[pod.metadata.name] = copy.deepcopy(pod)
        if self.lose:
            raise self.lose.pop(0)
        return pod

    async def read_namespaced_pod(self, name, namespace, **kw):
        self.reads += 1
        if self.read_fails:
            raise self.read_fails.pop(0)
        if name not in self.pods:
            raise ApiException(status=404, reason="Not Found")
        return self.pods[name]


def manifest(name="jupyter-ada", annotations=None):
    return V1Pod(metadata=V1ObjectMeta(name=name, annotations=annotations),
                 spec=V1PodSpec(containers=[V1Container(name="notebook", image="jupyter/base")]))


def spawner(api):
    return SimpleNamespace(namespace="jhub", api=api, log=logging.getLogger("test-lost_replies"))


class _Stale:
    def __init__(self, api):
        self.api, self.calls = api, 0

    async def __call__(self):  # KubeSpawner's stop(now=True): the pod is deleted
        self.calls += 1
        self.api.pods.clear()


async def tries(s, pod, remove):
    await exponential_backoff(partial(create, s, pod, 3, remove), "Could not create pod", timeout=5)


def test_a_manifest_gets_one_token_and_keeps_an_admins_annotations():
    pod = manifest(annotations={"team": "vision"})
    token = mark(pod)
    assert mark(pod) == token and len(token) == 32
    assert pod.metadata.annotations == {"team": "vision", SPAWN_ANNOTATION: token}
    assert mark(manifest()) != token  # each start its own


async def test_a_created_pod_is_done_in_one_try():
    api = _Api()
    remove = _Stale(api)
    assert await create(spawner(api), manifest(), 3, remove) is True
    assert api.creates == 1 and api.reads == 0 and remove.calls == 0
    assert api.pods["jupyter-ada"].metadata.annotations[SPAWN_ANNOTATION]


@pytest.mark.parametrize("lost", [CUT, aiohttp.ServerDisconnectedError(), asyncio.TimeoutError()],
                         ids=["cut-mid-body", "disconnected", "timeout"])
async def test_a_pod_created_by_a_try_whose_reply_was_lost_is_this_starts(lost, caplog):
    """The CI failure: the reply was lost after the pod was created. The start goes on with that
    pod; nothing deletes it."""
    api = _Api(lose=[lost])
    remove = _Stale(api)
    with caplog.at_level(logging.INFO, logger="test-lost_replies"):
        await tries(spawner(api), manifest(), remove)
    assert api.creates == 2 and api.reads == 1  # the second try met 409 and read the pod back
    assert remove.calls == 0 and "jupyter-ada" in api.pods
    assert "did not come back" in caplog.text and "created by an earlier try whose reply was lost" in caplog.text


async def test_a_stale_pod_of_an_earlier_start_is_deleted_then_the_pod_created():
    stale = manifest(annotations={SPAWN_ANNOTATION: "an-earlier-start"})
    api = _Api(existing=stale)
    remove = _Stale(api)
    pod = manifest()
    await tries(spawner(api), pod, remove)
    assert remove.calls == 1
    assert api.pods["jupyter-ada"].metadata.annotations[SPAWN_ANNOTATION] == pod.metadata.annotations[SPAWN_ANNOTATION]


async def test_a_pod_without_a_token_is_stale():
    """A pod of KubeSpawner or of gpuspawner before the token existed: never taken for this start's."""
    api = _Api(existing=manifest())
    remove = _Stale(api)
    await tries(spawner(api), manifest(), remove)
    assert remove.calls == 1 and api.creates == 2


async def test_a_pod_gone_between_the_conflict_and_the_read_is_created_again():
    api = _Api(existing=manifest(annotations={SPAWN_ANNOTATION: "x"}))
    real_read = api.read_namespaced_pod

    async def read_after_deletion(name, namespace, **kw):
        api.pods.clear()
        return await real_read(name, namespace, **kw)

    api.read_namespaced_pod = read_after_deletion
    remove = _Stale(api)
    assert await create(spawner(api), manifest(), 3, remove) is False
    assert remove.calls == 0 and api.pods == {}
    assert await create(spawner(api), manifest(), 3, remove) is True


@pytest.mark.parametrize("read_error", [aiohttp.ServerDisconnectedError(), ApiException(status=503, reason="Unavailable")],
                         ids=["lost", "refused"])
async def test_a_failed_read_back_is_another_try_and_deletes_nothing(read_error):
    api = _Api(lose=[CUT], read_fails=[read_error])
    remove = _Stale(api)
    await tries(spawner(api), manifest(), remove)
    assert api.creates == 3 and api.reads == 2 and remove.calls == 0


@pytest.mark.parametrize("status", [403, 422, 500])
async def test_other_refusals_fail_the_start_as_kubespawners_do(status, caplog):
    class Refusing(_Api):
        async def create_namespaced_pod(self, namespace, pod):
            raise ApiException(status=status, reason="Refused")

    with caplog.at_level(logging.ERROR, logger="test-lost_replies"), pytest.raises(ApiException) as e:
        await create(spawner(Refusing()), manifest(), 3, _Stale(Refusing()))
    assert e.value.status == status and f"HTTP {status}" in caplog.text


async def test_a_refused_connection_fails_as_before():
    """The request never left: KubeSpawner's error stands (no retry loop hides an outage)."""
    class Refused(_Api):
        async def create_namespaced_pod(self, namespace, pod):
            raise aiohttp.ClientConnectorError(SimpleNamespace(ssl=None, host="127.0.0.1", port=6443),
                                               ConnectionRefusedError(111, "Connection refused"))

    with pytest.raises(aiohttp.ClientConnectorError):
        await create(spawner(Refused()), manifest(), 3, _Stale(Refused()))


# -- GPUSpawner: the tries keep what the start holds --

A100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB", total=8, free=4, per_node=4, memory_mib=81920,
                 driver="535.183.01", cuda="12.2")
GPU_PROFILES = [{"slug": "gpu", "display_name": "GPU server",
                 "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-latest"}}]


@pytest.fixture
def cache(install_cache):
    return install_cache(FakeCache(A100))


async def test_a_gpu_start_keeps_its_reservation_through_a_lost_reply_and_a_stale_pod(
        no_kube_client, cache, monkeypatch):
    """KubeSpawner's own answer to 409 is ``self.stop(True)``, and GPUSpawner's stop gives back
    the start's GPU reservation and claim template; the stale pod is deleted by KubeSpawner's stop
    alone."""
    deleted = []

    async def kubespawner_stop(self, now=False):  # deletes the pod: here, the stand-in's
        deleted.append(now)
        self.api.pods.clear()

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "stop", kubespawner_stop)
    s = make_spawner("ada", gpu_profiles=GPU_PROFILES, namespace="jhub")
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    await s.load_user_options()
    owner = f"jhub/{s.pod_name}"
    assert cache.reservations == {owner: (A100.id, 2)}
    s._spawn = replace(s._spawn, dra_template="jhub/gpu-claim")  # as a DRA start holds one

    stale = manifest(s.pod_name, annotations={SPAWN_ANNOTATION: "an-earlier-start"})
    s.api = _Api(existing=stale, lose=[CUT])
    pod = manifest(s.pod_name)
    await exponential_backoff(partial(s._make_create_pod_request, pod, 3), "Could not create pod", timeout=5)

    assert deleted == [True]  # the stale pod, once
    token = s.api.pods[s.pod_name].metadata.annotations[SPAWN_ANNOTATION]
    assert token == pod.metadata.annotations[SPAWN_ANNOTATION]
    assert cache.reservations == {owner: (A100.id, 2)} and cache.released == []
    assert s._spawn.dra_template == "jhub/gpu-claim" and s._spawn.pod_requested


async def test_a_stop_whose_delete_reply_is_lost_tries_again_and_ends(no_kube_client, caplog):
    """A delete is idempotent: the next try's 404 is KubeSpawner's "already deleted", so the stop
    ends instead of failing with the lost reply."""
    class Deleting(_Api):
        deletes = 0

        async def delete_namespaced_pod(self, name, namespace, **kw):
            self.deletes += 1
            if name not in self.pods:
                raise ApiException(status=404, reason="Not Found")
            del self.pods[name]
            raise CUT

    s = make_spawner("ada", namespace="jhub")
    s.api = Deleting(existing=manifest(s.pod_name))
    with caplog.at_level(logging.WARNING):
        await exponential_backoff(partial(s._make_delete_pod_request, s.pod_name, None, 0, 3),
                                  "Could not delete pod", timeout=5)
    assert s.api.deletes == 2 and s.api.pods == {}
    assert "The reply to deleting pod" in caplog.text


async def test_a_home_volume_whose_creation_reply_is_lost_is_found_at_the_next_try(no_kube_client, caplog):
    """KubeSpawner's next try meets a 409, its "already exists": the start goes on."""
    class Volumes(_Api):
        claims: dict = {}

        async def create_namespaced_persistent_volume_claim(self, namespace, body):
            self.creates += 1
            if body.metadata.name in self.claims:
                raise ApiException(status=409, reason="Conflict")
            self.claims[body.metadata.name] = body
            raise CUT

    s = make_spawner("ada", namespace="jhub")
    s.api = Volumes()
    pvc = SimpleNamespace(metadata=SimpleNamespace(name="claim-ada"))
    with caplog.at_level(logging.WARNING):
        await exponential_backoff(partial(s._make_create_pvc_request, pvc, 3), "Could not create PVC", timeout=5)
    assert s.api.creates == 2 and "claim-ada" in s.api.claims
    assert "The reply to creating PVC jhub/claim-ada did not come back" in caplog.text
