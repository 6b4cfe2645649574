"""The objects of the benchmarks' big GPU cluster, which ``realcluster.py`` applies to the real control plane.

Shared by ``benchmarks/capacity.py`` (the capacity cache alone) and ``benchmarks/hub.py``
(a real JupyterHub): 5,000 GPU nodes by default in 7 pools (A100, H100, T4 time-sliced, L4,
MIG mixed with two profiles, MI300X) with the labels GPU Feature Discovery and the clouds'
node groups write, drivers from four NVIDIA branches, and pods in several namespaces of which
a share hold GPUs. Imports nothing of the product.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

# (name, share of nodes, resource -> per-node count, labels)
POOLS: list[tuple[str, float, dict[str, int], dict[str, str]]] = [
    ("a100", 0.25, {"nvidia.com/gpu": 8}, {
        "cloud.google.com/gke-nodepool": "a100", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.memory": "81920", "nvidia.com/gpu.compute.major": "8", "nvidia.com/gpu.compute.minor": "0"}),
    ("h100", 0.15, {"nvidia.com/gpu": 8}, {
        "cloud.google.com/gke-nodepool": "h100", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"}),
    ("t4", 0.25, {"nvidia.com/gpu": 4}, {
        "eks.amazonaws.com/nodegroup": "gpu-t4", "nvidia.com/gpu.product": "Tesla-T4-SHARED",
        "nvidia.com/gpu.memory": "15360", "nvidia.com/gpu.replicas": "4"}),
    ("l4", 0.15, {"nvidia.com/gpu": 1}, {
        "kubernetes.azure.com/agentpool": "l4", "nvidia.com/gpu.product": "NVIDIA-L4",
        "nvidia.com/gpu.memory": "23034"}),
    ("mig", 0.12, {"nvidia.com/mig-1g.10gb": 16, "nvidia.com/mig-3g.40gb": 4}, {
        "karpenter.sh/nodepool": "mig", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/mig-1g.10gb.memory": "9728", "nvidia.com/mig-3g.40gb.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
        "nvidia.com/mig-3g.40gb.memory": "40192"}),
    ("mi300", 0.08, {"amd.com/gpu": 8}, {
        "karpenter.sh/nodepool": "mi300", "amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM",
        "amd.com/gpu.vram": "192G", "amd.com/gpu.driver-version": "6.8.5"}),
]
DRIVERS = [("535.183.01", "12.2"), ("550.127.05", "12.4"), ("570.172.08", "12.8"), ("580.95.05", "13.0")]
NAMESPACES = ["jhub", "ml-batch", "data", "web", "monitoring", "ci"]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# the label of the few A100 nodes whose pods run as processes: the hub benchmark's spawns go there
SPAWN_LABEL = "bench.gpuspawner.dev/spawns"


def make_node(i: int, rnd: random.Random) -> tuple[dict, dict[str, int]]:
    """Node ``i``: its pool drawn by the pools' shares, a random driver, 1% NotReady, 1% cordoned."""
    r = rnd.random()
    acc = 0.0
    for name, share, resources, labels in POOLS:
        acc += share
        if r <= acc:
            break
    driver, cuda = rnd.choice(DRIVERS)
    node_name = f"{name}-{i:05d}"
    all_labels = {
        "kubernetes.io/hostname": node_name, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": f"{name}-standard", "topology.kubernetes.io/zone": rnd.choice("abc"),
        **labels,
    }
    if not name.startswith("mi"):
        all_labels.update({
            "nvidia.com/cuda.driver-version.full": driver, "nvidia.com/cuda.runtime-version.full": cuda,
            "nvidia.com/cuda.driver.major": driver.split(".")[0], "nvidia.com/cuda.runtime.major": cuda.split(".")[0],
            "nvidia.com/gfd.timestamp": str(1_755_000_000 + i),
        })
    allocatable = {"cpu": "94", "memory": "1500Gi", "pods": "110", "ephemeral-storage": "1Ti",
                   **{k: str(v) for k, v in resources.items()}}
    ready = rnd.random() > 0.01
    obj = {
        "metadata": {"name": node_name, "labels": all_labels},
        "spec": {"unschedulable": rnd.random() < 0.01, "taints": [dict(GPU_TAINT)]},
        "status": {
            "capacity": allocatable, "allocatable": allocatable,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node_name}],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}],
            "nodeInfo": {"kubeletVersion": "v1.33.1", "containerRuntimeVersion": "containerd://1.7.27"},
        },
    }
    return obj, dict(resources)


def make_pod(i: int, node: str | None, resource: str | None, gpus: int, rnd: random.Random) -> dict:
    limits: dict[str, str] = {"cpu": "2", "memory": "8Gi"}
    if resource:
        limits[resource] = str(gpus)
    return {
        "metadata": {"name": f"pod-{i:06d}", "namespace": rnd.choice(NAMESPACES),
                     "labels": {"app": rnd.choice(["notebook", "worker", "api", "exporter"])}},
        "spec": {
            **({"nodeName": node} if node else {}),
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "quay.io/jupyter/pytorch-notebook:2025-06-02",
                            "resources": {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": limits},
                            "env": [{"name": "JUPYTERHUB_USER", "value": f"user{i}"}]}],
        },
    }


def cluster_objects(n_nodes: int, n_pods: int, gpu_share: float, seed: int, unbound_share: float = 0.02,
                    built: dict[str, Any] | None = None) -> Iterator[tuple[str, dict]]:
    """The cluster's objects as ``(plural, object)``, namespaces, then nodes, then pods;
    ``unbound_share`` of the pods are left Pending (no node). ``built`` gets ``gpu_pods``, ``nodes``
    and ``gpu_pod_names`` as they are made."""
    rnd = random.Random(seed)
    built = built if built is not None else {}
    built.update(gpu_pods=0, nodes=[], gpu_pod_names=[])
    for ns in NAMESPACES:
        yield "namespaces", {"metadata": {"name": ns}}
    nodes: list[tuple[str, dict[str, int]]] = []
    for i in range(n_nodes):
        obj, resources = make_node(i, rnd)
        yield "nodes", obj
        nodes.append((obj["metadata"]["name"], resources))
        built["nodes"].append(obj["metadata"]["name"])
    free = {name: dict(res) for name, res in nodes}
    for i in range(n_pods):
        resource, gpus = None, 0
        name, res = nodes[rnd.randrange(len(nodes))]
        if rnd.random() < gpu_share:
            resource = rnd.choice(sorted(res))
            gpus = rnd.choice([1, 1, 1, 2, 4])
            if free[name][resource] >= gpus:
                free[name][resource] -= gpus
                built["gpu_pods"] += 1
            else:
                resource, gpus = None, 0
        node = name if rnd.random() >= unbound_share else None
        pod = make_pod(i, node, resource, gpus, rnd)
        yield "pods", pod
        if resource and node:
            built["gpu_pod_names"].append((pod["metadata"]["namespace"], pod["metadata"]["name"]))
