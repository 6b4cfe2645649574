"""The home page in a real browser: the user's running GPU server with its model, count and pool, its GPU
use and memory now (from the demo's Prometheus, which its culler reads) and when the idle rule would stop
it; at desktop and phone sizes, in JupyterHub's light and dark themes, with axe-core.

The demo's own hub (``hub`` of conftest): its culler runs with Prometheus when ``prometheus`` is installed
(``scripts/setup.sh --prometheus``), and the demo tells the hub the same rule and Prometheus.
"""

from __future__ import annotations

import re
import shutil
import time

import pytest
from playwright.sync_api import expect

from ..e2e.harness import wait_for
from .conftest import axe_serious
from .test_spawn_page import A100, browser_test
from .test_spawn_page_glance import pages, sign_in, viewport  # noqa: F401 - fixtures this module uses too

USER = "hana"


@pytest.fixture(scope="module")
def running_server(hub):
    """``USER``'s server: 2 GPUs of the demo's A100 pool, started through the REST API."""
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed: run scripts/setup.sh --prometheus (the demo's culler reads it)")
    free = hub.pool(A100)["free"]
    hub.create_user(USER)
    r = hub.api("POST", f"/users/{USER}/server",
                json={"profile": "gpu", "gpu_pool": A100, "gpus": 2, "image": "pytorch"})
    assert r.status_code in (201, 202), r.text
    hub.wait_ready(USER, timeout=180)
    yield USER
    r = hub.api("DELETE", f"/users/{USER}/server")
    assert r.status_code in (202, 204), r.text
    hub.wait_stopped(USER)
    # the hub is the package's: the next module finds the pool as the demo cluster has it
    wait_for(lambda: hub.pool(A100)["free"] == free, 60, f"{USER}'s 2 GPUs back in the pool")


def home_with_figures(hub, page, timeout: float = 90):
    """The home page, reloaded until the GPU figures arrived (the demo's Prometheus scrapes every 15 s and
    the hub keeps an answer 10 s)."""
    use = page.locator("#gpuspawner-gpu-servers [data-gs-use]")
    deadline = time.monotonic() + timeout
    while True:
        page.goto(f"{hub.url}/hub/home")
        text = use.inner_text()
        if "%" in text or time.monotonic() > deadline:
            return text
        time.sleep(3)


@browser_test
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_the_users_gpu_server_with_its_use_now_and_when_it_would_be_stopped(
        hub, running_server, pages, viewport, theme, screenshot):  # noqa: F811 - the imported fixtures
    page = pages(viewport, theme)
    sign_in(hub.url, page, running_server)
    use = home_with_figures(hub, page)
    card = page.locator("#gpuspawner-gpu-servers [data-gs-server='']")
    expect(card.locator("[data-gs-gpus]")).to_have_text("2 \u00d7 NVIDIA A100 40GB")
    expect(card.locator("[data-gs-pool]")).to_have_text("gpu-a100-pool")
    assert re.fullmatch(r"\d{1,3}% on average over 2 GPUs", use), use
    expect(card.locator("[data-gs-memory]")).to_have_text(re.compile(r"^\d+\.\d of 80\.0 GiB$"))
    # the demo's culler stops servers after 30 minutes without notebook or GPU use
    expect(card.locator("[data-gs-stop]")).to_contain_text(re.compile(r"(Stopped as idle|in use now).*30m"))
    assert "NaN" not in card.inner_text()
    # pools by the names users read, in the GPU-hours table too: no raw pool id on the page
    assert A100 not in page.locator("body").inner_text() and "nvidia.com/gpu" not in page.locator("body").inner_text()
    # the phone's narrow screen: the card fits, nothing to scroll sideways
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    bad, result = axe_serious(page)
    screenshot(page, f"home-{theme}-{viewport['width']}")
    assert bad == [], bad
    assert any(r["id"] == "color-contrast" for r in result["passes"] + result["incomplete"])
