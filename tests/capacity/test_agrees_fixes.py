"""What the differential test against kube-scheduler found: a node whose hard taint no server
tolerates gives no GPUs, and a DRA pool counts only the nodes where the whole pod fits (CPU,
memory, ephemeral storage, a pod slot), as device-plugin pools do."""

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import class_record, dra_node, slice_record
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.plugin_accounts import PluginAccounts
from gpuspawner.capacity.model import FitCount
from gpuspawner.capacity.pod_requests import base_record
from gpuspawner.spawn.tolerations import refused_by_taint

from tests.builders import container, gpu_node, node, pod
from tests.builders.dra import NVIDIA, device_class, gpu_device, resource_slice

CFG = CapacityConfig()
GiB = 1 << 30
SERVER = (8000, 32 * GiB, 0, 1)  # 8 CPUs, 32 GiB, a pod slot


def taint(key, effect="NoSchedule", value=None):
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


@pytest.mark.parametrize(
    "taints, config, counted",
    [
        ([], CFG, True),
        # the GPU taint every server tolerates (gpu_tolerated_taint_keys' default)
        ([taint("nvidia.com/gpu", value="present")], CFG, True),
        # a team's taint no server tolerates: kube-scheduler's TaintToleration keeps servers off
        ([taint("dedicated", value="ml")], CFG, False),
        ([taint("dedicated", "NoExecute", "ml")], CFG, False),
        # PreferNoSchedule only steers
        ([taint("dedicated", "PreferNoSchedule", "ml")], CFG, True),
        # the admin lets servers tolerate it
        ([taint("dedicated", value="ml")], CapacityConfig(tolerated_taint_keys=("nvidia.com/gpu", "dedicated")), True),
    ],
    ids=["untainted", "gpu-taint", "team-taint", "team-noexecute", "prefer-no-schedule", "admin-allows"],
)
def test_a_node_no_server_tolerates_gives_no_gpus(taints, config, counted):
    led = PluginAccounts()
    led.upsert_node(node_record(gpu_node("g1", 4, taints=taints), config))
    pools = led.ledger.pools()
    assert (pools[0].free if pools else 0) == (4 if counted else 0)
    dra = dra_node(node("d1", taints=taints), config.node_group_labels, config.is_gpu_resource,
                   config.tolerated_taint_keys)
    assert dra.contributes is counted


def dra_ledger(cpu="16", memory="64Gi", pods="110"):
    """A DRA node with 2 A100s, wired to a device-plugin ledger as the capacity cache wires them."""
    led, dra = PluginAccounts(), DraAccounts()
    led.ledger.on_requested = dra.ledger.refit
    dra.ledger.track([SERVER], led.ledger.requested_on)
    dra.upsert_class(class_record(device_class(NVIDIA, device_type="gpu")))
    dra.upsert_node(dra_node(node("d1", {"cpu": cpu, "memory": memory, "pods": pods}), CFG.node_group_labels,
                             CFG.is_gpu_resource))
    dra.upsert_slice(slice_record(resource_slice("d1-gpus", "d1", [gpu_device("gpu-0"), gpu_device("gpu-1")]),
                                  CFG.dra_drivers))
    return led, dra


def busy(led, name, cpu, memory="1Gi"):
    obj = pod(name, 0, "d1", namespace="others", containers=[container("c", requests={"cpu": cpu, "memory": memory})])
    led.upsert_base_pod(f"others/{name}", base_record(obj))


@pytest.mark.parametrize(
    "node_size, pods, expected",
    [
        ({}, [], FitCount(1, 2, 2, 1)),
        # another team's pod leaves 4 CPUs: the server's 8 do not fit now, though the node could hold them
        ({}, [("etl", "12")], FitCount(0, 0, 0, 1)),
        ({}, [("etl", "1", "40Gi")], FitCount(0, 0, 0, 1)),
        # the node can never hold it
        ({"cpu": "4"}, [], FitCount(0, 0, 0, 0)),
        # its one pod slot is taken
        ({"pods": "1"}, [("etl", "100m")], FitCount(0, 0, 0, 1)),
    ],
    ids=["room", "cpu-taken", "memory-taken", "too-small", "no-pod-slot"],
)
def test_a_dra_pool_counts_only_nodes_where_the_pod_fits(node_size, pods, expected):
    led, dra = dra_ledger(**node_size)
    for p in pods:
        busy(led, *p)
    (pool,) = dra.ledger.pools()
    assert pool.fit_for(SERVER) == expected


def test_a_dra_pool_follows_the_pods_on_its_nodes():
    led, dra = dra_ledger()
    busy(led, "etl", "12")
    before = dra.ledger.generation
    assert dra.ledger.pools()[0].fit_for(SERVER).free == 0
    led.remove_pod("others/etl")
    assert dra.ledger.generation > before
    assert dra.ledger.pools()[0].fit_for(SERVER).free == 2
    # a pod that moves no fit changes no pool (the page's memos hold)
    gen = dra.ledger.generation
    busy(led, "tiny", "100m")
    assert dra.ledger.generation == gen


def test_a_pool_refused_by_a_taint_still_shows_it_so_the_page_can_say_why():
    """The pool of refused nodes stays listed with zeros and its nodes' taint, in both ledgers:
    what the spawn page, the REST refusal and the API read to name the taint and the key to add."""
    keys = ("nvidia.com/gpu",)
    config = CapacityConfig(tolerated_taint_keys=keys)
    sku = [taint("sku", value="gpu")]
    led = PluginAccounts()
    led.upsert_node(node_record(gpu_node("t4-1", 1, taints=sku), config))
    dra = DraAccounts()
    dra.upsert_class(class_record(device_class(NVIDIA, device_type="gpu")))
    dra.upsert_node(dra_node(node("d1", taints=sku), config.node_group_labels, config.is_gpu_resource, keys))
    dra.upsert_slice(slice_record(resource_slice("d1-gpus", "d1", [gpu_device("gpu-0")]), config.dra_drivers))
    for (pool,) in (led.ledger.pools(), dra.ledger.pools()):
        assert (pool.nodes, pool.total, pool.free) == (0, 0, 0)
        assert "carry the taint sku=gpu:NoSchedule" in refused_by_taint(pool, keys)
        assert refused_by_taint(pool, keys + ("sku",)) is None
