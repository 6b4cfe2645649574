"""A pending GPU pod that kube-scheduler (1.35 on) turns away with "N node(s) had untolerated taint(s)",
naming no taint: the verdict the hub reaches with the context it builds (``SpawnContext.from_pool`` with
the snapshot's per-taint-set node counts and the pod itself).  Pure: ``spawn.pending_verdicts``."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.model import Taint
from gpuspawner.capacity.taintrule import NodeTaints
from gpuspawner.spawn.pending_verdicts import fatal_verdict
from gpuspawner.spawn.progress import SpawnContext
from tests.builders import pool_view

POOL = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"
GPU = Taint("nvidia.com/gpu", "present", "NoSchedule")
SKU = Taint("sku", "gpu", "NoSchedule")
NOT_READY = Taint("node.kubernetes.io/not-ready", None, "NoSchedule")
UNSCHEDULABLE = Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")
# what the spawner gives a server of the A100 pool, and the API server's default tolerations
SERVER_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]
# a cluster of 7 nodes: 4 A100 (nvidia.com/gpu), 2 T4 (sku=gpu), 1 CPU node without taints
CLUSTER = ((NodeTaints(False, (GPU,)), 4), (NodeTaints(False, (SKU,)), 2))
T4_NOT_READY = ((NodeTaints(False, (GPU,)), 4), (NodeTaints(False, (NOT_READY, SKU)), 1),
                (NodeTaints(False, (NOT_READY,)), 1))
CORDONED_T4 = ((NodeTaints(False, (GPU,)), 4), (NodeTaints(True, (SKU, UNSCHEDULABLE)), 2))
A100_NOT_READY = ((NodeTaints(False, (GPU, NOT_READY)), 4), (NodeTaints(False, (SKU,)), 2))

RACK_9 = ("0/7 nodes are available: 2 node(s) had untolerated taint(s), 5 node(s) didn't match Pod's node "
          "affinity/selector. preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.")
A100_DOWN = ("0/7 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 6 node(s) had "
             "untolerated taint(s). preemption: 0/7 nodes are available: 7 Preemption is not helpful for "
             "scheduling.")
T4_CORDONED = ("0/7 nodes are available: 2 node(s) were unschedulable, 5 node(s) didn't match Pod's node "
               "affinity/selector.")


def pending(message: str, tolerations: list | None = None) -> dict:
    return {
        "metadata": {"name": "jupyter-erin", "namespace": "jhub", "uid": "u1"},
        "spec": {"containers": [{"name": "notebook"}], "tolerations": SERVER_TOLERATIONS if tolerations is None else tolerations},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable", "message": message}]},
    }


# (the scheduler's word, the pod's tolerations, the cluster's taint sets, the verdict's kind or None: wait)
CASES = [
    pytest.param(RACK_9, None, CLUSTER, "no_matching_node", id="a-selector-no-node-matches-beside-another-pools-taint"),
    pytest.param(RACK_9, None, T4_NOT_READY, None, id="the-tainted-nodes-are-not-ready-they-may-come-back"),
    pytest.param(T4_CORDONED, None, CORDONED_T4, None, id="cordoned-nodes-are-not-counted-as-tainted"),
    pytest.param(A100_DOWN, None, A100_NOT_READY, None, id="the-pools-own-nodes-not-ready"),
    pytest.param(A100_DOWN, [], CLUSTER, "untolerated_taint", id="a-hook-dropped-the-pools-toleration"),
    pytest.param(RACK_9, None, None, None, id="no-snapshot-no-evidence"),
]


@pytest.mark.parametrize("message, tolerations, node_taints, kind", CASES)
def test_keyless_taint_verdict(message, tolerations, node_taints, kind):
    pod = pending(message, tolerations)
    ctx = SpawnContext.from_pool(pool_view(id=POOL, taints=(GPU,)), pool_id=POOL, gpus=1,
                                 tolerated_taint_keys=("nvidia.com/gpu",), node_taints=node_taints, pod=pod)
    verdict = fatal_verdict(pod, [], ctx)
    assert (verdict.kind if verdict else None) == kind, verdict
    if kind == "untolerated_taint":
        assert "nvidia.com/gpu=present:NoSchedule" in verdict.reason
