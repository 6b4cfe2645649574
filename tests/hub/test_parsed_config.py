"""Configuration read once, at assignment (gpuspawner.hub.parsed_config): a new value is noticed, a
change in place is refused saying what to do, and asking again (as each page view does) parses nothing."""

from __future__ import annotations

import copy
import logging
import os

import pytest
from traitlets import TraitError
from traitlets.config import Config

from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.spawner import GPUSpawner
from tests.builders import make_spawner

PROFILES = [{"slug": "gpu", "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-latest"},
             "profile_options": {"size": {"choices": {"s": {"display_name": "small"}}}}}]

# (trait, value, what a change in place does to it): every parsed setting is kept frozen
IN_PLACE = [
    ("gpu_profiles", PROFILES, lambda v: v.append({"slug": "more"})),
    ("gpu_profiles", PROFILES, lambda v: v[0].update(max_gpus=2)),
    ("gpu_profiles", PROFILES, lambda v: v[0]["kubespawner_override"].__setitem__("image", "other")),
    ("gpu_pool_rules", [{"match": "a100:*", "hide": True}], lambda v: v[0].pop("hide")),
    ("gpu_kueue_queues", [{"match": "a100:*", "queue": "gpu-a100"}], lambda v: v.clear()),
    ("gpu_quota_by_group", {"staff": 8}, lambda v: v.__setitem__("students", 1)),
    ("gpu_declared_pools", [], lambda v: v.extend([{}])),
    ("gpu_cull_rules", {"idle_timeout": "1h"}, lambda v: v.setdefault("max_age", "8h")),
    ("gpu_tolerated_taint_keys", ["nvidia.com/gpu"], lambda v: v.insert(0, "example.com/x")),
    ("gpu_resources", ["nvidia.com/gpu"], lambda v: v.remove("nvidia.com/gpu")),
]
IN_PLACE_IDS = ["profiles-append", "profile-update", "profile-nested-override", "pool-rule-pop", "queues-clear",
                "quota-group-set", "declared-extend", "cull-rules-setdefault", "taint-keys-insert",
                "resources-remove"]


@pytest.mark.parametrize("trait, value, change", IN_PLACE, ids=IN_PLACE_IDS)
def test_a_change_in_place_is_refused_saying_to_assign_a_new_value(no_kube_client, trait, value, change):
    spawner = make_spawner(**{trait: value})
    before = spawner.spawn_config()
    with pytest.raises(TypeError, match=rf"c\.GPUSpawner\.{trait} is read when it is assigned.*assign a new value"):
        change(getattr(spawner, trait))
    assert getattr(spawner, trait) == value  # nothing half-changed
    assert spawner.spawn_config() is before


def test_an_assigned_gpu_profiles_list_is_noticed_by_the_next_view(no_kube_client):
    spawner = make_spawner(gpu_profiles=PROFILES)
    assert [s.slug for s in spawner.spawn_config().specs] == ["gpu"]
    # the admin's own list, changed after it was given, is not the spawner's: it was copied
    given = [{"slug": "big", "max_gpus": 8}]
    spawner.gpu_profiles = given
    given[0]["max_gpus"] = 1
    assert [(s.slug, s.max_gpus) for s in spawner.spawn_config().specs] == [("big", 8)]
    assert [(s.slug, s.max_gpus) for s in spawner.gpu_profile_specs()] == [("big", 8)]


# (what a page view or GET /hub/api/gpus asks for, the setting it comes from)
PARSED = [
    ("gpu_profile_specs", "gpu_profiles", [{"slug": "gpu", "allowed_groups": ["staff"]}]),
    ("pool_rules", "gpu_pool_rules", [{"match": "a100:*", "display_name": "A100"}]),
    ("access_rules", "gpu_pool_rules", [{"match": "a100:*", "allowed_groups": ["staff"]}]),
    ("queue_rules", "gpu_kueue_queues", [{"match": "a100:*", "queue": "gpu-a100"}]),
    ("gpu_quota_policy", "gpu_quota_by_group", {"staff": 8}),
    ("cull_rules", "gpu_cull_rules", {"idle_timeout": "1h"}),
    ("capacity_config", "gpu_resources", ["nvidia.com/gpu"]),
    ("spawn_config", "gpu_profiles", [{"slug": "gpu"}]),
]


@pytest.mark.parametrize("method, trait, value", PARSED, ids=[p[0] for p in PARSED])
def test_asking_again_parses_nothing_until_the_setting_is_assigned(no_kube_client, method, trait, value):
    spawner = make_spawner(**{trait: value})
    first = getattr(spawner, method)()
    # each view asks again: the same object, not a new parse of the same dicts
    assert getattr(spawner, method)() is first
    setattr(spawner, trait, copy.deepcopy(value))
    again = getattr(spawner, method)()
    assert again is not first and again == first or method == "spawn_config"


def test_the_rest_endpoint_s_settings_are_parsed_once_from_the_hub_config():
    c = Config()
    c.GPUSpawner.gpu_pool_rules = [{"match": "a100:*", "display_name": "A100", "allowed_groups": ["staff"]}]
    c.GPUSpawner.gpu_profiles = [{"slug": "gpu"}]
    settings = GPUSpawnerSettings.from_hub_config(c, GPUSpawner)
    for method in ("pool_rules", "access_rules", "gpu_profile_specs", "queue_rules", "cull_rules"):
        assert getattr(settings, method)() is getattr(settings, method)(), method


def test_a_config_file_may_still_append_to_a_setting():
    c = Config()
    c.GPUSpawner.gpu_pool_rules.append({"match": "a100:*", "hide": True})
    c.GPUSpawner.gpu_pool_rules.append({"match": "h100:*", "display_name": "H100"})
    settings = GPUSpawnerSettings.from_hub_config(c, GPUSpawner)
    assert [r.match for r in settings.pool_rules()] == ["a100:*", "h100:*"]
    # a copy of a setting is the admin's to change
    plain = copy.deepcopy(settings.gpu_pool_rules)
    plain[0]["hide"] = False
    assert type(plain) is list and type(plain[0]) is dict


def _rewrite_keeping_mtime(path, text):
    st = path.stat()
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_rules_file_is_read_again_only_when_its_modification_time_changes(tmp_path):
    rules = tmp_path / "cull.yaml"
    rules.write_text("idle_timeout: 30m\n")
    s = GPUSpawnerSettings(gpu_cull_rules=str(rules))
    first = s.cull_rules()
    assert first.idle_timeout == 1800
    # same size, same modification time: a view does not read it again
    _rewrite_keeping_mtime(rules, "idle_timeout: 40m\n")
    assert s.cull_rules() is first
    st = rules.stat()
    os.utime(rules, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert s.cull_rules().idle_timeout == 2400


BAD_FILES = [
    ("idle_timeout: [\n", "not valid YAML"),
    ("idle_timeout: soon\n", "idle_timeout: 'soon'"),
    ("profiles: 3\n", "profiles"),
]


@pytest.mark.parametrize("text, says", BAD_FILES, ids=["not-yaml", "bad-duration", "bad-profiles"])
def test_a_rules_file_that_turns_bad_is_logged_once_with_the_fix_and_the_form_shows_no_rule(tmp_path, caplog,
                                                                                           text, says):
    rules = tmp_path / "cull.yaml"
    rules.write_text("idle_timeout: 30m\n")
    s = GPUSpawnerSettings(gpu_cull_rules=str(rules))
    assert s.cull_rules() is not None
    rules.write_text(text)
    st = rules.stat()
    os.utime(rules, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with caplog.at_level(logging.ERROR, logger="gpuspawner.hub.settings"):
        assert s.cull_rules() is None
        assert s.idle_rule("gpu", "p") is None
    logged = [r.getMessage() for r in caplog.records if "gpu_cull_rules" in r.getMessage()]
    assert len(logged) == 1, logged
    assert str(rules) in logged[0] and says in logged[0] and "the spawn form shows no idle rule" in logged[0]
    # at assignment the same file is refused with the same words
    with pytest.raises(TraitError, match=rf"c\.GPUSpawner\.gpu_cull_rules: {rules}"):
        GPUSpawnerSettings(gpu_cull_rules=str(rules))
