import dataclasses

import pytest

from gpuspawner.capacity.model import DraFacts
from gpuspawner.spawn.cards import card_words
from gpuspawner.spawn.profiles import ONE_SHARE_NOTE, build_offers, GPUProfileSpec

from tests.builders import pool_view, snapshot

A100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB", nodes=2, total=8, free=3, memory_mib=81920)
T4_SLICED = pool_view("t4", "Tesla-T4-SHARED", nodes=1, total=4, free=3, memory_mib=15360,
                      sharing="time-slicing", replicas=4)
A100_MPS = pool_view("mps", "NVIDIA-A100-SXM4-80GB-SHARED", nodes=1, total=8, free=6, memory_mib=81920,
                     sharing="mps", replicas=4)
MIG = pool_view("dgx", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "nvidia.com/mig-1g.10gb", nodes=1, total=7, free=5,
                memory_mib=9728, sharing="mig")
DRA_MIG = dataclasses.replace(
    pool_view("dra", "NVIDIA A100-SXM4-80GB MIG 1g.10gb", "mig.nvidia.com", nodes=1, total=7, free=7,
              memory_mib=9728, sharing="mig"),
    dra=DraFacts("gpu.nvidia.com", "mig.nvidia.com", "NVIDIA A100-SXM4-80GB", "1g.10gb", "mig"),
)


@pytest.mark.parametrize(
    "pool, unit, free, sharing, memory",
    [
        (A100, "GPU", "3 of 8 GPUs on 2 nodes", None, "80 GiB per GPU"),
        (T4_SLICED, "share", "3 of 4 shares of one T4, on 1 node",
         "Time-sliced: each GPU is shared by up to 4 servers, with no memory or fault isolation; the whole memory "
         "is shared, and one server's crash can stop the others", "15 GiB per GPU, shared by all its 4 shares"),
        (A100_MPS, "share", "6 of 8 shares of 2 A100 80GB GPUs, on 1 node",
         "MPS: each GPU is shared by up to 4 servers, about 20 GiB of memory each; memory and compute are limited "
         "per server, faults are not isolated", "about 20 GiB per share (80 GiB per GPU)"),
        (MIG, "slice", "5 of 7 slices on 1 node",
         "1g.10gb: 1/7 of an A100 80GB, 10 GB; a hardware-isolated slice with its own memory and compute",
         "9.5 GiB per slice"),
        (DRA_MIG, "slice", "7 of 7 slices on 1 node",
         "1g.10gb: 1/7 of an A100 80GB, 10 GB; a hardware-isolated slice with its own memory and compute",
         "9.5 GiB per slice"),
    ],
    ids=["whole", "time-sliced", "mps", "mig", "dra-mig"],
)
def test_card_words(pool, unit, free, sharing, memory):
    words = card_words(pool)
    assert (words.unit, words.free, words.sharing, words.memory) == (unit, free, sharing, memory)


@pytest.mark.parametrize(
    "pool, allowed, most, note",
    [
        (T4_SLICED, False, 1, ONE_SHARE_NOTE),
        (T4_SLICED, True, 3, None),
        (A100_MPS, False, 6, None),  # MPS shares each carry their own memory
        (MIG, False, 5, None),
    ],
    ids=["time-sliced", "time-sliced-allowed", "mps", "mig"],
)
def test_one_share_of_a_time_sliced_gpu_per_server_unless_allowed(pool, allowed, most, note):
    spec = GPUProfileSpec.from_config({"slug": "gpu"})
    (offer,) = build_offers([spec], snapshot(pool), multiple_shares=allowed)["gpu"].pools
    assert (offer.max_gpus, offer.limit_note) == (most, note)


FULL_A100 = pool_view("b100", "NVIDIA-A100-SXM4-80GB", nodes=1, total=8, free=0, per_node=0, memory_mib=81920)
L4 = pool_view("l4", "NVIDIA-L4", nodes=1, total=4, free=4)


@pytest.mark.parametrize(
    "pools, expected",
    [
        # whole GPUs, then slices, then shares; the groups with room first; in a group, the pools with room first
        ((T4_SLICED, MIG, FULL_A100, A100, L4),
         [("NVIDIA A100 80GB", ["a100", "b100"]), ("NVIDIA L4", ["l4"]),
          ("NVIDIA A100 80GB, MIG slices", ["dgx"]), ("NVIDIA T4, shared", ["t4"])]),
        ((FULL_A100, L4), [("NVIDIA L4", ["l4"]), ("NVIDIA A100 80GB", ["b100"])]),
    ],
    ids=["kinds-and-room", "room-first"],
)
def test_the_page_groups_pools_by_model(pools, expected):
    spec = GPUProfileSpec.from_config({"slug": "gpu"})
    offer = build_offers([spec], snapshot(*pools))["gpu"]
    assert [(title, [p.pool.node_group for p in members]) for title, members in offer.groups()] == expected
