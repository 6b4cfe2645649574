"""What a user's other servers hold (gpuspawner.hub.user_quota): the quota check's input and the page's quota line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuspawner.hub import user_quota
from tests.hub.test_spawner import A100, make_spawner


def other(name, gpus, *, active=True, pending=None):
    return SimpleNamespace(name=name, user_options={"profile": "gpu", "gpu_pool": A100.id, "gpus": gpus},
                           gpu_held=gpus, pending=pending, active=active)


def with_servers(s, *servers, groups=()):
    s.user = SimpleNamespace(name="alice", admin=False, groups=list(groups),
                             spawners={"": s, **{o.name: o for o in servers}})
    return s


@pytest.mark.parametrize(
    "traits, servers, view",
    [
        ({}, [other("a", 2)], None),
        ({"gpu_quota": 4}, [], (4, 0)),
        ({"gpu_quota": 4}, [other("a", 2), other("b", 1)], (4, 3)),
        ({"gpu_quota": 4}, [other("a", 2), other("gone", 3, active=False)], (4, 2)),
        ({"gpu_quota": 4, "gpu_quota_by_group": {"research": None}}, [other("a", 2)], None),
    ],
    ids=["no-quota", "nothing-held", "two-servers", "inactive-not-counted", "group-without-limit"],
)
def test_the_quota_line_says_what_the_user_may_hold_and_holds(no_kube_client, traits, servers, view):
    s = with_servers(make_spawner(**traits), *servers, groups=["research"])
    assert user_quota.quota_view(s, []) == view


def test_the_servers_held_elsewhere_leave_this_one_out(no_kube_client):
    s = with_servers(make_spawner(gpu_quota=4), other("a", 2), other("b", 1))
    assert sorted((h.name, h.gpus) for h in user_quota.held_elsewhere(s, [])) == [("a", 2), ("b", 1)]
