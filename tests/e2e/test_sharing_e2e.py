"""End to end on ``gpuspawner demo --cluster tests/fixtures/clusters/time-sliced-t4.yaml``: a T4 time-sliced
four ways is said as shared (in the API, on the spawn page), and one server gets one share of it unless
the admin allows more."""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import pytest

from .harness import DemoHub

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "clusters" / "time-sliced-t4.yaml"
T4 = "t4shared:tesla-t4:nvidia.com/gpu.shared"


@pytest.fixture(scope="module")
def hub():
    h = DemoHub(cluster_file=str(FIXTURE)).start()
    try:
        yield h
    finally:
        h.stop()


def test_the_api_says_how_the_t4_is_shared(hub):
    pool = hub.pool(T4)
    assert (pool["sharing"], pool["replicas"], pool["display_name"]) == ("time-slicing", 4, "NVIDIA T4")
    assert (pool["total"], pool["free"]) == (4, 3)


def test_the_card_counts_shares_and_says_what_time_slicing_means(hub):
    session = hub.login("tess")
    page = html.unescape(session.get(f"{hub.url}/hub/spawn", timeout=30).text)
    card = page[page.index(f'value="{T4}"'):]
    card = card[:card.index("</div>")]
    assert "<strong>NVIDIA T4</strong>" in card
    assert "3 of 4 shares of one T4, on 1 node" in card
    assert "no memory or fault isolation" in card and "the whole memory is shared" in card
    assert "up to 1 share<" in card  # one share per server: gpu_allow_multiple_shares is off


def test_two_shares_are_refused_with_the_reason(hub):
    hub.create_user("tom")
    r = hub.api("POST", "/users/tom/server", json={"profile": "gpu", "gpu_pool": T4, "gpus": 2})
    assert r.status_code == 400, r.text
    message = r.json()["message"]
    assert "choose between 1 and 1 GPUs" in message and "a time-sliced GPU gives one share per server" in message
    assert hub.server("tom") is None
