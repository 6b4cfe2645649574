"""The hub's user models + server pods -> the culler's Server records."""

from __future__ import annotations

import pytest

from tests.builders.hubapi import NOW, hub_user, server_model, server_pod
from gpuspawner.cull.servers import gpu_count, pod_index, servers_from_users

OPTIONS = {"profile": "gpu", "gpu_pool": "pool-from-options", "gpus": 2}


def test_the_pod_found_by_annotations_gives_pool_and_gpus_over_the_user_options():
    users = [hub_user("alice", {"": server_model(user_options=OPTIONS)}, groups=["staff"]),
             hub_user("alice", {"train": server_model(user_options=OPTIONS)})]
    pods = pod_index([server_pod("alice", gpus=4, pool="pool-on-pod"),
                      server_pod("alice", "train", gpus=1, pool="other-pool")])
    default, named = servers_from_users(users, pods)
    assert (default.pod, default.pool, default.gpus, default.profile) == (
        ("jupyterhub", "jupyter-alice"), "pool-on-pod", 4, "gpu")
    assert default.groups == {"staff"} and named.groups is None
    assert (named.label, named.pod, named.pool, named.gpus) == (
        "alice/train", ("jupyterhub", "jupyter-alice--train"), "other-pool", 1)
    assert default.last_activity == NOW.replace(hour=10)


def test_kubespawner_state_names_the_pod_when_the_token_may_read_it():
    users = [hub_user("bob", {"": server_model(user_options=OPTIONS,
                                               state={"pod_name": "jupyter-bob", "namespace": "hub"})})]
    (server,) = servers_from_users(users, {})
    assert (server.pod, server.pool, server.gpus) == (("hub", "jupyter-bob"), "pool-from-options", 2)


def test_a_cpu_server_has_no_gpus():
    users = [hub_user("carol", {"": server_model(user_options={"profile": "cpu"})})]
    assert servers_from_users(users, pod_index([server_pod("carol", gpus=None, pool=None)]))[0].gpus == 0


@pytest.mark.parametrize("pod, gpus", [
    (server_pod("a", gpus=3), 3),
    (server_pod("a", gpus=None, limits={"nvidia.com/gpu": "2"}), 2),
    (server_pod("a", gpus=None, limits={"nvidia.com/mig-1g.10gb": "1"}), 1),
    (server_pod("a", gpus=None, limits={"cpu": "2"}), 0),
    (server_pod("a", gpus=None, limits={"nvidia.com/gpu": "lots"}), 0),
], ids=["annotation", "limits", "mig", "cpu", "bad-quantity"])
def test_gpu_count(pod, gpus):
    assert gpu_count(pod) == gpus


def test_pod_index_skips_pods_being_deleted_and_pods_of_no_user():
    gone = server_pod("a")
    gone["metadata"]["deletionTimestamp"] = "2026-11-23T11:59:00Z"
    stranger = {"metadata": {"name": "x", "annotations": {}}}
    assert pod_index([gone, stranger]) == {}
