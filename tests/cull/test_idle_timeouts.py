"""The culler's rules: precedence, reading files, refusing bad settings with a clear message."""

from __future__ import annotations

import pytest

from gpuspawner.cull.idle_timeouts import CullRules, Limits, RulesError, describe, load_rules, rule_for, rules_from_mapping

RULES = CullRules(
    idle_timeout=3600, max_age=86400,
    profiles={"gpu-long": Limits(idle_timeout=4 * 3600), "gpu-short": Limits(max_age=3600)},
    pools={"h100": Limits(idle_timeout=1800, max_age=0)},
)


@pytest.mark.parametrize("profile, pool, timeout, max_age, source", [
    (None, None, 3600, 86400, "default"),
    ("gpu", "a100", 3600, 86400, "default"),  # neither is configured
    ("gpu-long", "a100", 4 * 3600, 86400, "profile gpu-long"),
    ("gpu-short", "a100", 3600, 3600, "default"),  # the profile sets only max_age
    ("gpu-long", "h100", 1800, 0, "pool h100"),  # the pool is more specific than the profile
    (None, "h100", 1800, 0, "pool h100"),
], ids=["defaults", "unconfigured", "profile", "profile-max-age-only", "pool-beats-profile", "pool"])
def test_rule_for_takes_each_setting_from_the_most_specific_place(profile, pool, timeout, max_age, source):
    rule = rule_for(RULES, profile, pool)
    assert (rule.idle_timeout, rule.max_age, rule.timeout_from) == (timeout, max_age, source)


def test_describe_words_the_rule_for_users():
    assert describe(rule_for(RULES, "gpu-long", None)) == (
        "This server is stopped after 4h00m in which neither the notebook nor its GPUs were used. "
        "It is stopped 24h00m after it started, even if busy.")
    assert "after it started" not in describe(rule_for(RULES, None, "h100"))


def test_rules_from_mapping_reads_every_setting():
    rules = rules_from_mapping({
        "idle_timeout": "2h", "max_age": "36h", "noise_floor": 0.05,
        "exempt_groups": ["admins"],
        "profiles": {"gpu": {"idle_timeout": "30m"}},
        "pools": {"p": {"idle_timeout": 900, "max_age": "0"}},
    })
    assert rules.idle_timeout == 7200 and rules.max_age == 36 * 3600 and rules.noise_floor == 0.05
    assert rules.exempt_groups == {"admins"}
    assert rules.profiles["gpu"] == Limits(idle_timeout=1800)
    assert rules.pools["p"] == Limits(idle_timeout=900, max_age=0)


@pytest.mark.parametrize("doc, message", [
    ({"idle_timeout": "soon"}, "rules.idle_timeout: 'soon' is not a duration"),
    ({"idle_timeout": "0s"}, "rules.idle_timeout: '0s' must be longer than 0s"),
    ({"noise_floor": 1.5}, "rules.noise_floor: 1.5 must be a fraction"),
    ({"exempt_groups": "admins"}, "rules.exempt_groups: expected a list of group names"),
    ({"profiles": {"gpu": {"timeout": "1h"}}}, "rules.profiles.gpu: unknown setting(s) timeout"),
    ({"pools": ["a"]}, "rules.pools: expected a mapping"),
    ({"idle-timeout": "1h"}, "rules: unknown setting(s) idle-timeout"),
    (["idle_timeout"], "rules: expected a mapping at the top"),
], ids=["bad-duration", "zero-timeout", "floor", "groups", "scope-key", "scopes", "top-key", "not-mapping"])
def test_bad_rules_are_refused_with_where_and_what(doc, message):
    with pytest.raises(RulesError) as e:
        rules_from_mapping(doc)
    assert message in str(e.value)


def test_load_rules_reads_yaml_and_names_the_file_in_errors(tmp_path):
    good = tmp_path / "cull.yaml"
    good.write_text("idle_timeout: 45m\npools:\n  'gpu-a100:x:nvidia.com/gpu': {idle_timeout: 10m}\n")
    assert load_rules(good).pools["gpu-a100:x:nvidia.com/gpu"].idle_timeout == 600
    bad = tmp_path / "bad.yaml"
    bad.write_text("idle_timeout: [1h\n")
    with pytest.raises(RulesError, match=r"bad.yaml: not valid YAML"):
        load_rules(bad)
    with pytest.raises(RulesError, match=r"missing.yaml: cannot read it"):
        load_rules(tmp_path / "missing.yaml")
