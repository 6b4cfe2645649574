"""CPU and memory fit: the ledger counts, per tracked server request, the GPUs on nodes where the whole
pod fits now, beside what the node's pods (with or without GPUs) request (NodeResourcesFit)."""

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import node_record
from gpuspawner.capacity.plugin_accounts import PluginAccounts
from gpuspawner.capacity.model import FitCount
from gpuspawner.capacity.node_resources import node_base, request_words, shortfall_words
from gpuspawner.capacity.pod_requests import base_record, pod_base, pod_record

from tests.builders import container, node, pod

CFG = CapacityConfig()
GiB = 1 << 30
T4 = {"nvidia.com/gpu.product": "Tesla-T4", "cloud.google.com/gke-nodepool": "t4"}
SERVER = (8000, 32 * GiB, 0, 1)  # 8 CPUs, 32 GiB, a pod slot
SMALL = (1000, 4 * GiB, 0, 1)


def t4_node(name, cpu="3860m", memory="24Gi", gpus=1):
    return node_record(node(name, {"nvidia.com/gpu": str(gpus), "cpu": cpu, "memory": memory, "pods": "110"}, T4),
                       CFG)


def ledger(*nodes, track=(SERVER, SMALL)):
    led = PluginAccounts()
    for n in nodes:
        led.upsert_node(n)
    led.ledger.track(track)
    return led


def cpu_pod(name, node_name, cpu, memory="1Gi"):
    return pod(name, 0, node_name, containers=[container("c", requests={"cpu": cpu, "memory": memory})])


def fit(led, request):
    (pool,) = led.ledger.pools()
    return pool.fit_for(request)


@pytest.mark.parametrize(
    "nodes, pods, server, expected",
    [
        # the demo: T4 nodes of 3.86 CPUs and 24Gi never hold 8 CPUs and 32G
        ([t4_node("t1"), t4_node("t2")], [], SERVER, FitCount(0, 0, 0, 0)),
        ([t4_node("t1"), t4_node("t2")], [], SMALL, FitCount(2, 2, 1, 2)),
        # big enough nodes, but another team's CPU pod fills one of them
        ([t4_node("t1", cpu="16", memory="64Gi"), t4_node("t2", cpu="16", memory="64Gi")],
         [cpu_pod("busy", "t1", "12")], SERVER, FitCount(1, 1, 1, 2)),
        # memory counts too
        ([t4_node("t1", cpu="16", memory="64Gi")], [cpu_pod("busy", "t1", "1", "40Gi")], SERVER, FitCount(0, 0, 0, 1)),
        # a GPU pod's CPU counts on its node, and its GPU is not free
        ([t4_node("t1", cpu="16", memory="64Gi", gpus=2)], [pod("gpu", 1, "t1")], SMALL, FitCount(1, 1, 1, 1)),
        # a pod that finished holds nothing
        ([t4_node("t1", cpu="16", memory="64Gi")], [{**cpu_pod("done", "t1", "12"), "status": {"phase": "Succeeded"}}],
         SERVER, FitCount(1, 1, 1, 1)),
    ],
    ids=["never-fits", "small-fits", "one-node-full-of-cpu", "memory-full", "gpu-pod-counts", "finished-pod"],
)
def test_fit_counts(nodes, pods, server, expected):
    led = ledger(*nodes)
    for p in pods:
        rec = pod_record(p, CFG.is_gpu_resource)
        key = f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        if rec is not None:
            led.upsert_pod(rec)
        elif base_record(p) is not None:
            led.upsert_base_pod(key, base_record(p))
    assert fit(led, server) == expected


def test_a_pod_leaving_gives_its_room_back_and_an_untracked_request_is_not_counted():
    led = ledger(t4_node("t1", cpu="16", memory="64Gi"))
    led.upsert_base_pod("x/busy", base_record(cpu_pod("busy", "t1", "12")))
    assert fit(led, SERVER) == FitCount(0, 0, 0, 1)
    led.remove_pod("x/busy")
    assert fit(led, SERVER) == FitCount(1, 1, 1, 1)
    assert fit(led, (1, 1, 0, 1)) is None  # not tracked: the caller counts without it
    assert (led.pod_count, led.base_pod_count) == (0, 0)


def test_the_largest_node_and_the_reason_in_words():
    led = ledger(t4_node("t1"), t4_node("t2"))
    (pool,) = led.ledger.pools()
    assert pool.largest == (3860, 24 * GiB, 1 << 62, 110)
    assert shortfall_words(SERVER, pool.largest, "T4 nodes") == (
        "T4 nodes have 3.9 CPUs and 24 GiB of memory; this server needs 8 and 32 GiB")
    assert shortfall_words(SMALL, pool.largest) is None
    assert request_words(SERVER) == "8 CPUs, 32 GiB of memory"


def test_a_reservation_holds_the_servers_room_on_a_node_it_fits_on():
    led = ledger(t4_node("t1", cpu="4", memory="64Gi"), t4_node("t2", cpu="12", memory="64Gi"))
    r = led.ledger.reserve("jhub/jupyter-ana", led.ledger.pools()[0].id, 1, expires_at=60.0, request=SERVER)
    assert r.node == "t2"
    assert fit(led, SERVER) == FitCount(0, 0, 0, 1)  # t2's GPU and room are now held for ana
    led.ledger.release("jhub/jupyter-ana")
    assert fit(led, SERVER) == FitCount(1, 1, 1, 1)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ({"containers": [container("c", limits={"cpu": "8", "memory": "32Gi"})]}, (8000, 32 * GiB, 0)),
        ({"containers": [container("c", requests={"cpu": "500m", "ephemeral-storage": "10Gi"}, limits={"cpu": "2"})]},
         (500, 0, 10 * GiB)),
        ({"containers": [container("a", requests={"cpu": "1"}), container("b", requests={"cpu": "1"})],
          "initContainers": [container("init", requests={"cpu": "3"})], "overhead": {"cpu": "250m"}}, (3250, 0, 0)),
    ],
    ids=["limits-default-requests", "requests-win", "init-max-and-overhead"],
)
def test_pod_base(spec, expected):
    assert pod_base(spec) == expected


def test_node_base_reads_allocatable_and_defaults_what_is_missing():
    assert node_base({"cpu": "3860m", "memory": "24Gi", "pods": "110", "ephemeral-storage": "100Gi"}) == (
        3860, 24 * GiB, 100 * GiB, 110)
    assert node_base({"cpu": "lots"}) == (0, 0, 1 << 62, 110)


@pytest.mark.parametrize(
    "rec",
    [("gpu-node-0", 0, 0, 0), ("n", 94000, 1500 * GiB, 1 << 40), ("a-very-long-node-name-" * 3, 1, 1, 1)],
    ids=["zeros", "big", "long-name"],
)
def test_held_pods_keep_a_record_exactly(rec):
    from gpuspawner.capacity.held_pods import HeldPods

    held = HeldPods()
    held.put("ns/a", rec)
    held.put("ns/b", ("other", 5, 6, 7))
    assert held.get("ns/a") == rec and len(held) == 2
    assert held.retain({"ns/b"}) == [rec]
    assert (held.get("ns/a"), held.pop("ns/b"), len(held)) == (None, ("other", 5, 6, 7), 0)


def test_a_relist_drops_the_pods_it_did_not_see_and_gives_their_room_back():
    led = ledger(t4_node("t1", cpu="16", memory="64Gi"))
    led.upsert_base_pod("x/busy", base_record(cpu_pod("busy", "t1", "12")))
    assert fit(led, SERVER).nodes == 0
    assert led.retain_pods(set()) == 1
    assert fit(led, SERVER).nodes == 1
