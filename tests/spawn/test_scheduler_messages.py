"""The grammar of the scheduler's, autoscalers' and kubelet's messages (gpuspawner.spawn.scheduler_messages).

The messages are the real formats (sources in the module's docstring); kube-scheduler's own messages,
recorded from the test cluster into tests/fixtures/scheduler_messages.json
(tests/testcluster/scheduler_messages.py, checked by tests/testcluster/test_scheduler_messages.py), are a
second source at the end.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuspawner.spawn.scheduler_messages import (
    AFFINITY,
    CONDITION_TAINT,
    DRA,
    INSUFFICIENT,
    TAINT,
    UNKNOWN,
    UNSCHEDULABLE,
    VOLUME,
    VOLUME_ZONE,
    cuda_refusal,
    image_in,
    image_not_found,
    is_admission_failure,
    parse_no_scale_up,
    parse_scale_up,
    parse_scheduling_message,
    pull_duration,
    scheduled_node,
    taint_in,
)

PRE_V = (
    "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, "
    "3 Preemption is not helpful for scheduling."
)


# ---------------------------------------------------------------------------
# parsing the kube-scheduler's FailedScheduling message
# ---------------------------------------------------------------------------

PARSE_CASES = [
    pytest.param(
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) had untolerated taint {sku: gpu}. "
        + PRE_V,
        4,
        [(1, INSUFFICIENT, "nvidia.com/gpu"), (3, TAINT, "sku")],
        True,
        id="issue-example-1.34",
    ),
    pytest.param(
        "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) had untolerated taint(s). "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        4,
        [(1, INSUFFICIENT, "nvidia.com/gpu"), (3, TAINT, None)],
        True,
        id="taint-without-key-1.35",
    ),
    pytest.param(
        "0/3 nodes are available: 3 node(s) had taint {sku: gpu}, that the pod didn't tolerate.",
        3,
        [(3, TAINT, "sku")],
        False,
        id="taint-pre-1.25-comma-inside-reason",
    ),
    pytest.param(
        "0/1 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.",
        1,
        [(1, TAINT, "node-role.kubernetes.io/control-plane")],
        True,
        id="taint-empty-value",
    ),
    pytest.param(
        "0/2 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.",
        2,
        [(2, CONDITION_TAINT, "node.kubernetes.io/not-ready")],
        False,
        id="not-ready-is-a-condition-taint",
    ),
    pytest.param(
        "0/6 nodes are available: 2 Insufficient cpu, 2 Insufficient nvidia.com/gpu, "
        "4 node(s) didn't match Pod's node affinity/selector. "
        "no new claims to deallocate, preemption: 0/6 nodes are available: 2 No preemption victims found "
        "for incoming pod, 4 Preemption is not helpful for scheduling.",
        6,
        [(2, INSUFFICIENT, "cpu"), (2, INSUFFICIENT, "nvidia.com/gpu"), (4, AFFINITY, None)],
        True,
        id="two-resources-one-node-and-dra-postfilter",
    ),
    pytest.param(
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. "
        "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
        3,
        [(None, VOLUME, None)],
        True,
        id="prefilter-message-without-count",
    ),
    pytest.param(
        "0/5 nodes are available: 5 node(s) were unschedulable.",
        5,
        [(5, UNSCHEDULABLE, None)],
        False,
        id="cordoned",
    ),
    pytest.param(
        "0/6 nodes are available: 6 node(s) had volume node affinity conflict.",
        6,
        [(6, VOLUME_ZONE, None)],
        False,
        id="volume-zone",
    ),
    pytest.param(  # kube-scheduler v1.37 (tests/doctor/checks/test_pending_volumes.py gets it from the test cluster)
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match PersistentVolume's node "
        "affinity. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        2,
        [(1, INSUFFICIENT, "nvidia.com/gpu"), (1, VOLUME_ZONE, None)],
        True,
        id="volume-zone-1.37",
    ),
    pytest.param(
        "0/2 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, 1 node(s) didn't match "
        "Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling.",
        2,
        [(1, VOLUME_ZONE, None), (1, AFFINITY, None)],
        True,
        id="volume-zone-kube-scheduler-1.37-wording",
    ),
    pytest.param(
        "0/3 nodes are available: 1 Too many pods, 2 node(s) didn't match node selector.",
        3,
        [(1, INSUFFICIENT, "pods"), (2, AFFINITY, None)],
        False,
        id="too-many-pods-and-old-selector-wording",
    ),
    pytest.param(
        "0/2 nodes are available: 2 Insufficient nvidia.com/mig-1g.10gb.",
        2,
        [(2, INSUFFICIENT, "nvidia.com/mig-1g.10gb")],
        False,
        id="mig-resource-with-dots",
    ),
    pytest.param(
        "0/3 nodes are available: 3 node(s) were frobnicated by a custom plugin.",
        3,
        [(3, UNKNOWN, None)],
        False,
        id="unknown-reason-passes-through",
    ),
    pytest.param("no nodes available to schedule pods", 0, [], False, id="empty-cluster"),
]


@pytest.mark.parametrize("message, total, reasons, has_post", PARSE_CASES)
def test_parse_scheduling_message(message, total, reasons, has_post):
    got = parse_scheduling_message(message)
    assert got is not None
    assert got.total_nodes == total
    assert [(r.count, r.kind, r.detail) for r in got.reasons] == reasons
    assert (got.post_filter is not None) == has_post


def test_unknown_reason_keeps_its_text():
    got = parse_scheduling_message("0/3 nodes are available: 3 node(s) were frobnicated by a custom plugin.")
    assert got.reasons[0].text == "node(s) were frobnicated by a custom plugin"


@pytest.mark.parametrize(
    "message",
    [None, 42, "", "Failed to schedule pod, incompatible with nodepool", "0/ nodes are avail",
     "0/x nodes are available"],
    ids=["none", "int", "empty", "karpenter", "truncated", "bad-count"],
)
def test_parse_scheduling_message_rejects_other_formats(message):
    assert parse_scheduling_message(message) is None


# ---------------------------------------------------------------------------
# cluster autoscaler messages
# ---------------------------------------------------------------------------


def test_parse_scale_up_groups():
    steps = parse_scale_up(
        "pod triggered scale-up: [{https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/gke-a100 "
        "0->1 (max: 4)} {eks-gpu-2 2->3 (max: 5)}]"
    )
    assert [(s.group.rsplit("/", 1)[-1], s.current, s.new, s.max) for s in steps] == [
        ("gke-a100", 0, 1, 4),
        ("eks-gpu-2", 2, 3, 5),
    ]


@pytest.mark.parametrize(
    "message, texts",
    [
        pytest.param(
            "pod didn't trigger scale-up: 1 max node group size reached, 3 node(s) didn't match Pod's node "
            "affinity/selector",
            ["max node group size reached", "node(s) didn't match Pod's node affinity/selector"],
            id="current",
        ),
        pytest.param(
            "pod didn't trigger scale-up (it wouldn't fit if a new node is added): 2 Insufficient nvidia.com/gpu",
            ["Insufficient nvidia.com/gpu"],
            id="older-wording",
        ),
        pytest.param(
            "pod didn't trigger scale-up: 1 max cluster cpu, memory limit reached",
            ["max cluster cpu, memory limit reached"],
            id="comma-inside-reason",
        ),
    ],
)
def test_parse_no_scale_up(message, texts):
    assert [r.text for r in parse_no_scale_up(message)] == texts


# ---------------------------------------------------------------------------
# Karpenter and the kubelet: one reader, one message, one answer
# ---------------------------------------------------------------------------


def _says_not_found(message: str) -> bool:
    """``image_not_found`` as its cases ask it: a truthy answer or not."""
    return bool(image_not_found(message))


READER_CASES = [
    # taint_in: the taint a scheduler reason names
    pytest.param(taint_in, "node(s) had untolerated taint {sku: gpu}", ("sku", "gpu"), id="taint_in-key-value"),
    pytest.param(taint_in, "node(s) had untolerated taint {nvidia.com/gpu: }", ("nvidia.com/gpu", ""),
                 id="taint_in-no-value"),
    pytest.param(taint_in, "node(s) had taint {dedicated: ml}, that the pod didn't tolerate", ("dedicated", "ml"),
                 id="taint_in-pre-1.25"),
    pytest.param(taint_in, "node(s) had untolerated taint(s)", None, id="taint_in-1.35-no-key"),
    pytest.param(taint_in, "Insufficient nvidia.com/gpu", None, id="taint_in-not-a-taint"),
    # image_in: the image of a pull event
    pytest.param(image_in, 'Pulling image "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"',
                 "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06", id="image_in-pulling"),
    pytest.param(image_in, 'Back-off pulling image "nope:1"', "nope:1", id="image_in-back-off"),
    pytest.param(image_in, "Error: ImagePullBackOff", None, id="image_in-none"),
    # pull_duration: how long a pull took
    pytest.param(pull_duration, 'Successfully pulled image "pt:1" in 1m2.5s (1m2.5s including waiting). '
                 "Image size: 8 bytes.", "1m2.5s", id="pull_duration-with-waiting"),
    pytest.param(pull_duration, 'Successfully pulled image "pt:1" in 812ms', "812ms", id="pull_duration-bare"),
    pytest.param(pull_duration, 'Container image "pt:1" already present on machine', None,
                 id="pull_duration-already-present"),
    # image_not_found: a failed pull of an image that does not exist
    pytest.param(_says_not_found, 'Failed to pull image "nope:1": rpc error: code = NotFound desc = failed to pull '
                 'and unpack image "docker.io/library/nope:1": not found', True, id="image_not_found-containerd"),
    pytest.param(_says_not_found, 'Failed to pull image "x:1": manifest unknown', True,
                 id="image_not_found-manifest-unknown"),
    pytest.param(_says_not_found, 'Failed to pull image "x:1": unauthorized: authentication required', False,
                 id="image_not_found-unauthorized"),
    # cuda_refusal: libnvidia-container's unsatisfied CUDA condition
    pytest.param(cuda_refusal, "failed to create containerd task: nvidia-container-cli: requirement error: "
                 "unsatisfied condition: cuda>=12.8, please update your driver to a newer version", "cuda>=12.8",
                 id="cuda_refusal-refused"),
    pytest.param(cuda_refusal, "unsatisfied condition: cuda>=12.8", None,  # not libnvidia-container's words
                 id="cuda_refusal-other-tool"),
    pytest.param(cuda_refusal, "nvidia-container-cli: initialization error: nvml error: driver not loaded", None,
                 id="cuda_refusal-other-error"),
    # is_admission_failure: the kubelet's admission refusal, by reason
    pytest.param(is_admission_failure, "UnexpectedAdmissionError", True, id="is_admission_failure-device-manager"),
    pytest.param(is_admission_failure, "OutOfnvidia.com/gpu", True, id="is_admission_failure-out-of-gpu"),
    pytest.param(is_admission_failure, "OutOfcpu", True, id="is_admission_failure-out-of-cpu"),
    pytest.param(is_admission_failure, "OutOf", False, id="is_admission_failure-no-resource"),
    pytest.param(is_admission_failure, "Failed", False, id="is_admission_failure-other-reason"),
    # scheduled_node: the node of a Scheduled event
    pytest.param(scheduled_node, "Successfully assigned jhub/jupyter-ada to gke-a100-1", "gke-a100-1",
                 id="scheduled_node-assigned"),
    pytest.param(scheduled_node, "Successfully assigned jhub/jupyter-ada", None, id="scheduled_node-no-node"),
]


@pytest.mark.parametrize("read, message, expected", READER_CASES)
def test_message_readers(read, message, expected):
    got = read(message)
    if expected is None or isinstance(expected, bool):
        assert got is expected
    else:
        assert got == expected


# ---------------------------------------------------------------------------
# a second source: kube-scheduler's own messages (Kubernetes v1.37), recorded from the test cluster
# ---------------------------------------------------------------------------

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "scheduler_messages.json").read_text())
HELPLESS = "Preemption is not helpful for scheduling."
RECORDED_CASES = [
    ("mixed", 4, [(1, INSUFFICIENT, "cpu"), (1, AFFINITY, None), (1, TAINT, None), (2, INSUFFICIENT, "nvidia.com/gpu")],
     HELPLESS),
    ("cordoned", 2, [(2, UNSCHEDULABLE, None)], HELPLESS),
    ("mig", 2, [(2, INSUFFICIENT, "nvidia.com/mig-1g.10gb")], HELPLESS),
    ("too-many-pods", 2, [(1, INSUFFICIENT, "pods"), (1, AFFINITY, None)], HELPLESS),
    ("dra", 2, [(2, DRA, None)], HELPLESS),
    # a claim that no volume can bind: the PreFilter message, then the PostFilter's bare error
    ("unbound-claim", 1, [(None, VOLUME, None)], "not found"),
]


def test_every_recorded_message_has_a_case():
    assert sorted(RECORDED) == sorted(c[0] for c in RECORDED_CASES)


@pytest.mark.parametrize("scenario, total, reasons, post", RECORDED_CASES, ids=[c[0] for c in RECORDED_CASES])
def test_kube_schedulers_own_messages_parse(scenario, total, reasons, post):
    got = parse_scheduling_message(RECORDED[scenario])
    assert got.total_nodes == total
    assert [(r.count, r.kind, r.detail) for r in got.reasons] == reasons
    assert got.post_filter.endswith(post)
