import random

import pytest

from gpuspawner.capacity.config import CapacityConfig, DeclaredPool
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.plugin_accounts import PluginAccounts
from gpuspawner.capacity.model import DriverGroup, ScaleUp, Taint, driver_groups, pool_id
from gpuspawner.capacity.pod_requests import pod_record

from tests.builders import DECLARED_H100
from tests.builders import GFD_A100, node, pod

CFG = CapacityConfig()
GKE = "cloud.google.com/gke-nodepool"
A100 = pool_id("a100", "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu")


def a100(name, gpus=8, driver="570.172.08", cuda="12.8", **kw):
    labels = {**GFD_A100, GKE: "a100", "nvidia.com/cuda.driver-version.full": driver,
              "nvidia.com/cuda.runtime-version.full": cuda}
    return node_record(node(name, {"nvidia.com/gpu": str(gpus)}, labels, **kw), CFG)


def gpod(name, gpus, node_name=None, **kw):
    return pod_record(pod(name, gpus, node_name, **kw), CFG.is_gpu_resource)


def summary(ledger, pid=A100):
    p = ledger.ledger.pools_by_id()[pid]
    return (p.nodes, p.total, p.free, p.max_free_per_node)


def test_pool_totals_and_free_follow_pods():
    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    led.upsert_node(a100("n2"))
    assert summary(led) == (2, 16, 16, 8)
    led.upsert_pod(gpod("a", 3, "n1"))
    led.upsert_pod(gpod("b", 8, "n2"))
    assert summary(led) == (2, 16, 5, 5)
    led.remove_pod("jhub/b")
    assert summary(led) == (2, 16, 13, 8)


def test_free_never_below_zero():
    led = PluginAccounts()
    led.upsert_node(a100("n1", gpus=2))
    led.upsert_pod(gpod("a", 2, "n1"))
    led.upsert_pod(gpod("b", 2, "n1"))  # e.g. allocatable shrank under running pods
    assert summary(led) == (1, 2, 0, 0)


@pytest.mark.parametrize(
    "kw",
    [{"ready": False}, {"unschedulable": True}],
    ids=["not-ready", "cordoned"],
)
def test_non_contributing_nodes_keep_the_pool_known_but_empty(kw):
    led = PluginAccounts()
    led.upsert_node(a100("n1", **kw))
    p = led.ledger.pools_by_id()[A100]
    assert (p.nodes, p.total, p.free, p.max_free_per_node, p.node_views) == (0, 0, 0, 0, ())
    led.upsert_node(a100("n1"))  # becomes Ready / uncordoned
    assert summary(led) == (1, 8, 8, 8)
    led.remove_node("n1")
    assert A100 not in led.ledger.pools_by_id()


def test_pod_seen_before_its_node_is_counted_when_the_node_arrives():
    led = PluginAccounts()
    led.upsert_pod(gpod("a", 3, "n1"))
    led.upsert_node(a100("n1"))
    assert summary(led) == (1, 8, 5, 5)


def test_pending_pod_counts_nothing_until_bound():
    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    led.upsert_pod(gpod("a", 3))
    assert summary(led) == (1, 8, 8, 8)
    led.upsert_pod(gpod("a", 3, "n1"))
    assert summary(led) == (1, 8, 5, 5)


def test_lowest_driver_and_cuda_are_compared_numerically():
    led = PluginAccounts()
    led.upsert_node(a100("n1", driver="535.54.03", cuda="12.2"))
    led.upsert_node(a100("n2", driver="535.183.01", cuda="12.10"))
    led.upsert_node(a100("n3", driver="470.82.01", cuda="11.4", ready=False))  # not contributing
    p = led.ledger.pools_by_id()[A100]
    assert (p.driver_version, p.cuda_version) == ("535.54.03", "12.2")
    assert [(v.name, v.driver_version) for v in p.node_views] == [("n1", "535.54.03"), ("n2", "535.183.01")]


def test_pool_attributes():
    led = PluginAccounts()
    led.upsert_node(
        a100("n1", taints=[
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        ])
    )
    led.upsert_node(a100("n2", taints=[{"key": "team", "value": "ml", "effect": "NoSchedule"}]))
    p = led.ledger.pools_by_id()[A100]
    assert (p.resource, p.product, p.memory_mib, p.node_group_label, p.node_group) == (
        "nvidia.com/gpu", "NVIDIA-A100-SXM4-80GB", 81920, GKE, "a100")
    assert p.defining_labels == ((GKE, "a100"), ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"))
    # the union of the nodes' taints, without the node lifecycle's passing ones
    assert p.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"), Taint("team", "ml", "NoSchedule"))
    assert p.scale_up is None


def test_generation_bumps_only_on_change_and_pools_are_cached():
    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    first = led.ledger.pools()
    g = led.ledger.generation
    assert led.upsert_node(a100("n1")) is False  # same record again (e.g. a heartbeat update)
    assert led.ledger.generation == g and led.ledger.pools() is first
    led.upsert_pod(gpod("a", 1, "n1"))
    assert led.ledger.generation > g and led.ledger.pools() is not first


def test_reservation_counts_at_once_on_the_node_with_most_free():
    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    led.upsert_node(a100("n2"))
    led.upsert_pod(gpod("x", 6, "n1"))
    r = led.ledger.reserve("jhub/spawn", A100, 4, expires_at=100.0)
    assert r.node == "n2"
    assert summary(led) == (2, 16, 6, 4)
    # the pod appears unbound: still reserved
    led.upsert_pod(gpod("spawn", 4, namespace="jhub"))
    assert summary(led) == (2, 16, 6, 4)
    # bound: it counts as used, the reservation is gone (no double count)
    led.upsert_pod(gpod("spawn", 4, "n2"))
    assert led.ledger.reservations() == {}
    assert summary(led) == (2, 16, 6, 4)


def test_reservation_goes_to_the_first_node_by_name_among_the_freest_contributing_ones():
    led = PluginAccounts()
    for name, kw in (("n4", {}), ("n2", {}), ("n3", {"unschedulable": True}), ("n1", {"ready": False})):
        led.upsert_node(a100(name, **kw))  # n1 and n3 do not contribute
    led.upsert_pod(gpod("x", 1, "n4"))
    assert led.ledger.reserve("jhub/a", A100, 1, expires_at=100.0).node == "n2"
    assert led.ledger.reserve("jhub/b", A100, 1, expires_at=100.0).node == "n2"  # 7 free on n2 and n4: the first by name
    assert led.ledger.reserve("jhub/c", A100, 1, expires_at=100.0).node == "n4"  # 6 on n2, 7 on n4
    led.upsert_node(a100("n4", unschedulable=True))  # cordoned: its reservation's GPUs are no longer offered
    assert led.ledger.reserve("jhub/d", A100, 1, expires_at=100.0).node == "n2"
    assert led.ledger.reserve("jhub/none", "nowhere:x:nvidia.com/gpu", 1, expires_at=100.0).node is None


@pytest.mark.parametrize("how", ["release", "expire", "pod-deleted"])
def test_reservation_is_released(how):
    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    led.ledger.reserve("jhub/s", A100, 8, expires_at=100.0)
    assert summary(led) == (1, 8, 0, 0)
    if how == "release":
        assert led.ledger.release("jhub/s")
    elif how == "expire":
        assert led.ledger.expire(99.9) == 0
        assert led.ledger.expire(100.0) == 1
    else:
        led.upsert_pod(gpod("s", 8))
        led.remove_pod("jhub/s")
    assert summary(led) == (1, 8, 8, 8)
    assert led.ledger.reservations() == {}


def test_reserving_for_a_pod_already_bound_holds_nothing():
    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    led.upsert_pod(gpod("s", 2, "n1"))
    assert led.ledger.reserve("jhub/s", A100, 2, expires_at=1.0) is None
    assert summary(led) == (1, 8, 6, 6)


def test_concurrent_spawns_are_not_all_offered_the_last_gpu():
    led = PluginAccounts()
    led.upsert_node(a100("n1", gpus=1))
    assert led.ledger.pools_by_id()[A100].free == 1
    led.ledger.reserve("jhub/u1", A100, 1, expires_at=10.0)
    assert led.ledger.pools_by_id()[A100].free == 0


def test_reserve_rejects_a_bad_count():
    with pytest.raises(ValueError, match="positive integer"):
        PluginAccounts().ledger.reserve("a/b", A100, 0, 1.0)




def h100(name):
    labels = {GKE: "h100-spot", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
              "nvidia.com/cuda.driver-version.full": "580.95.05"}
    return node_record(node(name, {"nvidia.com/gpu": "8"}, labels), CFG)


def test_declared_pool_scales_from_zero_and_merges_with_its_nodes():
    d = DeclaredPool.from_config(DECLARED_H100)
    led = PluginAccounts([d])
    p = led.ledger.pools_by_id()[d.id]
    assert (p.nodes, p.total, p.free, p.scale_up) == (0, 0, 0, ScaleUp(2, 8, 6.0))
    assert p.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert p.defining_labels == ((GKE, "h100-spot"), ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"))
    led.upsert_node(h100("h1"))
    p = led.ledger.pools_by_id()[d.id]
    assert (p.nodes, p.total, p.free, p.driver_version) == (1, 8, 8, "580.95.05")
    assert p.scale_up == ScaleUp(2, 8, 6.0)  # 1 < max_nodes
    led.upsert_node(h100("h2"))
    assert led.ledger.pools_by_id()[d.id].scale_up is None
    led.remove_node("h1")
    led.remove_node("h2")
    assert led.ledger.pools_by_id()[d.id].scale_up is not None  # declared pools never disappear


def test_incremental_equals_full_recount_under_random_events():
    """The incremental sums must match a recount from scratch after any event order."""
    rnd = random.Random(7)
    led = PluginAccounts()
    names = [f"n{i}" for i in range(6)]
    pods: dict[str, tuple[int, str | None]] = {}
    nodes: dict[str, dict] = {}
    for step in range(600):
        op = rnd.random()
        if op < 0.3:
            name = rnd.choice(names)
            kw = {"ready": rnd.random() > 0.2, "unschedulable": rnd.random() < 0.1,
                  "driver": rnd.choice(["535.54.03", "535.183.01", "570.172.08"])}
            nodes[name] = {"gpus": rnd.choice([1, 2, 4, 8]), **kw}
            led.upsert_node(a100(name, **nodes[name]))
        elif op < 0.35 and nodes:
            name = rnd.choice(sorted(nodes))
            del nodes[name]
            led.remove_node(name)
        elif op < 0.8:
            key = f"p{rnd.randrange(20)}"
            pods[key] = (rnd.randint(1, 3), rnd.choice(names + [None]))
            led.upsert_pod(gpod(key, *pods[key]))
        elif pods:
            key = rnd.choice(sorted(pods))
            del pods[key]
            led.remove_pod(f"jhub/{key}")
        # recount from scratch
        used: dict[str, int] = {}
        for n, node_name in pods.values():
            if node_name:
                used[node_name] = used.get(node_name, 0) + n
        contributing = {k: v for k, v in sorted(nodes.items()) if v["ready"] and not v["unschedulable"]}
        frees = [max(0, v["gpus"] - used.get(k, 0)) for k, v in contributing.items()]
        view = led.ledger.pools_by_id().get(A100)
        if not nodes:
            assert view is None, step
            continue
        assert (view.nodes, view.total, view.free, view.max_free_per_node) == (
            len(contributing),
            sum(v["gpus"] for v in contributing.values()),
            sum(frees),
            max(frees, default=0),
        ), step
        assert [(v.name, v.free, v.driver_version) for v in view.node_views] == [
            (k, f, v["driver"]) for (k, v), f in zip(contributing.items(), frees)
        ], step
        drivers = sorted((v["driver"] for v in contributing.values()), key=lambda d: tuple(map(int, d.split("."))))
        assert view.driver_version == (drivers[0] if drivers else None), step
        # the driver groups kept incrementally are those counted from the nodes
        assert view.driver_groups == driver_groups(view.node_views), step
        assert sum(g.nodes for g in view.driver_groups) == view.nodes, step


# ---------------------------------------------------------------------------
# driver groups


def group_summary(ledger, pid=A100):
    return [(g.driver_version, g.nodes, g.total, g.free, g.max_free_per_node) for g in ledger.ledger.pools_by_id()[pid].driver_groups]


def test_nodes_are_summed_per_driver_group():
    led = PluginAccounts()
    led.upsert_node(a100("n1", driver="535.183.01", cuda="12.2"))
    led.upsert_node(a100("n2", driver="570.172.08"))
    led.upsert_node(a100("n3", driver="570.172.08", gpus=4))
    led.upsert_pod(gpod("a", 3, "n2"))
    assert group_summary(led) == [("535.183.01", 1, 8, 8, 8), ("570.172.08", 2, 12, 9, 5)]
    (old, new) = led.ledger.pools_by_id()[A100].driver_groups
    assert new.labels == (("nvidia.com/cuda.driver-version.full", "570.172.08"),)
    assert (new.compute_capability, new.max_allocatable) == ("8.0", 8)


def test_a_driver_label_change_moves_the_node_to_another_group():
    led = PluginAccounts()
    led.upsert_node(a100("n1", driver="535.183.01", cuda="12.2"))
    led.upsert_node(a100("n2", driver="535.183.01", cuda="12.2"))
    before = led.ledger.pools_by_id()[A100].driver_groups
    led.upsert_pod(gpod("a", 1, "n1"))  # counts change, the groups' keys do not
    assert [g.key for g in led.ledger.pools_by_id()[A100].driver_groups] == [g.key for g in before]
    led.upsert_node(a100("n2", driver="570.172.08"))  # GFD relabels n2 after a driver upgrade
    assert group_summary(led) == [("535.183.01", 1, 8, 7, 7), ("570.172.08", 1, 8, 8, 8)]
    led.upsert_node(a100("n1", driver="570.172.08", unschedulable=True))  # upgraded, still cordoned
    assert group_summary(led) == [("570.172.08", 1, 8, 8, 8)]
    led.remove_node("n2")
    assert led.ledger.pools_by_id()[A100].driver_groups == ()


def test_hand_made_pool_views_count_their_groups_from_their_nodes():
    import dataclasses

    led = PluginAccounts()
    led.upsert_node(a100("n1"))
    view = led.ledger.pools_by_id()[A100]
    assert view.driver_groups == (DriverGroup("570.172.08", "12.8", "8.0",
                                              (("nvidia.com/cuda.driver-version.full", "570.172.08"),), 1, 8, 8, 8, 8),)
    assert dataclasses.replace(view, node_views=()).driver_groups == ()


# -- one mechanism, two sources: the same reservation rules whoever feeds the ledger ------------------

def _plugin_pool():
    """Device-plugin accounts with nodes of 2 and 4 free GPUs in pool A100."""
    accounts = PluginAccounts()
    accounts.upsert_node(a100("n1", gpus=4))
    accounts.upsert_node(a100("n2", gpus=4))
    accounts.upsert_pod(gpod("busy", 2, "n1"))
    return accounts, A100


def _dra_pool():
    """DRA accounts with nodes of 2 and 4 free devices in one DRA pool."""
    from gpuspawner.capacity.dra_accounts import DraAccounts
    from gpuspawner.capacity.dra_objects import claim_record, class_record, dra_node, slice_record
    from tests.builders.dra import device_class, gpu_device, group_node, resource_claim, resource_slice

    accounts = DraAccounts()
    accounts.upsert_class(class_record(device_class("gpu.nvidia.com", device_type="gpu")))
    for name in ("n1", "n2"):
        accounts.upsert_node(dra_node(group_node(name, group="dra-a100"), CFG.node_group_labels, CFG.is_gpu_resource))
        accounts.upsert_slice(slice_record(resource_slice(f"{name}-s", name, [gpu_device(f"gpu-{i}") for i in range(4)]),
                                           CFG.dra_drivers))
    accounts.upsert_claim(claim_record(resource_claim("busy", devices=[("n1", "gpu-0"), ("n1", "gpu-1")])))
    (pool,) = accounts.ledger.pools()
    return accounts, pool.id


SOURCES = [_plugin_pool, _dra_pool]
SOURCE_IDS = ["device-plugin", "dra"]


@pytest.mark.parametrize("make", SOURCES, ids=SOURCE_IDS)
def test_both_sources_reserve_on_the_node_with_the_most_free_gpus_until_released(make):
    accounts, pid = make()
    ledger = accounts.ledger
    assert [(v.name, v.free) for v in ledger.pools_by_id()[pid].node_views] == [("n1", 2), ("n2", 4)]
    before = ledger.generation
    r = ledger.reserve("jhub/jupyter-ada", pid, 3, expires_at=100.0)
    assert (r.node, r.count) == ("n2", 3) and ledger.generation > before
    assert [(v.name, v.free) for v in ledger.pools_by_id()[pid].node_views] == [("n1", 2), ("n2", 1)]
    # the same owner again: its first reservation is replaced, not added to
    ledger.reserve("jhub/jupyter-ada", pid, 1, expires_at=100.0)
    assert ledger.pools_by_id()[pid].free == 5
    assert ledger.release("jhub/jupyter-ada") and not ledger.release("jhub/jupyter-ada")
    assert ledger.pools_by_id()[pid].free == 6


@pytest.mark.parametrize("make", SOURCES, ids=SOURCE_IDS)
def test_both_sources_let_reservations_expire_and_rebuild_only_after_a_change(make):
    accounts, pid = make()
    ledger = accounts.ledger
    ledger.reserve("jhub/a", pid, 1, expires_at=10.0)
    ledger.reserve("jhub/b", pid, 1, expires_at=20.0)
    pools = ledger.pools()
    assert ledger.pools() is pools  # nothing changed: the same tuple
    assert ledger.expire(15.0) == 1 and set(ledger.reservations()) == {"jhub/b"}
    assert ledger.pools() is not pools and ledger.pools_by_id()[pid].free == 5
    assert ledger.expire(15.0) == 0
