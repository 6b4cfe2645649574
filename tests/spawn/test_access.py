"""Who may use which GPUs (gpuspawner.spawn.access): allowed groups, pure (quotas: test_quota.py).

The access rows run the same path a spawn does: build the offers, cut them
down to the user (``offers_for``), refuse named-but-forbidden profiles and
pools (``check_access``), then validate what is left
(``options.validate_user_options``), so crafted user options are checked
end to end without a hub.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest

from gpuspawner.spawn.access import (
    AccessError,
    AccessRules,
    Principal,
    check_access,
    offers_for,
    parse_allowed_groups,
    principal_of,
    visible_pools,
)
from gpuspawner.capacity.model import CapacitySnapshot, Taint
from gpuspawner.spawn.options import OptionError, validate_user_options
from gpuspawner.spawn.profiles import GPUProfileSpec, PoolRule, build_offers, merge_profiles, present_pools
from tests.builders import pool_view

GKE = "cloud.google.com/gke-nodepool"


# one-node pools with the usual GPU taint
pool = partial(pool_view, taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))


A100 = pool("a100", "NVIDIA-A100-SXM4-80GB")
T4 = pool("t4", "Tesla-T4", free=4)
MIG = pool("mig", "NVIDIA-A100-SXM4-40GB", resource="nvidia.com/mig-1g.5gb", free=7)
H100 = pool("h100", "NVIDIA-H100-80GB-HBM3")
SECRET = pool("secret", "NVIDIA-B200")
SNAPSHOT = CapacitySnapshot(pools=(A100, T4, MIG, H100, SECRET), synced=True, age_seconds=0.1, generation=1)

GPU_PROFILES = [
    {"slug": "gpu", "display_name": "GPU", "pools": {"exclude": ["h100:*"]}},
    {"slug": "big", "display_name": "H100", "pools": {"include": ["h100:*"]}, "allowed_groups": ["research"]},
]
POOL_RULES = [
    {"match": "secret:*", "hide": True},
    {"match": "a100:*", "display_name": "A100 80 GB"},  # renames only: must not open the pool
    {"match": "a100:*", "allowed_groups": ["ml", "staff"]},
    {"match": "*:nvidia.com/mig-*", "allowed_groups": []},  # an exception before the catch-all
    {"match": "*", "allowed_groups": ["gpu-users"]},
]
STATIC = [{"display_name": "CPU", "slug": "cpu", "default": True}]


def without_access_keys(d):
    # profiles.py learns the key in the integration; until then strip it here
    return {k: v for k, v in d.items() if k != "allowed_groups"}


SPECS = [GPUProfileSpec.from_config(without_access_keys(d)) for d in GPU_PROFILES]
RULES = AccessRules.from_config(GPU_PROFILES, POOL_RULES)
PRESENTATION = [PoolRule.from_config(without_access_keys(r)) for r in POOL_RULES]
OFFERS = build_offers(SPECS, SNAPSHOT, PRESENTATION)


def who(*groups, admin=False):
    return Principal("u", frozenset(groups), admin)


def spawn(principal, user_options):
    """What a spawn would do: returns the chosen pool id (or the profile slug
    for a non-GPU profile), or raises AccessError/OptionError."""
    view = offers_for(principal, OFFERS, RULES)
    profile_list, _ = merge_profiles(view.drop_hidden(STATIC), view.offers)
    check_access(user_options, view)
    selection = validate_user_options(user_options, profile_list, view.offers)
    return selection.pool.pool.id if selection.pool else selection.profile


# --- configuration --------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        pytest.param(None, frozenset(), id="none-is-everyone"),
        pytest.param([], frozenset(), id="empty-is-everyone"),
        pytest.param(["a", "b", "a"], frozenset({"a", "b"}), id="list"),
        pytest.param(("Staff",), frozenset({"Staff"}), id="tuple-case-kept"),
    ],
)
def test_allowed_groups_parse(value, expected):
    assert parse_allowed_groups(value, "x") == expected


@pytest.mark.parametrize(
    "value, words",
    [
        pytest.param({"staff": True}, "list of JupyterHub group names", id="dict"),
        pytest.param(3, "list of JupyterHub group names", id="number"),
        pytest.param(["staff", ""], "non-empty", id="empty-name"),
        pytest.param(["staff", 7], "non-empty", id="non-string"),
        pytest.param([" staff"], "write 'staff'", id="padded"),
        pytest.param("staff", "not the string 'staff': write ['staff']", id="one-string"),
    ],
)
def test_allowed_groups_mistakes_say_what_to_write(value, words):
    with pytest.raises(ValueError, match="gpu_profiles\\[0\\]") as e:
        AccessRules.from_config([{"slug": "gpu", "allowed_groups": value}])
    assert words in str(e.value)


@pytest.mark.parametrize(
    "profiles, rules, words",
    [
        pytest.param(["gpu"], [], "must be a dict", id="profile-not-dict"),
        pytest.param([{"allowed_groups": ["a"]}], [], "'slug' is required", id="no-slug"),
        pytest.param([], ["*"], "gpu_pool_rules[0]: each rule must be a dict", id="rule-not-dict"),
        pytest.param([], [{"allowed_groups": ["a"]}], "gpu_pool_rules[0]: 'match' is required", id="rule-no-match"),
        pytest.param([], [{"match": "*", "allowed_groups": 5}], "gpu_pool_rules[0] (match '*')", id="rule-bad-groups"),
    ],
)
def test_access_config_mistakes(profiles, rules, words):
    with pytest.raises(ValueError) as e:
        AccessRules.from_config(profiles, rules)
    assert words in str(e.value)


@pytest.mark.parametrize(
    "pool_id_, groups",
    [
        pytest.param(A100.id, {"ml", "staff"}, id="rename-rule-does-not-decide"),
        pytest.param(MIG.id, set(), id="earlier-empty-rule-is-an-exception"),
        pytest.param(T4.id, {"gpu-users"}, id="catch-all"),
        pytest.param(H100.id, {"gpu-users"}, id="catch-all-h100"),
    ],
)
def test_a_pool_takes_the_first_rule_that_sets_allowed_groups(pool_id_, groups):
    assert RULES.pool_groups(pool_id_) == groups


def test_no_allowed_groups_anywhere_restricts_nobody():
    rules = AccessRules.from_config([{"slug": "gpu"}], [{"match": "*", "display_name": "x"}])
    assert not rules.restricted
    assert offers_for(who(), OFFERS, rules).offers.keys() == OFFERS.keys()


# --- what each user is offered ------------------------------------------------------


@pytest.mark.parametrize(
    "principal, expected",
    [
        pytest.param(who(), {"gpu": {MIG.id}}, id="no-groups"),
        pytest.param(who("gpu-users"), {"gpu": {T4.id, MIG.id}}, id="gpu-users"),
        pytest.param(who("ml"), {"gpu": {A100.id, MIG.id}}, id="ml"),
        pytest.param(who("ML", "Gpu-Users"), {"gpu": {MIG.id}}, id="group-names-are-case-sensitive"),
        pytest.param(who("research"), {"gpu": {MIG.id}}, id="research-without-pool-group-hides-big"),
        pytest.param(who("research", "gpu-users"), {"gpu": {T4.id, MIG.id}, "big": {H100.id}}, id="research-and-gpu-users"),
        pytest.param(who(admin=True), {"gpu": {A100.id, T4.id, MIG.id}, "big": {H100.id}}, id="admin-sees-all-but-hidden"),
    ],
)
def test_offers_hold_only_what_the_user_may_use(principal, expected):
    view = offers_for(principal, OFFERS, RULES)
    got = {slug: {p.pool.id for p in offer.pools} for slug, offer in view.offers.items()}
    assert got == expected
    assert view.hidden_profiles == set(OFFERS) - set(expected)
    # the form's choices are built from these offers only
    profile_list, _ = merge_profiles(view.drop_hidden(STATIC), view.offers)
    for entry in profile_list:
        if entry["slug"] in expected:
            assert set(entry["profile_options"]["gpu_pool"]["choices"]) == expected[entry["slug"]]


def test_a_static_profile_shadowed_by_a_hidden_gpu_profile_stays_hidden():
    view = offers_for(who(), OFFERS, RULES)
    static = [*STATIC, {"display_name": "old big", "slug": "big"}]
    profile_list, _ = merge_profiles(view.drop_hidden(static), view.offers)
    assert [p["slug"] for p in profile_list] == ["cpu", "gpu"]


def test_a_profile_without_pools_because_capacity_is_unknown_stays_visible():
    unknown = CapacitySnapshot(pools=(), synced=False, age_seconds=0.0, generation=0)
    offers = build_offers(SPECS, unknown)
    view = offers_for(who(), offers, RULES)
    assert set(view.offers) == {"gpu"}  # "big" is closed by its own allowed_groups
    assert view.offers["gpu"].problem


# --- crafted user options -----------------------------------------------------------

FORBIDDEN_TO_GPU_USERS = (A100.id, H100.id, SECRET.id)
GU = who("gpu-users")


def gpu(pool_=None, **more):
    """User options for the "gpu" profile."""
    options = {"profile": "gpu", **more}
    if pool_ is not None:
        options["gpu_pool"] = pool_
    return options


@pytest.mark.parametrize(
    "principal, options, expected",
    [
        # allowed
        pytest.param(GU, gpu(gpus="2"), MIG.id, id="ok-default-pool-first-allowed-in-rule-order"),
        pytest.param(who(), gpu(gpus=5), MIG.id, id="ok-no-groups-get-mig"),
        pytest.param(who("ml"), gpu(A100.id), A100.id, id="ok-ml-a100"),
        pytest.param(who(admin=True), {"profile": "big", "gpu_pool": H100.id, "gpus": 8}, H100.id, id="ok-admin"),
        pytest.param(who("research", "gpu-users"), {"profile": "big"}, H100.id, id="ok-research"),
        pytest.param(GU, {"profile": "cpu"}, "cpu", id="ok-cpu"),
        # named but not allowed: 403 with the groups that would open it
        pytest.param(GU, gpu(A100.id), (403, "'ml', 'staff'"), id="pool-of-other-groups"),
        pytest.param(GU, gpu(A100.id, gpus="1"), (403, "not available to you"), id="pool-count-as-string"),
        pytest.param(GU, {"gpu_pool": A100.id}, (403, "'ml', 'staff'"), id="pool-without-profile"),
        pytest.param(
            GU,
            {"profile": "big"},
            (403, "profile 'big' is not available to you; ask your admin to add you to one of the groups 'research'"),
            id="profile-of-other-group",
        ),
        pytest.param(GU, {"profile": "big", "gpu_pool": H100.id}, (403, "'research'"), id="profile-and-pool"),
        pytest.param(GU, gpu(H100.id), (403, "'research'"), id="pool-of-a-hidden-profile"),
        pytest.param(who("research"), {"profile": "big"}, (403, "'gpu-users'"), id="profile-whose-pools-are-closed"),
        pytest.param(who(), gpu(T4.id), (403, "'gpu-users'"), id="catch-all-rule"),
        # not exactly a pool id the hub offers: 400 unknown, hints list only the user's pools
        pytest.param(GU, gpu(A100.id.upper()), (400, "unknown pool"), id="other-case"),
        pytest.param(GU, gpu(f" {A100.id} "), (400, "unknown pool"), id="spaces"),
        pytest.param(GU, gpu("a100:*"), (400, "unknown pool"), id="glob"),
        pytest.param(GU, gpu("*"), (400, "unknown pool"), id="star"),
        pytest.param(GU, gpu(SECRET.id), (400, "unknown pool"), id="hidden-pool-id"),
        pytest.param(GU, gpu([A100.id]), (400, "pool id string"), id="pool-as-list"),
        pytest.param(GU, {"profile": "BIG"}, (400, "unknown profile"), id="profile-other-case"),
        pytest.param(GU, gpu(T4.id, node_selector={GKE: "a100"}), (400, "node_selector"), id="node-selector"),
        pytest.param(GU, gpu(gpus=8), (400, "choose between 1 and 7"), id="only-a-closed-pool-fits"),
        pytest.param(GU, gpu(T4.id, gpus=2.5), (400, "whole number"), id="fraction"),
        pytest.param(GU, gpu(T4.id, gpus=True), (400, "whole number"), id="bool-count"),
        pytest.param(GU, gpu(T4.id, gpus=1.0), (400, "whole number"), id="float-count"),
    ],
)
def test_crafted_user_options(principal, options, expected):
    if isinstance(expected, str):
        assert spawn(principal, options) == expected
        return
    status, words = expected
    with pytest.raises((AccessError, OptionError)) as e:
        spawn(principal, options)
    assert e.value.status == status, str(e.value)
    assert words in str(e.value)
    if status == 400 and principal is GU:
        # an "unknown" answer lists the user's own pools, never the others
        # (it may echo what the user sent)
        message = str(e.value).replace(repr(options.get("gpu_pool")), "")
        for forbidden in FORBIDDEN_TO_GPU_USERS:
            assert forbidden not in message, forbidden


def test_a_403_does_not_describe_the_pool():
    with pytest.raises(AccessError) as e:
        spawn(who("gpu-users"), {"profile": "gpu", "gpu_pool": A100.id})
    message = str(e.value)
    assert "GPUs free" not in message and "up to" not in message
    assert T4.id not in message and MIG.id not in message


def test_check_access_leaves_non_objects_to_validation():
    view = offers_for(who(), OFFERS, RULES)
    for options in (None, [], "gpu", {"profile": 3, "gpu_pool": 4}):
        check_access(options, view)  # does not raise: validation answers 400


# --- GET /hub/api/gpus --------------------------------------------------------------

PRESENTED = tuple(p for p, _ in present_pools(SNAPSHOT.pools, PRESENTATION))  # what the handler lists


@pytest.mark.parametrize(
    "principal, profiles, expected",
    [
        pytest.param(who(), SPECS, {MIG.id}, id="no-groups"),
        pytest.param(who("gpu-users"), SPECS, {T4.id, MIG.id}, id="gpu-users-not-h100-of-research"),
        pytest.param(who("gpu-users", "research"), SPECS, {T4.id, MIG.id, H100.id}, id="research"),
        pytest.param(who("staff"), SPECS, {A100.id, MIG.id}, id="staff"),
        pytest.param(who(admin=True), SPECS, {A100.id, T4.id, MIG.id, H100.id}, id="admin"),
        pytest.param(who("gpu-users"), (), {T4.id, MIG.id, H100.id}, id="no-profiles-pool-rules-only"),
        pytest.param(
            who("gpu-users"), SPECS[1:], {T4.id, MIG.id}, id="pool-in-no-profile-is-shown-closed-profile-hides"
        ),
    ],
)
def test_capacity_api_shows_the_pools_a_user_may_use(principal, profiles, expected):
    got = visible_pools(PRESENTED, RULES, principal, profiles)
    assert {p.id for p in got} == expected
    assert [p.id for p in got] == [p.id for p in PRESENTED if p.id in expected]  # order kept


@pytest.mark.parametrize(
    "user, expected",
    [
        pytest.param(
            SimpleNamespace(name="ann", admin=False, groups=[SimpleNamespace(name="ml"), SimpleNamespace(name="x")]),
            Principal("ann", frozenset({"ml", "x"}), False),
            id="user-with-orm-groups",
        ),
        pytest.param(SimpleNamespace(name="svc", admin=True), Principal("svc", frozenset(), True), id="service-no-groups"),
        pytest.param(SimpleNamespace(name="b", admin=None, groups=None), Principal("b"), id="admin-none"),
        pytest.param(SimpleNamespace(name="c", admin="yes", groups=["g"]), Principal("c", frozenset({"g"})), id="admin-only-if-true"),
    ],
)
def test_principal_of_jupyterhub_objects(user, expected):
    assert principal_of(user) == expected
