"""A GPU server's pod while it is Pending (gpuspawner.spawn.pending_verdicts): its place in the
scheduler's queue, the verdict that it can never start, how long it waited for its GPUs.  Pure."""

from __future__ import annotations

import dataclasses

import pytest

from gpuspawner.capacity.model import ScaleUp, Taint
from gpuspawner.spawn.pending_verdicts import fatal_verdict, gpu_wait_seconds, queued_before
from gpuspawner.spawn.progress import SpawnContext
from tests.builders import group_nodes, MALFORMED_PODS, pod_event, pool_view, server_pod

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
SKU = Taint("sku", "gpu", "NoSchedule")  # not tolerated below
A100 = pool_view("a100", "NVIDIA-A100-SXM4-40GB", node_views=group_nodes("a100", 2, 4, "570.172.08", "12.8", "8.0"),
                 memory_mib=40960, driver="570.172.08", cuda="12.8", taints=(GPU_TAINT,))
T4 = pool_view("t4", "Tesla-T4", node_views=group_nodes("t4", 2, 1, "570.172.08", "12.8", "8.0"),
               memory_mib=40960, driver="570.172.08", cuda="12.8", taints=(SKU,))

TAINTED = ("0/7 nodes are available: 2 node(s) had untolerated taint {sku: gpu}, "
           "5 node(s) didn't match Pod's node affinity/selector. preemption: 0/7 nodes are available: "
           "7 Preemption is not helpful for scheduling.")
BUSY = ("0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.")

pod = server_pod
event = pod_event


# --- who is queued before whom ------------------------------------------------------------------

ME = pod("jupyter-alice", A100.id, created="2026-11-22T01:00:10Z")


@pytest.mark.parametrize(
    "others, expected",
    [
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z")], 1),
        ([pod("a", A100.id, created="2026-11-22T01:00:15Z")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:10Z")], 0),
        ([pod("a", T4.id, created="2026-11-22T01:00:05Z")], 0),
        ([pod("a", None, created="2026-11-22T01:00:05Z")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", node="gke-0")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", phase="Running", node="gke-0")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", deleting=True)], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:15Z", priority=1000)], 1),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", priority=-5)], 0),
        ([ME, pod("a", A100.id, created="2026-11-22T01:00:01Z"), pod("b", A100.id, created="2026-11-22T01:00:02Z"),
          pod("c", A100.id, created="2026-11-22T01:00:20Z")], 2),
        ([pod("a", A100.id, created="not a time"), "not a pod"], 0),
    ],
    ids=["earlier", "later", "same-second", "other-pool", "cpu-pod", "bound", "running", "deleting",
         "higher-priority-jumps-ahead", "lower-priority-waits", "counts-only-others-before", "garbage-ignored"],
)
def test_queued_before_follows_the_schedulers_queue_order(others, expected):
    assert queued_before(others, ME, A100.id) == expected


def test_queued_before_without_a_pod_yet_is_zero():
    assert queued_before([pod("a", A100.id)], None, A100.id) == 0
    assert queued_before([pod("a", A100.id)], pod("me", A100.id, created=None), A100.id) == 0


# --- when a pod can never start -----------------------------------------------------------------


def t4_ctx(**kw):
    return SpawnContext.from_pool(T4, pool_id=T4.id, gpus=1, tolerated_taint_keys=("nvidia.com/gpu",),
                                  pool_name="T4", **kw)


FAILED_SCHEDULING = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": TAINTED}


@pytest.mark.parametrize(
    "the_pod, events, kind",
    [
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED)], "untolerated_taint"),
        (pod("jupyter-alice", T4.id, conditions=[FAILED_SCHEDULING]), [], "untolerated_taint"),
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", BUSY)], None),
        # the scheduler's newest word counts: it found room after all
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED), event("FailedScheduling", BUSY)], None),
        # bound to a node since: an old FailedScheduling is history
        (pod("jupyter-alice", T4.id, node="t4-0"), [event("FailedScheduling", TAINTED)], None),
        # an event of an earlier pod with the same name
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED, uid="older-pod")], None),
        (pod("jupyter-alice", T4.id, node="t4-0"),
         [event("Failed", 'Failed to pull image "nope:1": rpc error: code = NotFound desc = failed to pull and '
                          'unpack image "docker.io/library/nope:1": not found')], "image_not_found"),
        (pod("jupyter-alice", T4.id, node="t4-0"), [event("Pulling", 'Pulling image "pytorch:cu124"')], None),
        (pod("jupyter-alice", T4.id, phase="Failed", reason="UnexpectedAdmissionError",
             message="Allocate failed due to no healthy devices present"), [], "gpu_allocation_failed"),
    ],
    ids=["taint-event", "taint-condition", "waiting-for-gpu", "newest-wins", "bound-since", "older-pod",
         "image-not-found", "pulling", "admission"],
)
def test_fatal_verdict(the_pod, events, kind):
    verdict = fatal_verdict(the_pod, events, t4_ctx())
    assert (verdict.kind if verdict else None) == kind
    if verdict:
        assert verdict.fatal and verdict.reason


def test_a_pool_that_can_scale_up_keeps_waiting():
    ctx = SpawnContext.from_pool(dataclasses.replace(T4, scale_up=ScaleUp(3, 1, 5)), pool_id=T4.id, gpus=1,
                                 tolerated_taint_keys=("nvidia.com/gpu",))
    assert fatal_verdict(pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED)], ctx) is None


# --- time waiting for a GPU -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "pod, seconds",
    [
        pytest.param({"metadata": {"creationTimestamp": "2026-11-22T00:00:00Z"}, "status": {"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T00:06:30Z"}]}},
            390.0, id="scheduled-after-a-scale-up"),
        pytest.param({"metadata": {"creationTimestamp": "2026-11-22T00:00:00Z"}, "status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}, None, id="still-pending"),
        pytest.param({"metadata": {}, "status": {"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T00:06:30Z"}]}},
            None, id="no-creation-time"),
        pytest.param({"metadata": {"creationTimestamp": "yesterday"}, "status": {}}, None, id="bad-time"),
        pytest.param(None, None, id="not-a-pod"),
    ],
)
def test_gpu_wait_seconds(pod, seconds):
    assert gpu_wait_seconds(pod) == seconds


@pytest.mark.parametrize("pod", list(MALFORMED_PODS.values()), ids=list(MALFORMED_PODS))
def test_malformed_pods_never_raise(pod):
    assert gpu_wait_seconds(pod) is None
    assert queued_before([pod], pod, A100.id) == 0
    assert fatal_verdict(pod, [pod], SpawnContext(pool_id=A100.id, gpus=1)) is None
