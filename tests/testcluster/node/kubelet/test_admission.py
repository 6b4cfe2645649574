"""The simulated kubelet admits a pod bound to its node as the kubelet does: a pod that does not fit
beside the pods already admitted there fails with ``OutOf<resource>`` and the kubelet's message (the
same words as the bulk node agent's, which calls the kubelet's own code)."""

from __future__ import annotations

import sys

import pytest

from testcluster.node.kubelet.admission import REJECTED, Rejection, admit
from tests.builders.kubelet import container, pod_manifest

PY = sys.executable
NODE = {"cpu": "8", "memory": "32Gi", "pods": "3", "nvidia.com/gpu": "4"}


def asks(**requests) -> dict:
    """A pod whose one container asks for these resources (``asks(**{"nvidia.com/gpu": "1"})``)."""
    return pod_manifest("p", container(resources={"requests": requests, "limits": requests}))


def gpus(n: str) -> dict:
    return asks(**{"nvidia.com/gpu": n})


def oom(resource: str, requested: int, used: int, capacity: int) -> Rejection:
    return Rejection(f"OutOf{resource}", f"Node didn't have enough resource: {resource}, requested: {requested}, "
                                         f"used: {used}, capacity: {capacity}")


@pytest.mark.parametrize("pod, others, want", [
    pytest.param(gpus("2"), [gpus("2")], None, id="fits-beside-the-admitted"),
    pytest.param(gpus("1"), [gpus("3"), gpus("1")],
                 oom("nvidia.com/gpu", 1, 4, 4), id="out-of-gpus"),
    pytest.param(asks(cpu="1500m"), [asks(cpu="7")], oom("cpu", 1500, 7000, 8000), id="cpu-in-millicores"),
    pytest.param(asks(memory="1Gi"), [asks(memory="32Gi")], oom("memory", 2**30, 32 * 2**30, 32 * 2**30),
                 id="memory-in-bytes"),
    pytest.param(asks(), [asks(), asks(), asks()], oom("pods", 1, 3, 3), id="out-of-pods-first"),
    pytest.param(asks(cpu="9", **{"nvidia.com/gpu": "5"}), [], oom("cpu", 9000, 0, 8000), id="cpu-before-gpus"),
    pytest.param(asks(**{"example.com/fpga": "1"}), [], None, id="an-extended-resource-the-node-lacks-is-not-checked"),
    pytest.param(asks(**{"hugepages-2Mi": "2Mi"}), [], oom("hugepages-2Mi", 2 * 2**20, 0, 0), id="hugepages-the-node-lacks"),
    pytest.param(asks(**{"ephemeral-storage": "1Gi"}), [], oom("ephemeral-storage", 2**30, 0, 0),
                 id="ephemeral-storage-the-node-lacks"),
])
def test_admit(pod, others, want):
    assert admit(pod, NODE, others) == want


@pytest.mark.integration
async def test_a_pod_past_its_nodes_cpu_fails_and_one_that_fits_once_room_is_freed_runs(cluster):
    # the test node has 8 CPUs; the pods skip the scheduler (bound to it at creation)
    def create(name: str, cpu: str) -> None:
        c = container(command=[PY, "-c", "import time; time.sleep(600)"], resources={"requests": {"cpu": cpu}})
        cluster.store.create("pods", pod_manifest(name, c), namespace="default")

    def phase(name: str, want: str):
        return lambda: (p := cluster.pod("default", name)) and p["status"].get("phase") == want and p

    create("holds-six", "6")
    await cluster.wait_for(phase("holds-six", "Running"), 30, what="holds-six Running")
    create("wants-four", "4")
    rejected = await cluster.wait_for(phase("wants-four", "Failed"), 30, what="wants-four Failed")
    message = "Node didn't have enough resource: cpu, requested: 4000, used: 6000, capacity: 8000"
    assert (rejected["status"]["reason"], rejected["status"]["message"]) == ("OutOfcpu", REJECTED + message)
    events = [(e["type"], e["reason"], e["message"]) for e in cluster.store.list("events", namespace="default")["items"]
              if e["involvedObject"]["name"] == "wants-four"]
    assert events == [("Warning", "OutOfcpu", message)]
    cluster.store.delete("pods", "holds-six", "default", 0)
    await cluster.wait_for(lambda: cluster.pod("default", "holds-six") is None, 30, what="holds-six gone")
    create("wants-four-again", "4")
    started = await cluster.wait_for(lambda: (p := cluster.pod("default", "wants-four-again"))
                                     and p["status"].get("phase") not in (None, "Pending") and p, 30,
                                     what="wants-four-again started or rejected")
    assert started["status"]["phase"] == "Running", started["status"]
