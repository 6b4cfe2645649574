"""The builders and fakes the tests share, in one place.

* Kubernetes objects as the API server sends them (wire-format dicts): :func:`node`,
  :func:`gpu_node`, :func:`pod`, :func:`container`, GPU Feature Discovery labels
  (:data:`GFD_A100`, :data:`GFD_A100_40GB`, :data:`GFD_T4_470`); a GPU
  server's pod and its events as KubeSpawner's reflectors hold them (:func:`server_pod`,
  :func:`pod_event`);
* the capacity layer's views: :func:`node_view`, :func:`group_nodes`, :func:`pool_view`, :func:`snapshot`;
  offers built over them with the default CUDA rules (:func:`gpu_offers`; a pool mid driver
  upgrade: :func:`steered_pool`, :func:`driver_node`, :func:`old_driver_node`, :func:`new_driver_node`,
  :func:`steered_offers`, :data:`STEERED_PROFILE`, :data:`STEERED_POOL_ID`);
* :class:`FakeCache`, a stand-in for ``CapacityCache`` with the same reading surface;
* the hub side: :class:`MockUser` and :func:`make_spawner` (with the ``no_kube_client`` fixture of
  ``tests/conftest.py``, which replaces KubeSpawner's client setup);
* the fake NVML fixtures of ``tests/fixtures/nvml/`` (:func:`fake_pynvml`,
  :func:`require_samples`).

Everything has defaults that describe one ordinary GPU node or pool; a test passes what its
case is about.  Beside this module: ``tests.builders.dra`` (resource.k8s.io/v1 objects),
``tests.builders.sim`` (nodes, pods, storage objects and owner references for the simulated
cluster's controllers), ``tests.builders.kubelet`` (pods, containers and nodes for the simulated
kubelet, the real kubectl's environment, a pod's processes on the machine) and
``tests.builders.hubapi`` (the hub's REST models and DCGM series, for the culler).
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import pathlib
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from gpuspawner.capacity.model import DRIVER_LABELS, CapacitySnapshot, NodeView, PoolView, ScaleUp, Taint, pool_id
from gpuspawner.capacity.nodeimages import NodeImages

GKE = "cloud.google.com/gke-nodepool"
HOSTNAME = "kubernetes.io/hostname"
DRIVER_FULL, DRIVER_MAJOR = DRIVER_LABELS  # GFD: nvidia.com/cuda.driver-version.full, nvidia.com/cuda.driver.major
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"

#: hub config (jupyterhub_config.py text) with the GPU profile of a big notebook server: 8 CPUs and 32G,
#: more than the AKS T4 nodes of the fixture clusters hold (3.86 CPUs, 24Gi)
BIG_GPU_PROFILE_CONFIG = """
c.GPUSpawner.gpu_profiles = [{
    "slug": "gpu", "display_name": "GPU server",
    "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06",
                             "cpu_limit": 8, "mem_limit": "32G"},
    "cuda": "12.4", "max_gpus": 8,
}]
"""

GFD_A100 = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/cuda.driver-version.full": "570.172.08",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
}


# ---------------------------------------------------------------------------
# Kubernetes objects (wire format)


def node(
    name: str = "gpu-0",
    allocatable: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    *,
    ready: bool | str | None = True,
    unschedulable: bool = False,
    taints: list[dict] | None = None,
    capacity: dict[str, Any] | None = None,
    reason: str | None = None,
    message: str | None = None,
) -> dict:
    """A Node: ``ready`` True/False or a condition status ("Unknown"); None for no conditions.
    ``reason``/``message`` go on the Ready condition; ``capacity`` adds ``status.capacity``."""
    alloc = {"cpu": "32", "memory": "256Gi", **(allocatable or {})}
    status: dict[str, Any] = {"allocatable": alloc}
    if capacity is not None:
        status["capacity"] = {**alloc, **capacity}
    if ready is not None:
        cond: dict[str, Any] = {"type": "Ready", "status": ready if isinstance(ready, str) else str(ready)}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        status["conditions"] = [{"type": "MemoryPressure", "status": "False"}, cond]
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {HOSTNAME: name, **(labels or {})}},
        "spec": spec,
        "status": status,
    }


#: GPU Feature Discovery labels of a 4 x A100 40 GB node, and of a T4 node on driver 470
GFD_A100_40GB = {
    "nvidia.com/cuda.driver-version.full": "570.172.08",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "4",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
}
GFD_T4_470 = {
    "nvidia.com/cuda.driver-version.full": "470.256.02",
    "nvidia.com/cuda.runtime-version.full": "11.4",
    "nvidia.com/gpu.compute.major": "7",
    "nvidia.com/gpu.compute.minor": "5",
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.product": "Tesla-T4",
}


def gpu_node(name: str = "gpu-0", n: int = 4, labels: dict[str, str] | None = None, **kw: Any) -> dict:
    """A Node whose device plugin advertises ``n`` x ``nvidia.com/gpu``, GFD-labelled (default: A100 40 GB)."""
    return node(name, {"nvidia.com/gpu": str(n)}, GFD_A100_40GB if labels is None else labels, **kw)


def container(name: str = "c", requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    res: dict[str, Any] = {}
    if requests is not None:
        res["requests"] = requests
    if limits is not None:
        res["limits"] = limits
    return {"name": name, "image": "busybox", "resources": res, **extra}


def pod(
    name: str,
    gpus: int | dict[str, int] = 1,
    node_name: str | None = None,
    *,
    namespace: str = "jhub",
    phase: str = "Running",
    resource: str = "nvidia.com/gpu",
    containers: list[dict] | None = None,
    init_containers: list[dict] | None = None,
) -> dict:
    """A Pod whose one container asks for ``gpus`` of ``resource`` (limits, as KubeSpawner sets them)."""
    if containers is None:
        want = gpus if isinstance(gpus, dict) else ({resource: str(gpus)} if gpus else {})
        containers = [container("notebook", limits={"cpu": "1", **want})]
    spec: dict[str, Any] = {"containers": containers}
    if init_containers:
        spec["initContainers"] = init_containers
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": {"phase": phase},
    }


def server_pod(name: str, pool: str | None = None, *, namespace: str = "jhub", created: str | None = "2026-11-22T01:00:00Z",
               phase: str = "Pending", node: str | None = None, priority: int | None = None, uid: str | None = None,
               deleting: bool = False, conditions: Iterable[dict] = (), user: str | None = None,
               server_name: str = "", **status: Any) -> dict:
    """A GPU server's pod as KubeSpawner's pod reflector holds it: the pool it was pinned to in
    its ``gpuspawner.io/pool`` annotation, its scheduling state in ``status`` (extra keyword
    arguments: ``reason``, ``message``, ``containerStatuses`` ...); with ``user``, KubeSpawner's
    annotations naming the user and (``server_name``, when not the default server) the server."""
    annotations = {"gpuspawner.io/pool": pool} if pool else {}
    if user is not None:
        annotations["hub.jupyter.org/username"] = user
        if server_name:
            annotations["hub.jupyter.org/servername"] = server_name
    p: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "creationTimestamp": created,
                     "annotations": annotations},
        "spec": {},
        "status": {"phase": phase, "conditions": list(conditions), **status},
    }
    if node:
        p["spec"]["nodeName"] = node
    if priority is not None:
        p["spec"]["priority"] = priority
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-11-22T01:00:09Z"
    return p


def pod_event(reason: str, message: str, *, pod_name: str = "jupyter-alice", uid: str = "uid-jupyter-alice",
              type_: str = "Warning") -> dict:
    """A core/v1 Event about a server's pod, as KubeSpawner's event reflector holds it."""
    return {"reason": reason, "message": message, "type": type_,
            "involvedObject": {"kind": "Pod", "name": pod_name, "uid": uid}, "metadata": {"uid": f"ev-{reason}"}}


#: a pool the autoscaler creates from zero nodes, as an admin declares it (c.GPUSpawner.gpu_declared_pools)
DECLARED_H100 = {
    "resource": "nvidia.com/gpu",
    "product": "NVIDIA-H100-80GB-HBM3",
    "node_group_label": GKE,
    "node_group": "h100-spot",
    "taints": ["nvidia.com/gpu=present:NoSchedule"],
    "gpus_per_node": 8,
    "max_nodes": 2,
    "minutes": 6,
}


# pods whose fields have the wrong shapes (a reader of pods must never raise on them), by test id
MALFORMED_PODS: dict[str, dict[str, Any]] = {
    "wrong-types": {"metadata": "x", "status": {"conditions": 5, "containerStatuses": "abc"}},
    "odd-conditions": {"status": {"conditions": [None, 3, {"type": "PodScheduled", "status": "False", "message": 7}]}},
    "bad-failed-reason": {"status": {"phase": "Failed", "reason": 3}},
    "odd-container-statuses": {"status": {"containerStatuses": [
        {"state": "waiting"}, {"state": {"waiting": {"reason": None}}},
        {"image": 5, "state": {"waiting": {"reason": "ErrImagePull"}}}]}},
}


# ---------------------------------------------------------------------------
# capacity views


def node_view(
    name: str,
    allocatable: int = 8,
    free: int | None = None,
    driver: str | None = None,
    cuda: str | None = None,
    cc: str | None = None,
    *,
    hostname: str | None = None,
    gfd: str | None = None,
) -> NodeView:
    """One node of a pool; ``free`` defaults to all of it, ``hostname`` adds its hostname label,
    ``gfd`` the GPU Feature Discovery driver labels of ``driver``: ``"full"`` both the full version
    and the deprecated major, ``"old"`` the deprecated major only (GFD before v0.15.0)."""
    labels: list[tuple[str, str]] = [(HOSTNAME, hostname)] if hostname else []
    if driver and gfd in ("full", "old"):
        if gfd == "full":
            labels.append((DRIVER_FULL, driver))
        labels.append((DRIVER_MAJOR, driver.split(".")[0]))
    return NodeView(name, allocatable, allocatable if free is None else free, driver, cuda, cc, tuple(labels))


def group_nodes(group: str, count: int, gpus: int, driver: str | None = None, cuda: str | None = None,
                cc: str | None = None) -> tuple[NodeView, ...]:
    """``count`` nodes ``<group>-0``... of ``gpus`` free GPUs each, named by their hostname label."""
    return tuple(node_view(f"{group}-{i}", gpus, gpus, driver, cuda, cc, hostname=f"{group}-{i}") for i in range(count))


def pool_view(
    group: str | None = "a100",
    product: str | None = "NVIDIA-A100-SXM4-80GB",
    resource: str = "nvidia.com/gpu",
    *,
    id: str | None = None,
    node_views: Iterable[NodeView] = (),
    nodes: int | None = None,
    total: int | None = None,
    free: int | None = None,
    per_node: int | None = None,
    memory_mib: int | None = None,
    driver: str | None = None,
    cuda: str | None = None,
    scale_up: ScaleUp | None = None,
    taints: Iterable[Taint] = (),
    defining: Iterable[tuple[str, str]] | None = None,
    group_label: str = GKE,
    sharing: str = "none",
    replicas: int = 1,
) -> PoolView:
    """A pool as the capacity cache reports it.

    The counts follow ``node_views`` when given (nodes, GPUs, free, the most free on one node),
    else one node of 8 free GPUs; ``defining`` (the labels that pin a pod to the pool) defaults
    to the node-group label; ``group=None`` is a pool without a node group."""
    views = tuple(node_views)
    nodes = nodes if nodes is not None else (len(views) if views else 1)
    total = total if total is not None else (sum(v.allocatable for v in views) if views else 8)
    free = free if free is not None else (sum(v.free for v in views) if views else total)
    if per_node is None:
        per_node = max((v.free for v in views), default=0) if views else free
    if defining is None:
        defining = ((group_label, group),) if group is not None else ()
    return PoolView(
        id=id or pool_id(group, product, resource),
        resource=resource,
        product=product,
        memory_mib=memory_mib,
        node_group_label=group_label if group is not None else None,
        node_group=group,
        nodes=nodes,
        total=total,
        free=free,
        max_free_per_node=per_node,
        driver_version=driver,
        cuda_version=cuda,
        scale_up=scale_up,
        defining_labels=tuple(defining),
        taints=tuple(taints),
        node_views=views,
        sharing=sharing,
        replicas=replicas,
    )


def snapshot(*pools: PoolView, synced: bool = True, healthy: bool = True, error: str | None = None,
             age_seconds: float = 0.1, generation: int = 1) -> CapacitySnapshot:
    return CapacitySnapshot(pools=tuple(pools), synced=synced, age_seconds=age_seconds, generation=generation,
                            healthy=healthy, error=error)


def gpu_offers(profiles: Iterable[dict], *pools: PoolView, policy: str = "minor", synced: bool = True,
               **options: Any) -> dict:
    """``profiles.build_offers`` for GPU profile dicts over ``pools``, each image judged by the
    default CUDA rules under ``policy`` (``options``: ``admit_without_capacity``...)."""
    from gpuspawner.cuda import decide
    from gpuspawner.spawn.cuda_fit import pool_fit
    from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers

    specs = [GPUProfileSpec.from_config(d) for d in profiles]
    return build_offers(specs, snapshot(*pools, synced=synced), fit=lambda img, p: pool_fit(img, p, policy, decide),
                        **options)


#: a profile whose own image needs CUDA 12.4 and whose "cu114" choice runs on any driver since 470
STEERED_PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu114": {"display_name": "CUDA 11.4", "kubespawner_override": {"image": "pt:cu114"}, "cuda": "11.4"},
    }}},
}


def steered_pool(*nodes: NodeView, scale_up: ScaleUp | None = None) -> PoolView:
    """A100 nodes mid driver upgrade: ``driver_node("old", free, "470.82.01", "11.4")``,
    ``driver_node("new", free, "550.54.15", "12.4")``; the pool reports its lowest driver."""
    return pool_view(node_views=nodes, driver="470.82.01", cuda="11.4", scale_up=scale_up)


def driver_node(name: str, free: int, driver: str, cuda: str) -> NodeView:
    """An 8-GPU A100 node with a driver, found by its ``<name>.internal`` hostname."""
    return node_view(name, 8, free, driver, cuda, "8.0", hostname=f"{name}.internal")


STEERED_POOL_ID = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"  # the id of steered_pool(...)


def old_driver_node(free: int = 4) -> NodeView:
    """Node ``old``: driver 470 (CUDA 11.4), which CUDA 12.4 does not fit under any policy."""
    return driver_node("old", free, "470.82.01", "11.4")


def new_driver_node(free: int = 1) -> NodeView:
    """Node ``new``: driver 550 (CUDA 12.4)."""
    return driver_node("new", free, "550.54.15", "12.4")


def steered_offers(the_pool: PoolView, **profile: Any) -> dict:
    """The offers of :data:`STEERED_PROFILE` (with ``profile``'s keys over it) on ``the_pool``."""
    return gpu_offers([{**STEERED_PROFILE, **profile}], the_pool)


class FakeCache:
    """Stands in for ``CapacityCache``: serves snapshots of ``pools``, waits for no sync, and
    records reservations.  With ``reservations_count`` (the real cache's behaviour) GPUs
    reserved for a spawn are taken off their pool's free counts at once.  As the real cache,
    ``snapshot(max_age)`` serves the counts it held for the page while they are at most
    ``max_age`` old on ``clock`` (a list holding the time, which a test moves on)."""

    def __init__(self, *pools: PoolView, synced: bool = True, healthy: bool | None = None,
                 error: str | None = None, age_seconds: float = 0.1, generation: int = 1,
                 reservations_count: bool = True, clock: list[float] | None = None):
        self.pools = {p.id: p for p in pools}
        self.synced, self.error = synced, error
        self.healthy = (error is None and synced) if healthy is None else healthy
        self.age_seconds, self.generation = age_seconds, generation
        self.reservations_count = reservations_count
        self.reservations: dict[str, tuple[str, int]] = {}
        self.released: list[str] = []
        self.snapshots = 0
        self.max_ages: list[float] = []
        self.renewals = 0
        self._last: CapacitySnapshot | None = None
        self.clock = clock if clock is not None else [0.0]
        self._held: tuple[float, CapacitySnapshot] | None = None
        # which nodes hold which images, as the real cache counts them (fed by a test: ``update``)
        self.node_images = NodeImages()

    async def wait_synced(self, timeout: float) -> bool:
        return self.synced

    def held_age(self) -> float | None:
        return None if self._held is None else self.clock[0] - self._held[0]

    def snapshot(self, max_age: float = 0.0, renew: bool = False) -> CapacitySnapshot:
        """The pools as of now: the same pools object until a count changes, as the real cache's
        (the page's ``max_age`` is recorded in ``max_ages``, each ``renew`` in ``renewals``)."""
        self.snapshots += 1
        self.max_ages.append(max_age)
        self.renewals += bool(renew)
        age = self.held_age()
        if max_age > 0 and not renew and age is not None and age <= max_age:
            return self._held[1]
        snap = self._count()
        if max_age > 0:
            self._held = (self.clock[0], snap)
        return snap

    def _count(self) -> CapacitySnapshot:
        pools = []
        for p in self.pools.values():
            held = sum(n for pid, n in self.reservations.values() if pid == p.id) if self.reservations_count else 0
            if held:
                p = dataclasses.replace(p, free=max(p.free - held, 0),
                                        max_free_per_node=max(p.max_free_per_node - held, 0))
            pools.append(p)
        snap = snapshot(*pools, synced=self.synced, healthy=self.healthy, error=self.error,
                        age_seconds=self.age_seconds, generation=self.generation)
        # as the real cache's ledger: the same pools object until a count changes
        if self._last is not None and self._last.pools == snap.pools:
            snap = dataclasses.replace(snap, pools=self._last.pools)
        self._last = snap
        return snap

    def reserve(self, owner: str, pool_id: str, count: int, request: tuple[int, ...] | None = None) -> None:
        self.reservations[owner] = (pool_id, count)

    def track_requests(self, requests) -> bool:
        """The server requests the real cache would count fits for (recorded in ``tracked``)."""
        changed = set(requests) != getattr(self, "tracked", None)
        self.tracked = set(requests)
        return changed

    def release(self, owner: str) -> None:
        self.released.append(owner)
        self.reservations.pop(owner, None)


# ---------------------------------------------------------------------------
# the hub side


class MockUser:
    """What a spawner reads of JupyterHub's ``User``: name, id, url, groups, admin, spawners."""

    def __init__(self, name: str = "alice", *, id: int | None = None, groups: Iterable[str] = (),
                 admin: bool = False):
        self.name = name
        self.id = len(name) if id is None else id
        self.url = f"/user/{name}/"
        self.escaped_name = name
        self.groups = [SimpleNamespace(name=g) for g in groups]  # orm.Group objects have a name
        self.admin = admin
        self.spawners: dict[str, Any] = {}


def make_spawner(name: str = "alice", *, config: Any = None, user: Any = None, server: bool = True,
                 **traits: Any):
    """A ``GPUSpawner`` as JupyterHub builds one: from a traitlets ``Config`` (``config``, plus
    ``traits`` set on its ``GPUSpawner`` section), for ``user`` (default ``MockUser(name)``),
    with a ``Hub`` and, unless ``server=False``, a ``Server``.  Needs the ``no_kube_client``
    fixture (KubeSpawner makes its API client in ``__init__``)."""
    from jupyterhub.objects import Hub, Server
    from traitlets.config import Config

    from gpuspawner.hub.spawner import GPUSpawner

    config = Config(config) if config is not None else Config()
    for k, v in traits.items():
        config.GPUSpawner[k] = v
    user = user if user is not None else MockUser(name)
    spawner = GPUSpawner(config=config, user=user, hub=Hub())
    if server:
        spawner.server = Server(ip="127.0.0.1", port=8888, base_url=f"/user/{user.name}/")
    return spawner


def finding_ids(findings: Iterable[Any]) -> list[str]:
    """The sorted ids of doctor's findings."""
    return sorted(f.id for f in findings)


# ---------------------------------------------------------------------------
# NVML fixtures


def fake_pynvml(name: str):
    """A fresh fake ``pynvml`` module described by ``tests/fixtures/nvml/<name>.json``."""
    spec = importlib.util.spec_from_file_location("fake_pynvml", FIXTURES / "nvml" / "fake_pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make(name)


def require_samples() -> list[dict[str, str]]:
    """The real NVIDIA_REQUIRE_CUDA strings of the official nvidia/cuda images
    (read from the images' Dockerfiles in NVIDIA's container-images/cuda repository)."""
    with open(FIXTURES / "nvml" / "nvidia-require-cuda-samples.csv", newline="") as f:
        return list(csv.DictReader(f))
