"""Which server pods the reaper deletes: those no server of the hub owns, past the grace period,
not being deleted already."""

from __future__ import annotations

from datetime import datetime

import pytest

from gpuspawner.spawn.orphans import orphans, server_of

from tests.builders import server_pod

CREATED = "2026-11-22T01:00:00Z"
NOW = datetime.fromisoformat("2026-11-22T01:10:00+00:00").timestamp()  # 600 s after CREATED
OWNED = {("alice", ""), ("bob", "big")}


@pytest.mark.parametrize("pod, reaped", [
    (server_pod("jupyter-alice", user="alice"), False),
    (server_pod("jupyter-bob--big", user="bob", server_name="big"), False),
    (server_pod("jupyter-bob", user="bob"), True),  # bob's default server is not recorded
    (server_pod("jupyter-carol", "a100", user="carol"), True),
    (server_pod("jupyter-carol", user="carol", deleting=True), False),  # being deleted already
    (server_pod("jupyter-carol", user="carol", created="2026-11-22T01:09:00Z"), False),  # 60 s old: within grace
    (server_pod("jupyter-carol", user="carol", created="2026-11-22T01:08:00Z"), True),  # 120 s old: past it
    (server_pod("jupyter-carol", user="carol", created=None), False),  # no creation time: never guessed
    (server_pod("jupyter-carol", user="carol", created="yesterday"), False),
    (server_pod("someone-elses-pod"), False),  # no KubeSpawner annotations: not a server pod
], ids=["owned-default", "owned-named", "other-server-of-an-owner", "nobody-owns-it", "deleting",
        "within-grace", "past-grace", "no-creation-time", "bad-creation-time", "not-a-server-pod"])
def test_orphans(pod, reaped):
    found = orphans([pod], OWNED, NOW, grace=120)
    assert [o.name for o in found] == ([pod["metadata"]["name"]] if reaped else [])


def test_an_orphan_says_whose_and_how_old():
    (o,) = orphans([server_pod("jupyter-dave--x", user="dave", server_name="x", uid="u-1")], OWNED, NOW, grace=0)
    assert (o.namespace, o.name, o.uid, o.user, o.server, o.age_seconds) == ("jhub", "jupyter-dave--x", "u-1", "dave",
                                                                             "x", 600.0)


@pytest.mark.parametrize("annotations, whose", [
    ({"hub.jupyter.org/username": "alice"}, ("alice", "")),
    ({"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": "gpu"}, ("alice", "gpu")),
    ({"hub.jupyter.org/username": ""}, None),
    ({"hub.jupyter.org/username": 7}, None),
    ({"hub.jupyter.org/username": "alice", "hub.jupyter.org/servername": ["x"]}, None),
    (None, None),
], ids=["default", "named", "empty-user", "user-not-text", "server-not-text", "no-annotations"])
def test_server_of(annotations, whose):
    assert server_of({"metadata": {"annotations": annotations}}) == whose
