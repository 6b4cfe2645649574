"""``GET /hub/api/gpus`` in a JupyterHub MockHub application (no proxy, no cluster).

The hub is initialized (database, users, tokens, the tornado application with
the handler registered by ``jupyterhub_config.d/gpuspawner.py``) and served on
a loopback port; it is not started, so no configurable-http-proxy runs.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from jupyterhub.tests.mocking import MockHub
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from traitlets.config import Config

from gpuspawner import config_snippet
import gpuspawner.capacity.cache as cache_module
from gpuspawner.capacity.model import ScaleUp
from gpuspawner.capacity.nodeimages import NodeImages
from gpuspawner.hub.handlers import GPUCapacityHandler
from gpuspawner.hub.gpu_hours_handlers import CUSTOM_SCOPES as usage_scopes
from gpuspawner.hub.gpu_hours_handlers import handlers as usage_handlers
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.templates import hub_template_dir
from gpuspawner.hub.spawner import GPUSpawner
from gpuspawner.hub import capacity_access, form_assets
from tests.builders import FakeCache, make_spawner, pool_view
from tests.builders.dra import counted_dra_pools

SNIPPET = Path(str(config_snippet()))
KEYS = ["id", "allocation", "resource", "product", "memory_mib", "nodes", "total", "free", "max_free_per_node",
        "driver_version", "cuda_version", "scale_up", "display_name", "sharing", "replicas", "queue",
        "fits_profiles", "refused_by_taint", "images"]


# two-node pools of 80 GB cards, driver 535 (CUDA 12.2), at most 8 free on one node
def pool(group, product, *, free, total, scale_up=None):
    return pool_view(group, product, nodes=2, total=total, free=free, per_node=min(free, 8), memory_mib=81920,
                     driver="535.183.01", cuda="12.2", scale_up=scale_up)


A100 = pool("a100", "NVIDIA-A100-SXM4-80GB", free=5, total=16)
H100 = pool("h100", "NVIDIA-H100-80GB-HBM3", free=0, total=0, scale_up=ScaleUp(max_nodes=4, gpus_per_node=8, minutes=6.5))
SECRET = pool("secret", "NVIDIA-B200", free=8, total=8)


def fake_cache(*pools):
    return FakeCache(*pools, age_seconds=1.23456, generation=4)


def load_snippet() -> Config:
    c = Config()
    # as traitlets' loader runs a config file: `c` and `get_config` in its namespace
    exec(compile(SNIPPET.read_text(), str(SNIPPET), "exec"), {"c": c, "get_config": lambda: c})
    return c


@pytest.fixture
async def hub(mock_hub):
    """The snippet's config; (url of /hub/api/gpus, token of a plain user)."""
    c = load_snippet()
    c.GPUSpawner.gpu_pool_rules = [{"match": "secret:*", "hide": True}, {"match": "h100:*"}]
    served = await mock_hub(c)
    return served.api + "gpus", served.token


@pytest.fixture
async def hub_for_spawn(mock_hub):
    """A hub with a GPU profile; (base API url, token of the user 'user')."""
    c = load_snippet()
    c.GPUSpawner.gpu_profiles = [{"slug": "gpu"}]
    c.GPUSpawner.profile_list = [{"display_name": "CPU", "slug": "cpu"}]
    served = await mock_hub(c)
    return served.api, served.token


async def get(url, token=None):
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        r = await AsyncHTTPClient().fetch(url, headers=headers, request_timeout=30)
    except HTTPClientError as e:
        return e.code, json.loads(e.response.body)
    return r.code, json.loads(r.body)


def test_snippet_sets_spawner_and_registers_handler_only():
    c = load_snippet()
    assert c.JupyterHub.spawner_class == "gpu"
    handlers = c.JupyterHub.extra_handlers.get_value([])
    assert handlers == [(r"/api/gpus", GPUCapacityHandler), *form_assets.handlers(), *usage_handlers]
    assert set(c) == {"JupyterHub"}  # nothing site-specific
    # the scopes of GET /hub/api/gpus and of the GPU-hour endpoints, the user role that reads GPU
    # capacity, the home page (Kueue's notice, GPU-hours) and its variable
    assert set(c.JupyterHub) == {"spawner_class", "extra_handlers", "custom_scopes", "template_paths", "template_vars",
                                 "load_roles"}
    assert set(c.JupyterHub.custom_scopes.get_value({})) == {"custom:gpus:read", *usage_scopes}
    assert c.JupyterHub.load_roles.get_value([]) == [
        {"name": "user", "description": "Standard user privileges, and reading GPU capacity",
         "scopes": ["self", "custom:gpus:read"]}]
    assert c.JupyterHub.template_paths.get_value([]) == [hub_template_dir()]


async def test_capacity_for_a_plain_user_token(hub, install_cache):
    url, token = hub
    fake = install_cache(fake_cache(A100, SECRET, H100))
    code, body = await get(url, token)
    assert code == 200
    assert list(body) == ["pools", "synced", "healthy", "error", "age_seconds"]
    assert body["synced"] is True and body["healthy"] is True and body["error"] is None and body["age_seconds"] == pytest.approx(1.235)
    # admin's order (h100 rule first), hidden pool left out, exact keys
    assert [p["id"] for p in body["pools"]] == [H100.id, A100.id]
    assert all(list(p) == KEYS for p in body["pools"])
    assert {p["allocation"] for p in body["pools"]} == {"device-plugin"}
    assert body["pools"][0]["scale_up"] == {"max_nodes": 4, "gpus_per_node": 8, "minutes": 6.5}
    # no gpu_kueue_queues: not queued; no CPU or memory asked: every profile fits
    assert {k: v for k, v in body["pools"][1].items() if k != "fits_profiles"} == {**A100.to_json(), "queue": None,
                                                                                    "refused_by_taint": None, "images": {}}
    assert all(set(p["fits_profiles"].values()) <= {True} for p in body["pools"])
    assert fake.snapshots == 1


@pytest.mark.parametrize("token", [None, "not-a-token"], ids=["anonymous", "bad-token"])
async def test_refused_without_authentication(hub, install_cache, token):
    url, _ = hub
    fake = install_cache(fake_cache(A100))
    code, body = await get(url, token)
    assert code == 403
    assert "API token" in body["message"]
    assert fake.snapshots == 0


class _Resp:
    def __init__(self, status, body):
        self.status, self._body = status, body

    async def read(self):
        return self._body

    def release(self):
        pass


class ForbiddenApi:
    """CoreV1Api stand-in for a hub with only the namespaced Z2JH Role."""

    def __init__(self):
        self.calls = 0

    async def _forbidden(self, **params):
        self.calls += 1
        return _Resp(403, json.dumps({"kind": "Status", "code": 403, "message": 'nodes is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource "nodes" in API group "" at the cluster scope'}).encode())

    list_node = _forbidden
    list_pod_for_all_namespaces = _forbidden


async def test_first_request_starts_the_shared_cache_and_reports_unknown(hub, no_kube_client, monkeypatch, caplog):
    url, token = hub
    api = ForbiddenApi()
    monkeypatch.setattr(cache_module, "_default_api", lambda: api)
    code, body = await get(url, token)
    assert code == 200 and body["pools"] == [] and body["synced"] is False
    # the cache the handler started is the one spawners share; it settles as forbidden
    shared = GPUSpawnerSettings.from_hub_config(load_snippet(), GPUSpawner).shared_capacity_cache()
    assert await shared.wait_synced(timeout=20) is False
    assert api.calls >= 1
    assert "nodes: list, watch" in shared.snapshot().error

    # a spawner in the same process keeps serving static profiles and says why GPUs are unknown
    monkeypatch.setattr(capacity_access, "_logged", set())
    spawner = make_spawner("ada", server=False, profile_list=[{"display_name": "CPU", "slug": "cpu"}],
                           gpu_profiles=[{"slug": "gpu"}], gpu_capacity_sync_timeout=1.0)
    with caplog.at_level(logging.WARNING):
        form = await spawner.get_options_form()
    assert "profile-item-cpu" in form and "GPU capacity is unknown" in form
    assert any("nodes: list, watch" in r.getMessage() and "deploy/rbac.yaml" in r.getMessage() for r in caplog.records)


@pytest.fixture
def gpu_hub_spawner(no_kube_client, install_cache, monkeypatch):
    """What a POST /users/{name}/server needs without a cluster."""
    import kubespawner.spawner

    async def no_delete(self, now=False):
        return None

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "stop", no_delete)

    async def no_pod(self):
        raise AssertionError("a pod would have been created")

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_make_create_pod_request", no_pod)
    fake = install_cache(fake_cache(A100))
    fake.reserve = lambda *a: pytest.fail("nothing may be reserved for a refused spawn")
    return fake


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 9}, 400, "choose between 1 and 5 GPUs in NVIDIA A100 80GB (asked for 9)"),
        ({"profile": "gpu", "gpus": "2.5"}, 400, "must be a whole number"),
        ({"profile": "gpu", "node_selector": {"kubernetes.io/hostname": "n1"}}, 400, "may not set `node_selector`"),
        ({"user_options": {"profile": "gpu", "gpu_pool": "nope"}}, 400, "unknown pool 'nope'"),
    ],
    ids=["too-many", "fraction", "node-selector", "new-body-schema"],
)
async def test_rest_spawn_mistakes_are_400_with_the_message(hub_for_spawn, gpu_hub_spawner, body, status, message):
    base, token = hub_for_spawn
    try:
        r = await AsyncHTTPClient().fetch(
            f"{base}users/user/server", method="POST", body=json.dumps(body),
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"}, request_timeout=30,
        )
        code, reply = r.code, r.body
    except HTTPClientError as e:
        code, reply = e.code, e.response.body
    assert code == status
    assert message in json.loads(reply)["message"]


async def test_each_pool_gets_its_idle_rule_when_the_culler_s_rules_are_configured(install_cache, mock_hub):
    c = load_snippet()
    c.GPUSpawner.gpu_cull_rules = {"idle_timeout": "1h", "pools": {H100.id: {"idle_timeout": "30m"}}}
    served = await mock_hub(c)
    install_cache(fake_cache(A100, H100))
    code, body = await get(served.api + "gpus", served.token)
    assert code == 200
    rules = {p["id"]: p["idle_rule"] for p in body["pools"]}
    assert rules[H100.id].startswith("This server is stopped after 30m ")
    assert rules[A100.id].startswith("This server is stopped after 60m ")
    assert all(list(p) == KEYS + ["idle_rule"] for p in body["pools"])  # a new key after the exact ones


async def test_each_pool_says_on_how_many_of_its_nodes_each_fitting_image_is_cached(install_cache, mock_hub):
    c = load_snippet()
    c.GPUSpawner.cuda_policy = "strict"
    # the CUDA 12.6 choice cannot run on the pools' driver 535 (CUDA 12.2): it is no image of theirs
    c.GPUSpawner.gpu_profiles = [{
        "slug": "gpu", "cuda": "12.1", "kubespawner_override": {"image": "pt:cu121"},
        "profile_options": {"image": {"choices": {
            "cu121": {"display_name": "CUDA 12.1", "default": True},
            "cu126": {"kubespawner_override": {"image": "pt:cu126"}, "cuda": "12.6"},
            "plain": {"kubespawner_override": {"image": "quay.io/jupyter/base-notebook:2026"}},
        }}},
    }]
    served = await mock_hub(c)
    counts = NodeImages()
    # a DRA pool (driver 550: CUDA 12.4) on d1 and d2, whose nodes come from their ResourceSlices
    (dra,) = counted_dra_pools(counts, {"d1": (4, {"docker.io/library/pt:cu121": 15 << 30}), "d2": (4, {})})
    fake = install_cache(fake_cache(A100, H100, dra))
    fake.node_images = counts
    # as the kubelet reports them: fully qualified, and by digest
    fake.node_images.update("a1", [A100.id], {"docker.io/library/pt:cu121": 15 << 30})
    fake.node_images.update("a2", [A100.id], {"docker.io/library/pt:cu121": 15 << 30,
                                              "quay.io/jupyter/base-notebook:2026": 1 << 30})
    fake.node_images.update("a3", [A100.id], {"docker.io/library/pt:cu126": 15 << 30})
    code, body = await get(served.api + "gpus", served.token)
    assert code == 200
    images = {p["id"]: p["images"] for p in body["pools"]}
    assert images[A100.id] == {
        "pt:cu121": {"cached_nodes": 2, "nodes": 3},
        "quay.io/jupyter/base-notebook:2026": {"cached_nodes": 1, "nodes": 3},
    }
    assert images[H100.id] == {
        "pt:cu121": {"cached_nodes": 0, "nodes": 0},
        "quay.io/jupyter/base-notebook:2026": {"cached_nodes": 0, "nodes": 0},
    }
    assert images[dra.id] == {
        "pt:cu121": {"cached_nodes": 1, "nodes": 2},
        "quay.io/jupyter/base-notebook:2026": {"cached_nodes": 0, "nodes": 2},
    }


async def login(hub_url: str, name: str) -> str:
    """Sign ``name`` in through the hub's login form (MockHub's authenticator takes the name as
    password); the Cookie header of the session."""
    from http.cookies import SimpleCookie
    from urllib.parse import urlencode

    client = AsyncHTTPClient()
    jar = SimpleCookie()

    def keep(response):
        for header in response.headers.get_list("Set-Cookie"):
            jar.load(header)

    r = await client.fetch(hub_url + "login", request_timeout=30)
    keep(r)
    body = urlencode({"username": name, "password": name, "_xsrf": jar["_xsrf"].value})
    try:
        r = await client.fetch(hub_url + "login", method="POST", body=body, follow_redirects=False, request_timeout=30,
                               headers={"Cookie": "; ".join(f"{k}={v.value}" for k, v in jar.items())})
    except HTTPClientError as e:  # the 302 to the home page
        r = e.response
    keep(r)
    return "; ".join(f"{k}={v.value}" for k, v in jar.items())


async def test_the_home_page_says_why_kueue_stopped_the_users_server(no_kube_client, hub_for_spawn):
    api, _token = hub_for_spawn
    hub_url = api[: -len("api/")]
    cookie = await login(hub_url, "user")
    spawner = MockHub.instance().users["user"].spawner

    async def home():
        r = await AsyncHTTPClient().fetch(hub_url + "home", headers={"Cookie": cookie}, follow_redirects=False,
                                          request_timeout=30)
        return r.body.decode()

    page = await home()
    assert 'id="start"' in page  # signed in: JupyterHub's own home page, its start button
    assert "Your last server was stopped" not in page
    spawner.gpu_stop_message = "Preempted in gpu-a100: a server with <higher> priority needed its GPU quota."
    page = await home()
    assert ("Your last server was stopped: Preempted in gpu-a100: a server with &lt;higher&gt; priority needed "
            "its GPU quota.") in page
    assert 'id="start"' in page


async def test_the_scope_can_be_taken_away_by_defining_the_user_role(install_cache, mock_hub):
    c = Config()
    c.JupyterHub.load_roles = [{"name": "user", "scopes": ["self"]}]  # the admin's own, without the scope
    exec(compile(SNIPPET.read_text(), str(SNIPPET), "exec"), {"c": c, "get_config": lambda: c})
    assert c.JupyterHub.load_roles == [{"name": "user", "scopes": ["self"]}]  # left as the admin wrote it
    install_cache(fake_cache(A100))
    served = await mock_hub(c)
    code, body = await get(served.api + "gpus", served.token)
    assert code == 403 and "custom:gpus:read" in body["message"]
