import pytest

from gpuspawner.capacity.config import DeclaredPool
from gpuspawner.capacity.model import ScaleUp
from gpuspawner.spawn.cards import card_words
from gpuspawner.spawn.scale_up import needs_new_node, slow_pools, start_timeout_for, wait_words

from tests.builders import pool_view

H100 = DeclaredPool.from_config({
    "resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3", "node_group_label": "cloud.google.com/gke-nodepool",
    "node_group": "h100", "gpus_per_node": 8, "max_nodes": 2, "minutes": 7})
SLOW = DeclaredPool.from_config({
    "resource": "nvidia.com/gpu", "product": "NVIDIA-B200", "node_group_label": "cloud.google.com/gke-nodepool",
    "node_group": "b200", "gpus_per_node": 8, "max_nodes": 2, "minutes": 55})
EMPTY = pool_view("h100", "NVIDIA-H100-80GB-HBM3", nodes=0, total=0, free=0, per_node=0,
                  scale_up=ScaleUp(max_nodes=2, gpus_per_node=8, minutes=7))


@pytest.mark.parametrize(
    "minutes, pull, timeout, most, expected",
    [
        (7, 600, 180, 3600, 1020),  # the demo's H100 pool under the demo's 180 s
        (7, 600, 1800, 3600, 1800),  # never shorter than the hub's own
        (55, 600, 300, 3600, 3600),  # never longer than gpu_start_timeout_max
    ],
    ids=["raised", "kept", "capped"],
)
def test_start_timeout_for(minutes, pull, timeout, most, expected):
    assert start_timeout_for(minutes, pull, timeout, most) == expected


@pytest.mark.parametrize(
    "pool, gpus, expected",
    [
        (EMPTY, 1, True),
        (pool_view("h100", nodes=1, total=8, free=8, per_node=8, scale_up=ScaleUp(2, 8, 7)), 4, False),
        (pool_view("h100", nodes=2, total=16, free=0, per_node=0, scale_up=ScaleUp(2, 8, 7)), 1, False),
        (pool_view("a100", nodes=1, total=8, free=0, per_node=0), 1, False),
    ],
    ids=["no-node-yet", "room-now", "at-max-nodes", "not-declared"],
)
def test_needs_new_node(pool, gpus, expected):
    assert needs_new_node(pool, gpus) is expected


def test_slow_pools_are_the_ones_a_spawn_cannot_wait_for():
    (slow,) = slow_pools([H100, SLOW], pull_seconds=600, most=3600)
    assert slow.pool_id == SLOW.id
    assert "scale-up of about 55 minutes" in slow.words() and "at most 3600 s" in slow.words()


def test_a_pool_with_no_node_yet_says_when_one_starts():
    assert card_words(EMPTY).free == "no machine running now; one starts in about 7 minutes"
    assert wait_words(0.4) == "no machine running now; one starts in about 1 minute"
