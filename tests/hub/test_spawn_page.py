"""The spawn page's cache (gpuspawner.hub.spawn_page): a result kept under the object it was built
from (by identity) and a key (by value), the oldest going first. Pure: no hub, no cluster."""

import asyncio
import dataclasses
import html
import re

import pytest

from gpuspawner.hub import spawn_page
from gpuspawner.hub.settings import fingerprint
from gpuspawner.hub.spawn_page import PageCache

from tests.builders import FakeCache
from tests.hub.test_spawner import (  # noqa: F401 (fixtures)
    A100,
    GPU_PROFILES,
    LAST,
    MVC_POOL,
    NEW_POOL,
    OLD_POOL,
    UNLABELLED,
    cache,
    cuda_spawner,
    driver_cache,
    make_spawner,
    pool,
)


def test_fingerprint_compares_configuration_by_value_whatever_the_key_order():
    assert fingerprint({"a": 1, "b": [1, 2]}) == fingerprint({"b": [1, 2], "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})
    assert fingerprint([{"slug": "gpu"}], None, print) != fingerprint([{"slug": "gpu"}], None, len)  # callables by name
    assert fingerprint({1: "x", "a": 2}) != fingerprint({1: "y", "a": 2})  # keys json cannot sort together


def test_offers_are_built_once_per_source_object_and_key():
    built = []
    memo = PageCache(size=2)
    pools, equal_pools = (1, 2), tuple([1, 2])  # equal, but another object: counted again

    def build(tag):
        built.append(tag)
        return {"tag": tag}

    first = memo.get(pools, "cfg", lambda: build("a"))
    assert memo.get(pools, "cfg", lambda: build("again")) is first
    assert memo.get(pools, "other cfg", lambda: build("b"))["tag"] == "b"
    assert equal_pools is not pools and memo.get(equal_pools, "cfg", lambda: build("c"))["tag"] == "c"
    assert built == ["a", "b", "c"] and (memo.hits, memo.misses) == (1, 3)


def test_the_oldest_offers_go_first_and_a_used_one_stays():
    memo = PageCache(size=2)
    a, b, c = object(), object(), object()
    memo.get(a, 0, lambda: "a")
    memo.get(b, 0, lambda: "b")
    memo.get(a, 0, lambda: "a again")  # used: now the newest
    memo.get(c, 0, lambda: "c")  # b goes
    assert memo.get(a, 0, lambda: "rebuilt a") == "a"
    assert memo.get(b, 0, lambda: "rebuilt b") == "rebuilt b"


def test_memo_size_must_be_positive():
    with pytest.raises(ValueError, match="size must be at least 1"):
        PageCache(size=0)
    with pytest.raises(ValueError, match="sources must be at least 1"):
        PageCache(size=4, sources=0)


def test_what_was_built_from_counts_renewed_away_goes_with_them():
    """Counts renewed every second: the offers and forms of the counts before go (garbage, not
    memory a full collection walks), whatever room is left for forms; the counts in use stay."""
    memo = PageCache(size=264, sources=2)
    first, second, third = object(), object(), object()
    for source in (first, second):
        for user in range(3):
            memo.get(source, user, lambda: "form")
    assert len(memo._entries) == 6
    memo.get(first, 0, lambda: "form")  # the page's counts, used again: now the newest
    memo.get(third, 0, lambda: "form")  # second goes, with its three forms
    assert sorted(i for i, _ in memo._entries) == sorted([id(first)] * 3 + [id(third)])
    assert memo.get(second, 1, lambda: "rebuilt") == "rebuilt"
    assert memo.get(first, 2, lambda: "rebuilt") == "rebuilt"  # first went for second
    assert set(memo._sources) == {id(second), id(first)} and len(memo._entries) == 2


def test_the_least_recently_used_result_goes_first_across_sources():
    memo = PageCache(size=2, sources=4)
    source, other = object(), object()
    memo.get(source, "a", lambda: "a")
    memo.get(source, "b", lambda: "b")
    memo.get(source, "a", lambda: "rebuilt a")  # used: now the newest
    memo.get(other, "x", lambda: "x")  # b goes
    assert memo.get(source, "a", lambda: "rebuilt a") == "a"
    assert memo.get(other, "x", lambda: "rebuilt x") == "x"
    assert memo.get(source, "b", lambda: "rebuilt b") == "rebuilt b"  # a goes now
    assert {id(source): {"b"}, id(other): {"x"}} == {i: keys for i, (_, keys) in memo._sources.items()}


def test_a_build_that_uses_the_cache_itself_is_kept():
    """The form's build asks for the offers (another source) first: both stay."""
    memo = PageCache(size=8, sources=2)
    pools = object()
    offers = {}

    def form():
        memo.get(pools, "offers", lambda: offers)
        return "form"

    assert memo.get(offers, "user", form) == "form"
    assert memo.get(offers, "user", lambda: "again") == "form"
    assert memo.get(pools, "offers", lambda: "again") is offers


def test_a_result_is_served_only_for_the_same_source_object_and_key():
    memo, offers = PageCache(), {"gpu": "offer"}
    assert memo.get(offers, ("alice", "{}"), lambda: "<form>") == "<form>"
    assert memo.get(offers, ("alice", "{}"), lambda: "rendered again") == "<form>"
    assert memo.get(offers, ("alice", '{"profile":"gpu"}'), lambda: "other options") == "other options"
    assert memo.get(dict(offers), ("alice", "{}"), lambda: "offers rebuilt") == "offers rebuilt"  # equal is not enough


async def test_form_renders_cards_escaped_and_limited(no_kube_client, install_cache):
    evil = dataclasses.replace(pool("evil", "<script>alert(1)</script>", free=0, total=2), node_group="g\"><img src=x>")
    install_cache(FakeCache(A100, evil))
    s = make_spawner(gpu_pool_rules=[{"match": "a100:*", "display_name": "A100 <80 GB>"}])
    form = await s.get_options_form()
    assert "<script>alert(1)</script>" not in form and "<img src=x>" not in form
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in form
    assert "A100 &lt;80 GB&gt;" in form
    # the full pool is shown, disabled, with the reason
    evil_radio = re.search(r'<input type="radio" name="profile-option-gpu--gpu_pool"[^>]*value="%s"[^>]*>' % re.escape(html.escape(evil.id)), form)
    assert evil_radio and "disabled" in evil_radio.group(0)
    assert "all 2 GPUs are in use" in form
    # the count select offers what the best pool can give
    counts = re.search(r'<select[^>]*name="profile-option-gpu--gpus".*?</select>', form, re.S).group(0)
    assert re.findall(r'value="(\d+)"', counts) == ["1", "2", "3"]
    # static profiles still render, and the default is checked
    assert re.search(r'<input type="radio" name="profile" id="profile-item-cpu" value="cpu"\s+checked', form)


async def test_form_posts_become_the_same_user_options_as_rest(no_kube_client, cache):
    s = make_spawner()
    formdata = {
        "profile": ["gpu"],
        "profile-option-gpu--gpu_pool": [A100.id],
        "profile-option-gpu--gpus": ["2"],
        "profile-option-gpu--image": ["torch"],
    }
    options = await s.run_options_from_form(formdata)  # as JupyterHub's spawn page calls it
    assert options == {"profile": "gpu", "gpu_pool": A100.id, "gpus": "2", "image": "torch"}
    s.user_options = options
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "2"}


async def test_page_reuses_its_offers_and_form_until_a_count_changes(no_kube_client, cache):
    # the page asks for counts at most gpu_capacity_page_max_age old, and while the snapshot's
    # pools are the same it serves the form it rendered, not a new one
    s = make_spawner(gpu_capacity_page_max_age=3)
    first = await s.get_options_form()
    cache.pools[A100.id] = dataclasses.replace(A100, free=2, max_free_per_node=2)
    cache.clock[0] += 1  # the counts held for the page are 1 s old: still good
    again = await s.get_options_form()
    assert again is first
    assert cache.max_ages == [3.0, 3.0]
    await asyncio.sleep(0.01)  # (no renewal under way: 1 s is less than half the interval)
    assert cache.renewals == 0
    cache.clock[0] += 2.5  # 3.5 s: too old, counted anew
    changed = await s.get_options_form()
    assert "5 of 16 GPUs" in first and "2 of 16 GPUs" in changed


async def test_past_half_the_interval_the_page_is_renewed_after_the_view(no_kube_client, cache):
    # stale-while-revalidate: the view that finds the counts 1.5 s old (of 2) is answered at
    # once with them; then, in the background, the counts are taken anew and its form rendered,
    # so the next view finds the new counts without rendering anything
    s = make_spawner(gpu_capacity_page_max_age=2)
    memo = spawn_page.PAGE_CACHE
    first = await s.get_options_form()
    cache.pools[A100.id] = dataclasses.replace(A100, free=2, max_free_per_node=2)
    cache.clock[0] += 1.5
    assert await s.get_options_form() is first  # answered from the held counts
    for _ in range(5):  # the renewal runs after the view
        await asyncio.sleep(0)
    assert cache.renewals == 1
    renders = memo.misses
    cache.clock[0] += 0.1
    renewed = await s.get_options_form()
    assert "2 of 16 GPUs" in renewed and memo.misses == renders  # served, not rendered


async def test_remembered_form_follows_the_user_options_and_the_users_groups(no_kube_client, cache):
    s = make_spawner(gpu_profiles=[{**GPU_PROFILES[0], "allowed_groups": ["ml"]}])
    hidden = await s.get_options_form()
    assert 'value="gpu"' not in hidden  # alice is in no group: no GPU profile
    s.user.groups = [dataclasses.make_dataclass("Group", ["name"])("ml")]
    shown = await s.get_options_form()
    assert 'id="profile-item-gpu" value="gpu"' in shown
    s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": "1", "image": "tf"}
    chosen = await s.get_options_form()
    assert re.search(r'value="tf"\s+selected', chosen) and not re.search(r'value="tf"\s+selected', shown)


async def test_users_who_see_the_same_page_share_one_rendered_form(no_kube_client, cache):
    profiles = [{**GPU_PROFILES[0], "allowed_groups": ["ml"]}]
    ml = [dataclasses.make_dataclass("Group", ["name"])("ml")]
    ana, bo, cy = (make_spawner(name, gpu_profiles=profiles) for name in ("ana", "bo", "cy"))
    ana.user.groups = bo.user.groups = ml
    form = await ana.get_options_form()
    assert await bo.get_options_form() is form  # the same groups, no saved options: one form
    other = await cy.get_options_form()  # in no group: no GPU profile
    assert 'value="gpu"' in form and 'value="gpu"' not in other


async def test_form_shows_fit_per_pool_and_image(no_kube_client, driver_cache):
    s = cuda_spawner()
    form = await s.get_options_form()
    cards = {}
    for pid in (OLD_POOL.id, MVC_POOL.id, NEW_POOL.id, UNLABELLED.id):
        card = re.search(r'value="%s".*?</div>' % re.escape(pid), form, re.S).group(0)
        cards[pid] = {
            key: (level, label, text.strip())
            for level, key, label, text in re.findall(
                r'<p class="gs-cuda gs-cuda-(\w+)"\s+data-gs-image-field="profile-option-gpu--image" '
                r'data-gs-image-choice="(\w+)">\s*<strong>CUDA for (.*?):</strong> ([^<]*)</p>', card)
        }
    old, mvc, new, bare = (cards[p] for p in (OLD_POOL.id, MVC_POOL.id, NEW_POOL.id, UNLABELLED.id))
    assert old["cu124"][0] == "fail" and old["cu124"][1] == "PyTorch (CUDA 12.4)"
    assert old["cu124"][2].startswith("does not fit: The image is built with CUDA 12.4 but the node has NVIDIA "
                                      "driver 470.82.01")
    assert old["cu118"][0] == "warn" and old["cu118"][2].startswith("fits with a caveat:")
    assert mvc["cu124"][0] == "warn"
    assert new["cu124"] == ("ok", "PyTorch (CUDA 12.4)",
                            "fits (1 of 2 nodes of this pool do not fit (driver 470.82.01); "
                            "the server is kept off them)")
    assert bare["cu124"] == ("skip", "PyTorch (CUDA 12.4)", "driver unknown")
    assert all("cpu" not in c for c in cards.values())  # an undeclared image shows no line
    assert "<dt>Driver</dt><dd>mixed: 470.82.01, 550.54.15</dd>" in form  # a pool mid upgrade
