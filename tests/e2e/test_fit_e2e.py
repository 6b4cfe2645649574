"""End to end on ``gpuspawner demo --cluster tests/fixtures/clusters/small-nodes.yaml``: the spawn page and
``GET /hub/api/gpus`` count only GPUs on nodes where the whole GPU server fits (CPU and memory, as the
kube-scheduler counts them), a pool whose nodes are too small says so and cannot be chosen, and a spawn
lands on the node with room."""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import pytest

from tests.builders import BIG_GPU_PROFILE_CONFIG

from .harness import DemoHub

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "clusters" / "small-nodes.yaml"
T4 = "gput4:tesla-t4:nvidia.com/gpu"
A100 = "a100:nvidia-a100-pcie-80gb:nvidia.com/gpu"
TOO_SMALL = "T4 nodes have 3.9 CPUs and 24 GiB of memory; this server needs 8 and 32 GiB"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    config = tmp_path_factory.mktemp("fit-e2e") / "big_profile.py"
    config.write_text(BIG_GPU_PROFILE_CONFIG)
    h = DemoHub(cluster_file=str(FIXTURE), extra_config=str(config)).start()
    try:
        yield h
    finally:
        h.stop()


def test_the_api_says_which_profiles_a_pool_can_never_fit(hub):
    t4, a100 = hub.pool(T4), hub.pool(A100)
    assert t4["fits_profiles"] == {"gpu": TOO_SMALL}
    assert a100["fits_profiles"] == {"gpu": True}
    assert (t4["free"], a100["free"]) == (2, 8)  # the API's own counts stay the pool's


def card(page: str, pool_id: str) -> str:
    """The markup of one pool's card on the spawn page."""
    at = page.index(f'value="{pool_id}"')
    start = page.rindex('<div class="gs-pool', 0, at)
    return page[start:page.index("</div>", at)]


def test_the_page_disables_the_small_pool_and_counts_only_nodes_with_room(hub):
    session = hub.login("fay")
    page = html.unescape(session.get(f"{hub.url}/hub/spawn", timeout=30).text)
    t4, a100 = card(page, T4), card(page, A100)
    assert "gs-disabled" in t4 and f"Unavailable: {TOO_SMALL}." in t4
    assert "4 of 8 GPUs on 2 nodes (4 more on nodes without room for this server's CPU or memory)" in a100
    assert "up to 4 GPUs" in a100


def test_a_rest_spawn_on_the_small_pool_is_refused_in_words_and_the_other_lands_where_it_fits(hub):
    hub.create_user("gil")
    r = hub.api("POST", "/users/gil/server", json={"profile": "gpu", "gpu_pool": T4})
    assert r.status_code == 400, r.text
    assert TOO_SMALL in r.json()["message"]
    assert hub.server("gil") is None
    r = hub.api("POST", "/users/gil/server", json={"profile": "gpu", "gpu_pool": A100, "gpus": 4})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready("gil", timeout=120)
    (server,) = [p for p in hub.pods() if p["metadata"]["name"] == "jupyter-gil"]
    assert server["spec"]["nodeName"] == "aks-a100-1"  # the node whose CPU is not taken
