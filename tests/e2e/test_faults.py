"""End to end under faults and hostile load: the demo's hub (real JupyterHub and configurable-http-proxy)
on Kubernetes' own control plane, reaching its API server through the fault proxy, driven over HTTP only.

The scenarios are the scripts of ``scripts/faults/`` run with CI sizes: 1,000 hostile REST bodies
(the script sends 10,000), 64 concurrent spawns, an API server outage of seconds (the script's is
five minutes).  Beside them, what the hostile tester found: query-string spawns that dropped
names, refusals that filled the log, a stalled watch that admitted a spawn which then waited out
the start timeout.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import time

import pytest
import requests

from scripts.faults import api_outage, concurrent_spawns, hostile_bodies

from .harness import DemoHub, running_demo, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

CONFIG = concurrent_spawns.SERVER_CONFIG + hostile_bodies.HOSTILE_CONFIG + """
c.GPUSpawner.gpu_full_pool_grace = 2
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_demo(CONFIG, tmp_path_factory.mktemp("faults")) as h:
        yield h


def log_since(hub: DemoHub, mark: int) -> str:
    return hub.log_path.read_text(errors="replace")[mark:]


def log_mark(hub: DemoHub) -> int:
    return len(hub.log_path.read_text(errors="replace"))


def a100_pool(hub: DemoHub) -> dict:
    return concurrent_spawns.pick_pool(hub, 64)


def test_live_figures_say_healthy_without_error(hub):
    data = hub.gpus()
    assert list(data) == ["pools", "synced", "healthy", "error", "age_seconds"]
    assert (data["synced"], data["healthy"], data["error"]) == (True, True, None)


# --- query-string spawns --------------------------------------------------------------------------------

def test_a_query_string_spawn_starts_what_it_names(hub):
    pool = a100_pool(hub)
    session = hub.login("quinn")
    r = session.get(f"{hub.url}/hub/spawn/quinn", params={"profile": "gpu", "gpu_pool": pool["id"], "gpus": "2"},
                    timeout=60, allow_redirects=False)
    # to the pending page (or the server once it runs); else what the hub logged
    assert r.status_code == 302, (r.status_code, hub.log()[-6000:])
    hub.wait_ready("quinn", timeout=120)
    pod = hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=quinn")[0]
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits[pool["resource"]] == "2"
    assert pod["metadata"]["annotations"]["gpuspawner.io/pool"] == pool["id"]
    assert hub.api("DELETE", "/users/quinn/server").status_code in (202, 204)
    hub.wait_stopped("quinn")


def test_a_spawn_whose_pod_creation_reply_is_cut_goes_on_with_its_pod(hub):
    """CI saw this: the API server created the pod, its reply was cut mid-body, JupyterHub answered
    500 and KubeSpawner deleted the pod. Now the start tries again, meets its own pod (409, with its
    start's ``gpuspawner.io/spawn`` token), and the server runs; a stop whose delete reply is cut
    tries again too and ends."""
    pool = a100_pool(hub)
    hub.create_user("cora")
    faults = hub.fault_proxy
    mark = log_mark(hub)
    faults.cut(verb="create", resource="pods")
    try:
        r = hub.api("POST", "/users/cora/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
        assert r.status_code in (201, 202), (r.status_code, r.text, log_since(hub, mark)[-4000:])
        hub.wait_ready("cora", timeout=120)
    finally:
        faults.clear()
    log = log_since(hub, mark)
    assert "The reply to creating pod jupyterhub/jupyter-cora did not come back" in log, log[-4000:]
    assert "Pod jupyterhub/jupyter-cora was created by an earlier try whose reply was lost" in log
    assert "Deleting pod jupyterhub/jupyter-cora" not in log  # the start's own pod was kept
    pods = hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=cora")
    assert len(pods) == 1 and pods[0]["metadata"]["annotations"]["gpuspawner.io/spawn"]

    mark = log_mark(hub)
    faults.cut(verb="delete", resource="pods")
    try:
        assert hub.api("DELETE", "/users/cora/server").status_code in (202, 204)
        hub.wait_stopped("cora")
    finally:
        faults.clear()
    assert "The reply to deleting pod jupyterhub/jupyter-cora did not come back" in log_since(hub, mark)
    wait_for(lambda: not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=cora"), 60, "the pod to go")


@pytest.mark.parametrize(
    "params, words",
    [
        ({"profile": "gpu", "gpus": "3", "node_selector": "x"}, "may not set `node_selector`"),
        ({"profile": "gpu", "gpus": "3", "colour": "blue"}, "unknown option(s) `colour` for profile 'gpu'"),
        ({"opt-profile": "gpu", "gpus": "3"},
         "the query mixes `opt-` names with plain ones (`gpus`), and JupyterHub reads only the `opt-` ones"),
        ({"profile": "cpu", "profile-option-gpu--gpus": "2"},
         "`profile-option-gpu--gpus` is an option of profile 'gpu', but the query chooses profile 'cpu'"),
        ({"profile": "gpu", "gpus": "2.0"}, "`gpus` must be a whole number of GPUs written as digits"),
    ],
    ids=["steering-name", "unknown-name", "mixed-opt-prefix", "another-profiles-field", "fraction"],
)
def test_a_query_string_spawn_that_cannot_be_read_is_refused_with_400(hub, params, words):
    session = hub.login("rory")
    r = session.get(f"{hub.url}/hub/spawn/rory", params=params, timeout=60)
    assert r.status_code == 400, (r.status_code, r.text[:500])
    assert words in html.unescape(r.text)
    assert not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=rory")
    assert not hub.server("rory")


# --- refusals: one INFO line each, no traceback ------------------------------------------------------------

def test_a_refused_form_post_is_one_info_line_without_traceback(hub):
    session = hub.login("fern")
    mark = log_mark(hub)
    page = session.get(f"{hub.url}/hub/spawn/fern", timeout=30)
    action = html.unescape(re.search(r'<form[^>]*action="([^"]+)"', page.text).group(1))
    r = session.post(f"{hub.url}{action}", data={"profile": "gpu", "profile-option-gpu--gpus": "1.0"}, timeout=60)
    assert r.status_code == 400
    assert "`gpus` must be a whole number of GPUs written as digits" in html.unescape(r.text)
    log = log_since(hub, mark)
    lines = [line for line in log.splitlines() if "fern" in line and "Refus" in line]
    assert len(lines) == 1 and lines[0].startswith("[I ") and "Refused spawn of fern (bad_count)" in lines[0], lines
    assert "Traceback" not in log
    assert "Failed to spawn single-user server with form" not in log
    assert "Not starting fern" not in log


def test_1000_hostile_bodies_are_refused_with_4xx_that_say_why(hub):
    mark = log_mark(hub)
    report = hostile_bodies.run(hub, 1000, seed=11)
    assert report.problems == [], report.problems[:10]
    assert report.bodies == 1000 and set(report.statuses) <= {400, 403, 413}
    log = log_since(hub, mark)
    assert "Traceback" not in log
    # what remains of a refusal: the spawner's INFO line and the access log's line, nothing at ERROR
    errors = [line for line in log.splitlines() if line.startswith("[E ") and " log:" not in line]
    assert errors == [], errors[:5]


# --- concurrency ---------------------------------------------------------------------------------------------

def test_64_concurrent_spawns_get_at_most_the_free_gpus(hub):
    report = concurrent_spawns.run(hub, 64)
    assert report.problems == [], report.problems
    assert 1 <= report.admitted <= report.free_before < 64
    assert report.admitted + report.refused == 64


# --- a stalled watch, GPUs gone meanwhile: the spawn ends early -------------------------------------------------

def _set_gpus(hub: DemoHub, node: str, resource: str, count: str) -> None:
    """What a node's device plugin reports, as its kubelet writes it: the Node's status, as the cluster admin."""
    r = hub.k8s.patch(f"{hub.k8s_url}/api/v1/nodes/{node}/status",
                      data=json.dumps({"status": {"allocatable": {resource: count}, "capacity": {resource: count}}}),
                      headers={"Content-Type": "application/merge-patch+json"}, timeout=10)
    r.raise_for_status()


def _progress_end(hub: DemoHub, user: str, timeout: float) -> dict:
    r = requests.get(f"{hub.url}/hub/api/users/{user}/server/progress",
                     headers={"Authorization": f"token {hub.token}"}, stream=True, timeout=timeout)
    last = {}
    for line in r.iter_lines(decode_unicode=True):
        if line and line.startswith("data:"):
            last = json.loads(line[5:])
            if last.get("failed") or last.get("ready"):
                break
    return last


def test_a_spawn_admitted_on_a_stalled_watch_fails_early_when_the_pool_is_full(hub):
    """The hostile tester stalled the hub's watch, took the GPUs, and the admitted spawn waited out the
    180 s start timeout.  Now the scheduler's ``Insufficient`` makes the hub re-list the cluster, and
    the spawn fails within seconds, saying why."""
    pool = a100_pool(hub)
    resource = pool["resource"]
    nodes = {n: obj for n, obj in hub.nodes().items()
             if obj["metadata"]["labels"].get("nvidia.com/gpu.product") == pool["product"]}
    allocatable = {n: obj["status"]["allocatable"][resource] for n, obj in nodes.items()}
    used = {n: 0 for n in nodes}
    for p in hub.pods():
        if p["spec"].get("nodeName") in used and p["status"].get("phase") not in ("Succeeded", "Failed"):
            used[p["spec"]["nodeName"]] += concurrent_spawns.gpu_requests(p).get(resource, 0)
    # the device plugin of every node with room for 2 now reports one GPU more than its pods use: no node
    # has 2 free, while the pool's largest node still has 2 or more (2 GPUs are not too many for it)
    shrink = {n: str(used[n] + 1) for n in nodes if int(allocatable[n]) - used[n] >= 2}
    if max(int(shrink.get(n, allocatable[n])) for n in nodes) < 2:
        pytest.fail(f"the demo's {pool['id']} has no busy node to keep: {allocatable}, used {used}")
    faults = hub.fault_proxy
    lists_before = faults.counts("list", "nodes")
    # a watch cut within a second of its start counts as a failure (client-go's "very short watch")
    wait_for(lambda: hub.gpus()["healthy"], 30, "live figures")
    time.sleep(1.5)
    # node watches hang for 45 s: long enough for the spawn, short of the 90 s after which the hub
    # would call the figures stale and refuse it
    faults.stall(45, verb="watch", resource="nodes")
    faults.close_watches()
    try:
        for n, count in shrink.items():  # the stalled node watch does not tell the hub
            _set_gpus(hub, n, resource, count)
        time.sleep(1)
        assert hub.pool(pool["id"])["max_free_per_node"] >= 2  # the hub still believes the old counts
        hub.create_user("stella")
        began = time.monotonic()
        r = hub.api("POST", "/users/stella/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 2})
        assert r.status_code in (201, 202, 500), r.text
        if r.status_code == 500:
            message = r.json()["message"]
        else:
            end = _progress_end(hub, "stella", timeout=150)
            assert end.get("failed"), end
            message = end["message"]
        took = time.monotonic() - began
        assert took < 60, f"the spawn took {took:.0f} s to fail (start_timeout is 180 s)"
        assert "has no node with 2 free GPUs on one node" in message and "it cannot add nodes" in message, message
        assert "the GPUs this server was counted on were taken after it was admitted" in message
        assert faults.counts("list", "nodes") > lists_before  # the hub re-checked the cluster
        wait_for(lambda: not hub.server("stella"), 60, "the failed server to be gone")
    finally:
        faults.clear()
        faults.close_watches()
        for n in shrink:
            _set_gpus(hub, n, resource, allocatable[n])
    # the watch that hangs still hangs until its 45 s are up; then it resumes with the changes
    wait_for(lambda: hub.pool(pool["id"])["max_free_per_node"] >= 2, 120, "the pool's counts to come back")


# --- the API server away, then back (last: it leaves the hub's watches restarted) ---------------------------------

def test_the_api_server_away_and_back(hub):
    report = api_outage.run(hub, outage=10, poll=2)
    assert report.problems == [], report.problems
    assert report.polls >= 2 and report.refusals == report.polls
    assert report.slowest_page_s < 1.0
    assert report.recovery_s <= 30  # the informers come back within a backoff of the API server's return
