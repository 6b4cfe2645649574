"""Every node's cordon and hard taints, counted per distinct set (gpuspawner.capacity.node_taints), and
how many nodes a pod's tolerations leave it off for good or for now (capacity.taintrule.taint_exclusion),
the rule the pending verdicts and ``doctor`` weigh kube-scheduler's keyless "node(s) had untolerated
taint(s)" with.  Pure: no API server."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.device_plugin_source import DevicePluginSource
from gpuspawner.capacity.model import Taint
from gpuspawner.capacity.node_taints import NodeTaintCounts, node_filter_taints
from gpuspawner.capacity.taintrule import NodeTaints, TaintExclusion, is_passing_taint, taint_exclusion
from tests.builders import gpu_node, node

SKU = Taint("sku", "gpu", "NoSchedule")
GPU = Taint("nvidia.com/gpu", "present", "NoSchedule")
CONTROL = Taint("node-role.kubernetes.io/control-plane", None, "NoSchedule")
NOT_READY = Taint("node.kubernetes.io/not-ready", None, "NoSchedule")
UNREACHABLE = Taint("node.kubernetes.io/unreachable", None, "NoExecute")
CORDONED = Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")
SCALE_DOWN = Taint("ToBeDeletedByClusterAutoscaler", "1700000000", "NoSchedule")
SOFT = Taint("example.com/soft", None, "PreferNoSchedule")


def k8s(t: Taint) -> dict:
    return t.to_k8s()


def facts(*taints: Taint, cordoned: bool = False) -> NodeTaints:
    return NodeTaints(cordoned, tuple(sorted(taints, key=lambda t: (t.key, t.value or "", t.effect))))


TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
TOLERATE_ALL = {"operator": "Exists"}


@pytest.mark.parametrize("key, passing", [
    ("node.kubernetes.io/not-ready", True),
    ("node.kubernetes.io/unreachable", True),
    ("node.kubernetes.io/unschedulable", True),
    ("node.kubernetes.io/memory-pressure", True),
    ("node.kubernetes.io/network-unavailable", True),
    ("node.cloudprovider.kubernetes.io/uninitialized", True),
    ("ToBeDeletedByClusterAutoscaler", True),
    ("karpenter.sh/disrupted", True),
    ("sku", False),
    ("node-role.kubernetes.io/control-plane", False),
    ("nvidia.com/gpu", False),
], ids=["not-ready", "unreachable", "cordon", "memory-pressure", "network", "cloud-uninitialized",
        "autoscaler-scale-down", "karpenter-disrupted", "aks-sku", "control-plane", "gpu"])
def test_which_taints_pass(key, passing):
    assert is_passing_taint(key) is passing


# (node taint sets with their node counts, the pod's tolerations, the exclusion)
EXCLUSION_CASES = [
    pytest.param([(facts(GPU), 4)], [TOLERATE_GPU], TaintExclusion(0, 0), id="every-taint-tolerated"),
    pytest.param([(facts(SKU), 2), (facts(GPU), 4)], [TOLERATE_GPU], TaintExclusion(2, 0, ((SKU, 2),)),
                 id="another-pools-taint-stays"),
    pytest.param([(facts(NOT_READY), 3)], [TOLERATE_GPU], TaintExclusion(0, 3), id="not-ready-passes"),
    pytest.param([(facts(SCALE_DOWN), 1)], [], TaintExclusion(0, 1), id="autoscaler-scale-down-passes"),
    pytest.param([(facts(SKU, NOT_READY), 2)], [], TaintExclusion(2, 0, ((SKU, 2),)),
                 id="a-lasting-taint-beside-a-passing-one-stays"),
    pytest.param([(facts(CONTROL), 1), (facts(SKU), 3), (facts(GPU, UNREACHABLE), 2)], [TOLERATE_GPU],
                 TaintExclusion(4, 2, ((SKU, 3), (CONTROL, 1))), id="most-nodes-first"),
    # NodeUnschedulable turns the pod away from a cordoned node before the taint filter
    pytest.param([(facts(SKU, CORDONED, cordoned=True), 2)], [], TaintExclusion(0, 0),
                 id="cordoned-node-is-the-cordons-reason"),
    pytest.param([(facts(SKU, CORDONED, cordoned=True), 2)], [TOLERATE_ALL], TaintExclusion(0, 0),
                 id="a-pod-that-tolerates-everything"),
    pytest.param([(facts(SKU, CORDONED, cordoned=True), 2)], [{"key": CORDONED.key, "operator": "Exists"}],
                 TaintExclusion(2, 0, ((SKU, 2),)), id="cordon-tolerated-then-the-taint-counts"),
    pytest.param([(facts(SOFT), 5)], [], TaintExclusion(0, 0), id="prefer-no-schedule-is-no-filter"),
    # Lt/Gt tolerate only behind an alpha feature gate: never counted as a taint that surely stays
    pytest.param([(facts(Taint("example.com/tier", "3", "NoSchedule")), 2)],
                 [{"key": "example.com/tier", "operator": "Gt", "value": "2", "effect": "NoSchedule"}],
                 TaintExclusion(0, 2), id="comparison-operator-not-sure"),
    pytest.param([], [], TaintExclusion(0, 0), id="no-tainted-node"),
    pytest.param([(facts(SKU), 1)], ["not a toleration", None], TaintExclusion(1, 0, ((SKU, 1),)),
                 id="malformed-tolerations-ignored"),
]


@pytest.mark.parametrize("nodes, tolerations, expected", EXCLUSION_CASES)
def test_taint_exclusion(nodes, tolerations, expected):
    assert taint_exclusion(nodes, tolerations) == expected


@pytest.mark.parametrize("excluded, count, lasting", [
    (TaintExclusion(3, 0), 3, 3),
    (TaintExclusion(3, 2), 5, 3),
    (TaintExclusion(3, 2), 4, 2),  # a node's not-ready taint went after the scheduler's word: not sure
    (TaintExclusion(4, 0), 3, 3),  # a node tainted since: never more than the scheduler counted
    (TaintExclusion(0, 2), 2, 0),
    (TaintExclusion(1, 5), 2, 0),
], ids=["all-lasting", "mixed", "cluster-changed-since", "tainted-since", "all-passing", "more-passing-than-said"])
def test_lasting_among_takes_the_safe_bound(excluded, count, lasting):
    assert excluded.lasting_among(count) == lasting


@pytest.mark.parametrize("obj, expected", [
    (node("cpu-0"), None),
    (node("cp-0", taints=[k8s(CONTROL)]), facts(CONTROL)),
    (node("cpu-1", unschedulable=True), facts(cordoned=True)),
    (node("cpu-2", taints=[k8s(SOFT), k8s(SKU)]), facts(SKU)),
    (node("cpu-3", taints=[k8s(SKU), k8s(SKU)]), facts(SKU)),
    ({"metadata": {"name": "odd"}, "spec": "not a spec"}, None),
    ({"metadata": {"name": "odd"}, "spec": {"taints": [{"key": 3}, "x", {"key": "k"}]}}, None),
], ids=["untainted", "control-plane", "cordoned", "soft-taint-left-out", "twice-is-once", "bad-spec",
        "bad-taints"])
def test_node_filter_taints(obj, expected):
    assert node_filter_taints(obj) == expected


def test_counts_follow_each_node_and_share_one_record_per_set():
    counts = NodeTaintCounts()
    for i in range(3):
        counts.put(f"t4-{i}", facts(SKU))
    counts.put("cp-0", facts(CONTROL))
    counts.put("cpu-0", None)
    first = counts.summary()
    assert first == ((facts(CONTROL), 1), (facts(SKU), 3))
    assert counts.summary() is first  # no change, no rebuild
    counts.put("t4-0", facts(SKU, NOT_READY))  # a node goes NotReady
    counts.remove("t4-1")
    assert counts.summary() == ((facts(CONTROL), 1), (facts(SKU, NOT_READY), 1), (facts(SKU), 1))
    assert counts.retain({"cp-0", "t4-2"}) == 1
    assert counts.summary() == ((facts(CONTROL), 1), (facts(SKU), 1))
    counts.put("t4-2", None)  # its taint was removed
    assert counts.summary() == ((facts(CONTROL), 1),)


def test_nodes_alike_share_one_record():
    counts = NodeTaintCounts()
    counts.put("a", facts(SKU))
    counts.put("b", facts(SKU))
    assert counts._of["a"] is counts._of["b"]


def test_the_device_plugin_source_counts_every_nodes_taints_gpu_or_not():
    src = DevicePluginSource(CapacityConfig())
    src.apply("nodes", gpu_node("t4-0", 1, taints=[k8s(SKU)]))
    src.apply("nodes", node("cp-0", taints=[k8s(CONTROL)]))
    src.apply("nodes", node("cpu-0"))
    assert src.taints.summary() == ((facts(CONTROL), 1), (facts(SKU), 1))
    src.remove("nodes", node("cp-0"))
    assert src.taints.summary() == ((facts(SKU), 1),)
    src.apply("nodes", node("cpu-1", taints=[k8s(CONTROL)]))
    src.retain("nodes", {"cpu-1"})  # a re-list no longer saw t4-0
    assert src.taints.summary() == ((facts(CONTROL), 1),)
