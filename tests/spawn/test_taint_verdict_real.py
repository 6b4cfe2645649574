"""kube-scheduler's keyless "N node(s) had untolerated taint(s)" against the rule the pending verdicts weigh
it with (capacity.taintrule.taint_exclusion over every node's taints, capacity.node_taints): on a control
plane of its own (a message counts every node of the cluster), the nodes the scheduler turns away for a
taint are exactly the lasting plus the passing ones the rule counts, a cordoned node is the cordon's, and
the verdict fails at once only when the taints that stay and the selector leave no node."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.node_taints import NodeTaintCounts, node_filter_taints
from gpuspawner.capacity.taintrule import pod_taint_exclusion
from gpuspawner.spawn.pending_verdicts import fatal_verdict
from gpuspawner.spawn.progress import SpawnContext
from gpuspawner.spawn.scheduler_messages import TAINT, UNSCHEDULABLE, parse_scheduling_message
from testcluster import ControlPlane
from tests.builders import node, pool_view
from tests.builders.scheduling import on_node, real_scheduler

pytestmark = pytest.mark.integration

GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
SKU = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
CONTROL = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
LEAVING = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}
POOL = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"


def gpus(name: str, pool: str, *taints: dict, unschedulable: bool = False) -> dict:
    return node(name, {"nvidia.com/gpu": "8"}, {"pool": pool}, taints=list(taints), unschedulable=unschedulable)


A100 = [gpus("a100-0", "a100", GPU), gpus("a100-1", "a100", GPU)]
T4 = [gpus("t4-0", "t4", SKU), gpus("t4-1", "t4", SKU)]
OTHERS = [node("cpu-0", {}, {"pool": "cpu"}), node("cp-0", {}, {"pool": "cp"}, taints=[CONTROL])]
# a cordoned T4 node and an A100 node the cluster autoscaler is removing
MOVING = [gpus("t4-2", "t4", SKU, unschedulable=True), gpus("a100-2", "a100", GPU, LEAVING)]


def erins_server() -> dict:
    """A server of the A100 pool (its taint tolerated) that an admin's hook pinned to a rack no node is in."""
    pod = on_node("-", {"tolerations": [{**GPU, "operator": "Equal"}], "nodeSelector": {"example.com/rack": "9"}},
                  resources={"limits": {"nvidia.com/gpu": "1"}})
    del pod["spec"]["affinity"]
    return pod


@pytest.fixture(scope="module")
def own_control_plane(tmp_path_factory):
    with ControlPlane(tmp_path_factory.mktemp("taint-verdict")) as cp:
        yield cp


@pytest.mark.parametrize("nodes, unschedulable, lasting, passing, fatal", [
    pytest.param(A100 + T4 + OTHERS, 0, 3, 0, True, id="taints-that-stay-and-a-selector-leave-no-node"),
    pytest.param(A100 + T4 + OTHERS + MOVING, 1, 3, 1, False, id="a-cordoned-and-a-leaving-node-may-come-back"),
])
async def test_the_scheduler_turns_away_the_nodes_the_rule_counts(own_control_plane, nodes, unschedulable, lasting,
                                                                  passing, fatal):
    async with real_scheduler(own_control_plane.kubeconfig, nodes) as scheduler:
        listed = (await scheduler.h.core.list_node()).items
        counts = NodeTaintCounts()
        for n in scheduler.h.api.sanitize_for_serialization(listed):
            counts.put(n["metadata"]["name"], node_filter_taints(n))
        pod = erins_server()
        verdict, message = await scheduler.h.decide(pod, None)
    assert verdict is False, message
    failure = parse_scheduling_message(message)
    assert failure.total_nodes == len(listed) == len(nodes), message
    excluded = pod_taint_exclusion(counts.summary(), pod)
    assert (excluded.lasting, excluded.passing) == (lasting, passing)
    # the scheduler's taint count is the rule's, and a cordoned node is the cordon's
    assert failure.count(TAINT) == excluded.lasting + excluded.passing, message
    assert failure.count(UNSCHEDULABLE) == unschedulable, message
    ctx = SpawnContext.from_pool(pool_view(id=POOL, taints=()), pool_id=POOL, gpus=1, node_taints=counts.summary(),
                                 pod=pod)
    pending = {"metadata": {"name": pod["metadata"]["name"]}, "spec": pod["spec"],
               "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                                              "reason": "Unschedulable", "message": message}]}}
    got = fatal_verdict(pending, [], ctx)
    assert (got is not None and got.kind) == ("no_matching_node" if fatal else False), (message, got)
