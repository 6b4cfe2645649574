"""Budget rules: exact keys, validated with messages that say what to fix; which rule applies."""

import pytest

from gpuspawner.usage.budgets import LEAST_GENEROUS, MOST_GENEROUS, candidates, check_combine, choose, parse_rules
from tests.builders.usage import rule


@pytest.mark.parametrize("value, says", [
    ({"scope": "everyone", "gpu_hours": 1}, "missing window"),
    ({"scope": "everyone", "gpu_hours": 1, "window": "30d", "limit": 2}, "unknown key"),
    ({"scope": "team:x", "gpu_hours": 1, "window": "30d"}, "group:NAME"),
    ({"scope": "group:", "gpu_hours": 1, "window": "30d"}, "group:NAME"),
    ({"scope": "everyone", "gpu_hours": -1, "window": "30d"}, "0 or more"),
    ({"scope": "everyone", "gpu_hours": "20", "window": "30d"}, "0 or more"),
    ({"scope": "everyone", "gpu_hours": 20, "window": "4w"}, r"\[0\]: window must be"),
    ("everyone", "must be a dict"),
], ids=["missing-key", "extra-key", "bad-scope-kind", "empty-group", "negative", "string-hours", "bad-window",
        "not-a-dict"])
def test_bad_rule_says_which_and_what(value, says):
    with pytest.raises(ValueError, match=says):
        parse_rules([value])


def test_one_rule_per_scope():
    with pytest.raises(ValueError, match=r"gpu_hour_budgets\[1\]: scope 'user:ann' already has a rule"):
        parse_rules([{"scope": "user:ann", "gpu_hours": 1, "window": "1d"},
                     {"scope": "user:ann", "gpu_hours": 2, "window": "1d"}])


def test_combine_values():
    assert check_combine(MOST_GENEROUS) == MOST_GENEROUS
    with pytest.raises(ValueError, match="most_generous"):
        check_combine("max")


RULES = (rule("everyone", 10), rule("group:students", 5), rule("group:research", 50), rule("user:ann", 1))


@pytest.mark.parametrize("user, groups, scopes", [
    ("ann", ["research"], ["user:ann"]),
    ("bob", ["students", "research"], ["group:students", "group:research"]),
    ("cy", ["students"], ["group:students"]),
    ("dee", ["other"], ["everyone"]),
    ("dee", [], ["everyone"]),
], ids=["user-wins", "groups-over-everyone", "one-group", "unlisted-group", "no-group"])
def test_precedence(user, groups, scopes):
    assert [r.scope for r in candidates(RULES, user, groups)] == scopes


@pytest.mark.parametrize("combine, chosen", [(MOST_GENEROUS, "group:research"), (LEAST_GENEROUS, "group:students")],
                         ids=["most-generous", "least-generous"])
def test_several_groups_combine(combine, chosen):
    rules = candidates(RULES, "bob", ["students", "research"])
    assert choose(rules, lambda r: r.gpu_hours, combine).scope == chosen


def test_no_rule_no_budget():
    assert choose((), lambda r: 0, MOST_GENEROUS) is None
