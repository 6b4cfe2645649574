"""End to end on the demo's default cluster, whose H100 pool is declared to scale from zero in about 7 minutes
while the demo's ``start_timeout`` is 180 s: the pool reads as having no machine yet, and a spawn that waits
for its new node gets a start timeout that covers the scale-up and an image pull."""

from __future__ import annotations

import html
import shutil

import pytest

from .harness import DemoHub, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

H100_SPOT = "gpu-h100-spot:nvidia-h100-80gb-hbm3:nvidia.com/gpu"


@pytest.fixture(scope="module")
def hub():
    h = DemoHub().start()
    try:
        yield h
    finally:
        h.stop()


def test_a_pool_with_no_node_yet_says_when_one_starts(hub):
    pool = hub.pool(H100_SPOT)
    assert (pool["nodes"], pool["scale_up"]["minutes"]) == (0, 7)
    page = html.unescape(hub.login("sam").get(f"{hub.url}/hub/spawn", timeout=30).text)
    assert "no machine running now; one starts in about 7 minutes" in page
    assert "0 of 0 GPUs on 0 nodes" not in page


def test_a_spawn_that_waits_for_a_new_node_gets_the_time_it_needs(hub):
    hub.create_user("sid")
    r = hub.api("POST", "/users/sid/server", json={"profile": "gpu", "gpu_pool": H100_SPOT, "gpus": 1})
    assert r.status_code in (201, 202), r.text
    try:
        # 7 min of scale-up and gpu_image_pull_seconds (600 s) over the demo's 180 s, before JupyterHub waits
        wait_for(lambda: f"waits for pool {H100_SPOT} to scale up (about 7 min): start_timeout 180 s -> 1020 s"
                 in hub.log(), 60, "the hub to raise start_timeout")
    finally:
        hub.api("DELETE", "/users/sid/server")
