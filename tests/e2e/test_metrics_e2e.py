"""End to end: a GPU spawn that can never start ends early with the reason, and
``/hub/metrics`` shows gpuspawner's series (pools, started / refused / failed
spawns, the wait for a GPU), on ``gpuspawner demo`` with its default cluster.

The hopeless spawn: the hub is configured (``gpu_tolerated_taint_keys``
without ``sku``) so that GPU servers may not tolerate the AKS T4 pool's
``sku=gpu:NoSchedule`` taint.  The pool is offered (the admin's rule, not the
user's mistake), the pod is created, and the scheduler answers
``node(s) had untolerated taint {sku: gpu}`` for the pool's nodes and a node
affinity mismatch for every other: no node can ever take it, and the pool
declares no scale-up, so the spawn must fail at once with the reason rather
than after the demo's 180 s ``start_timeout``.
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
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    with running_demo(EXTRA_CONFIG, tmp_path_factory.mktemp("metrics-e2e")) as h:
        yield h


def pool_of(hub: DemoHub, product_part: str) -> dict:
    for p in hub.gpus()["pools"]:
        if p["nodes"] and product_part in (p["product"] or "") and p["resource"] == "nvidia.com/gpu":
            return p
    raise AssertionError(f"the demo cluster has no {product_part} pool: {hub.gpus()}")


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
    """Ask for a GPU in the T4 pool, whose taint this hub's servers may not tolerate."""
    t4 = pool_of(hub, "T4")
    hub.create_user("erin")
    began = time.monotonic()
    # the CUDA 11.8 image: the pool's driver 470 runs it (with a caveat), so only the taint stands in the way
    answer = hub.api("POST", "/users/erin/server", json={"profile": "gpu", "gpu_pool": t4["id"], "gpus": 1,
                                                         "image": "cuda11"})
    events = progress_events(hub, "erin", timeout=START_TIMEOUT + 30)
    return {"pool": t4, "answer": answer, "events": events, "seconds": time.monotonic() - began}


def test_a_spawn_that_can_never_start_fails_quickly_with_the_reason(hub, hopeless_spawn):
    answer, events = hopeless_spawn["answer"], hopeless_spawn["events"]
    # a failure within slow_spawn_timeout is the POST's answer; later, a 202 and the progress stream's end
    assert answer.status_code in (202, 500), answer.text
    assert hopeless_spawn["seconds"] < QUICKLY, (hopeless_spawn["seconds"], events, hub.log())
    last = events[-1]
    assert last.get("failed") is True, events
    reason = "carry the taint sku=gpu:NoSchedule, which this server does not tolerate"
    assert last["message"].startswith("Spawn failed: The nodes of pool "), last
    assert reason in last["message"] and "gpu_tolerated_taint_keys (add 'sku')" in last["message"], last
    assert "SpawnException" not in last["message"]  # the user's words, not the exception's repr
    if answer.status_code == 500:
        assert reason in answer.json()["message"], answer.text
    # no pod is left behind, and the GPU it held is free again
    wait_for(lambda: not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=erin"), 60,
             "erin's pod to be deleted")
    assert not hub.server("erin")
    wait_for(lambda: hub.pool(hopeless_spawn["pool"]["id"])["free"] == hopeless_spawn["pool"]["free"], 60,
             "the T4 pool's free count to come back")


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


def test_hub_metrics_show_pools_and_spawns_by_outcome(hub, hopeless_spawn):
    a100, t4 = pool_of(hub, "A100-SXM4-40GB"), hopeless_spawn["pool"]

    # refused before any pod: the default image (CUDA 12.4) needs a newer driver than the T4 pool's 470
    hub.create_user("frank")
    r = hub.api("POST", "/users/frank/server", json={"profile": "gpu", "gpu_pool": t4["id"], "gpus": 1})
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
    assert value(samples, spawns, pool=t4["id"], outcome="refused", reason="cuda_mismatch") == 1, samples.get(spawns)
    assert value(samples, spawns, pool=t4["id"], outcome="failed", reason="untolerated_taint") == 1, samples.get(spawns)
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

    t4, a100 = fit(pool_of(hub, "T4")), fit(pool_of(hub, "A100-SXM4-40GB"))
    assert t4["cuda12"][0] == "fail" and t4["cuda12"][1].startswith("does not fit"), t4
    assert t4["cuda11"][0] == "warn" and t4["cuda11"][1].startswith("fits with a caveat"), t4
    assert a100["cuda12"][0] == "ok" and "caveat" in a100["cuda12"][1], a100  # its 535 node: minor-version
    assert a100["cuda11"] == ("ok", "fits"), a100
