"""Pods stuck Pending on GPUs, with a fix that follows the scheduler's words (doctor.checks.pending)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import checks
from tests.builders import finding_ids as ids, gpu_node, node

CONFIG = CapacityConfig()
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def pod(name="jupyter-a", gpus="1", phase="Pending", scheduled="False", created=NOW - 600,
        message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", node_name=None, resource="nvidia.com/gpu"):
    from datetime import datetime, timezone

    stamp = datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    limits = {resource: gpus} if gpus else {"cpu": "1"}
    spec = {"containers": [{"name": "nb", "image": "x", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    status = {"phase": phase}
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable",
                                 "message": message}]
    return {"metadata": {"name": name, "namespace": "jhub", "creationTimestamp": stamp}, "spec": spec,
            "status": status}


@pytest.mark.parametrize(
    "p, expected",
    [
        pytest.param(pod(), ["pod-pending-on-gpu"], id="pending-10min"),
        pytest.param(pod(created=NOW - 60), [], id="younger-than-threshold"),
        pytest.param(pod(gpus=None), [], id="cpu-pod"),
        pytest.param(pod(resource="nvidia.com/mig-1g.10gb"), ["pod-pending-on-gpu"], id="mig-slice"),
        pytest.param(pod(scheduled=None), [], id="not-yet-tried-by-scheduler"),
        pytest.param(pod(scheduled="True", node_name="gpu-0"), [], id="bound-pulling-image"),
        pytest.param(pod(phase="Running", scheduled="True", node_name="gpu-0"), [], id="running"),
    ],
)
def test_check_pending_pods(p, expected):
    assert ids(checks.check_pending_pods([p], CONFIG, NOW, 300)) == expected


@pytest.mark.parametrize(
    "message, fix_part",
    [
        ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "No node has 1 x nvidia.com/gpu free"),
        ("0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: ml}.", "gpu_tolerated_taint_keys"),
        ("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.", "node affinity"),
        ("weird", "kubectl describe pod -n jhub jupyter-a"),
        # the 1.35 wording names no taint key
        ("0/2 nodes are available: 2 node(s) had untolerated taint(s).", "gpu_tolerated_taint_keys"),
        ("0/2 nodes are available: 2 node(s) were unschedulable.", "kubectl uncordon NODE"),
        # a volume's node affinity is no node affinity of the pod's
        ("0/2 nodes are available: 2 node(s) had volume node affinity conflict.", "kubectl describe pod"),
        # the taint comes first, as the scheduler's TaintToleration filter does
        ("0/5 nodes are available: 2 Insufficient nvidia.com/gpu, 3 node(s) had untolerated taint {sku: gpu}.",
         "A taint keeps it off the GPU nodes"),
        # the T4 pool: its nodes pass the taint and affinity filters and lack CPU and memory; the
        # other nodes' taint is not the cause
        ("0/5 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 1 Insufficient nvidia.com/gpu, "
         "3 node(s) had untolerated taint {nvidia.com/gpu: present}.",
         "The nodes it may use lack the CPU and memory it asks for: when no node of the pool"),
    ],
    ids=["insufficient", "taint", "affinity", "other", "taint-1.35", "cordoned", "volume-affinity", "taint-first",
         "cpu-and-memory-before-taint"],
)
def test_pending_fix_follows_the_scheduler_message(message, fix_part):
    (f,) = checks.check_pending_pods([pod(message=message)], CONFIG, NOW, 300)
    assert message in f.summary
    assert fix_part in f.fix
    assert f.details["requests"] == {"nvidia.com/gpu": 1}
    assert f.details["age_seconds"] == 600


def test_pending_fix_without_a_scheduler_message_describes_the_pod():
    # PodScheduled=False/Unschedulable with no message: nothing to sort by, only the describe hint
    (f,) = checks.check_pending_pods([pod(message=None)], CONFIG, NOW, 300)
    assert f.summary.endswith(": Unschedulable")
    assert f.fix == "kubectl describe pod -n jhub jupyter-a"


# kube-scheduler 1.35+ names no taint: every node's taints, weighed with the pod's own tolerations (the
# spawn verdict's rule, capacity.taintrule), say which taints stay and whether the taint is the cause at all
SKU = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
KEYLESS_AND_AFFINITY = ("0/5 nodes are available: 2 node(s) had untolerated taint(s), "
                        "3 node(s) didn't match Pod's node affinity/selector.")
KEYLESS_AND_GPUS = "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient nvidia.com/gpu."


def cluster(taints):
    return [node("t4-0", taints=[taints]), node("t4-1", taints=[taints]), *(gpu_node(f"a100-{i}") for i in range(3))]


@pytest.mark.parametrize("message, nodes, fix_part, not_in_fix", [
    pytest.param(KEYLESS_AND_AFFINITY, cluster(SKU),
                 "Taints it does not tolerate keep it off 2 of the 5 nodes (sku=gpu:NoSchedule on 2 nodes)",
                 None, id="names-the-taint-that-stays"),
    pytest.param(KEYLESS_AND_AFFINITY, cluster(SKU), "The other nodes do not match its node affinity/selector",
                 None, id="and-the-affinity-of-the-others"),
    pytest.param(KEYLESS_AND_AFFINITY, cluster(NOT_READY), "No GPU node matches the pod's node affinity/selector",
                 "gpu_tolerated_taint_keys", id="not-ready-nodes-are-no-taint-to-allow"),
    pytest.param(KEYLESS_AND_GPUS, cluster(NOT_READY), "No node has 1 x nvidia.com/gpu free",
                 "gpu_tolerated_taint_keys", id="then-the-gpus-are-the-cause"),
    pytest.param("0/2 nodes are available: 2 node(s) had untolerated taint(s).", cluster(NOT_READY)[:2],
                 "are not ready or are being removed", "gpu_tolerated_taint_keys", id="only-not-ready-nodes"),
    pytest.param(KEYLESS_AND_AFFINITY, None, "A taint keeps it off the GPU nodes", None, id="nodes-not-listed"),
])
def test_a_keyless_taint_is_weighed_with_the_nodes_taints(message, nodes, fix_part, not_in_fix):
    (f,) = checks.check_pending_pods([pod(message=message)], CONFIG, NOW, 300, nodes)
    assert fix_part in f.fix, f.fix
    if not_in_fix:
        assert not_in_fix not in f.fix, f.fix
