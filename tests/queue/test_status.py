"""What a queued server's Workload means for the person waiting (gpuspawner.queue.status): the
progress page's words, and which states end the spawn.  Pure, from Workloads shaped as Kueue v0.17
writes them."""

from __future__ import annotations

import pytest

from gpuspawner.queue.status import ADMITTED, DEACTIVATED, EVICTED, EXCEEDS_MAX_QUOTA, NO_MATCHING_FLAVOR, PENDING, PODS_READY_TIMEOUT, PREEMPTED, QUEUE_INACTIVE, RESERVED
from gpuspawner.queue.status import Position, position_of, workload_state
from tests.builders import kueue

MAX = ("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a100, "
       "previously considered podsets requests (0) + current podset request (4) > maximum capacity (2)")


@pytest.mark.parametrize(
    "workload, position, kind, message, fatal",
    [
        pytest.param(kueue.pending(priority_class="high"), Position(3, 7), PENDING,
                     "Queued in gpu-a100: position 3 of 7 (priority high)", False, id="position-and-priority"),
        pytest.param(kueue.pending(), Position(1, 1), PENDING, "Queued in gpu-a100: position 1 of 1", False,
                     id="position-default-priority"),
        pytest.param(kueue.pending(), None, PENDING, "Queued in gpu-a100: waiting for GPU quota", False,
                     id="position-unknown"),
        pytest.param(kueue.workload(conditions=[]), None, PENDING, "Queued in gpu-a100: waiting for GPU quota", False,
                     id="not-looked-at-yet"),
        pytest.param(kueue.admitted("a100"), None, ADMITTED, "Admitted: quota reserved in flavor a100", False,
                     id="admitted"),
        pytest.param(kueue.workload(conditions=[kueue.condition("QuotaReserved")], flavors={"nvidia.com/gpu": "a100"}), None,
                     RESERVED, "Quota reserved in flavor a100; waiting for Kueue's admission checks", False,
                     id="reserved-checks-pending"),
    ],
)
def test_waiting_and_admitted(workload, position, kind, message, fatal):
    state = workload_state(workload, "gpu-a100", position)
    assert (state.kind, state.message, state.fatal) == (kind, message, fatal)


@pytest.mark.parametrize(
    "workload, kind, words",
    [
        pytest.param(kueue.pending(MAX), EXCEEDS_MAX_QUOTA,
                     ["Never admissible in gpu-a100", "more GPUs than the queue's quota can ever give",
                      "Ask for fewer GPUs"], id="ExceedsMaxQuota"),
        pytest.param(kueue.pending("couldn't assign flavors to pod set main: flavor a100 doesn't match node affinity"),
                     NO_MATCHING_FLAVOR, ["none of the queue's GPU flavors fits", "Choose another pool"],
                     id="NoMatchingFlavor-affinity"),
        pytest.param(kueue.pending("couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in "
                                "ClusterQueue"), NO_MATCHING_FLAVOR, ["none of the queue's GPU flavors fits"],
                     id="NoMatchingFlavor-resource-not-covered"),
        pytest.param(kueue.evicted("Preempted", "Preempted to accommodate a workload", "InClusterQueue"), PREEMPTED,
                     ["Preempted in gpu-a100", "higher priority", "start it again"], id="preempted"),
        pytest.param(kueue.evicted("Preempted", "reclaim", "InCohortReclamation"), PREEMPTED,
                     ["another queue took back the GPU quota"], id="preempted-reclaimed"),
        pytest.param(kueue.evicted("PodsReadyTimeout", "Exceeded the PodsReady timeout"), PODS_READY_TIMEOUT,
                     ["did not become ready within Kueue's waitForPodsReady timeout", "image"], id="PodsReadyTimeout"),
        pytest.param(kueue.evicted("ClusterQueueStopped", "The ClusterQueue is stopped"), EVICTED,
                     ["an admin stopped the queue"], id="queue-stopped"),
        pytest.param(kueue.pending(active=False), DEACTIVATED, ["Deactivated", "Stop it and start it again"],
                     id="deactivated"),
        pytest.param(kueue.evicted("SomethingNew", "a reason Kueue adds later"), EVICTED,
                     ["SomethingNew: a reason Kueue adds later"], id="unknown-eviction-reason"),
    ],
)
def test_states_that_end_the_wait_say_what_to_do(workload, kind, words):
    state = workload_state(workload, "gpu-a100", Position(1, 1))
    assert state.kind == kind and state.fatal
    for w in words:
        assert w in state.message


def test_a_request_that_fits_in_one_flavor_but_not_another_keeps_waiting():
    mixed = kueue.pending(MAX + ", insufficient unused quota for nvidia.com/gpu in flavor h100, 1 more needed")
    state = workload_state(mixed, "gpu-a100", Position(2, 2))
    assert (state.kind, state.fatal) == (PENDING, False)


def test_a_missing_queue_is_shown_not_fatal():
    wl = kueue.workload(conditions=[kueue.condition("QuotaReserved", False, "Inadmissible", "ClusterQueue cq-a100 is inactive")])
    state = workload_state(wl, "gpu-a100")
    assert state.kind == QUEUE_INACTIVE and not state.fatal
    assert "ClusterQueue cq-a100 is inactive" in state.message


@pytest.mark.parametrize(
    "workload",
    [
        pytest.param({"status": "x", "spec": []}, id="wrong-types"),
        pytest.param({}, id="empty"),
        pytest.param(None, id="none"),
        pytest.param(kueue.workload(conditions=[{"type": "Evicted", "status": "True", "reason": 3}]), id="bad-reason"),
    ],
)
def test_malformed_workloads_never_raise(workload):
    assert workload_state(workload, "q").message


@pytest.mark.parametrize(
    "entries, name, position",
    [
        pytest.param([kueue.pending_entry("a", 0), kueue.pending_entry("b", 1), kueue.pending_entry("c", 2)], "c",
                     Position(3, 3), id="third-of-three"),
        pytest.param([kueue.pending_entry("a", 0)], "a", Position(1, 1), id="first"),
        pytest.param([kueue.pending_entry("a", 0)], "zzz", None, id="not-listed"),
        pytest.param([{"metadata": {"name": "a"}, "positionInLocalQueue": -1}], "a", None, id="negative"),
        pytest.param([{"metadata": {"name": "a"}, "positionInLocalQueue": "0"}], "a", None, id="string"),
    ],
)
def test_position_from_the_visibility_api(entries, name, position):
    assert position_of(entries, name) == position
