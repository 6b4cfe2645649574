"""A GPU server whose storage keeps it off every node: the scheduler's volume words
(VolumeBinding, VolumeZone) read by ``spawn.scheduler_messages``, translated by ``spawn.progress``, and
judged by ``spawn.pending_verdicts.fatal_verdict`` (fatal: the spawn ends early).  Pure."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.model import ScaleUp
from gpuspawner.spawn.pending_verdicts import fatal_verdict
from gpuspawner.spawn.progress import FATAL_KINDS, SpawnContext, translate, translate_pod
from gpuspawner.spawn.scheduler_messages import (
    VOLUME,
    VOLUME_ZONE,
    classify_reason,
    missing_claim,
    parse_scheduling_message,
)
from tests.builders import pod_event, server_pod

POOL = "gke-gpu-a100-pool:nvidia-a100-sxm4-40gb:nvidia.com/gpu"
PREEMPTION = " preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
# the spawner pins its pod to the pool's labels: the CPU node fails NodeAffinity, the pool's only
# GPU node (us-central1-b) VolumeBinding, for alice's home volume lives in us-central1-a
ZONE = ("0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had volume node affinity conflict." + PREEMPTION)
UNBOUND = "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims." + PREEMPTION
MISSING = '0/2 nodes are available: persistentvolumeclaim "claim-alice" not found.' + PREEMPTION
DELETING = '0/2 nodes are available: persistentvolumeclaim "claim-alice" is being deleted.' + PREEMPTION
PV_GONE = '0/2 nodes are available: persistentvolume "home-alice" not found.' + PREEMPTION


def ctx(**kw) -> SpawnContext:
    base = dict(pool_id=POOL, pool_name="A100 40GB", gpus=1, free=4, total=4, max_free_per_node=4,
                max_node_allocatable=4, nodes=1)
    return SpawnContext(**{**base, **kw})


AUTOSCALED = ScaleUp(gpus_per_node=4, max_nodes=3, minutes=7)


# --- the grammar ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ('persistentvolumeclaim "claim-alice" not found', ("claim", "claim-alice", False)),
        ('persistentvolumeclaim "claim-a.b" is being deleted', ("claim", "claim-a.b", True)),
        ('persistentvolume "home-alice" not found', ("volume", "home-alice", False)),
        ("pod has unbound immediate PersistentVolumeClaims", None),
        ('resourceclaim "gpu" not found', None),  # DRA's claim, not storage
    ],
)
def test_missing_claim_reads_the_prefilter_words(text, expected):
    assert missing_claim(text) == expected


@pytest.mark.parametrize(
    "text, kind",
    [
        ("node(s) had volume node affinity conflict", VOLUME_ZONE),
        ("node(s) had no available volume zone", VOLUME_ZONE),
        ("node(s) didn't find available persistent volumes to bind", VOLUME),
        ("node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)", VOLUME),
        ("pod has unbound immediate PersistentVolumeClaims", VOLUME),
        ('persistentvolumeclaim "claim-alice" not found', VOLUME),
    ],
)
def test_volume_reasons_are_classified(text, kind):
    assert classify_reason(text)[0] == kind


def test_a_prefilter_rejection_speaks_for_every_node():
    failure = parse_scheduling_message(MISSING)
    assert [(r.count, r.text) for r in failure.reasons] == [(None, 'persistentvolumeclaim "claim-alice" not found')]
    assert failure.count(VOLUME) == 2


# --- the translation -----------------------------------------------------------------------------

FIX = ("choose a GPU pool with nodes in that zone", "move the volume", "WaitForFirstConsumer")


@pytest.mark.parametrize(
    "message, overrides, kind, fatal, phrases",
    [
        pytest.param(ZONE, {}, "volume_zone", True,
                     ("storage volume is bound to a zone where pool A100 40GB has no node", *FIX), id="volume-zone"),
        pytest.param("0/1 nodes are available: 1 node(s) had no available volume zone.", {}, "volume_zone", True,
                     FIX, id="volume-zone-label"),
        # an autoscaler may add a node in the volume's zone: no verdict, but the words say what blocks it
        pytest.param(ZONE, {"scale_up": AUTOSCALED}, "waiting_for_storage", False,
                     ("1 node cannot use this server's storage volume", "another zone"), id="zone-with-autoscaler"),
        # the pool has a free node in the volume's zone too, busy now: waiting for a GPU there
        pytest.param("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node "
                     "affinity/selector, 1 node(s) had volume node affinity conflict.", {"nodes": 2},
                     "waiting_for_gpu", False, (), id="zone-on-one-node-of-two"),
        pytest.param(UNBOUND, {}, "waiting_for_storage", False,
                     ("unbound immediate PersistentVolumeClaims", "still being created"), id="unbound-immediate"),
        pytest.param(MISSING, {}, "volume_missing", True,
                     ("storage claim claim-alice does not exist", "ask your administrator"), id="claim-missing"),
        pytest.param(MISSING, {"scale_up": AUTOSCALED, "nodes": None}, "volume_missing", True,
                     ("claim-alice",), id="claim-missing-whatever-the-pool"),
        pytest.param(DELETING, {}, "volume_missing", True, ("claim-alice is being deleted",), id="claim-deleting"),
        pytest.param(PV_GONE, {}, "volume_missing", True, ("volume home-alice", "no longer exists"), id="pv-gone"),
    ],
)
def test_failed_scheduling_on_storage(message, overrides, kind, fatal, phrases):
    t = translate(pod_event("FailedScheduling", message), ctx(**overrides))
    assert (t.kind, t.fatal) == (kind, fatal), t.message
    for phrase in phrases:
        assert phrase in t.message, t.message
    if fatal:
        assert t.kind in FATAL_KINDS and t.reason in t.message


# --- the verdict ---------------------------------------------------------------------------------


def unschedulable(message: str) -> dict:
    return server_pod("jupyter-alice", POOL, namespace="jupyterhub", conditions=[
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}])


@pytest.mark.parametrize(
    "message, kind",
    [(ZONE, "volume_zone"), (MISSING, "volume_missing"), (DELETING, "volume_missing"), (UNBOUND, None)],
    ids=["volume-zone", "claim-missing", "claim-deleting", "unbound-waits"],
)
def test_the_pods_condition_decides_at_once(message, kind):
    verdict = fatal_verdict(unschedulable(message), [], ctx())
    assert (verdict.kind if verdict else None) == kind
    assert translate_pod(unschedulable(message), ctx()).kind == (kind or "waiting_for_storage")


def test_the_newest_failed_scheduling_event_decides():
    pod = server_pod("jupyter-alice", POOL, namespace="jupyterhub")
    # the claim was still being provisioned, then its volume turned out to be in the other zone
    events = [pod_event("FailedScheduling", UNBOUND), pod_event("FailedScheduling", ZONE)]
    assert fatal_verdict(pod, events, ctx()).kind == "volume_zone"
    # ... and the other way round: the last word is that the claim is being bound, so wait
    assert fatal_verdict(pod, events[::-1], ctx()) is None
