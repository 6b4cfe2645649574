"""GPU quotas (gpuspawner.spawn.quota): a user's limit, the GPUs their servers hold, and the
refusal that says what they hold and may ask for.  Pure."""

from __future__ import annotations

import pytest

from gpuspawner.spawn.access import AccessError, Principal
from gpuspawner.spawn.quota import HeldServer, OtherServer, QuotaPolicy, check_quota, held_servers, server_gpus


def who(*groups, admin=False):
    return Principal("u", frozenset(groups), admin)


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
