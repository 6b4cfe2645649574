"""Spawn progress in GPU words (gpuspawner.spawn.progress): what real scheduler, autoscaler
and kubelet messages mean for someone waiting for a GPU, and when a spawn can never succeed.

The messages are the real formats (sources in gpuspawner/spawn/scheduler_messages.py's docstring;
their parsing is tested in test_schedmsg.py).
"""

import pytest

from gpuspawner.capacity.model import ScaleUp, Taint
from gpuspawner.capacity.taintrule import NodeTaints, TaintExclusion
from gpuspawner.spawn.progress import FATAL_KINDS, SpawnContext, rewrite_progress_event, translate, translate_pod
from tests.builders import MALFORMED_PODS, node_view, pool_view

POOL = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"
SCALE = ScaleUp(max_nodes=4, gpus_per_node=8, minutes=6)
SKU = Taint("sku", "gpu", "NoSchedule")
PRE_V = (
    "preemption: 0/4 nodes are available: 1 No preemption victims found for incoming pod, "
    "3 Preemption is not helpful for scheduling."
)


def ctx(**kw):
    base = dict(
        pool_id=POOL,
        pool_name="A100 80GB",
        gpus=1,
        free=0,
        total=8,
        max_free_per_node=0,
        max_node_allocatable=4,
        nodes=2,
        queued_before=2,
        tolerated_taint_keys=("nvidia.com/gpu",),
    )
    base.update(kw)
    return SpawnContext(**base)


def ev(reason, message, type_="Normal"):
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": type_,
        "reason": reason,
        "message": message,
        "count": 1,
        "involvedObject": {"kind": "Pod", "name": "jupyter-ada", "namespace": "hub"},
        "lastTimestamp": "2026-11-22T00:00:00Z",
    }


# ---------------------------------------------------------------------------
# translate(): message, kind, fatal
# ---------------------------------------------------------------------------

TRANSLATE_CASES = [
    # -- waiting, not fatal --------------------------------------------------
    pytest.param(
        ev("FailedScheduling", f"0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3 node(s) had untolerated "
                               f"taint {{sku: gpu}}. {PRE_V}", "Warning"),
        {},
        "waiting_for_gpu",
        False,
        ["Waiting for a free GPU in pool A100 80GB", "all 8 of its GPUs are in use", "2 servers are queued before you"],
        id="busy-pool-is-a-queue-not-a-failure",
    ),
    pytest.param(
        ev("FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        {"gpus": 2, "free": 2, "max_free_per_node": 1, "queued_before": 0},
        "waiting_for_gpu",
        False,
        ["2 free GPUs on one node", "no single node has 2 free", "you are next in line"],
        id="free-gpus-split-over-nodes",
    ),
    pytest.param(
        ev("FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        {"queued_before": 1, "scale_up": SCALE},
        "waiting_for_gpu",
        False,
        ["1 server is queued before you", "can add nodes (up to 4)", "about 6 minutes"],
        id="busy-pool-that-can-grow",
    ),
    pytest.param(
        ev("FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        {"scale_up": SCALE, "nodes": 4},
        "waiting_for_gpu",
        False,
        ["at its maximum of 4 nodes"],
        id="busy-pool-at-max-size",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 1 node(s) were unschedulable, "
                               "2 node(s) didn't match Pod's node affinity/selector."),
        {},
        "nodes_cordoned",
        False,
        ["cordoned"],
        id="cordoned-node-comes-back",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 1 node(s) had untolerated taint "
                               "{node.kubernetes.io/not-ready: }, "
                               "2 node(s) didn't match Pod's node affinity/selector."),
        {},
        "nodes_not_ready",
        False,
        ["not ready", "node.kubernetes.io/not-ready"],
        id="not-ready-node-is-transient",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 1 Insufficient memory, "
                               "2 node(s) didn't match Pod's node affinity/selector."),
        {"free": 3, "max_free_per_node": 3},
        "waiting_for_resources",
        False,
        ["lack the memory this server asks for", "taken by other workloads"],
        id="gpu-free-but-memory-short",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, "
                               "1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."),
        {"free": 1, "max_free_per_node": 1, "request": (8000, 32 << 30, 0, 1),
         "largest": (3860, 24 << 30, 110 << 30, 110)},
        "nodes_too_small",
        True,
        ["Cannot start: the nodes of pool A100 80GB have 3.9 CPUs and 24 GiB of memory; this server needs 8 and "
         "32 GiB; choose another pool, or a smaller server."],
        id="nodes-too-small-for-cpu-and-memory",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 2 Insufficient cpu, "
                               "1 node(s) didn't match Pod's node affinity/selector."),
        {"free": 2, "max_free_per_node": 1, "request": (8000, 32 << 30, 0, 1),
         "largest": (94000, 1500 << 30, 1 << 40, 110)},
        "waiting_for_resources",
        False,
        ["the nodes with a free GPU lack the CPU this server asks for (8 CPUs, 32 GiB of memory)"],
        id="big-nodes-whose-cpu-is-taken",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 3 node(s) had untolerated taint(s). "
                               "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."),
        {},
        "waiting_for_node",
        False,
        ["untolerated taint(s)"],
        id="keyless-taint-not-fatal-without-evidence",
    ),
    pytest.param(
        ev("FailedScheduling", "0/4 nodes are available: 4 node(s) had untolerated taint {sku: gpu}."),
        {"scale_up": SCALE},
        "waiting_for_scale_up",
        False,
        ["waiting for the cluster autoscaler", "about 6 minutes"],
        id="excluded-everywhere-but-pool-can-grow",
    ),
    pytest.param(
        ev("FailedScheduling", "0/4 nodes are available: 4 node(s) had untolerated taint {sku: gpu}."),
        {"nodes": None, "free": None, "total": None},
        "waiting_for_node",
        False,
        ["sku: gpu"],
        id="pool-unknown-to-cache-never-fatal",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."),
        {},
        "waiting_for_storage",
        False,
        ["storage", "unbound immediate PersistentVolumeClaims"],
        id="pvc-being-provisioned",
    ),
    pytest.param(
        ev("FailedScheduling", "Failed to schedule pod, incompatible with nodepool \"gpu\", daemonset overhead="
                               "{\"cpu\":\"180m\"}, no instance type satisfied resources", "Warning"),
        {},
        "no_scale_up",
        False,
        ["Karpenter", "no instance type satisfied resources"],
        id="karpenter-failed-scheduling",
    ),
    pytest.param(
        ev("FailedScheduling", "running PreBind plugin \"VolumeBinding\": binding volumes: timed out"),
        {},
        "waiting_for_node",
        False,
        ["running PreBind plugin"],
        id="other-scheduler-text-passes-through",
    ),
    pytest.param(
        ev("TriggeredScaleUp", "pod triggered scale-up: [{gke-hub-a100-pool 0->1 (max: 4)}]"),
        {"scale_up": SCALE},
        "scale_up",
        False,
        ["Adding a GPU node to pool A100 80GB", "gke-hub-a100-pool: 0 -> 1 of at most 4", "about 6 minutes"],
        id="triggered-scale-up",
    ),
    pytest.param(
        ev("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 max node group size reached, "
                                "3 node(s) didn't match Pod's node affinity/selector"),
        {"scale_up": SCALE, "nodes": 4},
        "no_scale_up",
        False,
        ["Waiting for a free GPU", "at its maximum size"],
        id="not-triggered-max-size",
    ),
    pytest.param(
        ev("NotTriggerScaleUp", "pod didn't trigger scale-up: 1 in backoff after failed scale-up"),
        {"scale_up": SCALE},
        "no_scale_up",
        False,
        ["recent attempt to add a node failed"],
        id="not-triggered-backoff",
    ),
    pytest.param(
        ev("NotTriggerScaleUp", "pod didn't trigger scale-up: max total nodes in cluster reached"),
        {"scale_up": SCALE},
        "no_scale_up",
        False,
        ["autoscaling limit"],
        id="not-triggered-cluster-limit",
    ),
    pytest.param(
        ev("Nominated", "Pod should schedule on: nodeclaim/gpu-x7k2p"),
        {},
        "scale_up",
        False,
        ["nodeclaim/gpu-x7k2p"],
        id="karpenter-nominated",
    ),
    pytest.param(
        ev("Scheduled", "Successfully assigned hub/jupyter-ada to gpu-node-3"),
        {"gpus": 2},
        "scheduled",
        False,
        ["Got 2 GPUs in pool A100 80GB on node gpu-node-3"],
        id="scheduled",
    ),
    pytest.param(
        ev("Pulling", 'Pulling image "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-01"'),
        {},
        "image_pull",
        False,
        ["quay.io/jupyter/pytorch-notebook:cuda12-2026-11-01", "several minutes"],
        id="pulling",
    ),
    pytest.param(
        ev("Pulling", 'Pulling image "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-01"'),
        {"image": "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-01", "image_bytes": 15_032_385_536,
         "pull_rate": 60.0},
        "image_pull",
        False,
        ["Downloading the image quay.io/jupyter/pytorch-notebook:cuda12-2026-11-01: pulling 15 GB image, "
         "about 4 min on a node that does not have it yet."],
        id="pulling-estimated-from-the-size-other-nodes-report",
    ),
    pytest.param(
        ev("Pulling", 'Pulling image "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"'),
        {"image": "quay.io/jupyter/pytorch-notebook:cuda12-2026-11-01", "image_bytes": 15_032_385_536,
         "pull_rate": 60.0},
        "image_pull",
        False,
        ["nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", "several minutes"],
        id="pulling-another-image-not-estimated",
    ),
    pytest.param(
        ev("Pulled", 'Successfully pulled image "quay.io/jupyter/pytorch-notebook:cuda12" in 1m2.345s '
                     '(1m2.345s including waiting). Image size: 6421837393 bytes.'),
        {},
        "image_ready",
        False,
        ["Downloaded the image quay.io/jupyter/pytorch-notebook:cuda12 in 1m2.345s"],
        id="pulled",
    ),
    pytest.param(
        ev("Pulled", 'Container image "quay.io/jupyter/pytorch-notebook:cuda12" already present on machine'),
        {},
        "image_ready",
        False,
        ["already on the node"],
        id="already-present",
    ),
    pytest.param(
        ev("Failed", "Error: ErrImagePull", "Warning"),
        {},
        "image_pull_failed",
        False,
        ["retrying"],
        id="err-image-pull",
    ),
    pytest.param(
        ev("Failed", 'Failed to pull image "registry.example.org/private/gpu:1": failed to pull and unpack image '
                     '"registry.example.org/private/gpu:1": failed to authorize: failed to fetch anonymous token: '
                     "unexpected status: 401 Unauthorized", "Warning"),
        {},
        "image_pull_denied",
        False,
        ["access denied", "pull secret"],
        id="pull-denied-not-fatal",
    ),
    pytest.param(
        ev("BackOff", 'Back-off pulling image "quay.io/jupyter/pytorch-notebook:cuda12"', "Warning"),
        {},
        "image_pull_failed",
        False,
        ["will retry"],
        id="pull-backoff",
    ),
    pytest.param(
        ev("Created", "Created container: notebook"),
        {},
        "container_created",
        False,
        ["container"],
        id="created",
    ),
    pytest.param(
        ev("Started", "Started container notebook"),
        {},
        "container_started",
        False,
        ["waiting for Jupyter"],
        id="started",
    ),
    pytest.param(
        ev("FailedMount", 'MountVolume.SetUp failed for volume "home" : rpc error: code = DeadlineExceeded', "Warning"),
        {},
        "waiting_for_storage",
        False,
        ["storage volume home"],
        id="failed-mount",
    ),
    pytest.param(
        ev("FailedCreatePodSandBox", 'Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get '
                                     'sandbox runtime: no runtime for "nvidia" is configured', "Warning"),
        {},
        "gpu_runtime_missing",
        False,
        ["NVIDIA container runtime"],
        id="nvidia-runtime-missing",
    ),
    # -- fatal: the pod can never start ---------------------------------------
    pytest.param(
        ev("FailedScheduling", "0/4 nodes are available: 4 node(s) had untolerated taint {sku: gpu}. "
                               "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."),
        {"taints": (SKU,)},
        "untolerated_taint",
        True,
        ["sku=gpu", "gpu_tolerated_taint_keys", "'sku'"],
        id="taint-nothing-tolerates-no-scale-up",
    ),
    pytest.param(
        ev("FailedScheduling", "0/5 nodes are available: 2 node(s) had untolerated taint {sku: gpu}, "
                               "3 node(s) didn't match Pod's node affinity/selector."),
        {"taints": (SKU,)},
        "untolerated_taint",
        True,
        ["sku=gpu"],
        id="taint-on-pool-affinity-elsewhere",
    ),
    pytest.param(
        ev("FailedScheduling", "0/5 nodes are available: 2 node(s) had untolerated taint(s), "
                               "3 node(s) didn't match Pod's node affinity/selector."),
        {"taints": (SKU,)},
        "untolerated_taint",
        True,
        ["sku=gpu:NoSchedule"],
        id="keyless-taint-with-evidence-from-cache",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."),
        {"nodes": 0, "free": 0, "total": 0},
        "pool_empty",
        True,
        ["has no usable nodes now and cannot add any"],
        id="pool-vanished",
    ),
    pytest.param(
        ev("FailedScheduling", "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."),
        {},
        "no_matching_node",
        True,
        ["can ever take this server", "reload the page"],
        id="affinity-matches-nothing",
    ),
    pytest.param(
        ev("FailedScheduling", "0/2 nodes are available: 2 node(s) had volume node affinity conflict."),
        {},
        "volume_zone",
        True,
        ["storage volume is bound to a zone"],
        id="home-volume-in-another-zone",
    ),
    pytest.param(
        ev("FailedScheduling", "no nodes available to schedule pods"),
        {"nodes": 0, "free": 0, "total": 0},
        "no_nodes",
        True,
        ["no nodes"],
        id="empty-cluster",
    ),
    pytest.param(
        ev("FailedScheduling", "0/7 nodes are available: 2 node(s) had volume node affinity conflict, "
                               "5 node(s) didn't match Pod's node affinity/selector."),
        {},
        "volume_zone",
        True,
        ["storage volume is bound to a zone"],
        id="volume-zone-with-other-pools-elsewhere",
    ),
    pytest.param(
        ev("FailedScheduling", "0/2 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, "
                               "1 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are "
                               "available: 2 Preemption is not helpful for scheduling."),
        {},
        "volume_zone",
        True,
        ["storage volume is bound to a zone"],
        id="volume-zone-in-kube-scheduler-1.37-words",
    ),
    pytest.param(
        ev("FailedScheduling", "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: ml}, "
                               "3 node(s) didn't match Pod's node affinity/selector."),
        {"taints": (SKU,)},
        "no_matching_node",
        True,
        ["dedicated: ml", "can ever take this server"],
        id="cache-taint-not-the-one-the-scheduler-names",
    ),
    pytest.param(
        ev("FailedScheduling", "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
                               "2 node(s) didn't match Pod's node affinity/selector."),
        {"gpus": 8, "max_node_allocatable": 4},
        "too_many_gpus",
        True,
        ["asks for 8 GPUs on one node", "largest node of pool A100 80GB has 4"],
        id="more-gpus-than-any-node",
    ),
    pytest.param(
        ev("FailedScheduling", "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
                               "2 node(s) didn't match Pod's node affinity/selector."),
        {"gpus": 8, "max_node_allocatable": 4, "scale_up": ScaleUp(max_nodes=4, gpus_per_node=4, minutes=5)},
        "too_many_gpus",
        True,
        ["has 4"],
        id="more-gpus-than-any-node-even-after-scale-up",
    ),
    pytest.param(
        ev("UnexpectedAdmissionError", "Allocate failed due to requested number of devices unavailable for "
                                       "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected", "Warning"),
        {},
        "gpu_allocation_failed",
        True,
        ["device plugin", "Start the server again"],
        id="device-plugin-allocation-failed",
    ),
    pytest.param(
        ev("OutOfnvidia.com/gpu", "Node didn't have enough resource: nvidia.com/gpu, requested: 1, used: 1, "
                                  "capacity: 1", "Warning"),
        {},
        "node_out_of_resource",
        True,
        ["ran out of nvidia.com/gpu"],
        id="kubelet-admission-out-of-gpu",
    ),
    pytest.param(
        ev("Failed", 'Failed to pull image "quay.io/jupyter/pytorch-notebook:cuda99": rpc error: code = NotFound '
                     'desc = failed to pull and unpack image "quay.io/jupyter/pytorch-notebook:cuda99": failed to '
                     'resolve reference "quay.io/jupyter/pytorch-notebook:cuda99": quay.io/jupyter/pytorch-notebook:'
                     "cuda99: not found", "Warning"),
        {},
        "image_not_found",
        True,
        ["quay.io/jupyter/pytorch-notebook:cuda99 does not exist"],
        id="image-not-found",
    ),
    pytest.param(
        ev("Failed", "Error: failed to create containerd task: failed to create shim task: OCI runtime create "
                     "failed: runc create failed: unable to start container process: error during container init: "
                     "error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as "
                     "'legacy'\nnvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
                     "update your driver to a newer version, or use an earlier cuda container: unknown", "Warning"),
        {},
        "cuda_mismatch",
        True,
        ["requires cuda >= 12.8", "newer than the NVIDIA driver"],
        id="nvidia-require-cuda-refused",
    ),
    pytest.param(
        ev("InspectFailed", 'Failed to apply default image tag "Quay.io/x:y": couldn\'t parse image name '
                            '"Quay.io/x:y": invalid reference format: repository name must be lowercase', "Warning"),
        {},
        "image_invalid",
        True,
        ["invalid reference format"],
        id="invalid-image-reference",
    ),
    pytest.param(
        ev("Preempted", "Preempted by pod 5d1c7a0e-1f2b-4c3d-9e8f-0a1b2c3d4e5f on node gpu-node-3", "Normal"),
        {},
        "preempted",
        True,
        ["preemption"],
        id="preempted",
    ),
]


@pytest.mark.parametrize("event, overrides, kind, fatal, phrases", TRANSLATE_CASES)
def test_translate(event, overrides, kind, fatal, phrases):
    t = translate(event, ctx(**overrides))
    assert t is not None
    assert (t.kind, t.fatal) == (kind, fatal), t.message
    for phrase in phrases:
        assert phrase in t.message
    if fatal:
        assert t.reason and t.reason in t.message
        assert t.kind in FATAL_KINDS
    else:
        assert t.reason is None


def test_progress_hints_move_forward_through_a_normal_start():
    c = ctx()
    steps = [
        ev("FailedScheduling", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."),
        ev("TriggeredScaleUp", "pod triggered scale-up: [{g 1->2 (max: 4)}]"),
        ev("Scheduled", "Successfully assigned hub/jupyter-ada to n2"),
        ev("Pulling", 'Pulling image "img"'),
        ev("Pulled", 'Successfully pulled image "img" in 3s (3s including waiting). Image size: 1 bytes.'),
        ev("Created", "Created container: notebook"),
        ev("Started", "Started container notebook"),
    ]
    hints = [translate(e, c).progress for e in steps]
    assert hints == sorted(hints) and len(set(hints)) == len(hints)
    assert 0 < hints[0] and hints[-1] < 100


INSUFFICIENT_GPU = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."

# the scheduler's words alone would look fatal; what the cache knows says "wait" (kind: also checked, or None)
NOT_SURE_CASES = [
    # a MIG spawn: nodes short of full GPUs are not what this pod waits for
    pytest.param(INSUFFICIENT_GPU, {"resource": "nvidia.com/mig-1g.10gb"}, "waiting_for_resources",
                 id="insufficient-other-gpu-resource-is-not-our-wait"),
    pytest.param(INSUFFICIENT_GPU, {"gpus": 4, "max_node_allocatable": 4}, "waiting_for_gpu",
                 id="request-within-largest-node"),
    pytest.param(INSUFFICIENT_GPU, {"gpus": 8, "max_node_allocatable": None}, None, id="largest-node-unknown"),
    pytest.param(INSUFFICIENT_GPU, {"gpus": 8, "max_node_allocatable": 0}, None, id="device-plugin-down"),
    pytest.param(INSUFFICIENT_GPU, {"gpus": 8, "max_node_allocatable": 4, "scale_up": SCALE}, "waiting_for_gpu",
                 id="scale-up-with-big-enough-nodes"),
    pytest.param("no nodes available to schedule pods", {"nodes": 2}, None,
                 id="scheduler-sees-no-nodes-while-the-cache-does"),
    # 1.35 wording hides node.kubernetes.io/not-ready; the cache leaves NotReady nodes out of `nodes`
    pytest.param("0/5 nodes are available: 2 node(s) had untolerated taint(s), "
                 "3 node(s) didn't match Pod's node affinity/selector.",
                 {"nodes": 0, "free": 0, "total": 0}, None, id="keyless-taints-on-an-empty-pool"),
    # the pool's nvidia.com/gpu taint is tolerated; a keyless taint message then proves nothing
    pytest.param("0/3 nodes are available: 3 node(s) had untolerated taint(s).",
                 {"taints": (Taint("nvidia.com/gpu", "present", "NoSchedule"),)}, None,
                 id="tolerated-taint-key-is-not-blamed"),
]


@pytest.mark.parametrize("message, overrides, kind", NOT_SURE_CASES)
def test_not_sure_is_never_fatal(message, overrides, kind):
    t = translate(ev("FailedScheduling", message), ctx(**overrides))
    assert not t.fatal
    if kind is not None:
        assert t.kind == kind


@pytest.mark.parametrize(
    "event",
    [
        None,
        "FailedScheduling",
        {},
        {"reason": "FailedScheduling"},
        {"reason": 3, "message": "x"},
        {"reason": "FailedScheduling", "message": None},
        {"reason": "SomethingNew", "message": "from a future kubelet"},
        {"reason": "Killing", "message": "Stopping container notebook"},
    ],
    ids=["none", "string", "empty", "no-message", "bad-reason", "null-message", "unknown-reason", "killing"],
)
def test_untranslated_events_return_none(event):
    assert translate(event, ctx()) is None


def test_rewrite_kubespawner_progress_items():
    raw = ev("TriggeredScaleUp", "pod triggered scale-up: [{g 1->2 (max: 4)}]")
    item = {"progress": 50, "raw_event": raw, "message": "2026-11-22T00:00:00Z [Normal] pod triggered scale-up"}
    out, t = rewrite_progress_event(item, ctx())
    assert t.kind == "scale_up"
    assert out["message"] == t.message and out["raw_event"] is raw
    assert out["progress"] == 50  # KubeSpawner was already further: never backwards
    out, _ = rewrite_progress_event({**item, "progress": 5}, ctx())
    assert out["progress"] == 20
    assert item["progress"] == 50  # the input is not changed


@pytest.mark.parametrize(
    "item",
    [{"message": "Server requested"}, {"progress": 30, "message": "x", "raw_event": {"reason": "Killing"}}],
    ids=["slow-spawn-notice", "untranslated-event"],
)
def test_rewrite_keeps_items_it_cannot_translate(item):
    out, t = rewrite_progress_event(item, ctx())
    assert t is None and out == item


# ---------------------------------------------------------------------------
# translate_pod(): the pod's own state
# ---------------------------------------------------------------------------

POD_CASES = [
    pytest.param(
        {"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}},
        "waiting_for_gpu",
        False,
        id="unschedulable-condition",
    ),
    pytest.param(
        {"status": {"phase": "Pending", "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates"}]}},
        "queued",
        False,
        id="scheduling-gated",
    ),
    pytest.param(
        {"status": {"phase": "Failed", "reason": "UnexpectedAdmissionError",
                    "message": "Allocate failed due to no healthy devices present; cannot allocate unhealthy "
                               "devices nvidia.com/gpu, which is unexpected"}},
        "gpu_allocation_failed",
        True,
        id="admission-rejected",
    ),
    pytest.param(
        {"status": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}},
        "pod_failed",
        True,
        id="evicted",
    ),
    pytest.param(
        {"status": {"phase": "Pending", "containerStatuses": [{
            "name": "notebook", "image": "quay.io/x/y:nope",
            "state": {"waiting": {"reason": "ErrImagePull",
                                  "message": "rpc error: code = NotFound desc = failed to pull and unpack image "
                                             "\"quay.io/x/y:nope\": not found"}}}]}},
        "image_not_found",
        True,
        id="image-missing-in-container-status",
    ),
    pytest.param(
        {"status": {"phase": "Pending", "containerStatuses": [{
            "name": "notebook", "image": "img",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"img\""}}}]}},
        "image_pull_failed",
        False,
        id="image-backoff-in-container-status",
    ),
    pytest.param(
        {"status": {"phase": "Pending", "containerStatuses": [{
            "name": "notebook", "image": "img",
            "state": {"waiting": {"reason": "RunContainerError",
                                  "message": "nvidia-container-cli: requirement error: unsatisfied condition: "
                                             "cuda>=13.0, please update your driver to a newer version"}}}]}},
        "cuda_mismatch",
        True,
        id="cuda-refused-in-container-status",
    ),
]


@pytest.mark.parametrize("pod, kind, fatal", POD_CASES)
def test_translate_pod(pod, kind, fatal):
    t = translate_pod(pod, ctx())
    assert t is not None
    assert (t.kind, t.fatal) == (kind, fatal)


@pytest.mark.parametrize(
    "pod",
    [None, {}, {"status": None}, {"status": {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}}],
    ids=["none", "empty", "null-status", "running"],
)
def test_translate_pod_says_nothing_new(pod):
    assert translate_pod(pod, ctx()) is None


@pytest.mark.parametrize("pod", list(MALFORMED_PODS.values()), ids=list(MALFORMED_PODS))
def test_malformed_pods_never_raise(pod):
    translate_pod(pod, ctx())


# ---------------------------------------------------------------------------
# SpawnContext
# ---------------------------------------------------------------------------


def test_context_from_pool_view():
    pool = pool_view(id=POOL, node_views=(node_view("n1", 8, 2), node_view("n2", 4, 1)), memory_mib=81920,
                     scale_up=SCALE, taints=(SKU,), defining=())
    assert (pool.nodes, pool.total, pool.free, pool.max_free_per_node) == (2, 12, 3, 2)
    c = SpawnContext.from_pool(pool, pool_id=POOL, gpus=2, queued_before=1, tolerated_taint_keys=["nvidia.com/*"])
    assert (c.free, c.total, c.max_free_per_node, c.max_node_allocatable, c.nodes) == (3, 12, 2, 8, 2)
    assert c.scale_up == SCALE and c.label == POOL
    assert c.hard_taints() == (SKU,)
    unknown = SpawnContext.from_pool(None, pool_id=POOL, gpus=1)
    assert (unknown.nodes, unknown.free, unknown.max_node_allocatable) == (None, None, None)


# ---------------------------------------------------------------------------
# kube-scheduler 1.35+: "N node(s) had untolerated taint(s)", no key; every node's taints weighed
# with the pod's own tolerations (SpawnContext.excluded) say how many stay out for good
# ---------------------------------------------------------------------------

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
CONTROL = Taint("node-role.kubernetes.io/control-plane", None, "NoSchedule")
KEYLESS_AND_AFFINITY = ("0/7 nodes are available: 2 node(s) had untolerated taint(s), 5 node(s) didn't match "
                        "Pod's node affinity/selector. preemption: 0/7 nodes are available: 7 Preemption is not "
                        "helpful for scheduling.")
KEYLESS_ONLY = "0/3 nodes are available: 3 node(s) had untolerated taint(s)."

# (message, context overrides, kind, fatal, fragments of the message)
KEYLESS_CASES = [
    # an admin's hook pins the pod to a rack no node is in; another pool's nodes carry sku=gpu
    pytest.param(KEYLESS_AND_AFFINITY, {"taints": (GPU_TAINT,), "excluded": TaintExclusion(2, 0, ((SKU, 2),))},
                 "no_matching_node", True,
                 ["can ever take this server", "node affinity/selector", "2 node(s) had untolerated taint(s): "
                  "sku=gpu:NoSchedule on 2 nodes)"], id="other-pools-taint-and-a-selector-nothing-matches"),
    pytest.param(KEYLESS_AND_AFFINITY, {"taints": (GPU_TAINT,), "excluded": TaintExclusion(0, 2)},
                 "waiting_for_node", False, ["had untolerated taint(s): 2 nodes not ready or being removed for now)"],
                 id="not-ready-nodes-may-come-back"),
    pytest.param(KEYLESS_AND_AFFINITY, {"taints": (GPU_TAINT,), "excluded": TaintExclusion(1, 1, ((SKU, 1),))},
                 "waiting_for_node", False, ["sku=gpu:NoSchedule on 1 node and 1 node not ready or being removed"],
                 id="one-lasting-one-passing"),
    # the scheduler counted 2, the cache now sees 2 lasting and 1 passing: not sure the 2 are the lasting ones
    pytest.param(KEYLESS_AND_AFFINITY, {"taints": (GPU_TAINT,), "excluded": TaintExclusion(2, 1, ((SKU, 2),))},
                 "waiting_for_node", False, [], id="cluster-changed-since-the-schedulers-word"),
    pytest.param(KEYLESS_AND_AFFINITY, {"taints": (GPU_TAINT,), "excluded": TaintExclusion(2, 0, ((SKU, 2),)),
                                        "scale_up": SCALE},
                 "waiting_for_scale_up", False, [], id="a-pool-that-can-grow-waits"),
    pytest.param(KEYLESS_ONLY, {"taints": (SKU,), "excluded": TaintExclusion(3, 0, ((SKU, 3),))},
                 "untolerated_taint", True,
                 ["the nodes of pool A100 80GB carry the taint sku=gpu:NoSchedule", "(add 'sku')"],
                 id="the-pools-own-taint"),
    pytest.param(KEYLESS_ONLY, {"taints": (), "excluded": TaintExclusion(3, 0, ((SKU, 2), (CONTROL, 1)))},
                 "untolerated_taint", True,
                 ["every node that could run this server carries a taint it does not tolerate (sku=gpu:NoSchedule, "
                  "node-role.kubernetes.io/control-plane:NoSchedule)", "allow them with", "(add 'sku' and "
                  "'node-role.kubernetes.io/control-plane') or remove the taints"], id="taints-on-every-node"),
    # the old evidence (the pool's taint not among the tolerated keys) would say fatal; the pod's own
    # tolerations (an admin's hook) tolerate it, and its nodes are not ready
    pytest.param(KEYLESS_ONLY, {"taints": (SKU,), "excluded": TaintExclusion(0, 3)},
                 "waiting_for_node", False, ["3 nodes not ready or being removed for now"], id="the-pods-own-tolerations-decide"),
]


@pytest.mark.parametrize("message, overrides, kind, fatal, fragments", KEYLESS_CASES)
def test_a_keyless_taint_is_weighed_with_every_nodes_taints(message, overrides, kind, fatal, fragments):
    t = translate(ev("FailedScheduling", message, "Warning"), ctx(**overrides))
    assert (t.kind, t.fatal) == (kind, fatal), t
    for fragment in fragments:
        assert fragment in t.message, t.message
    if fatal:
        assert kind in FATAL_KINDS and t.reason in t.message


SKU_NODES = ((NodeTaints(False, (SKU,)), 2), (NodeTaints(False, (GPU_TAINT,)), 4))


@pytest.mark.parametrize("pool, node_taints, pod, excluded", [
    (pool_view(id=POOL), SKU_NODES, {"spec": {"tolerations": [GPU_TAINT.to_k8s() | {"operator": "Equal"}]}},
     TaintExclusion(2, 0, ((SKU, 2),))),
    (pool_view(id=POOL), SKU_NODES, {"spec": {"tolerations": [{"operator": "Exists"}]}}, TaintExclusion(0, 0)),
    (pool_view(id=POOL), SKU_NODES, {"spec": {}}, TaintExclusion(6, 0, ((GPU_TAINT, 4), (SKU, 2)))),
    (pool_view(id=POOL), SKU_NODES, {"spec": {"tolerations": "not a list"}}, TaintExclusion(6, 0, ((GPU_TAINT, 4), (SKU, 2)))),
    (pool_view(id=POOL), SKU_NODES, None, None),
    (pool_view(id=POOL), None, {"spec": {}}, None),
    (None, SKU_NODES, {"spec": {}}, None),
], ids=["gpu-taint-tolerated", "tolerates-everything", "no-tolerations", "malformed-tolerations", "no-pod-yet",
        "no-snapshot", "pool-unknown"])
def test_the_context_weighs_the_nodes_taints_with_the_pods_tolerations(pool, node_taints, pod, excluded):
    c = SpawnContext.from_pool(pool, pool_id=POOL, gpus=1, node_taints=node_taints, pod=pod)
    assert c.excluded == excluded


def test_condition_taints_are_never_hard():
    c = ctx(taints=(Taint("node.kubernetes.io/unreachable", None, "NoExecute"), Taint("x", None, "PreferNoSchedule")))
    assert c.hard_taints() == ()


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"gpus": 0}, "gpus must be a whole number"),
        ({"gpus": "2"}, "gpus must be a whole number"),
        ({"pool_id": ""}, "pool_id must be a non-empty"),
        ({"queued_before": -1}, "queued_before must be a count"),
        ({"free": -2}, "free must be None"),
        ({"tolerated_taint_keys": "sku"}, "list of keys"),
    ],
    ids=["zero-gpus", "string-gpus", "empty-pool", "negative-queue", "negative-free", "keys-as-string"],
)
def test_context_rejects_bad_values_with_a_clear_error(overrides, fragment):
    with pytest.raises(ValueError, match=fragment):
        ctx(**overrides)


# ---------------------------------------------------------------------------
# a server whose GPUs come from a ResourceClaim (DRA): the dynamicresources plugin's words
# (pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go)
# ---------------------------------------------------------------------------

DRA_POOL = "dra-a100:nvidia-a100-sxm4-80gb:gpu.nvidia.com"


def dra_ctx(**kw):
    return ctx(pool_id=DRA_POOL, resource="gpu.nvidia.com", **kw)


@pytest.mark.parametrize(
    "message, kind, fatal",
    [
        ("0/5 nodes are available: 2 cannot allocate all claims, 3 node(s) didn't match Pod's node "
         "affinity/selector. preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling.",
         "waiting_for_gpu", False),
        ("0/3 nodes are available: 1 resourceclaim not available on the node, 2 node(s) didn't match Pod's "
         "node affinity/selector.", "waiting_for_gpu", False),
        ('0/3 nodes are available: pod "jhub/jupyter-ada": ResourceClaim not created yet.',
         "waiting_for_claim", False),
        ("0/3 nodes are available: resource claim jhub/jupyter-ada-gpuspawner-gpus-x7k2p is in the process of "
         "being allocated.", "waiting_for_claim", False),
        ("0/3 nodes are available: request gpus: device class gpu.nvidia.com does not exist.",
         "gpu_class_missing", True),
    ],
    ids=["cannot-allocate", "not-available-on-node", "claim-not-created", "being-allocated", "class-missing"],
)
def test_dra_scheduling_words(message, kind, fatal):
    t = translate(ev("FailedScheduling", message, "Warning"), dra_ctx(free=0, total=8))
    assert (t.kind, t.fatal) == (kind, fatal)
    assert kind in FATAL_KINDS if fatal else kind not in FATAL_KINDS
    if kind == "waiting_for_gpu":
        assert t.message.startswith("Waiting for a free GPU in pool A100 80GB: all 8 of its GPUs are in use")
    if kind == "gpu_class_missing":
        assert "no DeviceClass gpu.nvidia.com" in t.reason


def test_dra_claim_bigger_than_any_node_fails_at_once():
    msg = "0/2 nodes are available: 2 cannot allocate all claims."
    t = translate(ev("FailedScheduling", msg, "Warning"), dra_ctx(gpus=8, max_node_allocatable=4, free=8))
    assert (t.kind, t.fatal) == ("too_many_gpus", True)
    assert "largest node of pool A100 80GB has 4" in t.reason
