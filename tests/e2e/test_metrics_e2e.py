"""End to end: a GPU spawn that can never start ends early with the reason, a pool whose nodes
carry a taint no server tolerates is refused before any pod with that taint and the fix, and
``/hub/metrics`` shows gpuspawner's series (pools, started / refused / failed spawns, the wait for
a GPU), on the demo's hub and its default cluster (Kubernetes' own control plane).

The hopeless spawn: the admin's ``modify_pod_hook`` gives one user's pods a ``nodeSelector`` for
a rack label no node has.  The capacity model does not read what a hook adds, so the A100 pool is
offered, the pod is created, and the scheduler answers ``didn't match Pod's node affinity/
selector`` for the nodes whose taints the pod tolerates and, naming no taint (kube-scheduler 1.35
on), ``had untolerated taint(s)`` for the other pools' tainted nodes.  The hub weighs that with
every node's taints and the pod's own tolerations: those taints stay, so no node can ever take
it, and the pool declares no scale-up, so the spawn must fail at once with the reason rather than
after the demo's 180 s ``start_timeout``.

The refused pool: the hub is configured (``gpu_tolerated_taint_keys`` without ``sku``) so that GPU
servers may not tolerate the AKS T4 pool's ``sku=gpu:NoSchedule`` taint.  kube-scheduler would
keep every server off those nodes, so the capacity counts none of their GPUs; a spawn there is
refused at once (400), and the refusal, the pool's card and ``GET /hub/api/gpus`` name the taint
and the key to add.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from .harness import DemoHub, running_demo, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

START_TIMEOUT = 180  # the demo's c.GPUSpawner.start_timeout
QUICKLY = 60  # well under it, generous for a loaded CI machine

EXTRA_CONFIG = """
c = get_config()  # noqa: F821
# GPU servers may tolerate the A100/MIG pools' nvidia.com/gpu taint and AMD's, not AKS's sku=gpu
c.GPUSpawner.gpu_tolerated_taint_keys = ["nvidia.com/gpu", "amd.com/gpu"]


# the admin's own pod hook pins erin's servers to a rack no node is in
def pin_erin(spawner, pod):
    if spawner.user.name == "erin":
        pod.spec.node_selector = {**(pod.spec.node_selector or {}), "example.com/rack": "9"}
    return pod


c.GPUSpawner.modify_pod_hook = pin_erin
"""

# what the refusal, the card and the API say of the T4 pool
TAINT_WORDS = "its nodes carry the taint sku=gpu:NoSchedule, which this server does not tolerate"
TAINT_FIX = "c.GPUSpawner.gpu_tolerated_taint_keys (add 'sku') or remove the taint"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_demo(EXTRA_CONFIG, tmp_path_factory.mktemp("metrics-e2e")) as h:
        yield h


def progress_events(hub: DemoHub, user: str, timeout: float) -> list[dict]:
    """The spawn's progress stream (server-sent events) until it says failed or ready."""
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    with requests.get(
        f"{hub.url}/hub/api/users/{user}/server/progress",
        headers={"Authorization": f"token {hub.token}"},
        stream=True,
        timeout=30,
    ) as r:
        assert r.status_code == 200, r.text[:500]
        for line in r.iter_lines(decode_unicode=True):
            if line and line.startswith("data:"):
                events.append(json.loads(line[len("data:"):]))
                if events[-1].get("failed") or events[-1].get("ready"):
                    break
            assert time.monotonic() < deadline, f"no end of the spawn after {timeout}s: {events}"
    return events


@pytest.fixture(scope="module")
def hopeless_spawn(hub):
    """Ask erin's GPU of the A100 pool, which the admin's hook pins to a rack no node is in."""
    a100 = hub.pool_of("A100-SXM4-40GB")
    hub.create_user("erin")
    began = time.monotonic()
    answer = hub.api("POST", "/users/erin/server", json={"profile": "gpu", "gpu_pool": a100["id"], "gpus": 1})
    events = progress_events(hub, "erin", timeout=START_TIMEOUT + 30)
    return {"pool": a100, "answer": answer, "events": events, "seconds": time.monotonic() - began}


def test_a_spawn_that_can_never_start_fails_quickly_with_the_reason(hub, hopeless_spawn):
    answer, events = hopeless_spawn["answer"], hopeless_spawn["events"]
    # a failure within slow_spawn_timeout is the POST's answer; later, a 202 and the progress stream's end
    assert answer.status_code in (202, 500), answer.text
    assert hopeless_spawn["seconds"] < QUICKLY, (hopeless_spawn["seconds"], events, hub.log())
    last = events[-1]
    assert last.get("failed") is True, events
    assert last["message"].startswith("Spawn failed: No node of pool "), last
    assert "can ever take this server" in last["message"] and "node affinity/selector" in last["message"], last
    assert "SpawnException" not in last["message"]  # the user's words, not the exception's repr
    if answer.status_code == 500:
        assert "can ever take this server" in answer.json()["message"], answer.text
    # no pod is left behind, and the GPU it held is free again
    wait_for(lambda: not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=erin"), 60,
             "erin's pod to be deleted")
    assert not hub.server("erin")
    wait_for(lambda: hub.pool(hopeless_spawn["pool"]["id"])["free"] == hopeless_spawn["pool"]["free"], 60,
             "the A100 pool's free count to come back")


@pytest.fixture(scope="module")
def refused_by_taint(hub):
    """Ask for a GPU of the T4 pool, whose taint this hub's servers may not tolerate."""
    t4 = hub.pool_of("T4")
    hub.create_user("ivan")
    # the CUDA 11.8 image: the pool's driver 470 runs it (with a caveat), so only the taint stands in the way
    answer = hub.api("POST", "/users/ivan/server", json={"profile": "gpu", "gpu_pool": t4["id"], "gpus": 1,
                                                         "image": "cuda11"})
    return {"pool": t4, "answer": answer}


def test_a_pool_no_server_may_enter_is_refused_at_once_with_the_taint_and_the_fix(hub, refused_by_taint):
    t4, answer = refused_by_taint["pool"], refused_by_taint["answer"]
    # its nodes are listed, but no GPU of theirs is counted: kube-scheduler would keep the server off
    assert (t4["nodes"], t4["total"], t4["free"]) == (0, 0, 0), t4
    assert TAINT_WORDS in t4["refused_by_taint"] and TAINT_FIX in t4["refused_by_taint"], t4
    # the REST refusal: before any pod, with the taint and the key to add
    assert answer.status_code == 400, answer.text
    message = answer.json()["message"]
    assert TAINT_WORDS in message and TAINT_FIX in message, message
    assert not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=ivan")
    assert not hub.server("ivan")
    # the spawn page's card for the pool says the same, and its radio cannot be chosen
    page = hub.login("judy").get(f"{hub.url}/hub/spawn", timeout=30).text
    card = re.search(r'<input[^>]*value="%s"[^>]*>.*?</div>' % re.escape(html.escape(t4["id"])), page, re.S)
    assert card, page
    assert " disabled" in card.group(0).split(">", 1)[0], card.group(0)
    reason = re.search(r'<p class="gs-reason"[^>]*>([^<]*)</p>', page[card.start():])
    assert reason and html.unescape(reason.group(1)).startswith(f"Unavailable: {TAINT_WORDS}"), page[card.start():][:2000]
    assert TAINT_FIX in html.unescape(reason.group(1))


def scrape(hub: DemoHub) -> dict[str, list]:
    r = requests.get(f"{hub.url}/hub/metrics", headers={"Authorization": f"token {hub.token}"}, timeout=30)
    assert r.status_code == 200, r.text[:500]
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s)
    return samples


def value(samples: dict[str, list], name: str, **labels) -> float | None:
    for s in samples.get(name, []):
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


def test_hub_metrics_show_pools_and_spawns_by_outcome(hub, hopeless_spawn, refused_by_taint):
    a100, t4, amd = hopeless_spawn["pool"], refused_by_taint["pool"], hub.pool_of("MI300X", "amd.com/gpu")

    # refused before any pod: a CUDA image runs on no AMD GPU
    hub.create_user("frank")
    r = hub.api("POST", "/users/frank/server", json={"profile": "gpu", "gpu_pool": amd["id"], "gpus": 1})
    assert r.status_code == 400, r.text
    assert "does not fit any node of GPU pool" in r.json()["message"]

    # started: a GPU in the A100 pool (the CUDA 12.4 image fits its drivers)
    hub.create_user("grace")
    r = hub.api("POST", "/users/grace/server", json={"profile": "gpu", "gpu_pool": a100["id"], "gpus": 1})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("grace")

    samples = scrape(hub)
    assert value(samples, "gpuspawner_pool_gpus", pool=a100["id"], resource="nvidia.com/gpu") == a100["total"]
    assert value(samples, "gpuspawner_pool_free_gpus", pool=t4["id"]) is not None
    assert value(samples, "gpuspawner_capacity_cache_synced") == 1
    assert value(samples, "gpuspawner_capacity_cache_healthy") == 1
    assert value(samples, "gpuspawner_capacity_cache_age_seconds") >= 0
    spawns = "gpuspawner_spawns_total"
    assert value(samples, spawns, pool=a100["id"], outcome="started", reason="") == 1, samples.get(spawns)
    assert value(samples, spawns, pool=amd["id"], outcome="refused", reason="cuda_mismatch") == 1, samples.get(spawns)
    assert value(samples, spawns, pool=t4["id"], outcome="refused", reason="untolerated_taint") == 1, samples.get(spawns)
    assert value(samples, spawns, pool=a100["id"], outcome="failed", reason="no_matching_node") == 1, samples.get(spawns)
    assert value(samples, "gpuspawner_gpu_wait_seconds_count", pool=a100["id"]) == 1
    # JupyterHub's own metrics are still served beside ours
    assert "jupyterhub_running_servers" in samples
    # GPUSpawner's default apply_user_options: JupyterHub no longer calls the GPU options unhandled
    log = hub.log_path.read_text(errors="replace")
    assert "Refused spawn of frank (cuda-driver)" in log  # the hub's own log is there
    assert "unhandled user_options" not in log.lower()

    r = hub.api("DELETE", "/users/grace/server")
    assert r.status_code in (202, 204)
    hub.wait_stopped("grace")
