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


def test_template_dirs_are_the_packages_own():
    assert template_dirs() == [str((REPO / "gpuspawner" / "hub" / "templates").resolve())]


def _live_pools(html):
    data = re.search(r"var PROFILES = (\{.*?\});", html).group(1)
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
