"""The spawn page read at a glance, in Chromium at desktop and phone sizes: friendly GPU names grouped by model,
the image choice before the pools, MIG slices and shared GPUs said as such, a pool with no node yet, a pool whose
nodes are too small, the form back with the user's choices after a refusal, and axe-core (from the npm registry,
``node_modules/axe-core``) on the page in JupyterHub's light and dark themes: no serious or critical violation,
text contrast at least 4.5:1.

Hubs: the demo's default cluster (``hub`` of conftest), ``tests/fixtures/clusters/time-sliced-t4.yaml`` and
``tests/fixtures/clusters/small-nodes.yaml`` with a GPU profile that asks for 8 CPUs and 32G, and
``tests/fixtures/clusters/warm-images.yaml`` (nodes that report the images they hold) with the same profile.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from tests.builders import BIG_GPU_PROFILE_CONFIG

from .conftest import ROOT, BrowserHub, axe_serious, chromium_missing
from .test_spawn_page import H100_SPOT, T4, browser_test, open_spawn_page, pool_card, pool_radio

FIXTURES = ROOT / "tests" / "fixtures" / "clusters"
VIEWPORTS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}
SHARED_T4 = "t4shared:tesla-t4:nvidia.com/gpu.shared"
SMALL_T4 = "gput4:tesla-t4:nvidia.com/gpu"
WARM_A100 = "a100:nvidia-a100-pcie-80gb:nvidia.com/gpu"  # tests/fixtures/clusters/warm-images.yaml
WARM_IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"  # BIG_GPU_PROFILE_CONFIG's image


@pytest.fixture(scope="module", autouse=True)
def expect_timeout():
    expect.set_options(timeout=30_000)
    yield
    expect.set_options(timeout=None)


@pytest.fixture(params=sorted(VIEWPORTS), ids=sorted(VIEWPORTS))
def viewport(request):
    return VIEWPORTS[request.param]


def open_page(browser, viewport, errors, theme: str = "light"):
    ctx = browser.new_context(viewport=viewport, color_scheme=theme)
    ctx.set_default_timeout(30_000)
    # JupyterHub's theme switch keeps the choice here (static/js/darkmode.js)
    ctx.add_init_script(f"try {{ localStorage.setItem('jupyterhub-bs-theme', '{theme}'); }} catch (e) {{}}")
    page = ctx.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return ctx, page


def sign_in(hub_url: str, page, user: str) -> None:
    page.goto(f"{hub_url}/hub/login")
    page.fill("#username_input", user)
    page.fill("#password_input", "any-password")
    page.click("#login_submit")
    page.wait_for_url(lambda url: "/hub/login" not in url)


def spawn_page(hub, pages, viewport, user: str, theme: str = "light"):
    """A page of ``user``, signed in, on the spawn page (no live refresh during the test)."""
    page = pages(viewport, theme)
    sign_in(hub.url, page, user)
    open_spawn_page(hub, page, refresh_s=3600)
    return page


@pytest.fixture
def pages(browser):
    """``pages(viewport, theme)``: a fresh context's page; no uncaught script error in any."""
    made, errors = [], []

    def make(viewport, theme="light"):
        ctx, page = open_page(browser, viewport, errors, theme)
        made.append(ctx)
        return page

    yield make
    for ctx in made:
        ctx.close()
    assert not errors, errors


def start_hub(tmp_path_factory, cluster: str, config: str | None = None):
    reason = chromium_missing()
    if reason:
        pytest.skip(reason)
    extra = None
    if config:
        extra = tmp_path_factory.mktemp("glance") / "extra_config.py"
        extra.write_text(config)
    return BrowserHub(cluster_file=str(FIXTURES / cluster), extra_config=str(extra) if extra else None).start()


@pytest.fixture(scope="module")
def shared_hub(tmp_path_factory):
    h = start_hub(tmp_path_factory, "time-sliced-t4.yaml")
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="module")
def small_hub(tmp_path_factory):
    h = start_hub(tmp_path_factory, "small-nodes.yaml", BIG_GPU_PROFILE_CONFIG)
    try:
        yield h
    finally:
        h.stop()


@browser_test
def test_names_groups_image_first_slices_and_a_pool_with_no_node(hub, pages, viewport, screenshot):
    page = spawn_page(hub, pages, viewport, "gale")
    form = page.locator("#kubespawner-profiles-list")
    text = form.inner_text()
    # how GPUs are allocated, DeviceClass names and raw labels stay out of the page
    for raw in ("Dynamic Resource Allocation", "DeviceClass", "nvidia.com/", "SXM4", "AMD_Instinct", "Tesla-T4"):
        assert raw not in text, raw
    # the image choice comes before the pools of its profile
    image = page.locator("#profile-option-gpu--image")
    pools = page.locator('fieldset[data-gs-profile="gpu"] .gs-pools')
    assert image.bounding_box()["y"] < pools.bounding_box()["y"]
    # grouped by model: whole GPUs, then MIG slices; the same hardware under one name whoever publishes it
    titles = [t.strip() for t in page.locator('fieldset[data-gs-profile="gpu"] .gs-group-title').all_inner_texts()]
    assert "NVIDIA H100 80GB" in titles and "NVIDIA A100 80GB, MIG slices" in titles
    assert max(i for i, t in enumerate(titles) if "MIG" not in t) < min(i for i, t in enumerate(titles) if "MIG" in t)
    mig_1g = next(p["id"] for p in hub.gpus()["pools"] if p["resource"] == "nvidia.com/mig-1g.10gb")
    expect(pool_card(page, mig_1g)).to_contain_text("1g.10gb: 1/7 of an A100 80GB, 10 GB")
    expect(pool_card(page, mig_1g).locator("[data-gs-free]")).to_contain_text("slices on")
    expect(pool_card(page, H100_SPOT).locator("[data-gs-free]")).to_have_text(
        "no machine running now; one starts in about 7 minutes")
    expect(pool_card(page, T4).locator("strong").first).to_have_text("NVIDIA T4")
    screenshot(page, f"glance-{viewport['width']}")


@browser_test
def test_the_form_comes_back_with_the_users_choices_after_a_refusal(hub, pages, viewport):
    page = spawn_page(hub, pages, viewport, f"rhea{viewport['width']}")
    page.locator("#profile-option-gpu--image").select_option("pytorch")
    # the T4 pool's driver (470, CUDA 11.4) cannot run the PyTorch image (CUDA 12.4): refused at start
    pool_radio(page, T4).check()
    page.get_by_role("button", name="Start").click()
    expect(page.locator("body")).to_contain_text(re.compile("CUDA", re.I))
    expect(page.locator("#profile-item-gpu")).to_be_checked()
    expect(page.locator("#profile-option-gpu--image")).to_have_value("pytorch")
    expect(pool_radio(page, T4)).to_be_checked()


@browser_test
def test_a_time_sliced_gpu_is_counted_in_shares(shared_hub, pages, viewport):
    page = spawn_page(shared_hub, pages, viewport, "tess")
    card = pool_card(page, SHARED_T4)
    expect(card.locator("[data-gs-free]")).to_have_text("3 of 4 shares of one T4, on 1 node")
    expect(card.locator("[data-gs-per-server]")).to_have_text("up to 1 share")
    expect(card).to_contain_text("no memory or fault isolation; the whole memory is shared")
    # shares after whole GPUs (the demo's declared H100 pool)
    expect(page.locator('fieldset[data-gs-profile="gpu"] .gs-group-title')).to_have_text(
        ["NVIDIA H100 80GB", "NVIDIA T4, shared"])


@browser_test
def test_a_pool_whose_nodes_are_too_small_cannot_be_chosen(small_hub, pages, viewport):
    page = spawn_page(small_hub, pages, viewport, "fay")
    card = pool_card(page, SMALL_T4)
    expect(pool_radio(page, SMALL_T4)).to_be_disabled()
    expect(card.locator(".gs-reason")).to_have_text(
        "Unavailable: T4 nodes have 3.9 CPUs and 24 GiB of memory; this server needs 8 and 32 GiB.")
    # the pools with room come first
    first = page.locator('fieldset[data-gs-profile="gpu"] .gs-group-title').first
    expect(first).to_have_text("NVIDIA A100 80GB")


@browser_test
@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_violation(hub, pages, viewport, theme, screenshot):
    page = spawn_page(hub, pages, viewport, f"axel{theme}", theme)
    assert page.evaluate("document.documentElement.getAttribute('data-bs-theme')") == theme
    bad, result = axe_serious(page)
    screenshot(page, f"axe-{theme}-{viewport['width']}")
    assert bad == [], bad
    # axe checks text contrast against WCAG AA (4.5:1 for normal text) in rule color-contrast
    assert any(r["id"] == "color-contrast" for r in result["passes"] + result["incomplete"])


@pytest.fixture(scope="module")
def warm_hub(tmp_path_factory):
    h = start_hub(tmp_path_factory, "warm-images.yaml", BIG_GPU_PROFILE_CONFIG)
    try:
        yield h
    finally:
        h.stop()


def set_node_images(hub, node: str, images: list) -> None:
    """What ``node``'s kubelet reports in ``status.images`` (a merge patch of its status, as the admin): it
    holds until the node agent's next status post of that node (every 5 minutes, or after it pulled an image)."""
    r = hub.k8s.patch(f"{hub.k8s_url}/api/v1/nodes/{node}/status", data=json.dumps({"status": {"images": images}}),
                      headers={"Content-Type": "application/merge-patch+json"}, timeout=10)
    r.raise_for_status()


@browser_test
def test_the_image_ready_line_follows_the_nodes_without_reload(warm_hub, pages):
    page = pages(VIEWPORTS["desktop"])
    sign_in(warm_hub.url, page, "yara")
    open_spawn_page(warm_hub, page, refresh_s=1)
    line = pool_card(page, WARM_A100).locator(".gs-warm")
    expect(line).to_have_text("Image ready on 2 of 3 nodes.")
    page.evaluate("window.gsNoReload = 'still here'")  # lost if the page were loaded again
    nodes = warm_hub.nodes()
    warm = [i for i in nodes["aks-a100-0"]["status"]["images"] if WARM_IMAGE in i["names"]]
    held = nodes["aks-a100-2"]["status"].get("images") or []
    set_node_images(warm_hub, "aks-a100-2", held + warm)  # the third node's pull finished
    try:
        expect(line).to_have_text("Image ready on 3 of 3 nodes.")
        assert page.evaluate("window.gsNoReload") == "still here"
    finally:
        set_node_images(warm_hub, "aks-a100-2", held)  # the kubelet's garbage collection removed it again
    expect(line).to_have_text("Image ready on 2 of 3 nodes.")
    assert page.evaluate("window.gsNoReload") == "still here"


@browser_test
def test_the_card_says_on_how_many_nodes_the_image_is_ready(warm_hub, pages, viewport, screenshot):
    page = spawn_page(warm_hub, pages, viewport, "wren")
    # two of the pool's three nodes report the profile's image in status.images
    line = pool_card(page, WARM_A100).locator(".gs-warm")
    expect(line).to_have_text("Image ready on 2 of 3 nodes.")
    expect(line).to_be_visible()
    pool = next(p for p in warm_hub.gpus()["pools"] if p["id"] == WARM_A100)
    assert pool["images"] == {WARM_IMAGE: {"cached_nodes": 2, "nodes": 3}}
    bad, _ = axe_serious(page)
    screenshot(page, f"warm-{viewport['width']}")
    assert bad == [], bad
