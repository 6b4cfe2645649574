"""The simulated DCGM: GPUs from Node objects, activity from CPU use or the annotation, and the
exporter pods (DaemonSet-like) the node agent runs on the test cluster, serving NVIDIA's format."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuspawner.commands.testbed import default_cluster_file
from testcluster.node import devices
from testcluster.node.dcgm import ActivityMeter, cpu_to_activity, parse_activity
from testcluster.node.gpu_hardware import model_name, node_gpus
from testcluster.node.loader import load_file
from testcluster.node.process_tree import ProcStat, parse_stat, tree_cpu_seconds
from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN, ApiError
from tests.builders.nodeagent import running_with_ip, wait_for, write_cluster


def default_node(name: str) -> dict:
    return next(n for n in load_file(default_cluster_file()).nodes if n["metadata"]["name"] == name)


def test_full_gpus_have_the_device_plugins_ids_as_uuids():
    gpus = node_gpus(default_node("gke-gpu-a100-pool-7f3c-0"))
    assert [g.uuid for g in gpus] == [devices.device_id("gke-gpu-a100-pool-7f3c-0", "nvidia.com/gpu", i)
                                      for i in range(4)]
    assert {g.model for g in gpus} == {"NVIDIA A100-SXM4-40GB"} and gpus[3].device == "nvidia3"


def test_mig_instances_are_spread_over_the_nodes_gpus_larger_profiles_first():
    gpus = node_gpus(default_node("dgx-a100-01"))
    assert len(gpus) == 8  # nvidia.com/gpu.count
    assert [(i.gpu_instance_id, i.profile) for i in gpus[0].instances] == [
        (1, "3g.40gb"), (2, "2g.20gb"), (3, "1g.10gb"), (4, "1g.10gb")]
    all_ids = {i.uuid for g in gpus for i in g.instances}
    assert devices.device_id("dgx-a100-01", "nvidia.com/mig-1g.10gb", 15) in all_ids and len(all_ids) == 32


def test_time_sliced_replicas_are_aliases_of_their_gpu():
    node = {"metadata": {"name": "t4", "labels": {"nvidia.com/gpu.count": "2", "nvidia.com/gpu.replicas": "4"}},
            "status": {"allocatable": {"nvidia.com/gpu.shared": "8"}}}
    gpus = node_gpus(node)
    assert len(gpus) == 2
    assert gpus[1].aliases == tuple(devices.device_id("t4", "nvidia.com/gpu.shared", j) for j in range(4, 8))


def test_amd_and_cpu_nodes_have_no_dcgm_gpus():
    assert node_gpus(default_node("cpu-node-01")) == []
    assert node_gpus(default_node("ip-10-0-12-34.us-east-2.compute.internal")) == []


@pytest.mark.parametrize("product, name", [("NVIDIA-A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
                                           ("Tesla-T4", "Tesla T4"),
                                           ("NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA A100-SXM4-80GB")])
def test_model_name_from_gfd_product(product, name):
    assert model_name(product) == name


@pytest.mark.parametrize("value, parsed", [("0.8", 0.8), ("0", 0.0), ("1", 1.0), ("1.5", None), ("-0.1", None),
                                           ("busy", None), (None, None)])
def test_parse_activity(value, parsed):
    assert parse_activity(value) == parsed


def test_cpu_use_below_housekeeping_is_no_gpu_work():
    assert cpu_to_activity(0.05) == 0.0 and cpu_to_activity(0.5) == 0.5 and cpu_to_activity(1.7) == 1.0


def test_activity_meter_measures_cpu_over_the_interval_between_samples():
    m = ActivityMeter()
    m.sample(100.0, {"ns/a": 10.0, "ns/b": None})
    assert m.activity == {"ns/b": 0.0}  # a first sample has no interval yet
    m.sample(102.0, {"ns/a": 11.5, "ns/b": None})
    assert m.activity == {"ns/a": 0.75, "ns/b": 0.0}
    m.sample(104.0, {})  # pods that no longer hold GPUs are forgotten
    assert m.activity == {}


def test_proc_stat_parsing_and_process_trees():
    line = "4242 (python -c (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 30 20 20 0 1 0 0"
    assert parse_stat(line, ticks=100) == ProcStat(1, 2.5)  # (150 + 50 + 30 + 20) / 100
    stats = {10: ProcStat(1, 1.0), 11: ProcStat(10, 2.0), 12: ProcStat(11, 4.0), 20: ProcStat(1, 8.0)}
    assert tree_cpu_seconds([10], stats) == 7.0  # the kernel in its own session is a descendant
    assert tree_cpu_seconds([99], stats) is None


# -- on the test cluster: the node agent's exporter pods ------------------------------------------


def gpu_node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.memory": "15360"}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}}}


def cpu_node(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}}


def gpu_pod(name: str, node: str, code: str, annotations: dict | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": "python:3.12", "command": ["python", "-c", code],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def exporters(api, node: str, ready: bool = True) -> list[dict]:
    """The node's exporter pods (not being deleted); ``ready``: only those Ready with a pod IP."""
    _, pods = await api.client.list(KNOWN["Pod"], namespace="gpu-operator", label_selector="app=nvidia-dcgm-exporter")
    mine = [p for p in pods if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")]
    return [p for p in mine if running_with_ip(p) and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])] if ready else mine


async def engine_activity(ip: str, pod: str) -> float | None:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://{ip}:9400/metrics") as r:
            assert r.status == 200, await r.text()
            text = await r.text()
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    values = [x.value for x in families.get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", []) if x.labels.get("pod") == pod]
    return values[0] if values else None


@pytest.mark.integration
async def test_exporter_pods_serve_activity_that_follows_the_pods(api, tmp_path):
    gpu, busy, idle = api.name("gpu-a"), api.name("busy"), api.name("idle")
    cluster = write_cluster(tmp_path / "cluster.yaml", [gpu_node(gpu), cpu_node(api.name("cpu-a"))])
    async with NodeAgent(api.kubeconfig, cluster, dcgm_exporter=True, dcgm_interval=0.5):
        (exporter,) = await wait_for(lambda: exporters(api, gpu), "the exporter pod to be ready (its /health answers)",
                                     timeout=60)
        assert exporter["metadata"]["labels"]["app"] == "nvidia-dcgm-exporter"
        ip = exporter["status"]["podIP"]
        try:
            await api.client.create(KNOWN["Pod"], gpu_pod(busy, gpu, "while True: pass"), namespace="default")
            await api.client.create(KNOWN["Pod"], gpu_pod(idle, gpu, "import time; time.sleep(600)",
                                                           {"gpuspawner.sim/gpu-activity": "0.25"}), namespace="default")

            async def value(pod, ok):
                for _ in range(60):
                    v = await engine_activity(ip, pod)
                    if v is not None and ok(v):
                        return v
                    await asyncio.sleep(0.5)
                raise AssertionError(f"{pod}: activity {await engine_activity(ip, pod)}")
            assert await value(busy, lambda v: v > 0.3)  # a process computing makes its GPU busy
            assert await value(idle, lambda v: v == 0.25)  # the annotation overrides CPU use
            await api.client.patch(KNOWN["Pod"], idle, {"metadata": {"annotations": {"gpuspawner.sim/gpu-activity": "0"}}},
                                   namespace="default")
            await value(idle, lambda v: v == 0.0)  # ...live
            await api.client.patch(KNOWN["Pod"], idle, {"metadata": {"annotations": {"gpuspawner.sim/gpu-activity": None}}},
                                   namespace="default")
            await value(idle, lambda v: v == 0.0)  # without it: a sleeping process is idle
        finally:
            for name in (busy, idle):
                try:
                    await api.client.delete(KNOWN["Pod"], name, namespace="default", options={"gracePeriodSeconds": 0})
                except ApiError:
                    pass


@pytest.mark.integration
async def test_exporter_pods_are_kept_like_a_daemonset(api, tmp_path):
    gpu = api.name("gpu-a")
    cluster = write_cluster(tmp_path / "cluster.yaml", [gpu_node(gpu), cpu_node(api.name("cpu-a"))])
    async with NodeAgent(api.kubeconfig, cluster, dcgm_exporter=True, dcgm_interval=0.2):
        async def names():
            return [p["metadata"]["name"] for p in await exporters(api, gpu, ready=False)]

        (first,) = await wait_for(names, "the exporter pod", timeout=30)
        await api.client.delete(KNOWN["Pod"], first, namespace="gpu-operator")

        async def others():
            return [n for n in await names() if n != first]
        assert len(await wait_for(others, "a new exporter pod", timeout=30)) == 1
        await api.client.patch(KNOWN["Node"], gpu, {"metadata": {"labels": {"nvidia.com/gpu.deploy.dcgm-exporter": "false"}}})

        async def gone():
            return not await names()
        await wait_for(gone, "the exporter pod to go (label false)", timeout=30)
