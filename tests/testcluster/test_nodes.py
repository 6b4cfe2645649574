"""``gpuspawner-cluster nodes`` registers a cluster file's nodes with the real control plane: the
real scheduler places pods on them, and the agent admits those pods as a kubelet does and reports
them running, or rejected when their node is out of what they ask for."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import time

import pytest

from testcluster import find_binary
from tests.builders.nodeagent import remove_file_objects

# the pods the tests create in the default namespace
TEST_PODS = ("wants-a-t4", "bound-past-its-gpus")
CLUSTER = pathlib.Path(__file__).resolve().parents[2] / "gpuspawner" / "data" / "clusters" / "default.yaml"


@pytest.fixture(scope="module")
def nodes(control_plane, tmp_path_factory, local_kubectl):
    """The agent serving the demo's default cluster file; ``READY <n> nodes`` once applied.  The
    control plane is the session's: afterwards the file's objects and the tests' pods are gone."""
    log = tmp_path_factory.mktemp("nodes") / "nodes.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [find_binary(), "nodes", f"--cluster={CLUSTER}", f"--kubeconfig={control_plane.kubeconfig}"],
            stdout=subprocess.PIPE, stderr=err, text=True,
        )
    line = proc.stdout.readline()
    assert line.startswith("READY "), f"{line!r}: {log.read_text()[-3000:]}"
    try:
        yield int(line.split()[1])
    finally:
        proc.terminate()
        proc.wait(10)
        local_kubectl("delete", "pod", *TEST_PODS, "-n", "default", "--ignore-not-found", "--grace-period=0",
                      "--force")
        asyncio.run(remove_file_objects(control_plane.kubeconfig, CLUSTER))


def get(kubectl, *args):
    return json.loads(kubectl("get", *args, "-o", "json").stdout)


def test_registers_every_node_ready_with_its_gpus(nodes, local_kubectl):
    kubectl = local_kubectl
    assert nodes == 10
    items = {n["metadata"]["name"]: n for n in get(kubectl, "nodes")["items"]}
    a100 = items["gke-gpu-a100-pool-7f3c-0"]
    assert a100["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in a100["spec"]["taints"]
    assert a100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    for name, node in items.items():
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", name
        assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"], name


def test_renews_a_lease_per_node(nodes, local_kubectl):
    kubectl = local_kubectl
    leases = {item["metadata"]["name"]: item for item in get(kubectl, "leases", "-n", "kube-node-lease")["items"]}
    assert leases["dgx-a100-01"]["spec"]["holderIdentity"] == "dgx-a100-01"


def test_publishes_the_dra_nodes_resourceslices(nodes, local_kubectl):
    kubectl = local_kubectl
    slices = get(kubectl, "resourceslices")["items"]
    assert {s["spec"]["nodeName"] for s in slices} == {"gke-h100-dra-pool-9a1e-0", "gke-h100-dra-pool-9a1e-1",
                                                       "gke-a100-mig-dra-pool-5c2b-0"}


def test_the_real_scheduler_places_a_gpu_pod_and_the_agent_runs_it(nodes, local_kubectl):
    kubectl = local_kubectl
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wants-a-t4", "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.azure.com/agentpool": "gput4"},
            "tolerations": [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
    }
    kubectl("create", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + 30
    while True:
        got = get(kubectl, "pod", "wants-a-t4", "-n", "default")
        if got["status"].get("phase") == "Running" or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got["status"]["phase"] == "Running", got["status"]
    assert got["spec"]["nodeName"].startswith("aks-gput4-")
    assert got["status"]["podIP"].startswith("127.")


def test_a_pod_bound_to_a_node_out_of_gpus_is_rejected_as_the_kubelet_rejects_it(nodes, local_kubectl):
    # train-llm-0 of the file holds 2 of the node's 4 GPUs; this pod skips the scheduler
    kubectl = local_kubectl
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound-past-its-gpus", "namespace": "default"},
        "spec": {
            "nodeName": "gke-gpu-a100-pool-7f3c-0",
            "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "3"}}}],
        },
    }
    kubectl("create", "-f", "-", input=json.dumps(pod))
    deadline = time.monotonic() + 30
    while True:
        got = get(kubectl, "pod", "bound-past-its-gpus", "-n", "default")
        if got["status"].get("phase") not in (None, "Pending") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert got["status"]["phase"] == "Failed", got["status"]
    assert got["status"]["reason"] == "OutOfnvidia.com/gpu"
    assert got["status"]["message"] == ("Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
                                        "requested: 3, used: 2, capacity: 4")
    events = get(kubectl, "events", "-n", "default", "--field-selector", "involvedObject.name=bound-past-its-gpus")
    assert [(e["type"], e["reason"], e["source"].get("component")) for e in events["items"]] == [
        ("Warning", "OutOfnvidia.com/gpu", "kubelet")]
