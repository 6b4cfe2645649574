"""GPU counts offered and admitted count only the nodes the CUDA steering allows.

A pool whose nodes run different drivers: the pod of an image whose CUDA fails
some nodes is kept off them (``kubernetes.io/hostname NotIn``), so what the form
offers and what validation admits must come from the other nodes only. Pure,
plus one render of the spawn form (no network).
"""

from __future__ import annotations

import json
import re

import pytest

from gpuspawner.capacity.model import CapacitySnapshot, NodeView, PoolView, ScaleUp
from gpuspawner.cuda import decide
from gpuspawner.spawn.cudafit import pool_fit
from gpuspawner.spawn.options import TOO_MANY_GPUS, OptionError, validate_user_options
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers, describe_pool, gpu_profile_entry, merge_profiles
from gpuspawner.hub.templates import render_form, template_dirs

GKE = "cloud.google.com/gke-nodepool"
POOL_ID = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"


def node(name, free, driver, cuda):
    return NodeView(name, 8, free, driver, cuda, "8.0", (("kubernetes.io/hostname", f"{name}.internal"),))


def old(free=4):  # CUDA 12.4 does not fit a 470 driver (CUDA 11.4) under any policy
    return node("old", free, "470.82.01", "11.4")


def new(free=1):
    return node("new", free, "550.54.15", "12.4")


def pool(*nodes, scale_up=None):
    return PoolView(
        id=POOL_ID, resource="nvidia.com/gpu", product="NVIDIA-A100-SXM4-80GB", memory_mib=None,
        node_group_label=GKE, node_group="a100", nodes=len(nodes), total=8 * len(nodes),
        free=sum(n.free for n in nodes), max_free_per_node=max((n.free for n in nodes), default=0),
        driver_version="470.82.01", cuda_version="11.4", scale_up=scale_up,
        defining_labels=((GKE, "a100"),), taints=(), node_views=tuple(nodes),
    )


# the profile's own image needs CUDA 12.4; the "cu114" choice runs everywhere
PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu114": {"display_name": "CUDA 11.4", "kubespawner_override": {"image": "pt:cu114"}, "cuda": "11.4"},
    }}},
}


def offers_for(the_pool, **profile):
    spec = GPUProfileSpec.from_config({**PROFILE, **profile})
    snapshot = CapacitySnapshot(pools=(the_pool,), synced=True, age_seconds=0.1, generation=1)
    return build_offers([spec], snapshot, fit=lambda img, p: pool_fit(img, p, "minor", decide))


def counts(offer):
    return offer.max_gpus, offer.now, offer.cuda_free, offer.scale_up_minutes, offer.reason


@pytest.mark.parametrize(
    "the_pool, profile, image_key, expected",
    [
        # 4 free on the old node, 1 on the new: the 12.4 image may get 1
        (pool(old(), new()), {}, "cu124", (1, 1, 1, None, None)),
        # the 11.4 image fits both nodes: counted as today
        (pool(old(), new()), {}, "cu114", (4, 4, None, None, None)),
        # every fitting GPU in use: nothing now, and the reason says why (not "all in use")
        (pool(old(), new(free=0)), {}, "cu124",
         (0, 0, 0, None, "no GPU is free on the nodes whose driver fits this image")),
        # a new node from a scale-up is not excluded, so it still counts
        (pool(old(), new(), scale_up=ScaleUp(max_nodes=3, gpus_per_node=8, minutes=6)), {}, "cu124",
         (8, 1, 1, 6, None)),
        # the profile's max_gpus still caps
        (pool(old(), new(free=3)), {"max_gpus": 2}, "cu124", (2, 2, 3, None, None)),
        # no failing node: the offer is the very same
        (pool(new(free=5)), {}, "cu124", (5, 5, None, None, None)),
        # every node fails: refused elsewhere, counts untouched
        (pool(old()), {}, "cu124", (4, 4, None, None, None)),
    ],
    ids=["narrowed", "image-fits-all", "fitting-full", "scale-up-counts", "cap", "no-failing-node", "all-fail"],
)
def test_pool_offer_counts_only_nodes_the_image_may_land_on(the_pool, profile, image_key, expected):
    offer = offers_for(the_pool, **profile)["gpu"].pools[0]
    narrowed = offer.for_image(image_key)
    assert counts(narrowed) == expected
    assert narrowed.narrowed is (expected[2] is not None)
    if not narrowed.narrowed:
        assert narrowed is offer
    assert narrowed.fit(image_key) is offer.fit(image_key)  # the CUDA verdicts stay
    assert narrowed.for_image(image_key) is narrowed  # counting twice changes nothing


def test_offer_without_free_counts_is_not_narrowed():
    snapshot = CapacitySnapshot(pools=(pool(old(), new()),), synced=False, age_seconds=0.1, generation=1)
    spec = GPUProfileSpec.from_config(PROFILE)
    offer = build_offers([spec], snapshot, admit_without_capacity=True,
                         fit=lambda img, p: pool_fit(img, p, "minor", decide))["gpu"]
    assert offer.for_image("cu124") is offer


def validate(options, the_pool):
    offers = offers_for(the_pool)
    profiles, _ = merge_profiles([], offers)
    return validate_user_options({"profile": "gpu", **options}, profiles, offers)


@pytest.mark.parametrize(
    "options, gpus",
    [
        ({"gpus": "1"}, 1),
        ({"gpus": "4", "image": "cu114"}, 4),  # the chosen image fits the old node too
        ({"gpus": "1", "gpu_pool": POOL_ID}, 1),
    ],
    ids=["fits-on-new", "other-image-fits-old", "pool-named"],
)
def test_validation_admits_what_a_fitting_node_holds(options, gpus):
    sel = validate(options, pool(old(), new()))
    assert sel.gpus == gpus and sel.pool.pool.id == POOL_ID


@pytest.mark.parametrize(
    "options, the_pool, message",
    [
        ({"gpus": "4"}, pool(old(), new()),
         "choose between 1 and 1 GPUs in pool 'a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu' on the nodes whose "
         "driver fits this image (asked for 4)"),
        ({"gpus": "2", "image": "cu124", "gpu_pool": POOL_ID}, pool(old(), new()), "on the nodes whose driver fits"),
        ({"gpus": "1", "gpu_pool": POOL_ID}, pool(old(), new(free=0)),
         "cannot give any GPU now: no GPU is free on the nodes whose driver fits this image"),
    ],
    ids=["default-image", "chosen-image", "fitting-nodes-full"],
)
def test_validation_refuses_counts_only_an_excluded_node_holds(options, the_pool, message):
    with pytest.raises(OptionError) as e:
        validate(options, the_pool)
    assert message in str(e.value)
    assert e.value.reason == TOO_MANY_GPUS


def test_stock_profile_entry_counts_for_the_default_image():
    offer = offers_for(pool(old(), new()))["gpu"]
    entry = gpu_profile_entry(offer)
    assert list(entry["profile_options"]["gpus"]["choices"]) == ["1"]
    line = entry["profile_options"]["gpu_pool"]["choices"][POOL_ID]["display_name"]
    assert "5 of 16 GPUs free (1 on nodes whose driver fits this image), up to 1 per server" in line
    assert "(1 on nodes" not in describe_pool(offer.pools[0])  # the raw offer is not narrowed


def _live_pools(html):
    data = re.search(r"var PROFILES = (\{.*?\});", html).group(1)
    return json.loads(data)["gpu"]["live"]


@pytest.mark.parametrize(
    "the_pool, steered",
    [(pool(old(), new()), True), (pool(new(free=5)), False)],
    ids=["mixed-drivers", "all-fit"],
)
def test_spawn_form_shows_fitting_counts_and_live_refresh_leaves_them(the_pool, steered):
    offers = offers_for(the_pool)
    profiles, _ = merge_profiles([], offers)
    html = render_form(template_dirs(), None, profile_list=profiles, user_options={}, gpu_offers=offers)
    options = re.search(r'id="profile-option-gpu--gpus".*?</select>', html, re.S).group(0)
    values = re.findall(r'<option value="(\d+)"', options)
    radio = re.search(r'<input type="radio" name="profile-option-gpu--gpu_pool"[^>]*>', html, re.S).group(0)
    if steered:
        assert values == ["1"] and 'data-gs-max="1"' in radio
        assert "1 free on nodes whose driver fits this image" in html
        assert "data-gs-cuda-steered" in html
        assert _live_pools(html) == []  # the refresh would recount over every node
    else:
        assert values == [str(n) for n in range(1, 6)] and 'data-gs-max="5"' in radio
        assert "nodes whose driver fits" not in html and "data-gs-cuda-steered" not in html
        assert _live_pools(html) == [POOL_ID]
