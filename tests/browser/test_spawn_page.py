"""The spawn page in a real browser: live GPU availability, flagged choices, a spawn from the page.

One demo hub (Kubernetes' own control plane with the node agent running the default cluster file,
real JupyterHub and proxy) serves the package; the page polls ``GET /hub/api/gpus`` every second
(``#gs-refresh=1``) so a change on the cluster shows within a few seconds. Cluster changes are GPU
pods of another namespace created through the API server as its admin (see ``ClusterLoad`` in
conftest.py).
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace as NS

import jinja2
import pytest
from playwright.sync_api import expect

from gpuspawner.hub.templates import template_dirs

from ..e2e.harness import wait_for
from .conftest import LEGACY_IMAGE


def browser_test(fn):
    """Marks a test that drives Chromium against a demo hub (the template tests do not)."""
    return pytest.mark.integration(pytest.mark.hub(pytest.mark.browser(fn)))


# Pools and nodes of gpuspawner/data/clusters/default.yaml
T4 = "gput4:tesla-t4:nvidia.com/gpu"  # 2 nodes x 1 T4; research holds the one on ...000000
T4_FREE_NODE = "aks-gput4-31415926-vmss000001"
A100 = "gpu-a100-pool:nvidia-a100-sxm4-40gb:nvidia.com/gpu"  # 2 nodes x 4; 2 and 3 free
A100_NODE_WITH_3_FREE = "gke-gpu-a100-pool-7f3c-1"
H100_SPOT = "gpu-h100-spot:nvidia-h100-80gb-hbm3:nvidia.com/gpu"  # declared, scale from zero

WAIT_MS = 30_000  # generous: a loaded 2-core CI machine, a 1 s poll and the hub's watch in between


@pytest.fixture(scope="module", autouse=True)
def expect_timeout():
    expect.set_options(timeout=WAIT_MS)
    yield
    expect.set_options(timeout=None)


def open_spawn_page(hub, page, user: str | None = None, refresh_s: int = 1):
    path = f"/hub/spawn/{user}" if user else "/hub/spawn"
    # a fragment, not a query: JupyterHub spawns at once when /hub/spawn has query arguments.
    # Leave the page first: a change of fragment alone would not load it again.
    page.goto("about:blank")
    page.goto(f"{hub.url}{path}#gs-refresh={refresh_s}")
    expect(page.locator("#kubespawner-profiles-list")).to_be_visible()


def pool_radio(page, pool_id: str):
    return page.locator(f'input[name="profile-option-gpu--gpu_pool"][value="{pool_id}"]')


def pool_card(page, pool_id: str):
    return page.locator(".gs-pool").filter(has=pool_radio(page, pool_id))


def free_text(pool: dict) -> str:
    """A card's free line for a pool of the API: in GPUs, or MIG slices (shared GPUs are worded in shares)."""
    nodes, total = pool["nodes"], pool["total"]
    if nodes == 0 and pool["scale_up"]:
        minutes = max(1, int(pool["scale_up"]["minutes"] + 0.5))
        return f"no machine running now; one starts in about {minutes} minute{'' if minutes == 1 else 's'}"
    unit = "slice" if pool["sharing"] == "mig" else "GPU"
    return f"{pool['free']} of {total} {unit}{'' if total == 1 else 's'} on {nodes} node{'' if nodes == 1 else 's'}"


def cards_and_radios(page) -> list:
    return page.eval_on_selector_all(
        ".gs-pool",
        """cards => cards.map(c => {
             const r = c.querySelector('input[type=radio]');
             const d = r.dataset;
             return [c.innerText, c.className, r.value, r.disabled, d.gsMax, d.gsNow];
           })""",
    )


def wait_pool(hub, pool_id: str, free: int) -> None:
    """Wait until the hub itself counts ``free`` GPUs in the pool (its watch saw the change)."""
    wait_for(lambda: hub.pool(pool_id)["free"] == free, 30, f"{pool_id} to have {free} free")


@browser_test
def test_cards_show_live_counts_and_follow_the_cluster_without_reload(
    hub, new_page, login, load, screenshot
):
    page = new_page()
    login(page, "ana")
    open_spawn_page(hub, page, refresh_s=3600)
    rendered = cards_and_radios(page)

    # the first refresh with nothing changed leaves every card as the hub rendered it: the
    # script's per-server rule (limits, scale-up, caps) agrees with gpuspawner.spawn.profiles
    page.evaluate("location.hash = 'gs-refresh=1'")
    page.wait_for_function(
        "document.getElementById('kubespawner-profiles-list').hasAttribute('data-gs-refreshed')"
    )
    assert cards_and_radios(page) == rendered

    # a card per pool of the API as this user reads it (it lists the pools they may use), with
    # the API's counts
    pools = page.evaluate(
        """() => fetch(jhdata.base_url + 'api/gpus', {headers: {'X-XSRFToken': jhdata.xsrf_token}})
                   .then(r => r.json())"""
    )["pools"]
    assert {p["id"] for p in pools} >= {T4, A100, H100_SPOT}
    for pool in pools:
        card = pool_card(page, pool["id"])
        expect(card).to_have_count(1)
        expect(card.locator("[data-gs-free]")).to_have_text(free_text(pool))
    expect(pool_card(page, H100_SPOT)).to_contain_text("after scale-up (~7 min)")
    t4 = hub.pool(T4)
    assert t4["free"] == 1, t4
    expect(pool_radio(page, T4)).to_be_enabled()
    screenshot(page, "live-counts")

    # the page must not reload to show changes: this marker would be lost
    page.evaluate("window.gsNoReload = 'still here'")

    # another team takes the last free T4 and 2 of the 3 free A100s on one node
    load.hold(T4_FREE_NODE, 1)
    load.hold(A100_NODE_WITH_3_FREE, 2)
    wait_pool(hub, T4, 0)
    wait_pool(hub, A100, 3)
    t4_card = pool_card(page, T4)
    expect(t4_card.locator("[data-gs-free]")).to_have_text("0 of 2 GPUs on 2 nodes")
    expect(t4_card.locator("[data-gs-per-server]")).to_have_text("none now")
    expect(pool_radio(page, T4)).to_be_disabled()
    expect(t4_card).to_have_class(re.compile(r"\bgs-disabled\b"))
    expect(t4_card.locator(".gs-reason")).to_have_text("Unavailable: all 2 GPUs are in use.")
    a100_card = pool_card(page, A100)
    expect(a100_card.locator("[data-gs-free]")).to_have_text("3 of 8 GPUs on 2 nodes")
    # one server's GPUs come from one node: 2 free on each now
    expect(a100_card.locator("[data-gs-per-server]")).to_have_text("up to 2 GPUs")
    expect(pool_radio(page, A100)).to_have_attribute("data-gs-max", "2")
    assert page.evaluate("window.gsNoReload") == "still here"
    screenshot(page, "full-pool")

    # and they give them back
    load.release_all()
    wait_pool(hub, T4, 1)
    expect(t4_card.locator("[data-gs-free]")).to_have_text("1 of 2 GPUs on 2 nodes")
    expect(pool_radio(page, T4)).to_be_enabled()
    expect(t4_card.locator(".gs-reason")).to_have_count(0)
    expect(t4_card).not_to_have_class(re.compile(r"\bgs-disabled\b"))
    expect(a100_card.locator("[data-gs-per-server]")).to_have_text("up to 3 GPUs")
    assert page.evaluate("window.gsNoReload") == "still here"

    # signed out elsewhere: the hub answers 403, and the page says so instead of going stale quietly
    page.context.clear_cookies()
    expect(page.locator("#gs-live-status")).to_contain_text("reload the page")


@browser_test
def test_stale_figures_from_the_hub_are_not_shown_as_live(hub, new_page, login):
    page = new_page()
    login(page, "ana")
    open_spawn_page(hub, page, refresh_s=3600)
    rendered = cards_and_radios(page)
    # the hub's answer while its watch is lost: old counts, healthy false and why (the API's
    # exact fields); the page must keep what it shows and say the hub's words, not apply them
    stale = {"synced": True, "healthy": False, "age_seconds": 130.0, "pools": [
        {**hub.pool(T4), "free": 0, "max_free_per_node": 0}],
        "error": "GPU capacity is unknown: the hub lost its watch of pods 2 minutes ago"}
    page.route("**/hub/api/gpus", lambda route: route.fulfill(json=stale))
    page.evaluate("location.hash = 'gs-refresh=1'")
    expect(page.locator("#gs-live-status")).to_contain_text(
        "GPU counts could not be refreshed (GPU capacity is unknown: the hub lost its watch of pods 2 minutes ago)")
    assert cards_and_radios(page) == rendered
    expect(pool_radio(page, T4)).to_be_enabled()


@browser_test
def test_a_pool_a_taint_closes_says_which_taint_and_how_to_allow_it(hub, new_page, login):
    """A pool whose nodes all took a taint no server tolerates: the API counts no GPU there and says
    why (``refused_by_taint``); the card shows those words, not a bare "no GPUs"."""
    page = new_page()
    login(page, "cleo")
    open_spawn_page(hub, page, refresh_s=3600)
    expect(pool_radio(page, T4)).to_be_enabled()
    words = ("its nodes carry the taint example.com/reserved=x:NoSchedule, which this server does not tolerate; "
             "an administrator can allow it with c.GPUSpawner.gpu_tolerated_taint_keys (add "
             "'example.com/reserved') or remove the taint")
    body = hub.gpus()
    body["pools"] = [{**p, "nodes": 0, "total": 0, "free": 0, "max_free_per_node": 0, "refused_by_taint": words}
                     if p["id"] == T4 else p for p in body["pools"]]
    page.route("**/hub/api/gpus", lambda route: route.fulfill(json=body))
    page.evaluate("location.hash = 'gs-refresh=1'")
    expect(pool_card(page, T4).locator(".gs-reason")).to_have_text(f"Unavailable: {words}.")
    expect(pool_radio(page, T4)).to_be_disabled()


@browser_test
def test_a_choice_that_became_impossible_is_flagged_before_submit(
    hub, new_page, login, load, screenshot
):
    page = new_page()
    login(page, "ben")
    open_spawn_page(hub, page)
    warning = page.locator("#gs-live-warning")
    expect(warning).to_have_attribute("aria-live", "polite")
    expect(warning).to_have_text("")

    # the pool the user chose is taken
    t4 = pool_radio(page, T4)
    t4.check()
    expect(page.locator("#profile-item-gpu")).to_be_checked()
    load.hold(T4_FREE_NODE, 1)
    expect(warning).to_contain_text("NVIDIA T4")
    expect(warning).to_contain_text("cannot give a GPU now")
    expect(t4).to_have_attribute("aria-invalid", "true")
    expect(t4).to_have_attribute("aria-describedby", re.compile(r"\bgs-live-warning\b"))
    # not changed behind the user's back: still checked, still focusable
    expect(t4).to_be_checked()
    expect(t4).to_be_enabled()
    screenshot(page, "flagged-pool")

    # Start is held: no server, the user lands on the flagged choice
    page.get_by_role("button", name="Start").click()
    expect(t4).to_be_focused()
    assert "/hub/spawn" in page.url
    assert hub.server("ben") is None

    # another pool clears the warning; the full one is disabled once left
    pool_radio(page, A100).check()
    expect(warning).to_have_text("")
    expect(t4).not_to_have_attribute("aria-invalid", "true")
    expect(t4).to_be_disabled()

    # the count the user chose no longer fits on one node of the pool
    count = page.locator("#profile-option-gpu--gpus")
    count.select_option("3")
    load.hold(A100_NODE_WITH_3_FREE, 2)
    expect(warning).to_contain_text("at most 2 GPUs")
    expect(count).to_have_attribute("aria-invalid", "true")
    expect(count).to_have_value("3")
    expect(count.locator('option[value="4"]')).to_be_disabled()
    screenshot(page, "flagged-count")
    count.select_option("2")
    expect(warning).to_have_text("")
    expect(count).not_to_have_attribute("aria-invalid", "true")


@browser_test
def test_without_javascript_a_full_pool_is_disabled_and_the_form_spawns(
    hub, new_page, login, load, screenshot
):
    load.hold(T4_FREE_NODE, 1)
    wait_pool(hub, T4, 0)
    page = new_page(javascript=False)
    login(page, "cai")
    open_spawn_page(hub, page)
    t4 = pool_radio(page, T4)
    expect(t4).to_be_disabled()
    reason = pool_card(page, T4).locator(".gs-reason")
    expect(reason).to_have_text("Unavailable: all 2 GPUs are in use.")
    # KubeSpawner's own (non-GPU) profile still renders
    expect(page.locator("#profile-item-cpu")).to_have_count(1)
    screenshot(page, "no-javascript")

    page.locator("#profile-item-gpu").check()
    pool_radio(page, A100).check()
    page.locator("#profile-option-gpu--gpus").select_option("1")
    page.get_by_role("button", name="Start").click()
    server = hub.wait_ready("cai")
    assert server["user_options"]["gpu_pool"] == A100, server
    r = hub.api("DELETE", "/users/cai/server")
    assert r.status_code in (202, 204), r.text
    hub.wait_stopped("cai")


@browser_test
def test_choose_pool_and_image_spawn_arrive_and_the_choice_is_kept(
    hub, new_page, login, screenshot
):
    page = new_page()
    login(page, "cleo")
    open_spawn_page(hub, page, "cleo")
    page.locator("#profile-item-gpu").check()
    pool_radio(page, A100).check()
    page.locator("#profile-option-gpu--gpus").select_option("2")
    image = page.locator("#profile-option-gpu--image")
    image.select_option("legacy")
    # the card shows the CUDA fit of the chosen image only
    card = pool_card(page, A100)
    expect(card.locator('.gs-cuda[data-gs-image-choice="legacy"]')).to_be_visible()
    expect(card.locator('.gs-cuda[data-gs-image-choice="pytorch"]')).to_be_hidden()
    screenshot(page, "chosen")

    page.get_by_role("button", name="Start").click()
    # JupyterHub sends the browser through spawn-pending to the server itself, which opens JupyterLab
    page.wait_for_url(re.compile(r"/user/cleo/lab"), timeout=120_000)
    server = hub.wait_ready("cleo")
    options = server["user_options"]
    assert (options["profile"], options["gpu_pool"], str(options["gpus"]), options["image"]) == (
        "gpu", A100, "2", "legacy"
    ), options
    pods = hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=cleo")
    assert len(pods) == 1
    container = pods[0]["spec"]["containers"][0]
    assert container["image"] == LEGACY_IMAGE
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    node = hub.nodes()[pods[0]["spec"]["nodeName"]]
    assert node["metadata"]["labels"]["cloud.google.com/gke-nodepool"] == "gpu-a100-pool"
    screenshot(page, "server")

    # the last choice is preselected on the next visit while it is still possible; the user leaves
    # JupyterLab first (it reports a server stopped under it as an error, and rightly so)
    page.goto("about:blank")
    r = hub.api("DELETE", "/users/cleo/server")
    assert r.status_code in (202, 204), r.text
    hub.wait_stopped("cleo")
    wait_for(lambda: hub.pool(A100)["max_free_per_node"] >= 2, 60, "2 A100s free on one node")
    open_spawn_page(hub, page, "cleo")
    expect(page.locator("#profile-item-gpu")).to_be_checked()
    expect(pool_radio(page, A100)).to_be_checked()
    expect(page.locator("#profile-option-gpu--gpus")).to_have_value("2")
    expect(image).to_have_value("legacy")


@browser_test
def test_every_control_is_labelled_and_reachable_by_keyboard(hub, new_page, login):
    page = new_page()
    login(page, "dev")
    open_spawn_page(hub, page)
    unlabelled = page.evaluate(
        """() => Array.from(document.querySelectorAll('#spawn_form input, #spawn_form select'))
              .filter(el => el.type !== 'hidden' && !el.hidden)
              .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
              .map(el => el.name || el.id)"""
    )
    assert unlabelled == []
    # arrow keys move the pool choice within the group, skipping nothing that is offered
    radios = page.locator('input[name="profile-option-gpu--gpu_pool"]:not([disabled])')
    first = radios.first
    first.focus()
    page.keyboard.press("Space")
    expect(first).to_be_checked()
    expect(page.locator("#profile-item-gpu")).to_be_checked()
    page.keyboard.press("ArrowDown")
    expect(radios.nth(1)).to_be_checked()
    expect(radios.nth(1)).to_be_focused()


@browser_test
def test_a_pool_the_user_may_not_use_is_absent(hub, new_page, login):
    mig_3g = next(p["id"] for p in hub.gpus()["pools"] if p["resource"] == "nvidia.com/mig-3g.40gb")
    page = new_page()
    login(page, "eve")
    open_spawn_page(hub, page)
    expect(pool_radio(page, A100)).to_have_count(1)
    expect(pool_radio(page, mig_3g)).to_have_count(0)
    # a member of the group sees it
    assert hub.api("POST", "/groups/mig-team").status_code in (201, 409)
    hub.create_user("fay")
    r = hub.api("POST", "/groups/mig-team/users", json={"users": ["fay"]})
    assert r.status_code == 200, r.text
    member = new_page()
    login(member, "fay")
    open_spawn_page(hub, member)
    expect(pool_radio(member, mig_3g)).to_have_count(1)


# --- the include on its own: what it hands the script (no browser, no hub) -------------------


def render_live(gpu_offers) -> str:
    # autoescaping on, as GPUSpawner renders the form (gpuspawner/spawner.py, _form_environment)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template_dirs()), autoescape=True)
    return env.get_template("gpuspawner-live.html").render(
        gpu_offers=gpu_offers, asset_url=lambda name: f"/hub/gpuspawner/static/{name}?v=1")


def offer(*pools, max_gpus=None, problem=None):
    # cap: the profile's max_gpus and the hub's gpu_max_per_server, the lower (ProfileOffer.cap)
    return NS(spec=NS(max_gpus=max_gpus), cap=max_gpus, pools=pools, problem=problem)


def pool(pool_id, checked=True, labels=(("cloud.google.com/gke-nodepool", "g"),), node_views=(), follows_api=True):
    # follows_api: no CPU/memory fit or sharing rule narrows its counts (PoolOffer.follows_api)
    return NS(checked=checked, follows_api=follows_api,
              pool=NS(id=pool_id, defining_labels=labels, node_views=node_views,
                      pinnable=bool(labels or node_views), shared=False))


@pytest.mark.parametrize(
    "gpu_offers, expected",
    [
        pytest.param({}, None, id="no-gpu-profile-no-script"),
        pytest.param(
            {"gpu": offer(pool("a:b:nvidia.com/gpu"), max_gpus=4)},
            {"gpu": {"cap": 4, "live": ["a:b:nvidia.com/gpu"], "problem": False}},
            id="counted-pool-follows",
        ),
        pytest.param(
            {"gpu": offer(pool("a:b:nvidia.com/gpu", follows_api=False), max_gpus=4)},
            {"gpu": {"cap": 4, "live": [], "problem": False}},
            id="narrowed-pool-keeps-its-rendered-counts",
        ),
        pytest.param(
            {"gpu": offer(pool("a:b:nvidia.com/gpu", checked=False), problem="capacity unknown")},
            {"gpu": {"cap": 0, "live": [], "problem": True}},
            id="unchecked-pool-is-left-alone",
        ),
        pytest.param(
            {"gpu": offer(pool("a:b:nvidia.com/gpu", labels=(), node_views=()))},
            {"gpu": {"cap": 0, "live": [], "problem": False}},
            id="unpinnable-pool-is-left-alone",
        ),
        pytest.param(
            {"gpu": offer(pool("</script><script>alert(1)</script>"))},
            {"gpu": {"cap": 0, "live": ["</script><script>alert(1)</script>"], "problem": False}},
            id="script-end-in-an-id-stays-data",
        ),
    ],
)
def test_the_include_hands_the_script_its_profiles_safely(gpu_offers, expected):
    out = render_live(gpu_offers)
    if expected is None:
        assert "<script" not in out
        return
    # the data's element and the script's, whatever the data holds: nothing in it can close one early
    assert out.count("<script") == 2 and out.count("</script>") == 2, out
    data = re.search(r'<script type="application/json" id="gs-live-profiles">(.*?)</script>', out)
    assert data, out
    assert json.loads(data.group(1)) == expected
    assert '<script src="/hub/gpuspawner/static/gpuspawner-live.js?v=1" defer></script>' in out
