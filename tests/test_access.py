"""Who may use which GPUs (gpuspawner.spawn.access): allowed groups and GPU quotas, pure.

The access rows run the same path a spawn does: build the offers, cut them
down to the user (``offers_for``), refuse named-but-forbidden profiles and
pools (``check_access``), then validate what is left
(``options.validate_user_options``), so crafted user options are checked
end to end without a hub.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuspawner.spawn.access import (
    AccessError,
    AccessRules,
    HeldServer,
    OtherServer,
    Principal,
    QuotaPolicy,
    check_access,
    check_quota,
    held_servers,
    offers_for,
    parse_allowed_groups,
    principal_of,
    server_gpus,
    visible_pools,
)
from gpuspawner.capacity.model import CapacitySnapshot, PoolView, Taint, pool_id
from gpuspawner.spawn.options import OptionError, validate_user_options
from gpuspawner.spawn.profiles import GPUProfileSpec, PoolRule, build_offers, merge_profiles, present_pools

GKE = "cloud.google.com/gke-nodepool"


def pool(group, product, *, resource="nvidia.com/gpu", free=8):
    return PoolView(
        id=pool_id(group, product, resource),
        resource=resource,
        product=product,
        memory_mib=None,
        node_group_label=GKE,
        node_group=group,
        nodes=1,
        total=8,
        free=free,
        max_free_per_node=free,
        driver_version=None,
        cuda_version=None,
        scale_up=None,
        defining_labels=((GKE, group),),
        taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
    )


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
    {"match": "*", "allowed_groups": "gpu-users"},
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
        pytest.param("staff", frozenset({"staff"}), id="one-string"),
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


# --- quotas ---------------------------------------------------------------------------

POLICY = QuotaPolicy.from_config(default=2, by_group={"staff": 8, "students": 1, "guests": 0, "unlimited": None})


@pytest.mark.parametrize(
    "principal, policy, limit, source",
    [
        pytest.param(who(), POLICY, 2, "the default quota", id="default"),
        pytest.param(who("other"), POLICY, 2, "the default quota", id="unlisted-group"),
        pytest.param(who("students"), POLICY, 1, "the quota of group 'students'", id="override-below-default"),
        pytest.param(who("students", "staff"), POLICY, 8, "the quota of group 'staff'", id="most-generous"),
        pytest.param(who("guests", "students"), POLICY, 1, "the quota of group 'students'", id="zero-and-one"),
        pytest.param(who("staff", "unlimited"), POLICY, None, "the quota of group 'unlimited'", id="none-beats-numbers"),
        pytest.param(who(admin=True), POLICY, None, "the quota for admins", id="admins-unlimited"),
        pytest.param(who("guests", admin=True), QuotaPolicy.from_config(admin=16), 16, "the quota for admins", id="admin-configured"),
        pytest.param(who("staff"), QuotaPolicy(), None, "the default quota", id="no-quota"),
    ],
)
def test_a_users_limit(principal, policy, limit, source):
    got = policy.limit_for(principal)
    assert (got.gpus, got.source) == (limit, source)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        pytest.param({"default": -1}, "gpu_quota must be a whole number", id="negative"),
        pytest.param({"default": 1.5}, "gpu_quota must be", id="float"),
        pytest.param({"default": True}, "gpu_quota must be", id="bool"),
        pytest.param({"default": "4"}, "gpu_quota must be", id="string"),
        pytest.param({"by_group": ["staff"]}, "gpu_quota_by_group must be a dict", id="by-group-list"),
        pytest.param({"by_group": {"staff": "8"}}, "gpu_quota_by_group['staff']", id="by-group-string"),
        pytest.param({"by_group": {" staff": 8}}, "not a JupyterHub group name", id="by-group-padded"),
        pytest.param({"admin": -2}, "gpu_quota_admin", id="admin-negative"),
    ],
)
def test_quota_config_mistakes(kwargs, words):
    with pytest.raises(ValueError) as e:
        QuotaPolicy.from_config(**kwargs)
    assert words in str(e.value)


def test_quota_enabled():
    assert not QuotaPolicy().enabled
    assert not QuotaPolicy.from_config(by_group={"x": None}).enabled
    assert QuotaPolicy.from_config(by_group={"x": 0}).enabled
    assert QuotaPolicy.from_config(admin=4).enabled


GPU_SLUGS = {"gpu", "big"}


@pytest.mark.parametrize(
    "options, recorded, spawning, default, gpus",
    [
        pytest.param({"profile": "gpu", "gpus": 2}, None, False, "cpu", 2, id="int"),
        pytest.param({"profile": "gpu", "gpus": "3"}, None, False, "cpu", 3, id="form-string"),
        pytest.param({"profile": "gpu", "gpus": 2.0}, None, False, "cpu", 2, id="float"),
        pytest.param({"profile": "gpu"}, None, False, "cpu", 1, id="absent-is-one"),
        pytest.param({"profile": "gpu", "gpus": ""}, None, False, "cpu", 1, id="empty-is-one"),
        pytest.param({}, None, False, "gpu", 1, id="default-gpu-profile"),
        pytest.param({}, None, False, "cpu", 0, id="default-cpu-profile"),
        pytest.param({"profile": "cpu", "gpus": 4}, None, False, "gpu", 0, id="cpu-profile"),
        pytest.param({"profile": "gpu", "gpus": "two"}, None, False, "cpu", 0, id="invalid-will-fail"),
        pytest.param({"profile": "gpu", "gpus": True}, None, False, "cpu", 0, id="bool-will-fail"),
        pytest.param({"profile": "gpu", "gpus": -3}, None, False, "cpu", 0, id="negative-will-fail"),
        pytest.param(None, None, False, "gpu", 0, id="no-options-object"),
        pytest.param({"profile": "gpu", "gpus": 1}, "4", False, "cpu", 4, id="annotation-wins"),
        pytest.param({"profile": "gpu", "gpus": 4}, 0, False, "cpu", 0, id="recorded-zero-wins"),
        pytest.param({"profile": "gpu", "gpus": 2}, "garbage", False, "cpu", 2, id="bad-record-falls-back"),
        pytest.param({"profile": "gpu", "gpus": 2}, None, True, "cpu", 0, id="spawn-not-checked-yet"),
        pytest.param({"profile": "gpu", "gpus": 1}, 2, True, "cpu", 2, id="spawn-checked"),
    ],
)
def test_gpus_a_server_holds(options, recorded, spawning, default, gpus):
    got = server_gpus(
        options, recorded=recorded, spawning=spawning, gpu_profiles=GPU_SLUGS, default_profile=default
    )
    assert got == gpus


@pytest.mark.parametrize(
    "principal, held, asked, refusal",
    [
        pytest.param(who(), [], 2, None, id="fits-exactly"),
        pytest.param(who(), [HeldServer("", 1)], 1, None, id="fits-with-a-server"),
        pytest.param(who(), [], 3, "you asked for 3 GPUs but may hold 2 (the default quota): ask for at most 2", id="too-many-alone"),
        pytest.param(
            who("staff"),
            [HeldServer("", 1), HeldServer("train", 2), HeldServer("cpu", 0)],
            5,
            None,
            id="staff-fits-exactly",
        ),
        pytest.param(
            who(),
            [HeldServer("", 1)],
            2,
            "you hold 1 GPU (default server: 1) and may hold 2 (the default quota): stop a server or ask for 1",
            id="ask-for-one",
        ),
        pytest.param(
            who("students"),
            [HeldServer("a", 1)],
            1,
            "you hold 1 GPU (server 'a': 1) and may hold 1 (the quota of group 'students'): stop a server to start this one",
            id="none-left",
        ),
        pytest.param(
            who("guests"),
            [],
            1,
            "you may not hold any GPUs (the quota of group 'guests' is 0)",
            id="zero-quota",
        ),
        pytest.param(who("unlimited"), [HeldServer("a", 50)], 50, None, id="unlimited-group"),
        pytest.param(who(admin=True), [HeldServer("a", 50)], 50, None, id="admin"),
        pytest.param(who(), [HeldServer("me", 2)], 2, None, id="own-server-is-not-counted"),
        pytest.param(who(), [HeldServer("x", 5)], 0, None, id="no-gpus-asked"),
        pytest.param(
            who(),
            [HeldServer("x", 2), HeldServer("y", 2)],
            1,
            "you hold 4 GPUs (server 'x': 2, server 'y': 2) and may hold 2 (the default quota): stop a server",
            id="over-after-quota-lowered",
        ),
    ],
)
def test_quota(principal, held, asked, refusal):
    if refusal is None:
        check_quota(principal, POLICY, held, asked, server_name="me")
        return
    with pytest.raises(AccessError) as e:
        check_quota(principal, POLICY, held, asked, server_name="me")
    assert e.value.status == 403
    assert refusal in str(e.value)


def test_quota_counts_every_other_active_server():
    """The glue's inputs: each of the user's other active servers."""
    servers = [
        OtherServer("", {"profile": "gpu", "gpus": 1}, recorded="1"),  # running, recorded
        OtherServer("train", {"profile": "gpu", "gpus": "2"}),  # started before counts were recorded
        OtherServer("notes", {"profile": "cpu"}),
        OtherServer("failed", {"profile": "gpu", "gpus": 4}, recorded=0),  # refused
        OtherServer("racing", {"profile": "gpu", "gpus": 4}, spawning=True),  # not checked yet
    ]
    held = held_servers(servers, gpu_profiles=GPU_SLUGS, default_profile="cpu")
    assert [h.gpus for h in held] == [1, 2, 0, 0, 0]
    with pytest.raises(AccessError) as e:
        check_quota(who(), QuotaPolicy(default=4), held, 2, server_name="new")
    message = str(e.value)
    assert message == (
        "you hold 3 GPUs (server 'train': 2, default server: 1) and may hold 4 (the default quota): "
        "stop a server or ask for 1"
    )


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")], ids=["a-first", "b-first"])
def test_two_concurrent_spawns_cannot_both_pass(order):
    """Spawns A and B of one user, both pending, 2 GPUs each, limit 3. Each
    check and its record run with no await between (as in the spawner), in
    either order: the first checked passes and records 2, the second sees
    that record and is refused."""
    policy = QuotaPolicy(default=3)
    recorded: dict[str, int | None] = {"a": None, "b": None}

    def check(name):
        others = [
            OtherServer(n, {"profile": "gpu", "gpus": 2}, recorded[n], spawning=True)
            for n in recorded
            if n != name
        ]
        held = held_servers(others, gpu_profiles=GPU_SLUGS, default_profile=None)
        try:
            check_quota(who(), policy, held, 2, server_name=name)
        except AccessError:
            recorded[name] = 0
            return False
        recorded[name] = 2
        return True

    first, second = order
    assert check(first) is True
    assert check(second) is False
    assert recorded == {first: 2, second: 0}
