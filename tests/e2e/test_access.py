"""End to end: allowed groups and GPU quotas through the REST API.

The demo hub gets a site config with a group-only pool, a group-only profile
and GPU quotas; groups are created and filled through ``/hub/api/groups``, as
an admin (or an authenticator with ``manage_groups``) would.
"""

from __future__ import annotations

import shutil
import textwrap
from concurrent.futures import ThreadPoolExecutor

import pytest

from .harness import DemoHub, running_demo, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

A100_GLOB = "gpu-a100-pool:*"

SITE_CONFIG = textwrap.dedent(
    """
    c = get_config()
    c.GPUSpawner.gpu_pool_rules = [
        {"match": "gpu-a100-pool:*", "allowed_groups": ["a100-users"]},
    ]
    c.GPUSpawner.gpu_profiles = [
        {"slug": "gpu", "display_name": "GPU server", "max_gpus": 8,
         "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"}},
        {"slug": "team", "display_name": "Team GPUs", "allowed_groups": ["team"],
         "pools": {"include": ["gput4:*"]}},
    ]
    c.GPUSpawner.gpu_quota = 1
    c.GPUSpawner.gpu_quota_by_group = {"a100-users": 2}
    """
)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_demo(SITE_CONFIG, tmp_path_factory.mktemp("access")) as h:
        yield h


def user_token(hub: DemoHub, name: str) -> dict:
    hub.create_user(name)
    r = hub.api("POST", f"/users/{name}/tokens", json={"note": "e2e access"})
    assert r.status_code == 201, r.text
    return {"Authorization": f"token {r.json()['token']}"}


def add_to_group(hub: DemoHub, group: str, *users: str) -> None:
    r = hub.api("POST", f"/groups/{group}", json={"users": list(users)})
    if r.status_code == 409:  # the group exists: add the users
        r = hub.api("POST", f"/groups/{group}/users", json={"users": list(users)})
    assert r.status_code in (200, 201), r.text


def pool_ids(hub: DemoHub, headers: dict | None = None) -> set[str]:
    r = hub.api("GET", "/gpus", headers=headers or {})
    assert r.status_code == 200, r.text
    return {p["id"] for p in r.json()["pools"]}


def a100_pool(hub: DemoHub) -> str:
    return next(p for p in pool_ids(hub) if p.startswith("gpu-a100-pool:"))


def free_pool(hub: DemoHub, need: int = 1) -> str:
    """A pool open to everyone with ``need`` free GPUs on one node (NVIDIA, not the A100s)."""
    for p in hub.gpus()["pools"]:
        if (
            not p["id"].startswith("gpu-a100-pool:")
            and p["resource"].startswith("nvidia.com/")
            and p["nodes"]
            and p["max_free_per_node"] >= need
        ):
            return p["id"]
    raise AssertionError(f"no open pool with {need} free GPUs: {hub.gpus()}")


def user_pods(hub: DemoHub, user: str) -> list[dict]:
    return hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={user}")


def stop_all(hub: DemoHub, user: str, *servers: str) -> None:
    for name in servers:
        path = f"/users/{user}/servers/{name}" if name else f"/users/{user}/server"
        hub.api("DELETE", path)
    for name in servers:
        hub.wait_stopped(user, name)


def test_capacity_api_lists_only_the_pools_a_user_may_use(hub):
    everyone = pool_ids(hub)  # the admin service sees all
    a100 = a100_pool(hub)
    headers = user_token(hub, "erin")
    assert pool_ids(hub, headers) == everyone - {a100}
    add_to_group(hub, "a100-users", "erin")
    assert pool_ids(hub, headers) == everyone


@pytest.mark.parametrize(
    "options, status, words",
    [
        pytest.param({"profile": "gpu", "gpu_pool": "A100"}, 403, "a100-users", id="closed-pool"),
        pytest.param({"gpu_pool": "A100"}, 403, "not available to you", id="closed-pool-default-profile"),
        pytest.param({"profile": "team"}, 403, "'team'", id="closed-profile"),
        pytest.param({"profile": "team", "gpu_pool": "T4", "gpus": "1"}, 403, "'team'", id="closed-profile-and-pool"),
        pytest.param({"profile": "gpu", "gpu_pool": "A100-UPPER"}, 400, "unknown pool", id="other-case"),
        pytest.param({"profile": "gpu", "gpu_pool": "A100-SPACES"}, 400, "unknown pool", id="spaces"),
        pytest.param({"profile": "gpu", "gpu_pool": A100_GLOB}, 400, "unknown pool", id="glob"),
        pytest.param(
            {"profile": "gpu", "gpu_pool": "T4", "node_selector": {"cloud.google.com/gke-nodepool": "gpu-a100-pool"}},
            400,
            "node_selector",
            id="node-selector-onto-closed-nodes",
        ),
    ],
)
def test_a_pool_or_profile_of_other_groups_is_refused_and_no_pod_is_made(hub, options, status, words):
    a100 = a100_pool(hub)
    t4 = next(p for p in pool_ids(hub) if p.startswith("gput4:"))
    replace = {"A100": a100, "A100-UPPER": a100.upper(), "A100-SPACES": f" {a100} ", "T4": t4}
    options = {k: replace.get(v, v) if isinstance(v, str) else v for k, v in options.items()}
    hub.create_user("frank")
    r = hub.api("POST", "/users/frank/server", json=options)
    assert r.status_code == status, (r.status_code, r.text)
    message = r.json().get("message", "")
    assert words in message, message
    if status == 400:
        assert a100 not in message.replace(repr(options.get("gpu_pool")), "")
    assert not user_pods(hub, "frank")
    assert not (hub.server("frank") or {}).get("pending")


def started(r) -> None:
    """A spawn the hub accepted: 201 (ready at once) or 202 (pending). The
    servers below are stopped again without waiting for them to be ready:
    a pending server already counts against the quota, and starting
    jupyterhub-singleuser is what makes a demo spawn slow."""
    assert r.status_code in (201, 202), (r.status_code, r.text)


def test_group_members_get_the_closed_pool_and_profile(hub):
    hub.create_user("gwen")
    add_to_group(hub, "team", "gwen")
    t4 = next(p for p in pool_ids(hub) if p.startswith("gput4:"))
    started(hub.api("POST", "/users/gwen/servers/t", json={"profile": "team", "gpu_pool": t4, "gpus": 1}))
    (pod,) = wait_for(lambda: user_pods(hub, "gwen"), 60, "gwen's pod")
    assert pod["metadata"]["annotations"]["gpuspawner.io/pool"] == t4
    stop_all(hub, "gwen", "t")


def test_quota_counts_named_and_pending_servers(hub):
    pool = free_pool(hub)
    hub.create_user("hugo")
    started(hub.api("POST", "/users/hugo/servers/one", json={"profile": "gpu", "gpu_pool": pool, "gpus": 1}))
    r = hub.api("POST", "/users/hugo/server", json={"profile": "gpu", "gpus": "1"})
    assert r.status_code == 403, r.text
    assert "you hold 1 GPU (server 'one': 1) and may hold 1 (the default quota)" in r.json()["message"]
    assert not (hub.server("hugo") or {}).get("pending")
    # a server without GPUs is not limited
    started(hub.api("POST", "/users/hugo/servers/notes", json={"profile": "cpu"}))
    # a group quota replaces the default
    add_to_group(hub, "a100-users", "hugo")
    r = hub.api("POST", "/users/hugo/servers/two", json={"profile": "gpu", "gpus": 2})
    assert r.status_code == 403, r.text
    assert "may hold 2 (the quota of group 'a100-users'): stop a server or ask for 1" in r.json()["message"]
    stop_all(hub, "hugo", "one", "notes")
    # once stopped, its GPUs are no longer held
    started(hub.api("POST", "/users/hugo/servers/two", json={"profile": "gpu", "gpus": 2}))
    stop_all(hub, "hugo", "two")


def test_two_spawns_at_once_do_not_both_pass_the_quota(hub):
    pool = free_pool(hub, 2)
    hub.create_user("ivy")

    def spawn(name):
        return hub.api("POST", f"/users/ivy/servers/{name}", json={"profile": "gpu", "gpu_pool": pool, "gpus": 1})

    with ThreadPoolExecutor(2) as ex:
        results = dict(zip(["x", "y"], ex.map(spawn, ["x", "y"])))
    codes = sorted(r.status_code for r in results.values())
    assert codes[1] == 403 and codes[0] in (201, 202), [(r.status_code, r.text) for r in results.values()]
    (name,) = [n for n, r in results.items() if r.status_code != 403]
    wait_for(lambda: user_pods(hub, "ivy"), 60, "ivy's pod")
    assert len(user_pods(hub, "ivy")) == 1
    stop_all(hub, "ivy", name)


def test_admins_have_no_quota(hub):
    pool = free_pool(hub, 2)
    started(hub.api("POST", "/users/admin/servers/big", json={"profile": "gpu", "gpu_pool": pool, "gpus": 2}))
    stop_all(hub, "admin", "big")
