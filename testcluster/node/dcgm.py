"""The simulated nodes' DCGM: what their GPUs are doing, and an exporter pod on each.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .devices import DeviceLedger, split_for_containers
from . import pod_resources
from . import process_tree
from .gpu_hardware import Gpu, driver_version, has_nvidia_gpus, node_gpus

log = logging.getLogger(__name__)

ACTIVITY_ANNOTATION = "gpuspawner.sim/gpu-activity"
DEPLOY_LABEL = "nvidia.com/gpu.deploy.dcgm-exporter"
NAMESPACE = "gpu-operator"
APP_LABEL = "nvidia-dcgm-exporter"
PORT = 9400
IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
HOUSEKEEPING_CPU = 0.1  # of one CPU: below it, a pod's processes launch no GPU work
CONTEXT_MIB = 512  # framebuffer a CUDA context takes on a held device (illustrative)


def parse_activity(value: Any) -> float | None:
    """The annotation's fraction, or None when it is absent or not a number in [0, 1]."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if 0.0 <= x <= 1.0 else None


def cpu_to_activity(cpu_fraction: float) -> float:
    """GPU activity from the share of one CPU a pod's processes used (see the module's note)."""
    return 0.0 if cpu_fraction < HOUSEKEEPING_CPU else min(cpu_fraction, 1.0)


class ActivityMeter:
    """Per pod: CPU seconds at the last sample -> activity over the interval since."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}  # pod key -> (time, cpu seconds)
        self.activity: dict[str, float] = {}

    def sample(self, now: float, cpu: Mapping[str, float | None]) -> None:
        """``cpu``: pod key -> CPU seconds of its process tree now (None: no process)."""
        for key in set(self._last) | set(self.activity):
            if key not in cpu:
                self._last.pop(key, None)
                self.activity.pop(key, None)
        for key, used in cpu.items():
            prev = self._last.get(key)
            if used is None:
                self._last.pop(key, None)
                self.activity[key] = 0.0
                continue
            self._last[key] = (now, used)
            if prev is not None and now > prev[0]:
                self.activity[key] = cpu_to_activity(max(used - prev[1], 0.0) / (now - prev[0]))


def _holders(pod: Mapping[str, Any], allocation: Mapping[str, list[str]]) -> dict[str, str]:
    """device id -> the container of ``pod`` holding it (the device manager's split)."""
    split = split_for_containers(pod, allocation, pod_resources.container_requests)
    out: dict[str, str] = {}
    for container, resources in split.items():
        for ids in resources.values():
            for i in ids:
                out.setdefault(i, container)
    return out


def _fields(activity: float, memory_mib: int, held: bool, whole_gpu: bool) -> dict[str, float]:
    used = min(CONTEXT_MIB, memory_mib) if held else 0
    f = {"DCGM_FI_DEV_FB_FREE": max(memory_mib - used, 0), "DCGM_FI_DEV_FB_USED": used,
         "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(activity, 6)}
    if whole_gpu:  # NVML reports no utilisation for a GPU in MIG mode
        f["DCGM_FI_DEV_GPU_UTIL"] = round(activity * 100)
    return f


class Dcgm:
    """The simulated DCGM of every node, its HTTP host engine, and the exporter pods."""

    def __init__(self, store, ledger: DeviceLedger, pod_pids: Callable[[str, str], list[int]], *,
                 interval: float = 1.0, host: str = "127.0.0.1",
                 read_stats: Callable[[], Mapping[int, process_tree.ProcStat]] = process_tree.read_stats):
        self.store = store
        self.ledger = ledger
        self.pod_pids = pod_pids
        self.interval = interval
        self.host = host
        self.read_stats = read_stats
        self.meter = ActivityMeter()
        self.address: str | None = None  # host:port of the host engine
        self._runner = None
        self._task: asyncio.Task | None = None

    # -- what DCGM reads ----------------------------------------------------

    def _pod(self, key: str) -> dict | None:
        ns, _, name = key.partition("/")
        try:
            return self.store.get("pods", name, namespace=ns)
        except Exception as e:
            if getattr(e, "code", None) == 404:
                return None
            raise

    def _activity(self, key: str, pod: Mapping[str, Any]) -> float:
        override = parse_activity(((pod.get("metadata") or {}).get("annotations") or {}).get(ACTIVITY_ANNOTATION))
        return override if override is not None else self.meter.activity.get(key, 0.0)

    # -- what a node has and who holds it (a node agent adds DRA devices: testcluster.nodeagent) --

    def gpus(self, node: Mapping[str, Any]) -> list[Gpu]:
        """The node's GPUs as DCGM enumerates them."""
        return node_gpus(node)

    def holder(self, node: str, device: str) -> str | None:
        """The key of the pod holding ``device`` of ``node``, if any."""
        return self.ledger.holder(node, device)

    def holders_of(self, key: str, pod: Mapping[str, Any]) -> dict[str, str]:
        """device id -> the container of the pod ``key`` that holds it."""
        return _holders(pod, self.ledger.allocation(key) or {})

    def _held_keys(self, node: str) -> set[str]:
        keys = set()
        for resource, ids in self.ledger.node_devices(node).items():
            if resource.startswith("nvidia.com/"):
                keys.update(k for k in (self.ledger.holder(node, i) for i in ids) if k)
        return keys

    def node_report(self, node: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON the host engine answers for one node."""
        name = (node.get("metadata") or {}).get("name") or ""
        pods: dict[str, tuple[dict, dict[str, str]]] = {}
        for key in self._held_keys(name):
            pod = self._pod(key)
            if pod is not None:
                pods[key] = (pod, self.holders_of(key, pod))

        def entity(ids: Iterable[str], memory: int, whole_gpu: bool) -> dict[str, Any]:
            holders, activity = [], 0.0
            for i in ids:
                key = self.holder(name, i)
                if key in pods:
                    pod, containers = pods[key]
                    meta = pod["metadata"]
                    holders.append({"pod": meta["name"], "namespace": meta.get("namespace") or "default",
                                    "container": containers.get(i, ""), "deviceId": i})
                    activity = max(activity, self._activity(key, pod))
            return {"fields": _fields(activity, memory, bool(holders), whole_gpu), "holders": holders}
        gpus = []
        for g in self.gpus(node):
            doc = self._gpu_doc(g)
            if g.instances:
                doc["instances"] = [dict(entity([mi.uuid], mi.memory_mib, False), gpuInstanceId=mi.gpu_instance_id,
                                         profile=mi.profile, uuid=mi.uuid) for mi in g.instances]
                doc.update(fields={}, holders=[])  # a GPU in MIG mode is watched per GPU instance
            else:
                doc.update(entity(g.plugin_ids, g.memory_mib, True))
            gpus.append(doc)
        return {"node": name, "driverVersion": driver_version(node), "gpus": gpus}

    @staticmethod
    def _gpu_doc(g: Gpu) -> dict[str, Any]:
        return {"index": g.index, "uuid": g.uuid, "device": g.device, "modelName": g.model,
                "pciBusId": g.pci_bus_id, "memoryMiB": g.memory_mib, "instances": []}

    # -- the periodic work: sample activity, keep the exporter pods ------------

    def dcgm_nodes(self) -> list[dict]:
        return [n for n in self.store.list("nodes")["items"] if has_nvidia_gpus(n)]

    def sample(self) -> None:
        """Measure every device-holding pod's activity over the interval since the last sample."""
        keys = set()
        for node in self.dcgm_nodes():
            keys |= self._held_keys(node["metadata"]["name"])
        pids = {k: self.pod_pids(*k.split("/", 1)) for k in keys}
        stats = self.read_stats() if any(pids.values()) else {}
        self.meter.sample(time.monotonic(), {k: process_tree.tree_cpu_seconds(p, stats) for k, p in pids.items()})

    def exporter_pod(self, node: str) -> dict[str, Any]:
        """The pod the GPU Operator's DaemonSet would create for ``node``."""
        source_root = str(Path(__file__).resolve().parents[2])  # the image "contains" this simulator
        env = [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "DCGM_EXPORTER_LISTEN", "value": f"$(POD_IP):{PORT}"},
            {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
            {"name": "DCGM_EXPORTER_INTERVAL", "value": str(int(self.interval * 1000))},
            {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": self.address or ""},
            {"name": "PYTHONPATH", "value": source_root},
        ]
        affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": f"{APP_LABEL}-", "namespace": NAMESPACE,
                         "labels": {"app": APP_LABEL, "app.kubernetes.io/managed-by": "gpu-operator"}},
            "spec": {
                "affinity": affinity,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": APP_LABEL, "image": IMAGE,
                                "command": [sys.executable, "-m", "testcluster.node.dcgm_exporter"],
                                "env": env,
                                "ports": [{"name": "metrics", "containerPort": PORT, "protocol": "TCP"}],
                                "readinessProbe": {"httpGet": {"path": "/health", "port": PORT},
                                                   "periodSeconds": 5}}],
            },
        }

    def reconcile_exporters(self) -> None:
        """One pod per node that should run the exporter; none elsewhere (DaemonSet-like)."""
        want = {n["metadata"]["name"] for n in self.dcgm_nodes()
                if ((n["metadata"].get("labels") or {}).get(DEPLOY_LABEL) or "true") != "false"}
        have: dict[str, list[dict]] = {}
        for pod in self.store.list("pods", namespace=NAMESPACE, label_selector=f"app={APP_LABEL}")["items"]:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") == "Failed":
                self._delete(pod)
                continue
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            node = terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
            have.setdefault(node, []).append(pod)
        for node, pods in have.items():
            for pod in pods[1:] if node in want else pods:
                self._delete(pod)
        for node in sorted(want - set(have)):
            self.store.create("pods", self.exporter_pod(node), namespace=NAMESPACE)

    def _delete(self, pod: dict) -> None:
        with contextlib.suppress(Exception):
            self.store.delete("pods", pod["metadata"]["name"], namespace=NAMESPACE)

    async def _loop(self) -> None:
        while True:
            try:
                self.sample()
                self.reconcile_exporters()
            except Exception:  # keep measuring: one bad tick must not end the simulated DCGM
                log.exception("simulated DCGM")
            await asyncio.sleep(self.interval)

    # -- the host engine ----------------------------------------------------------

    def node_obj(self, name: str) -> dict | None:
        try:
            return self.store.get("nodes", name)
        except Exception as e:
            if getattr(e, "code", None) == 404:
                return None
            raise

    async def serve(self) -> str:
        """Serve the host engine; returns host:port."""
        from aiohttp import web

        async def devices(request: web.Request) -> web.Response:
            node = self.node_obj(request.match_info["node"])
            if node is None:
                return web.json_response({"error": f"no node {request.match_info['node']}"}, status=404)
            return web.json_response(self.node_report(node))
        app = web.Application()
        app.router.add_get("/v1/nodes/{node}/devices", devices)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, 0).start()
        self.address = f"{self.host}:{self._runner.addresses[0][1]}"
        return self.address

    async def start(self) -> str:
        """Serve the host engine, create the exporter namespace, start the loop; returns host:port."""
        await self.serve()
        try:
            self.store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        except Exception as e:
            if getattr(e, "code", None) != 409:  # AlreadyExists: the cluster file made it
                raise
        self._task = asyncio.create_task(self._loop(), name="sim-dcgm")
        return self.address

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._runner is not None:
            await self._runner.cleanup()
