"""The spawn form (gpuspawner.hub.templates): the package's own templates, and what the form
shows of pools whose nodes do not all fit an image.  No network."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpuspawner.hub.templates import render_form, template_dirs
from gpuspawner.spawn.profiles import merge_profiles
from tests.builders import steered_pool
from tests.builders import STEERED_POOL_ID as POOL_ID
from tests.builders import new_driver_node as new
from tests.builders import old_driver_node as old
from tests.builders import steered_offers as offers_for

REPO = Path(__file__).resolve().parents[2]


def test_template_dirs_are_the_checkouts_in_an_editable_install():
    assert template_dirs() == [str((REPO / "share" / "templates").resolve())]


def _live_pools(html):
    data = re.search(r'<script type="application/json" id="gs-live-profiles">(.*?)</script>', html).group(1)
    return json.loads(data)["gpu"]["live"]


@pytest.mark.parametrize(
    "the_pool, steered",
    [(steered_pool(old(), new()), True), (steered_pool(new(free=5)), False)],
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


def _idle_lines(html):
    return re.findall(r'<p class="gs-idle"><strong>Idle rule:</strong> (.*?)</p>', html)


def test_spawn_form_shows_the_idle_rule_of_the_profile_and_pool_only_when_configured():
    from gpuspawner.hub.settings import GPUSpawnerSettings

    offers = offers_for(steered_pool(new(free=5)))
    profiles, _ = merge_profiles([], offers)
    settings = GPUSpawnerSettings(gpu_cull_rules={"idle_timeout": "1h", "profiles": {"gpu": {"idle_timeout": "4h"}},
                                                  "pools": {POOL_ID: {"max_age": "12h"}}})
    html = render_form(template_dirs(), None, profile_list=profiles, user_options={}, gpu_offers=offers,
                       cull_rules=settings.cull_rules(), idle_rule=settings.idle_rule)
    # the profile's timeout, the pool's maximum age: cull.idle_timeouts.describe's words, one line per pool
    assert _idle_lines(html) == ["This server is stopped after 4h00m in which neither the notebook nor its GPUs "
                                 "were used. It is stopped 12h00m after it started, even if busy."]
    html = render_form(template_dirs(), None, profile_list=profiles, user_options={}, gpu_offers=offers,
                       cull_rules=None, idle_rule=settings.idle_rule)
    assert _idle_lines(html) == [] and "Idle rule" not in html


def _ready_lines(html):
    return [re.sub(r"\s+", " ", t).strip() for t in re.findall(r'<p class="gs-warm"[^>]*>(.*?)</p>', html, re.S)]


def test_each_pool_card_says_on_how_many_nodes_each_image_it_can_run_is_ready():
    from gpuspawner.capacity.nodeimages import NodeImages
    from gpuspawner.hub.poolimages import ready_words
    from tests.builders import gpu_offers, pool_view

    profile = {
        "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
        "profile_options": {"image": {"choices": {
            "cu124": {"display_name": "CUDA 12.4 <b>new</b>", "default": True},
            "cu114": {"display_name": "CUDA 11.4", "kubespawner_override": {"image": "pt:cu114"}, "cuda": "11.4"},
        }}},
    }
    a100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB", driver="550.54.15", cuda="12.4")
    t4 = pool_view("t4", "Tesla-T4", driver="470.82.01", cuda="11.4")  # cannot run the CUDA 12.4 image
    counts = NodeImages()
    for i in range(5):
        counts.update(f"a{i}", [a100.id], {"docker.io/library/pt:cu124": 1} if i < 3 else {})
    counts.update("t0", [t4.id], {"docker.io/library/pt:cu124": 1})
    offers = gpu_offers([profile], a100, t4, policy="strict")
    profiles, _ = merge_profiles([], offers)
    spawner = type("S", (), {"shared_capacity_cache": lambda self: type("C", (), {"node_images": counts})()})()
    html = render_form(template_dirs(), None, profile_list=profiles, user_options={}, gpu_offers=offers,
                       image_ready=ready_words(spawner))
    # one line per image and pool, labelled by its choice (escaped); none for the image the T4 cannot run
    assert _ready_lines(html) == [
        "Image ready on 3 of 5 nodes (CUDA 12.4 &lt;b&gt;new&lt;/b&gt;).",
        "Image ready on 0 of 5 nodes (CUDA 11.4).",
        "Image ready on 0 of 1 node (CUDA 11.4).",
    ]
    assert "<b>new</b>" not in html
    # the script shows the chosen image's line only, as it does its CUDA line
    assert 'data-gs-image-field="profile-option-gpu--image" data-gs-image-choice="cu114"' in html
    # the live refresh finds each line by the image's key in the API's "images", with its label
    assert re.findall(r'<p class="gs-warm" data-gs-image="([^"]*)" data-gs-image-label="([^"]*)"', html) == [
        ("pt:cu124", "CUDA 12.4 &lt;b&gt;new&lt;/b&gt;"), ("pt:cu114", "CUDA 11.4"), ("pt:cu114", "CUDA 11.4")]
    # a pool with no node now: an empty line (not shown), for the live refresh to fill
    empty = pool_view("h100", "NVIDIA-H100-80GB-HBM3", driver="550.54.15", cuda="12.4")  # no node in the counts
    html = render_form(template_dirs(), None, profile_list=profiles, user_options={},
                       gpu_offers=gpu_offers([profile], empty, policy="strict"), image_ready=ready_words(spawner))
    assert _ready_lines(html) == ["", ""]
    assert ".gs-warm:empty { display: none; }" in (REPO / "share" / "static" / "gpuspawner-form.css").read_text()
    # no counts (no capacity cache): no line
    assert _ready_lines(render_form(template_dirs(), None, profile_list=profiles, user_options={},
                                    gpu_offers=offers)) == []
