"""A spawn on a DRA pool, through GPUSpawner's real seams (load_user_options, get_pod_manifest,
the modify_pod_hook it sets, stop): the pod and the template are valid for every Kubernetes version
that serves resource.k8s.io/v1 (kubernetes-validate, strict), carry the claim and no extended
resource, keep an admin's own hook and claims, and the templates are reused and cleaned up.
No cluster: KubeSpawner's client is replaced and the capacity cache faked (tests/hub/test_pod_manifest.py)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import kubernetes_validate
import pytest
from jupyterhub.utils import maybe_future
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from gpuspawner.capacity.nodeimages import NodeImages
from gpuspawner.hub import dra_templates as dra_glue
from gpuspawner.spawn.dra_claim import CLAIM_NAME, TEMPLATE_LABELS
from tests.builders import FakeCache
from tests.builders.dra import counted_dra_pools, dra_a100_pools
from tests.hub.test_pod_manifest import GKE_A100, preferred_terms, required_terms, spawner_factory  # noqa: F401
from tests.spawn.test_dra_claim import DRA_VERSIONS

POOLS = dra_a100_pools()
FULL, MIG = POOLS["gpu.nvidia.com"], POOLS["mig.nvidia.com"]


class FakeResourceApi:
    """ResourceV1Api's template calls, kept in a dict; 409 for an existing name, as the API server."""

    def __init__(self):
        self.templates: dict[str, dict] = {}
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.forbid = False
        self.lose = 0  # the next creates' replies lost after the template was made
        self.tries = 0

    async def create_namespaced_resource_claim_template(self, namespace, body):
        self.tries += 1
        if self.forbid:
            raise ApiException(status=403, reason="Forbidden")
        name = body["metadata"]["name"]
        if name in self.templates:
            raise ApiException(status=409, reason="AlreadyExists")
        self.templates[name] = {**body, "metadata": {**body["metadata"], "creationTimestamp": "2020-01-01T00:00:00Z"}}
        self.created.append(name)
        if self.lose:  # made, and the reply lost on its way back
            self.lose -= 1
            raise aiohttp.ClientPayloadError("Response payload is not completed")

    async def list_namespaced_resource_claim_template(self, namespace, label_selector, _preload_content):
        assert label_selector == ",".join(f"{k}={v}" for k, v in TEMPLATE_LABELS.items())
        body = json.dumps({"items": list(self.templates.values())}).encode()

        class Resp:
            async def read(self):
                return body

            def release(self):
                pass

        return Resp()

    async def delete_namespaced_resource_claim_template(self, name, namespace):
        self.templates.pop(name)
        self.deleted.append(name)


@pytest.fixture
def api(monkeypatch):
    fake = FakeResourceApi()
    monkeypatch.setattr(dra_glue, "shared_client", lambda kind: fake)
    monkeypatch.setattr(dra_glue, "_in_use", type(dra_glue._in_use)())
    return fake


@pytest.fixture
def dra_spawner(spawner_factory, install_cache, api):  # noqa: F811
    cache = install_cache(FakeCache(FULL, MIG, GKE_A100, age_seconds=0.0, reservations_count=False))

    def make(cuda=None, **traits):
        s = spawner_factory(**traits)
        profile = {"slug": "gpu", "kubespawner_override": {"image": "nvcr.io/nvidia/pytorch:24.05-py3"}}
        if cuda:
            profile["cuda"] = cuda
        s.gpu_profiles = [profile]
        s.test_cache = cache
        return s

    return make


async def pod_for(spawner, options):
    """What KubeSpawner's _start sends: get_pod_manifest(), then modify_pod_hook, as JSON."""
    spawner.user_options = options
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    if spawner.modify_pod_hook:
        pod = await maybe_future(spawner.modify_pod_hook(spawner, pod))
    async with ApiClient() as client:
        return client.sanitize_for_serialization(pod)


def gpu_resources(container):
    res = container.get("resources") or {}
    return {k: v for part in ("limits", "requests") for k, v in (res.get(part) or {}).items() if "/" in k}


@pytest.mark.parametrize("version", DRA_VERSIONS)
@pytest.mark.parametrize("pool", [FULL, MIG], ids=["whole-gpus", "mig"])
async def test_pod_and_template_valid_with_the_claim_and_no_extended_resource(dra_spawner, api, version, pool):
    s = dra_spawner(cuda="12.4", cpu_limit=2.0)
    m = await pod_for(s, {"profile": "gpu", "gpu_pool": pool.id, "gpus": 2})
    kubernetes_validate.validate(m, version, strict=True)
    (name,) = api.created
    kubernetes_validate.validate(api.templates[name], version, strict=True)
    assert m["spec"]["resourceClaims"] == [{"name": CLAIM_NAME, "resourceClaimTemplateName": name}]
    notebook = m["spec"]["containers"][0]
    assert notebook["resources"]["claims"] == [{"name": CLAIM_NAME}]
    assert gpu_resources(notebook) == {}  # no nvidia.com/gpu, no DeviceClass name as a resource
    assert float(notebook["resources"]["limits"]["cpu"]) == 2.0  # KubeSpawner's own limits are kept
    assert required_terms(m) == [{"matchExpressions": [
        {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["dra-a100"]}]}]
    assert {t["key"] for t in m["spec"]["tolerations"]} >= {"nvidia.com/gpu"}
    assert m["metadata"]["annotations"]["gpuspawner.io/pool"] == pool.id
    request = api.templates[name]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert (request["deviceClassName"], request["count"]) == (pool.resource, 2)
    assert s.test_cache.reservations == {"jhub/jupyter-ada": (pool.id, 2)}


async def test_the_driver_check_is_a_selector_not_an_affinity(dra_spawner, api):
    s = dra_spawner(cuda={"cuda": "12.4"}, cuda_policy="strict")  # d2 (CUDA 12.2) fails under strict
    m = await pod_for(s, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    assert all(e["key"] != "kubernetes.io/hostname" for t in required_terms(m) for e in t["matchExpressions"])
    exprs = [sel["cel"]["expression"] for sel in
             api.templates[api.created[0]]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]]
    assert exprs[-1].endswith("cudaDriverVersion.compareTo(semver('12.4.0')) >= 0")


@pytest.mark.parametrize("version", DRA_VERSIONS)
async def test_a_dra_spawn_prefers_the_pools_nodes_that_hold_its_image(dra_spawner, install_cache, api, version):
    s = dra_spawner()
    image = "nvcr.io/nvidia/pytorch:24.05-py3"  # the profile's image
    counts = NodeImages()
    # the pool's nodes are those its ResourceSlices name; only dw-1 holds the image
    (pool,) = counted_dra_pools(counts, {"dw-0": (4, {}), "dw-1": (4, {image: 15 << 30}), "dw-2": (4, {})},
                                group="dra-warm")
    s.test_cache = install_cache(FakeCache(pool, age_seconds=0.0, reservations_count=False))
    s.test_cache.node_images = counts
    m = await pod_for(s, {"profile": "gpu", "gpu_pool": pool.id, "gpus": 1})
    kubernetes_validate.validate(m, version, strict=True)
    assert preferred_terms(m) == [{"weight": 50, "preference": {"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["dw-1"]}]}}]
    # a preference only: the pool's node group is still the one requirement, the claim still the GPUs
    assert required_terms(m) == [{"matchExpressions": [
        {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["dra-warm"]}]}]
    assert m["spec"]["resourceClaims"][0]["name"] == CLAIM_NAME


async def test_same_request_reuses_the_template(dra_spawner, api):
    first = await pod_for(dra_spawner(), {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 2})
    second = await pod_for(dra_spawner(), {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 2})
    other = await pod_for(dra_spawner(), {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    names = [p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] for p in (first, second, other)]
    assert names[0] == names[1] != names[2]
    assert len(api.created) == 2


async def test_admin_hook_and_claims_are_kept(dra_spawner, api):
    seen = []

    def admin_hook(spawner, pod):
        seen.append(pod.metadata.name)
        pod.spec.resource_claims = [{"name": "rdma", "resourceClaimTemplateName": "site-nic"}]
        pod.spec.containers[0].resources.claims = [{"name": "rdma"}]
        return pod

    s = dra_spawner(modify_pod_hook=admin_hook)
    m = await pod_for(s, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    assert seen == ["jupyter-ada"]
    assert [c["name"] for c in m["spec"]["resourceClaims"]] == ["rdma", CLAIM_NAME]
    assert m["spec"]["containers"][0]["resources"]["claims"] == [{"name": "rdma"}, {"name": CLAIM_NAME}]
    # a respawn into a device-plugin pool: the admin's hook alone, no GPU claim, the extended resource back
    m = await pod_for(s, {"profile": "gpu", "gpu_pool": GKE_A100.id, "gpus": 1})
    assert s.modify_pod_hook is admin_hook
    assert [c["name"] for c in m["spec"]["resourceClaims"]] == ["rdma"]
    assert gpu_resources(m["spec"]["containers"][0]) == {"nvidia.com/gpu": "1"}


async def test_probe_shares_the_claim(dra_spawner, api):
    s = dra_spawner(cuda="12.4", cuda_probe=True)
    m = await pod_for(s, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 2})
    (probe,) = m["spec"]["initContainers"]
    assert probe["resources"] == {"claims": [{"name": CLAIM_NAME}]}
    assert probe["args"][probe["args"].index("--expect-gpus") + 1] == "2"
    kubernetes_validate.validate(m, DRA_VERSIONS[-1], strict=True)


async def test_forbidden_template_creation_is_a_clear_spawn_error(dra_spawner, api):
    api.forbid = True
    s = dra_spawner()
    with pytest.raises(Exception) as e:
        await pod_for(s, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    assert "may not create ResourceClaimTemplates in namespace jhub" in str(e.value)
    assert "deploy/rbac.yaml" in str(e.value)


async def test_a_template_creation_whose_reply_is_lost_is_tried_again(dra_spawner, api, caplog):
    """The next try's 409 says the first made it: the spawn goes on with the claim."""
    api.lose = 1
    m = await pod_for(dra_spawner(), {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    assert api.tries == 2 and len(api.created) == 1
    assert m["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == api.created[0]
    assert "did not come back" in caplog.text


async def test_template_replies_lost_every_time_are_a_clear_503(dra_spawner, api):
    async def never_answered(namespace, body):  # the connection drops before the API server acts
        api.tries += 1
        raise aiohttp.ServerDisconnectedError()

    api.create_namespaced_resource_claim_template = never_answered
    with pytest.raises(Exception) as e:
        await pod_for(dra_spawner(), {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    assert api.tries == dra_glue.LOST_REPLY_TRIES
    assert e.value.status_code == 503
    assert f"the API server's reply did not come back {dra_glue.LOST_REPLY_TRIES} times" in str(e.value)
    assert "check the hub's connection to the Kubernetes API server" in str(e.value)


@pytest.fixture
def pods_gone(monkeypatch):
    """KubeSpawner's stop as if the pod were deleted, and no pod left in its reflector."""
    from gpuspawner.hub.spawner import GPUSpawner

    async def stopped(self, now=False):
        return None

    monkeypatch.setattr("kubespawner.KubeSpawner.stop", stopped)
    monkeypatch.setattr(GPUSpawner, "pod_reflector", None, raising=False)


async def test_stop_deletes_templates_nothing_uses(dra_spawner, api, pods_gone):
    a, b = dra_spawner(), dra_spawner()
    await pod_for(a, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    await pod_for(b, {"profile": "gpu", "gpu_pool": MIG.id, "gpus": 1})
    assert len(api.templates) == 2
    a_template = a._spawn.dra_template.split("/", 1)[1]
    await a.stop()  # b's spawn still uses its template: only a's goes
    assert api.deleted == [a_template]
    await b.stop()
    assert api.templates == {}


@pytest.mark.parametrize("lost", [aiohttp.ClientPayloadError("Response payload is not completed"),
                                  aiohttp.ServerDisconnectedError(), asyncio.TimeoutError()],
                         ids=["cut-mid-body", "disconnected", "timeout"])
async def test_a_lost_reply_while_cleaning_up_never_fails_the_stop(dra_spawner, api, pods_gone, lost, caplog):
    """The pod is gone; a template left behind is deleted at a later stop."""
    a = dra_spawner()
    await pod_for(a, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})

    async def lost_list(namespace, label_selector, _preload_content):
        raise lost

    api.list_namespaced_resource_claim_template = lost_list
    await a.stop()
    assert "Could not clean up GPU claim templates in namespace jhub" in caplog.text
    assert len(api.templates) == 1 and a._spawn.dra_template is None


async def test_a_restarted_hub_still_cleans_up_at_stop(dra_spawner, api, pods_gone, monkeypatch):
    a = dra_spawner()
    await pod_for(a, {"profile": "gpu", "gpu_pool": FULL.id, "gpus": 1})
    state = a.get_state()
    assert state["gpu_dra_template"] == a._spawn.dra_template
    monkeypatch.setattr(dra_glue, "_in_use", type(dra_glue._in_use)())  # the new hub process knows no spawn
    restored = dra_spawner()
    restored.load_state(state)
    await restored.stop()
    assert api.templates == {}
