"""A GPU pod admitted on counts that had room, which the scheduler turns away with ``Insufficient``
GPUs: when it truly cannot fit soon.  Pure: ``spawn.pending_verdicts``."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.model import ScaleUp, Taint
from gpuspawner.capacity.taintrule import TaintExclusion
from gpuspawner.spawn.pending_verdicts import no_room_verdict, scheduling_failure, short_of_gpus
from gpuspawner.spawn.progress import FATAL_KINDS, SpawnContext

INSUFFICIENT = ("0/6 nodes are available: 2 Insufficient nvidia.com/gpu, "
                "4 node(s) didn't match Pod's node affinity/selector. preemption: 0/6 nodes are available: "
                "2 No preemption victims found for incoming pod, 4 Preemption is not helpful for scheduling.")


def pending_pod(message=None, node=None, uid="u1"):
    status = {"phase": "Pending"}
    if message is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": message}]
    spec = {"containers": [{"name": "notebook"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "jupyter-ada", "namespace": "jhub", "uid": uid}, "spec": spec, "status": status}


def failed_scheduling(message, uid="u1"):
    return {"reason": "FailedScheduling", "message": message, "involvedObject": {"uid": uid}}


def test_the_condition_is_the_schedulers_current_word():
    f = scheduling_failure(pending_pod(INSUFFICIENT), [failed_scheduling("0/6 nodes are available: 6 Too many pods.")])
    assert f.total_nodes == 6 and f.insufficient("nvidia.com/gpu") == 2


def test_without_a_condition_the_newest_event_of_this_pod_counts():
    events = [failed_scheduling("0/6 nodes are available: 6 Too many pods."),
              failed_scheduling(INSUFFICIENT),
              failed_scheduling("0/6 nodes are available: 6 Too many pods.", uid="older-pod")]
    assert scheduling_failure(pending_pod(), events).insufficient("nvidia.com/gpu") == 2


def test_a_bound_pod_has_no_scheduling_failure():
    assert scheduling_failure(pending_pod(INSUFFICIENT, node="n1"), [failed_scheduling(INSUFFICIENT)]) is None


@pytest.mark.parametrize(
    "message, short",
    [
        (INSUFFICIENT, True),
        ("0/6 nodes are available: 2 Insufficient amd.com/gpu, 4 node(s) didn't match Pod's node affinity/selector.",
         False),
        ("0/6 nodes are available: 1 node(s) were unschedulable, 1 Insufficient nvidia.com/gpu, "
         "4 node(s) didn't match Pod's node affinity/selector.", False),
        ("0/6 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint "
         "{node.kubernetes.io/not-ready: }, 4 node(s) didn't match Pod's node affinity/selector.", False),
        ("0/6 nodes are available: 2 Insufficient cpu, 4 node(s) didn't match Pod's node affinity/selector.", False),
    ],
    ids=["gpu", "another-resource", "a-cordoned-node-may-come-back", "a-not-ready-node-may-come-back", "cpu"],
)
def test_short_of_gpus(message, short):
    assert short_of_gpus(scheduling_failure(pending_pod(message), []), "nvidia.com/gpu") is short


KEYLESS = ("0/6 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had untolerated taint(s), "
           "4 node(s) didn't match Pod's node affinity/selector.")
SKU = Taint("sku", "gpu", "NoSchedule")


# kube-scheduler 1.35+ names no taint: every node's taints against the pod's tolerations say whether the
# tainted node is another pool's for good, or a node that is not ready and may be back soon
@pytest.mark.parametrize("excluded, short", [
    (TaintExclusion(1, 0, ((SKU, 1),)), True),
    (TaintExclusion(0, 1), False),
    (TaintExclusion(1, 1, ((SKU, 1),)), False),
    (None, True),
], ids=["another-pools-taint", "a-not-ready-node-may-come-back", "not-sure-which", "unknown-as-before"])
def test_short_of_gpus_with_a_keyless_taint(excluded, short):
    assert short_of_gpus(scheduling_failure(pending_pod(KEYLESS), []), "nvidia.com/gpu", excluded) is short


def ctx(**kw):
    base = dict(pool_id="a100:x:nvidia.com/gpu", pool_name="A100", gpus=2, free=1, total=8, max_free_per_node=1,
                max_node_allocatable=8, nodes=2)
    return SpawnContext(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, words",
    [
        ({}, "pool A100 has no node with 2 free GPUs on one node (1 of its 8 GPUs are free, at most 1 on one node) "
             "and it cannot add nodes: the GPUs this server was counted on were taken after it was admitted; "
             "start it again later, or choose another pool"),
        ({"gpus": 1, "free": 0, "max_free_per_node": 0},
         "pool A100 has no node with a free GPU (all 8 of its GPUs are in use) and it cannot add nodes"),
        ({"free": 0, "max_free_per_node": 0, "scale_up": ScaleUp(max_nodes=2, gpus_per_node=8, minutes=5)},
         "(all 8 of its GPUs are in use) and it is at its maximum size"),
    ],
    ids=["fragmented", "full", "at-max-size"],
)
def test_no_room_and_no_growth_is_fatal(kw, words):
    t = no_room_verdict(ctx(**kw))
    assert t.fatal and t.kind == "no_free_gpu" and t.kind in FATAL_KINDS
    assert words in t.reason and t.message == f"Cannot start: {t.reason}."


@pytest.mark.parametrize(
    "kw",
    [
        {"max_free_per_node": 2, "free": 2},  # a node has room: the scheduler retries when pods change
        {"scale_up": ScaleUp(max_nodes=4, gpus_per_node=8, minutes=5)},  # a new node may come
        {"nodes": None, "free": None, "total": None, "max_free_per_node": None},  # unknown pool: not sure
    ],
    ids=["room-now", "can-grow", "unknown"],
)
def test_may_still_fit_soon(kw):
    assert no_room_verdict(ctx(**kw)) is None
