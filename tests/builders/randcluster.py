"""Random GPU clusters from a seed, for the differential test of the capacity model against kube-scheduler.

A cluster is Nodes (device-plugin GPUs, MIG slices, time-sliced GPUs, DRA nodes with NVIDIA's
ResourceSlices), taints, cordons, and what other namespaces already hold there (pods bound to a
node, allocated ResourceClaims); a case is a server's request of its node and a GPU count.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tests.builders import GKE
from tests.builders.dra import gpu_device, mig_device, resource_slice

NVIDIA = "gpu.nvidia.com"
OTHER_NS = "sched-agrees-others"
#: on every node, slice and lease the test creates, so it deletes only its own
MARK = ("gpuspawner.io/test", "scheduler-agrees")
SELECTOR = "=".join(MARK)

# GPU Feature Discovery product labels and their DRA productName (NVIDIA's DRA driver)
PRODUCTS = (("NVIDIA-A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"), ("Tesla-T4", "Tesla T4"),
            ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"))
MIG_PROFILES = ("1g.10gb", "3g.40gb")
CPUS = ("3860m", "8", "16", "32", "64")
MEMORIES = ("24Gi", "64Gi", "128Gi", "256Gi")
EPHEMERAL = ("40Gi", "200Gi")
GROUPS = (None, "pool-a", "pool-b")


@dataclass
class Cluster:
    """What a case runs on: objects to create, in order."""

    seed: int
    nodes: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)  # each with ``status.allocation`` to write
    pods: list[dict[str, Any]] = field(default_factory=list)  # bound with ``spec.nodeName``


@dataclass(frozen=True)
class Profile:
    """What a GPU profile's server asks of its node (KubeSpawner trait values)."""

    slug: str
    cpu: float
    mem: str
    ephemeral: str | None = None

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cpu_guarantee": self.cpu, "mem_guarantee": self.mem}
        if self.ephemeral:
            out["extra_resource_guarantees"] = {"ephemeral-storage": self.ephemeral}
        return out


def _node(name: str, alloc: dict[str, str], labels: dict[str, str], taints: list[dict], cordoned: bool) -> dict:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", MARK[0]: MARK[1],
                                                  **labels}},
            "spec": spec, "status": {"capacity": dict(alloc), "allocatable": dict(alloc)}}


def _pod(name: str, node: str, cpu_m: int, mem_mi: int, extra: dict[str, str] | None = None,
         shape: str = "plain") -> dict:
    """A pod of another namespace bound to ``node`` that requests ``cpu_m`` and ``mem_mi`` in all, as
    kube-scheduler sums a pod (PodRequests): one container, or (``shape``) split between an app
    container and a sidecar, or with a regular init container whose peak is what counts."""
    limits = dict(extra or {})

    def container(cname: str, cpu: int, mem: int, gpus: bool = False, **more: Any) -> dict:
        res: dict[str, Any] = {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi", **(limits if gpus else {})}}
        if gpus and limits:
            res["limits"] = limits
        return {"name": cname, "image": "busybox", "resources": res, **more}

    spec: dict[str, Any] = {"nodeName": node, "automountServiceAccountToken": False}
    if shape == "sidecar":  # app + sidecar (an init container that keeps running) are summed
        spec["initContainers"] = [container("proxy", cpu_m // 4, mem_mi // 4, restartPolicy="Always")]
        spec["containers"] = [container("c", cpu_m - cpu_m // 4, mem_mi - mem_mi // 4, True)]
    elif shape == "init":  # a regular init container's peak counts when above the app's
        spec["initContainers"] = [container("setup", cpu_m, mem_mi)]
        spec["containers"] = [container("c", cpu_m // 3, mem_mi // 3, True)]
    else:
        spec["containers"] = [container("c", cpu_m, mem_mi, True)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": OTHER_NS}, "spec": spec}


def _claim(name: str, node: str, devices: list[str]) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": OTHER_NS},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": NVIDIA, "allocationMode": "ExactCount", "count": len(devices)}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": NVIDIA, "pool": node, "device": d} for d in devices]}}}}


def _taints(rng: random.Random) -> list[dict]:
    out = []
    if rng.random() < 0.35:
        out.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    if rng.random() < 0.05:
        out.append({"key": "dedicated", "value": "ml", "effect": "NoSchedule"})
    if rng.random() < 0.08:
        out.append({"key": "example.com/maintenance", "effect": "PreferNoSchedule"})
    return out


def cluster(seed: int, prefix: str = "n") -> Cluster:
    """A random cluster of 3 to 9 nodes; the same ``seed`` gives the same cluster."""
    rng = random.Random(seed)
    c = Cluster(seed)
    for i in range(rng.randint(3, 9)):
        name = f"{prefix}{i}"
        gfd, dra_product = rng.choice(PRODUCTS)
        group = rng.choice(GROUPS)
        labels = {GKE: group} if group else {}
        alloc = {"cpu": rng.choice(CPUS), "memory": rng.choice(MEMORIES), "ephemeral-storage": rng.choice(EPHEMERAL),
                 "pods": rng.choice(("110", "110", "110", "3"))}
        kind = rng.choices(("gpu", "shared", "mig", "dra", "dra-mig"), (4, 1, 1, 2, 1))[0]
        devices: list[str] = []  # DRA devices
        gpus: dict[str, int] = {}  # device-plugin resources
        if kind == "gpu":
            n = rng.choice((1, 2, 4, 8))
            gpus["nvidia.com/gpu"] = n
            labels.update({"nvidia.com/gpu.product": gfd, "nvidia.com/gpu.count": str(n)})
        elif kind == "shared":
            n, replicas = rng.choice((1, 2)), rng.choice((2, 4))
            gpus["nvidia.com/gpu"] = n * replicas
            labels.update({"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.count": str(n),
                           "nvidia.com/gpu.replicas": str(replicas),
                           "nvidia.com/gpu.sharing-strategy": "time-slicing"})
        elif kind == "mig":
            labels.update({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig.strategy": "mixed",
                           "nvidia.com/gpu.count": "1"})
            gpus["nvidia.com/mig-1g.10gb"] = rng.choice((2, 4, 7))
            if rng.random() < 0.5:
                gpus["nvidia.com/mig-3g.40gb"] = 1
        alloc.update({k: str(v) for k, v in gpus.items()})
        c.nodes.append(_node(name, alloc, labels, _taints(rng), rng.random() < 0.1))
        if kind in ("dra", "dra-mig"):
            n = rng.choice((1, 2, 4))
            if kind == "dra":
                devs = [gpu_device(f"gpu-{j}", dra_product) for j in range(n)]
            else:
                profile = rng.choice(MIG_PROFILES)
                devs = [mig_device(f"mig-{j}", profile) for j in range(n)]
            devices = [d["name"] for d in devs]
            rs = resource_slice(f"{name}-gpus", name, devs)
            rs["metadata"]["labels"] = dict([MARK])
            c.slices.append(rs)
        # what other namespaces already hold on the node
        cpu_m = _millis(alloc["cpu"])
        mem_mi = _mebi(alloc["memory"])
        pods_left = int(alloc["pods"])
        for j in range(rng.choice((0, 1, 1, 2, 3))):
            if pods_left <= 0:
                break
            use_cpu = int(cpu_m * rng.choice((0.1, 0.25, 0.5, 0.7, 0.95)))
            use_mem = int(mem_mi * rng.choice((0.1, 0.3, 0.6, 0.95)))
            cpu_m -= use_cpu
            mem_mi -= use_mem
            extra: dict[str, str] = {}
            for res, n in gpus.items():
                take = rng.randint(0, n)
                if take:
                    extra[res] = str(take)
                    gpus[res] = n - take
            shape = rng.choices(("plain", "sidecar", "init"), (6, 2, 2))[0]
            c.pods.append(_pod(f"{name}-p{j}", name, use_cpu, use_mem, extra, shape))
            pods_left -= 1
        if devices and rng.random() < 0.6:
            taken = devices[: rng.randint(1, len(devices))]
            c.claims.append(_claim(f"{name}-held", name, taken))
    return c


def profiles(rng: random.Random) -> list[Profile]:
    """Three GPU profiles with random CPU, memory and (sometimes) ephemeral-storage requests."""
    out = []
    for i in range(3):
        eph = rng.choice((None, None, "50Gi"))
        out.append(Profile(f"p{i}", rng.choice((0.5, 1, 1, 2, 2, 4, 8, 16, 30)),
                           rng.choice(("1G", "4G", "4G", "16G", "100G")), eph))
    return out


def _millis(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(q) * 1000


def _mebi(q: str) -> int:
    return int(q[:-2]) * 1024
