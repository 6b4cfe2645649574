"""DRA accounting: pools from slices, taken devices from claims, complete generations only."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import claim_record, class_record, dra_node, slice_record
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.capacity.model import Taint
from tests.builders.dra import NVIDIA, device_class, gpu_device, mig_device, resource_claim, resource_slice
from tests.builders.dra import group_node as node

CFG = CapacityConfig()

A100 = "dra-a100:nvidia-a100-sxm4-80gb:gpu.nvidia.com"
MIG = "dra-a100:nvidia-a100-sxm4-80gb-mig-1g.10gb:mig.nvidia.com"


class Cluster:
    """DraAccounts (and their Ledger) fed with API objects, as the cache's informers feed it."""

    def __init__(self, *classes: dict):
        self.ledger = DraAccounts()
        for c in classes or (device_class("gpu.nvidia.com", device_type="gpu"),
                             device_class("mig.nvidia.com", device_type="mig")):
            self.ledger.upsert_class(class_record(c))

    def node(self, name, **kw):
        self.ledger.upsert_node(dra_node(node(name, **kw), CFG.node_group_labels, CFG.is_gpu_resource))

    def slice(self, *args, **kw):
        return self.ledger.upsert_slice(slice_record(resource_slice(*args, **kw), CFG.dra_drivers))

    def claim(self, *args, **kw):
        return self.ledger.upsert_claim(claim_record(resource_claim(*args, **kw)))

    def gpus_node(self, name, n=4, group="dra-a100", **dev):
        self.node(name, group=group)
        self.slice(f"{name}-gpu.nvidia.com", name, [gpu_device(f"gpu-{i}", **dev) for i in range(n)])

    def pool(self, pid):
        return {p.id: p for p in self.ledger.ledger.pools()}.get(pid)


def counts(pool):
    return pool.nodes, pool.total, pool.free, pool.max_free_per_node


def test_pool_of_two_nodes_and_a_claim():
    c = Cluster()
    c.gpus_node("g1")
    c.gpus_node("g2")
    c.claim("ada-gpus", devices=[("g1", "gpu-0"), ("g1", "gpu-1")])
    p = c.pool(A100)
    assert counts(p) == (2, 8, 6, 4)
    assert (p.resource, p.product, p.allocation, p.memory_mib) == ("gpu.nvidia.com", "NVIDIA A100-SXM4-80GB", "dra", 81920)
    assert p.defining_labels == (("cloud.google.com/gke-nodepool", "dra-a100"),)
    assert [(n.name, n.allocatable, n.free) for n in p.node_views] == [("g1", 4, 2), ("g2", 4, 4)]
    assert dict(p.node_views[0].labels) == {"kubernetes.io/hostname": "g1"}
    assert (p.dra.driver, p.dra.device_class, p.dra.product_name, p.dra.profile, p.dra.device_type) == (
        NVIDIA, "gpu.nvidia.com", "NVIDIA A100-SXM4-80GB", None, "gpu")
    assert p.to_json()["allocation"] == "dra"
    c.ledger.remove_claim("jhub/ada-gpus")
    assert counts(c.pool(A100)) == (2, 8, 8, 4)


def test_mig_devices_are_their_own_pool_per_profile():
    c = Cluster()
    c.node("m1", group="dra-a100")
    c.slice("m1-s", "m1", [mig_device(f"gpu-0-mig-{i}", "1g.10gb") for i in range(7)]
            + [mig_device("gpu-1-mig-0", "3g.40gb", memory="40192Mi")])
    assert counts(c.pool(MIG)) == (1, 7, 7, 7)
    big = c.pool("dra-a100:nvidia-a100-sxm4-80gb-mig-3g.40gb:mig.nvidia.com")
    assert (big.product, big.dra.profile, big.resource, big.memory_mib) == (
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb", "3g.40gb", "mig.nvidia.com", 40192)


def test_mixed_drivers_show_the_lowest_and_keep_each_node():
    c = Cluster()
    c.gpus_node("old", driver="535.183.01", cuda="12.2.0")
    c.gpus_node("new", driver="570.172.08", cuda="12.8.0")
    p = c.pool(A100)
    assert (p.driver_version, p.cuda_version) == ("535.183.1", "12.2")
    assert {n.name: (n.driver_version, n.cuda_version) for n in p.node_views} == {
        "new": ("570.172.8", "12.8"), "old": ("535.183.1", "12.2")}


def test_only_complete_generations_count():
    c = Cluster()
    c.node("g1", group="dra-a100")
    c.slice("g1-a", "g1", [gpu_device("gpu-0"), gpu_device("gpu-1")], pool="g1", count=2)
    assert c.pool(A100) is None and c.ledger.incomplete_pools() == ((NVIDIA, "g1"),)
    c.slice("g1-b", "g1", [gpu_device("gpu-2"), gpu_device("gpu-3")], pool="g1", count=2)
    assert counts(c.pool(A100)) == (1, 4, 4, 4) and c.ledger.incomplete_pools() == ()
    # the driver starts a new generation: one of two new slices is here, so nothing is trusted
    c.slice("g1-c", "g1", [gpu_device("gpu-0")], pool="g1", generation=2, count=2)
    assert c.pool(A100) is None
    # ... the old generation's slices go, the second new one comes: the newest generation counts
    c.ledger.remove_slice("g1-a")
    c.ledger.remove_slice("g1-b")
    c.slice("g1-d", "g1", [gpu_device("gpu-1")], pool="g1", generation=2, count=2)
    assert counts(c.pool(A100)) == (1, 2, 2, 2)


def test_a_newer_complete_generation_replaces_the_old_one():
    c = Cluster()
    c.gpus_node("g1", n=4)
    c.slice("g1-gen2", "g1", [gpu_device("gpu-0"), gpu_device("gpu-1")], pool="g1", generation=2)
    assert counts(c.pool(A100)) == (1, 2, 2, 2)


def test_duplicate_device_names_make_a_pool_unusable():
    c = Cluster()
    c.node("g1", group="dra-a100")
    c.slice("a", "g1", [gpu_device("gpu-0")], pool="g1", count=2)
    c.slice("b", "g1", [gpu_device("gpu-0")], pool="g1", count=2)
    assert c.pool(A100) is None


def test_admin_access_and_other_drivers_take_nothing():
    c = Cluster()
    c.gpus_node("g1")
    c.claim("dcgm", devices=[("g1", "gpu-0")], admin_access=True)
    c.claim("nic", devices=[("g1", "gpu-1")], driver="dra.net")  # same pool and device names, other driver
    assert c.pool(A100).free == 4


def test_node_publishing_gpus_by_both_paths_contributes_no_dra_device():
    c = Cluster()
    c.gpus_node("g1")
    c.node("g1", group="dra-a100", allocatable={"nvidia.com/gpu": "4"})
    assert c.pool(A100) is None
    c.node("g1", group="dra-a100")  # the device plugin is gone
    assert counts(c.pool(A100)) == (1, 4, 4, 4)


def test_devices_without_a_device_class_are_not_offered_until_one_exists():
    c = Cluster(device_class("mig.nvidia.com", device_type="mig"))
    c.gpus_node("g1")
    assert c.pool(A100) is None
    c.ledger.upsert_class(class_record(device_class("gpu.nvidia.com", device_type="gpu")))
    assert counts(c.pool(A100)) == (1, 4, 4, 4)
    c.ledger.remove_class("gpu.nvidia.com")
    assert c.pool(A100) is None


def test_slice_before_its_node_and_node_states():
    c = Cluster()
    c.slice("g1-s", "g1", [gpu_device("gpu-0"), gpu_device("gpu-1")])
    assert c.pool("default:nvidia-a100-sxm4-80gb:gpu.nvidia.com") is None  # node not seen yet
    c.node("g1", group="dra-a100", ready=False)
    assert counts(c.pool(A100)) == (0, 0, 0, 0)  # known, but a NotReady node offers nothing
    c.node("g1", group="dra-a100")
    assert counts(c.pool(A100)) == (1, 2, 2, 2)
    c.node("g1", group="dra-h100")  # relabelled: its devices move pools
    assert c.pool(A100) is None
    assert counts(c.pool("dra-h100:nvidia-a100-sxm4-80gb:gpu.nvidia.com")) == (1, 2, 2, 2)
    c.ledger.remove_node("g1")
    assert c.ledger.ledger.pools() == ()


def test_pool_taints_leave_out_passing_ones():
    c = Cluster()
    c.node("g1", group="dra-a100", taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                                           {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
    c.slice("g1-s", "g1", [gpu_device("gpu-0")])
    assert c.pool(A100).taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    c.node("g1", group="dra-a100")
    assert c.pool(A100).taints == ()


def test_slices_not_node_local_and_unusable_devices_are_left_out():
    c = Cluster()
    c.node("g1", group="dra-a100")
    c.slice("net", None, [gpu_device("gpu-9")], pool="fabric")
    c.slice("g1-s", "g1", [gpu_device("gpu-0"), gpu_device("gpu-1", allowMultipleAllocations=True)])
    assert counts(c.pool(A100)) == (1, 1, 1, 1)


def test_reservation_until_the_pods_claim_is_allocated():
    c = Cluster()
    c.gpus_node("g1", n=2)
    c.gpus_node("g2", n=4)
    c.ledger.ledger.reserve("jhub/jupyter-ada", A100, 3, expires_at=100.0)
    assert {n.name: n.free for n in c.pool(A100).node_views} == {"g1": 2, "g2": 1}
    # the claim controller creates the pod's claim, the scheduler allocates it: now the claim counts
    c.claim("jupyter-ada-gpus-abcde", owner_pod="jupyter-ada")
    assert c.ledger.ledger.reservations()
    c.claim("jupyter-ada-gpus-abcde", owner_pod="jupyter-ada", devices=[("g2", f"gpu-{i}") for i in range(3)])
    assert not c.ledger.ledger.reservations()
    assert {n.name: n.free for n in c.pool(A100).node_views} == {"g1": 2, "g2": 1}


def test_reservations_released_and_expired():
    c = Cluster()
    c.gpus_node("g1", n=4)
    c.ledger.ledger.reserve("jhub/a", A100, 1, expires_at=10.0)
    c.ledger.ledger.reserve("jhub/b", A100, 2, expires_at=20.0)
    assert c.pool(A100).free == 1
    assert c.ledger.ledger.expire(15.0) == 1 and c.pool(A100).free == 2
    assert c.ledger.ledger.release("jhub/b") and c.pool(A100).free == 4
    assert not c.ledger.ledger.release("jhub/b")
    with pytest.raises(ValueError):
        c.ledger.ledger.reserve("jhub/c", A100, 0, expires_at=1.0)


def test_more_taken_than_there_is_never_goes_below_zero():
    c = Cluster()
    c.gpus_node("g1", n=2)
    c.claim("x", devices=[("g1", "gpu-0"), ("g1", "gpu-1")])
    c.ledger.ledger.reserve("jhub/late", A100, 2, expires_at=10.0)
    assert c.pool(A100).free == 0


def test_views_rebuilt_only_for_changed_pools():
    c = Cluster()
    c.gpus_node("g1")
    c.node("m1", group="dra-a100")
    c.slice("m1-s", "m1", [mig_device("gpu-0-mig-0")])
    first = c.ledger.ledger.pools()
    assert c.ledger.ledger.pools() is first  # nothing changed: the same tuple
    c.claim("x", devices=[("g1", "gpu-0")])
    second = {p.id: p for p in c.ledger.ledger.pools()}
    before = {p.id: p for p in first}
    assert second[MIG] is before[MIG] and second[A100] is not before[A100]
    assert not c.claim("x", devices=[("g1", "gpu-0")])  # the same claim again changes nothing


def test_retain_drops_what_a_relist_no_longer_shows():
    c = Cluster()
    c.gpus_node("g1")
    c.gpus_node("g2")
    c.claim("x", devices=[("g1", "gpu-0")])
    assert c.ledger.retain_slices({"g2-gpu.nvidia.com"}) == 1
    assert c.ledger.retain_claims(set()) == 1
    assert counts(c.pool(A100)) == (1, 4, 4, 4)
    assert c.ledger.retain_classes({"mig.nvidia.com"}) == 1 and c.pool(A100) is None


def test_nodes_without_dra_devices_change_no_generation():
    c = Cluster()
    c.gpus_node("g1")
    before = c.ledger.ledger.generation
    c.node("cpu-1")
    c.node("cpu-1", unschedulable=True)
    assert c.ledger.ledger.generation == before


@pytest.mark.parametrize(
    "sharing, expected",
    [(None, "none"), ("TimeSlicing", "time-slicing"), ("MPS", "mps")],
    ids=["not-shared", "time-slicing", "mps"],
)
def test_a_dra_pool_says_how_its_class_shares_devices_and_mig_is_mig(sharing, expected):
    c = Cluster(device_class("gpu.nvidia.com", device_type="gpu", sharing=sharing),
                device_class("mig.nvidia.com", device_type="mig"))
    c.gpus_node("g1")
    c.node("m1", group="dra-a100")
    c.slice("m1-s", "m1", [mig_device(f"gpu-0-mig-{i}", "1g.10gb") for i in range(7)])
    whole, mig = c.pool(A100).to_json(), c.pool(MIG).to_json()
    assert (whole["sharing"], whole["replicas"], whole["display_name"]) == (expected, 1, "NVIDIA A100 80GB")
    assert (mig["sharing"], mig["replicas"], mig["display_name"]) == ("mig", 1, "NVIDIA A100 80GB MIG 1g.10gb")
