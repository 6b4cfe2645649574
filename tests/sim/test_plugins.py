"""The simulated scheduler's plugins, quantities and lifecycle taints, checked against kube-scheduler's behaviour."""

from __future__ import annotations

import pytest

from gpuspawner.sim import plugins
from gpuspawner.sim.node_lifecycle import lifecycle_taints
from testcluster.node.pod_resources import QuantityError, parse_quantity, pod_requests, scheduler_units


def node(name, *, labels=None, taints=None, alloc=None, unschedulable=False, ready="True"):
    a = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    a.update(alloc or {})
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], **({"unschedulable": True} if unschedulable else {})},
        "status": {"allocatable": a, "conditions": [{"type": "Ready", "status": ready}]},
    }


def pod(*, requests=None, limits=None, tolerations=None, node_selector=None, affinity=None,
        init=None, overhead=None, preemption_policy=None):
    c = {"name": "notebook", "resources": {}}
    if requests:
        c["resources"]["requests"] = requests
    if limits:
        c["resources"]["limits"] = limits
    spec = {"containers": [c], "tolerations": tolerations or []}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    if preemption_policy:
        spec["preemptionPolicy"] = preemption_policy
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


@pytest.mark.parametrize("text,resource,expected", [
    ("500m", "cpu", 500),
    ("2", "cpu", 2000),
    ("0.1", "cpu", 100),
    ("1Gi", "memory", 2**30),
    ("1G", "memory", 10**9),
    ("1e3", "memory", 1000),
    ("1.5Ki", "memory", 1536),
    ("100m", "memory", 1),  # Value() rounds up
    (4, "nvidia.com/gpu", 4),
], ids=["milli-cpu", "cores", "fraction", "Gi", "G", "exponent", "fractional-Ki", "round-up", "int"])
def test_scheduler_units(text, resource, expected):
    assert scheduler_units(resource, text) == expected


@pytest.mark.parametrize("bad", ["1.2.3", "ten", "5Xi", "", True, None])
def test_bad_quantity_says_what_to_write(bad):
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(bad)


@pytest.mark.parametrize("p,expected", [
    (pod(requests={"cpu": "1", "memory": "1Gi"}), {"cpu": 1000, "memory": 2**30}),
    (pod(limits={"nvidia.com/gpu": 2}), {"nvidia.com/gpu": 2}),
    (pod(requests={"cpu": "1"}, limits={"cpu": "4", "memory": "2Gi"}), {"cpu": 1000, "memory": 2 * 2**30}),
    # a plain init container larger than the app containers wins
    (pod(requests={"cpu": "1"}, init=[{"name": "i", "resources": {"requests": {"cpu": "3"}}}]), {"cpu": 3000}),
    # a smaller init container does not add
    (pod(requests={"cpu": "2"}, init=[{"name": "i", "resources": {"requests": {"cpu": "1"}}}]), {"cpu": 2000}),
    # a sidecar adds to the app containers, and to the init containers after it
    (pod(requests={"cpu": "1"}, init=[
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
        {"name": "i", "resources": {"requests": {"cpu": "2"}}}]), {"cpu": 3000}),
    # a plain init container before the sidecar does not include it
    (pod(requests={"cpu": "1"}, init=[
        {"name": "i", "resources": {"requests": {"cpu": "2"}}},
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}]), {"cpu": 2000}),
    (pod(requests={"cpu": "1"}, overhead={"cpu": "250m"}), {"cpu": 1250}),
    (pod(limits={"nvidia.com/gpu": 1}, init=[{"name": "probe", "resources": {"limits": {"nvidia.com/gpu": 1}}}]),
     {"nvidia.com/gpu": 1}),
], ids=["plain", "limits-only-extended", "limit-defaults-request", "init-wins", "init-smaller",
        "sidecar-then-init", "init-then-sidecar", "overhead", "gpu-init-reuses"])
def test_pod_requests(p, expected):
    assert pod_requests(p) == expected


@pytest.mark.parametrize("tol,taint,ok", [
    ({"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
     {"key": "sku", "value": "gpu", "effect": "NoSchedule"}, True),
    ({"key": "sku", "value": "gpu"}, {"key": "sku", "value": "gpu", "effect": "NoExecute"}, True),
    ({"key": "sku", "value": "cpu"}, {"key": "sku", "value": "gpu", "effect": "NoSchedule"}, False),
    ({"key": "sku", "operator": "Exists"}, {"key": "sku", "value": "gpu", "effect": "NoSchedule"}, True),
    ({"operator": "Exists"}, {"key": "anything", "value": "x", "effect": "NoExecute"}, True),
    ({"operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "effect": "NoExecute"}, False),
    ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
     {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}, True),
    ({"key": "k", "operator": "Equal"}, {"key": "k", "effect": "NoSchedule"}, True),
], ids=["equal", "empty-effect-matches-all", "value-differs", "exists", "empty-key-exists-all",
        "effect-differs", "gke-gpu", "empty-values"])
def test_toleration(tol, taint, ok):
    assert plugins.toleration_tolerates(tol, taint) is ok


GPU = {"nvidia.com/gpu": "4"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/cuda.driver-version.major": "570"}


@pytest.mark.parametrize("n,p,reason", [
    (node("a", unschedulable=True), pod(), "node(s) were unschedulable"),
    (node("a", unschedulable=True),
     pod(tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]),
     None),
    (node("a", taints=[{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]), pod(),
     "node(s) had untolerated taint {sku: gpu}"),
    (node("a", taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]), pod(),
     "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"),
    (node("a", taints=[{"key": "x", "value": "y", "effect": "PreferNoSchedule"}]), pod(), None),
    (node("a", labels=A100), pod(node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}), None),
    (node("a", labels=A100), pod(node_selector={"nvidia.com/gpu.product": "Tesla-T4"}),
     "node(s) didn't match Pod's node affinity/selector"),
    (node("a", labels=A100), pod(affinity={"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/cuda.driver-version.major", "operator": "Gt", "values": ["560"]}]}]}),
     None),
    (node("a", labels=A100), pod(affinity={"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/cuda.driver-version.major", "operator": "Lt", "values": ["560"]}]}]}),
     "node(s) didn't match Pod's node affinity/selector"),
    (node("a", labels=A100), pod(affinity={"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "missing", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"},
                              {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}]}]}),
     None),
    (node("a", labels=A100), pod(affinity={"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-A100-SXM4-80GB"]}]}]}),
     "node(s) didn't match Pod's node affinity/selector"),
    (node("a"), pod(affinity={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}), None),
    (node("b"), pod(affinity={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]}),
     "node(s) didn't match Pod's node affinity/selector"),
    (node("a"), pod(affinity={"nodeSelectorTerms": [{}]}), "node(s) didn't match Pod's node affinity/selector"),
    (node("a"), pod(limits={"nvidia.com/gpu": 1}), "Insufficient nvidia.com/gpu"),
    (node("a", alloc=GPU), pod(limits={"nvidia.com/gpu": 4}), None),
    (node("a", alloc=GPU), pod(limits={"nvidia.com/gpu": 5}), "Insufficient nvidia.com/gpu"),
    (node("a", alloc={"pods": "0"}), pod(), "Too many pods"),
    # taints are checked before affinity and resources: the first failing filter wins
    (node("a", labels={}, taints=[{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
     pod(node_selector={"x": "y"}, limits={"nvidia.com/gpu": 1}), "node(s) had untolerated taint {sku: gpu}"),
], ids=["cordoned", "cordon-tolerated", "taint", "not-ready-taint", "prefer-no-schedule-ignored",
        "selector-match", "selector-miss", "gt", "lt-miss", "terms-ored", "notin", "match-fields",
        "match-fields-miss", "empty-term", "no-gpu", "gpu-fits", "gpu-short", "too-many-pods", "filter-order"])
def test_filter_node(n, p, reason):
    st = plugins.filter_node(p, plugins.NodeInfo(n), pod_requests(p))
    assert (st.reasons[0] if st else None) == reason


def test_resources_account_for_running_pods():
    info = plugins.NodeInfo(node("a", alloc={"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "2"}))
    p = pod(requests={"cpu": "3", "memory": "5Gi"}, limits={"nvidia.com/gpu": 2})
    info.add_pod("x/y", pod_requests(p))
    st = plugins.filter_node(p, info, pod_requests(p))
    assert st.reasons == ("Insufficient cpu", "Insufficient memory", "Insufficient nvidia.com/gpu")
    assert not st.unresolvable
    info.remove_pod("x/y", pod_requests(p))
    assert plugins.filter_node(p, info, pod_requests(p)) is None


def _statuses(nodes, p):
    reqs = pod_requests(p)
    out = {}
    for n in nodes:
        st = plugins.filter_node(p, plugins.NodeInfo(n), reqs)
        if st:
            out[n["metadata"]["name"]] = st
    return out


SKU = [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]


@pytest.mark.parametrize("nodes,p,message", [
    ([node("cpu"), node("t4-1", taints=SKU), node("t4-2", taints=SKU), node("t4-3", taints=SKU)],
     pod(limits={"nvidia.com/gpu": 1}),
     "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) had untolerated taint {sku: gpu}. "
     "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, "
     "3 Preemption is not helpful for scheduling."),
    ([node("a", unschedulable=True), node("b", ready="False",
                                          taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])],
     pod(),
     "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
     "1 node(s) were unschedulable. preemption: 0/2 nodes are available: "
     "2 Preemption is not helpful for scheduling."),
    ([node(f"n{i}", taints=SKU) for i in range(10)] + [node("x", labels={"a": "b"}), node("y")],
     pod(requests={"cpu": "1"}, node_selector={"a": "b"}),
     # Go's sort.Strings is bytewise: "10 ..." sorts before "2 ..."
     "0/12 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 10 node(s) had untolerated "
     "taint {sku: gpu}. preemption: 0/12 nodes are available: 11 Preemption is not helpful for scheduling."),
    ([node("a", alloc={"cpu": "1", "memory": "1Gi"})], pod(requests={"cpu": "2", "memory": "2Gi"}),
     "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory. preemption: 0/1 nodes are available: "
     "1 No preemption victims found for incoming pod."),
    ([node("a")], pod(limits={"nvidia.com/gpu": 1}, preemption_policy="Never"),
     "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
     "preemption: not eligible due to preemptionPolicy=Never."),
    ([], pod(), "no nodes available to schedule pods"),
], ids=["gpu-and-taints", "cordoned-and-not-ready", "bytewise-sort", "two-resources-one-node",
        "preemption-never", "no-nodes"])
def test_fit_error_message(nodes, p, message):
    assert plugins.fit_error_message(len(nodes), _statuses(nodes, p), p) == message


def test_histogram_sorts_bytewise_like_go():
    statuses = {f"n{i}": plugins.Status("NodeResourcesFit", ("Insufficient cpu",), False) for i in range(10)}
    statuses["t"] = plugins.Status("TaintToleration", ("node(s) had untolerated taint {a: b}",), True)
    statuses["u"] = plugins.Status("TaintToleration", ("node(s) had untolerated taint {a: b}",), True)
    msg = plugins.fit_error_message(12, statuses)
    assert msg.startswith("0/12 nodes are available: 10 Insufficient cpu, 2 node(s) had untolerated taint {a: b}.")
    assert msg.endswith("preemption: 0/12 nodes are available: 10 No preemption victims found for incoming pod, "
                        "2 Preemption is not helpful for scheduling.")


def test_newer_message_style_hides_taints():
    style = plugins.MessageStyle(taint_details=False, dra_postfilter=True)
    p = pod()
    st = plugins.filter_node(p, plugins.NodeInfo(node("a", taints=SKU)), {}, style)
    msg = plugins.fit_error_message(1, {"a": st}, p, style)
    assert msg == ("0/1 nodes are available: 1 node(s) had untolerated taint(s). no new claims to deallocate, "
                   "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")


@pytest.mark.parametrize("ready,unsched,taints,expected", [
    ("True", False, [], []),
    ("False", False, [], [("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute")]),
    ("Unknown", False, [], [("node.kubernetes.io/unreachable", "NoSchedule"),
                            ("node.kubernetes.io/unreachable", "NoExecute")]),
    ("True", True, [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
     [("sku", "NoSchedule"), ("node.kubernetes.io/unschedulable", "NoSchedule")]),
    ("True", False, [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], []),
    ("False", False, [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
     [("node.kubernetes.io/not-ready", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoExecute")]),
], ids=["ready", "not-ready", "unknown", "cordoned-keeps-others", "recovered", "unreachable-to-not-ready"])
def test_lifecycle_taints(ready, unsched, taints, expected):
    n = node("a", ready=ready, unschedulable=unsched, taints=taints)
    assert [(t["key"], t["effect"]) for t in lifecycle_taints(n)] == expected


def test_pick_node_least_allocated_then_name():
    a, b, c = (plugins.NodeInfo(node(x)) for x in "abc")
    b.add_pod("ns/busy", {"cpu": 8000, "memory": 2**30})
    p_reqs = {"cpu": 1000}
    assert plugins.pick_node(p_reqs, [b, c, a]).name == "a"
    assert plugins.pick_node(p_reqs, [b]).name == "b"
    assert plugins.pick_node(p_reqs, []) is None


def _pin(*terms):
    return pod(affinity={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(t)}]} for t in terms]})


@pytest.mark.parametrize("p,feasible,message", [
    (_pin(["b"]), ["b"], None),
    (_pin(["a"], ["c"]), ["a", "c"], None),
    (_pin(["zz"]), [],
     "0/3 nodes are available: 3 node(s) didn't satisfy plugin(s) [NodeAffinity]. "
     "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
    (pod(affinity={"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["a"]},
        {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}), [],
     "0/3 nodes are available: pod affinity terms conflict. "
     "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
], ids=["pinned", "terms-united", "pinned-to-missing-node", "conflict"])
def test_node_affinity_prefilter(p, feasible, message):
    infos = [plugins.NodeInfo(node(x)) for x in "abc"]
    ok, statuses, pre = plugins.evaluate(p, infos, pod_requests(p))
    assert [i.name for i in ok] == feasible
    if message:
        assert plugins.fit_error_message(3, statuses, p, prefilter_message=pre) == message


# -- the plugins with PreFilter state: volumes, then DynamicResources (default_plugins.go) ----

class Later:
    """A stand-in CyclePlugin: a PreFilter verdict and a Filter rejecting the named nodes."""

    def __init__(self, plugin, message=None, rejects=()):
        self.plugin, self.message, self.rejects, self.asked = plugin, message, set(rejects), []

    def filter(self, node):
        self.asked.append(node["metadata"]["name"])
        if node["metadata"]["name"] in self.rejects:
            return plugins.Status(self.plugin, (f"{self.plugin} says no",), True)
        return None


CONFLICT = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]},
                                                   {"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}


@pytest.mark.parametrize("affinity, volume_msg, dra_msg, want", [
    (CONFLICT, "pod has unbound immediate PersistentVolumeClaims", "resourceclaim in use",
     plugins.ERR_AFFINITY_CONFLICT),
    (None, "pod has unbound immediate PersistentVolumeClaims", "resourceclaim in use",
     "pod has unbound immediate PersistentVolumeClaims"),
    (None, None, "resourceclaim in use", "resourceclaim in use"),
], ids=["node-affinity-first", "volumes-before-dra", "dra-alone"])
def test_prefilter_rejections_come_in_the_profile_order(affinity, volume_msg, dra_msg, want):
    p = pod(affinity=affinity)
    volumes, dra = Later("VolumeBinding", volume_msg), Later("DynamicResources", dra_msg)
    ok, statuses, pre = plugins.evaluate(p, [plugins.NodeInfo(node(x)) for x in "ab"], pod_requests(p), plugins.MessageStyle(),
                                   volumes, dra=dra)
    assert (ok, pre) == ([], want)
    assert all(st.unresolvable and not st.reasons for st in statuses.values())
    assert volumes.asked == dra.asked == []


def test_filters_after_node_resources_fit_run_volumes_then_dynamic_resources():
    p = pod(requests={"nvidia.com/gpu": "1"})
    infos = [plugins.NodeInfo(node("small")), *(plugins.NodeInfo(node(x, alloc={"nvidia.com/gpu": "1"})) for x in "abc")]
    volumes, dra = Later("VolumeZone", rejects={"a"}), Later("DynamicResources", rejects={"a", "b"})
    ok, statuses, pre = plugins.evaluate(p, infos, pod_requests(p), plugins.MessageStyle(), volumes, dra=dra)
    assert [i.name for i in ok] == ["c"] and pre is None
    assert {n: st.plugin for n, st in statuses.items()} == {
        "small": "NodeResourcesFit", "a": "VolumeZone", "b": "DynamicResources"}
    # a node rejected earlier is not offered to the later plugins
    assert volumes.asked == ["a", "b", "c"] and dra.asked == ["b", "c"]
    assert plugins.fit_error_message(4, statuses, p, prefilter_message=pre).startswith(
        "0/4 nodes are available: 1 DynamicResources says no, 1 Insufficient nvidia.com/gpu, 1 VolumeZone says no.")
