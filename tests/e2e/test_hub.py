"""End to end: the demo's hub (Kubernetes' own control plane and the node agent + real JupyterHub + real
configurable-http-proxy), used the way a researcher and a script use it."""

from __future__ import annotations

import concurrent.futures
import html
import json
import re
import shutil
import time

import pytest
import requests

from .harness import DemoHub, running_demo, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

POOL_FIELDS = {
    "id", "allocation", "resource", "product", "memory_mib", "nodes", "total", "free",
    "max_free_per_node", "driver_version", "cuda_version", "scale_up", "display_name", "sharing", "replicas",
    "fits_profiles", "queue", "refused_by_taint", "images",
}


# the demo's server command, behind a line that says which devices the container got (what the device
# plugin's NVIDIA_VISIBLE_DEVICES gives the server, read back through pods/log); it starts 2 s late, so
# that a test can read the spawn's progress while it runs
DEVICES_CONFIG = """
c.GPUSpawner.cmd = ["sh", "-c", 'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-}"; sleep 2; exec "$0" "$@"',
                    "jupyterhub-singleuser"]
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_demo(DEVICES_CONFIG, tmp_path_factory.mktemp("hub")) as h:
        yield h


def devices(hub: DemoHub, pod: dict) -> list[str]:
    """The device ids the server's container got, from the first line it printed."""
    meta = pod["metadata"]
    text = hub.kube_text(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log")
    m = re.search(r"^NVIDIA_VISIBLE_DEVICES=(.*)$", text, re.M)
    assert m, f"the server did not print its devices: {text[:500]}"
    return [d for d in m.group(1).split(",") if d]


def spawn_watching_progress(hub: DemoHub, user: str, server: str, body: dict) -> tuple[requests.Response, list[str]]:
    """POST the spawn and read its progress stream (server-sent events) while it runs, until it says
    ready or failed; the answer to the POST and the messages."""
    path = f"/users/{user}/servers/{server}" if server else f"/users/{user}/server"
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        answer = ex.submit(hub.api, "POST", path, json=body)
        deadline = time.monotonic() + 60
        messages: list[str] = []
        while not messages and time.monotonic() < deadline:
            r = requests.get(f"{hub.url}/hub/api{path}/progress", headers={"Authorization": f"token {hub.token}"},
                             stream=True, timeout=120)
            if r.status_code != 200:  # not pending yet
                time.sleep(0.05)
                continue
            for line in r.iter_lines(decode_unicode=True):
                if line and line.startswith("data:"):
                    event = json.loads(line[5:])
                    messages.append(event.get("message", ""))
                    if event.get("ready") or event.get("failed"):
                        break
        return answer.result(), messages


def gpu_limits(pod: dict) -> dict[str, str]:
    limits: dict[str, str] = {}
    for c in pod["spec"]["containers"]:
        for k, v in (c.get("resources", {}).get("limits") or {}).items():
            if "/" in k:
                limits[k] = v
    return limits


def user_pod(hub: DemoHub, user: str, server: str = "") -> dict:
    pods = hub.pods("jupyterhub", labelSelector=f"hub.jupyter.org/username={user}")
    if server:
        pods = [p for p in pods if p["metadata"].get("annotations", {}).get("hub.jupyter.org/servername") == server]
    else:
        pods = [p for p in pods if not p["metadata"].get("annotations", {}).get("hub.jupyter.org/servername")]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def node_pool_matches(hub: DemoHub, pod: dict, pool: dict) -> None:
    """The pod sits on a node of the pool it asked for, with its limits, affinity and tolerations."""
    node = hub.nodes()[pod["spec"]["nodeName"]]
    labels = node["metadata"].get("labels", {})
    if pool["product"]:
        product_labels = {v for k, v in labels.items() if k.endswith("product") or k.endswith("product-name")}
        assert pool["product"] in product_labels, (pool["product"], labels)
    affinity = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    assert required, "the pod must carry a required node affinity that keeps it in its pool"
    # every node taint with a schedule-blocking effect is tolerated by the pod
    tolerations = pod["spec"].get("tolerations", [])
    for taint in node["spec"].get("taints", []):
        if taint["effect"] not in ("NoSchedule", "NoExecute"):
            continue
        assert any(
            t.get("key") == taint["key"] and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
            for t in tolerations
        ), (taint, tolerations)
    for t in tolerations:
        assert t.get("key"), f"a key-less toleration would tolerate every taint: {t}"


def pick_pool(hub: DemoHub, need: int, taken: set[str] = frozenset()) -> dict:
    """A device-plugin NVIDIA pool with ``need`` free GPUs on one node (DRA pools: test_dra_e2e.py)."""
    for p in hub.gpus()["pools"]:
        if (p["nodes"] and p["max_free_per_node"] >= need and p["id"] not in taken
                and not p["resource"].startswith("amd.com") and p["allocation"] == "device-plugin"):
            return p
    raise AssertionError(f"the demo cluster has no pool with {need} free GPUs on one node: {hub.gpus()}")


def test_capacity_api_exact_shape(hub):
    data = hub.gpus()
    assert list(data) == ["pools", "synced", "healthy", "error", "age_seconds"]
    assert data["synced"] is True and data["healthy"] is True and data["error"] is None
    assert isinstance(data["age_seconds"], float)
    assert len(data["pools"]) >= 4
    for pool in data["pools"]:
        # the exact keys, then the idle rule: the demo gives its hub the culler's rules (gpu_cull_rules)
        assert set(pool) == POOL_FIELDS | {"idle_rule"}, pool
        assert list(pool)[-1] == "idle_rule" and pool["idle_rule"].startswith("This server is stopped after "), pool
        assert 0 <= pool["free"] <= pool["total"]
        assert pool["max_free_per_node"] <= pool["free"] or pool["nodes"] == 0
    resources = {p["resource"] for p in data["pools"]}
    assert "nvidia.com/gpu" in resources
    assert any(r.startswith("nvidia.com/mig-") for r in resources), resources
    scale = [p for p in data["pools"] if p["scale_up"]]
    assert scale, "the demo declares a scale-from-zero pool"
    assert set(scale[0]["scale_up"]) == {"max_nodes", "gpus_per_node", "minutes"}
    assert any(p["nodes"] == 0 for p in scale)
    # GPUs held by another namespace's pods are not free
    assert any(p["free"] < p["total"] for p in data["pools"])


def test_capacity_api_needs_authentication(hub):
    r = hub.api("GET", "/gpus", headers={"Authorization": "token not-a-real-token"})
    assert r.status_code in (401, 403)


def test_capacity_api_for_a_user_token(hub):
    hub.create_user("carol")
    r = hub.api("POST", "/users/carol/tokens", json={"note": "e2e"})
    assert r.status_code == 201, r.text
    token = r.json()["token"]
    r = hub.api("GET", "/gpus", headers={"Authorization": f"token {token}"})
    assert r.status_code == 200
    assert r.json()["pools"]


def test_spawn_page_lists_pools_with_free_counts(hub):
    session = hub.login("dora")
    r = session.get(f"{hub.url}/hub/spawn", timeout=30)
    assert r.status_code == 200
    page = html.unescape(r.text)
    assert 'name="profile"' in page and 'value="gpu"' in page and 'value="cpu"' in page
    for pool in hub.gpus()["pools"]:
        assert f'value="{pool["id"]}"' in page, pool["id"]
        if pool["nodes"]:
            assert f'{pool["free"]} of {pool["total"]}' in page, (pool["id"], pool["free"], pool["total"])


def spawn_form(hub: DemoHub, session, user: str, data: dict):
    """Submit the spawn form as the browser does: to the form's own action (which carries _xsrf)."""
    page = session.get(f"{hub.url}/hub/spawn/{user}", timeout=30)
    action = re.search(r'<form[^>]*action="([^"]+)"', page.text)
    assert action, page.text[:2000]
    return session.post(f"{hub.url}{html.unescape(action.group(1))}", data=data, timeout=60)


def test_spawn_through_the_form_reaches_the_server_and_frees_on_stop(hub):
    pool = pick_pool(hub, 1)
    before = pool["free"]
    session = hub.login("alice")
    r = spawn_form(
        hub, session, "alice",
        {"profile": "gpu", "profile-option-gpu--gpu_pool": pool["id"], "profile-option-gpu--gpus": "1"},
    )
    assert r.status_code == 200, r.text[:2000]
    hub.wait_ready("alice")
    pod = user_pod(hub, "alice")
    assert gpu_limits(pod) == {pool["resource"]: "1"}
    node_pool_matches(hub, pod, pool)
    # extended resources cannot be overcommitted: the pod's GPU request equals its limit, exactly
    c = pod["spec"]["containers"][0]
    assert c["resources"]["requests"][pool["resource"]] == c["resources"]["limits"][pool["resource"]] == "1"

    # the server answers through the proxy (the session follows the OAuth dance)
    r = session.get(f"{hub.url}/user/alice/api", timeout=60)
    assert r.status_code == 200, r.text[:500]
    assert "version" in r.json()

    wait_for(lambda: hub.pool(pool["id"])["free"] == before - 1, 30, "the free count to drop")

    r = hub.api("DELETE", "/users/alice/server")
    assert r.status_code in (202, 204)
    hub.wait_stopped("alice")
    wait_for(lambda: hub.pool(pool["id"])["free"] == before, 60, "the free count to come back")


def test_spawn_through_the_rest_api_with_a_named_server(hub):
    pool = pick_pool(hub, 2)
    before = pool["free"]
    hub.create_user("bob")
    r, messages = spawn_watching_progress(hub, "bob", "train", {"profile": "gpu", "gpu_pool": pool["id"], "gpus": "2"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("bob", "train")
    pod = user_pod(hub, "bob", "train")
    assert gpu_limits(pod) == {pool["resource"]: "2"}
    node_pool_matches(hub, pod, pool)
    # the scheduler's Scheduled event, in GPU words, with the node it chose
    got = re.compile(rf"Got 2 GPUs in pool {re.escape(pool['display_name'])}.* on node "
                     rf"{re.escape(pod['spec']['nodeName'])}; preparing your server\.")
    assert any(got.fullmatch(m) for m in messages), messages
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env", [])}
    assert env.get("JUPYTERHUB_USER") == "bob"
    # another server in the same pool, running at the same time
    hub.create_user("bella")
    r = hub.api("POST", "/users/bella/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("bella")
    # the device plugin's share: two distinct devices, and no other running pod holds either
    mine = devices(hub, pod)
    assert len(mine) == 2 and len(set(mine)) == 2, mine
    others = devices(hub, user_pod(hub, "bella"))
    assert len(others) == 1 and not set(mine) & set(others), (mine, others)
    wait_for(lambda: hub.pool(pool["id"])["free"] == before - 3, 30, "the free count to drop by 3")
    for path in ("/users/bob/servers/train", "/users/bella/server"):
        assert hub.api("DELETE", path).status_code in (202, 204)
    hub.wait_stopped("bob", "train")
    hub.wait_stopped("bella")
    wait_for(lambda: hub.pool(pool["id"])["free"] == before, 60, "the free count to come back")


@pytest.mark.parametrize(
    "options, words",
    [
        pytest.param({"profile": "gpu", "gpu_pool": "no-such:pool:nvidia.com/gpu", "gpus": 1},
                     "unknown pool 'no-such:pool:nvidia.com/gpu'; pools that would work for this image: NVIDIA ",
                     id="unknown-pool"),
        pytest.param({"profile": "gpu", "gpus": 0}, "`gpus` must be at least 1, not 0", id="zero-gpus"),
        pytest.param({"profile": "gpu", "gpus": "two"},
                     "`gpus` must be a whole number of GPUs written as digits, such as 1 or \"2\", not 'two'",
                     id="not-a-number"),
        pytest.param({"profile": "gpu", "gpus": 1000}, "choose between 1 and ", id="too-many"),
        pytest.param({"profile": "nope"}, "unknown profile 'nope'; profiles you can use: cpu, gpu", id="unknown-profile"),
        pytest.param({"profile": "gpu", "gpus": 1, "node_selector": {"a": "b"}},
                     "user options may not set `node_selector`; choose a profile instead", id="node-selector"),
        pytest.param({"profile": "cpu", "image": "evil/image"}, "user options may not set `image`", id="image"),
        pytest.param({"profile": "gpu", "gpus": 1, "tolerations": [{"operator": "Exists"}]},
                     "user options may not set `tolerations`", id="tolerations"),
        pytest.param({"profile": "cpu", "colour": "blue"},
                     "unknown option(s) `colour` for profile 'cpu'; it accepts: profile", id="unknown-key"),
    ],
)
def test_bad_options_are_refused_with_400_and_no_pod(hub, options, words):
    hub.create_user("mallory")
    r = hub.api("POST", "/users/mallory/server", json=options)
    assert r.status_code == 400, (r.status_code, r.text)
    message = r.json().get("message", "")
    assert words in message, message
    assert not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=mallory")
    # nothing is left pending: the next good request works
    assert not (hub.server("mallory") or {}).get("pending")


def test_the_demo_shows_the_cuda_check_per_pool_and_image(hub):
    """The demo's GPU profile declares its images' CUDA: each pool card says how each image fits."""
    page = hub.login("heidi").get(f"{hub.url}/hub/spawn", timeout=30).text

    def fit(pool: dict) -> dict[str, tuple[str, str]]:
        card = re.search(r'value="%s".*?</div>' % re.escape(html.escape(pool["id"])), page, re.S)
        assert card, pool["id"]
        return {
            choice: (level, html.unescape(text).strip())
            for level, choice, text in re.findall(
                r'<p class="gs-cuda gs-cuda-(\w+)"[^>]*data-gs-image-choice="(\w+)">\s*<strong>[^<]*</strong>([^<]*)</p>',
                card.group(0),
            )
        }

    t4, a100 = fit(hub.pool_of("T4")), fit(hub.pool_of("A100-SXM4-40GB"))
    assert t4["cuda12"][0] == "fail" and t4["cuda12"][1].startswith("does not fit"), t4
    assert t4["cuda11"][0] == "warn" and t4["cuda11"][1].startswith("fits with a caveat"), t4
    assert a100["cuda12"][0] == "ok" and "caveat" in a100["cuda12"][1], a100  # its 535 node: minor-version
    assert a100["cuda11"] == ("ok", "fits"), a100
