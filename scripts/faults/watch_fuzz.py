"""Random watch events against the capacity cache; at every checkpoint its counts must equal a recount.

    python -m scripts.faults.watch_fuzz                       # 1,000,000 events, in memory
    python -m scripts.faults.watch_fuzz --events 100000 --seed 3
    python -m scripts.faults.watch_fuzz --real --events 5000  # into Kubernetes' own API server

A seeded generator changes a small GPU cluster at random: pods created, bound, finished and
deleted (some with GPU init containers or ``spec.overhead``), nodes flapping Ready/NotReady,
cordoned and uncordoned, relabelled into another node group or GPU product, their GPU count
changed, deleted and re-created.  Between those, the API side drops the cache's watches, answers
a resume with ``410 Gone`` (its history is short, and 410s are injected), and the hub restarts
(a new cache lists from scratch).  Every ``--checkpoint`` events, once the cache has caught up,
its pools (nodes, total, free, most free on one node) must equal a recount of the objects from
scratch (``recount.py``).

In memory (the default), :class:`MemoryApi` stands in for ``CoreV1Api``: paged lists and
watches from a resourceVersion over the generator's own event log, so the cache runs its real
list/watch/resume/re-list loop and JSON parsing with no sockets; that is fast enough for a
million events.  With ``--real`` the same generator's writes go to the test cluster's kube-apiserver
(``testcluster.ControlPlane``) and the cache watches it through the fault proxy (``close_watches``,
an injected ``410`` on a watch).

Exit status: 0 when every checkpoint agreed, 1 otherwise (the differences are printed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuspawner.capacity.cache import CapacityCache  # noqa: E402
from gpuspawner.capacity.config import CapacityConfig  # noqa: E402
from scripts.faults import scenario  # noqa: E402
from scripts.faults.recount import counted, differences, recount  # noqa: E402

GKE = "cloud.google.com/gke-nodepool"
GROUPS = ("a100", "h100", "t4", "spot")
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4")
RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu", "nvidia.com/gpu", "amd.com/gpu")
NAMESPACES = ("jhub", "batch")


# ---------------------------------------------------------------------------------------------
# the generator: a small cluster changed at random, as wire-format objects


@dataclass
class Mix:
    """Relative weights of what happens next."""

    pod_create: float = 22
    pod_bind: float = 18
    pod_finish: float = 6
    pod_terminate: float = 5
    pod_delete: float = 14
    node_ready_flap: float = 8
    node_cordon: float = 5
    node_relabel: float = 4
    node_resize: float = 3
    node_delete: float = 2
    node_create: float = 3
    cpu_pod: float = 4  # pods without GPUs: must change nothing
    # faults on the API side, per event
    drop_watch: float = 1.5
    gone: float = 0.5
    restart: float = 0.05


@dataclass
class World:
    """The cluster the generator keeps: objects by key, and what each write did."""

    rnd: random.Random
    nodes_max: int = 24
    pods_max: int = 160
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: dict[str, dict] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i in range(self.nodes_max * 3 // 4):
            self.nodes[f"n{i:02d}"] = self._node(f"n{i:02d}")

    # -- objects --
    def _node(self, name: str) -> dict:
        r = self.rnd
        k = r.randrange(len(GROUPS))
        resource = RESOURCES[k]
        labels = {"kubernetes.io/hostname": name, GKE: GROUPS[k]}
        if resource == "amd.com/gpu":
            labels["amd.com/gpu.product-name"] = "AMD-Instinct-MI300X"
        else:
            labels["nvidia.com/gpu.product"] = PRODUCTS[k % len(PRODUCTS)]
            labels["nvidia.com/cuda.driver-version.full"] = r.choice(("535.183.01", "570.172.08"))
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {
                "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", resource: str(r.choice((1, 2, 4, 8)))},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def _pod(self, name: str, namespace: str, gpus: int) -> dict:
        r = self.rnd
        resource = r.choice(("nvidia.com/gpu", "nvidia.com/gpu", "amd.com/gpu"))
        limits = {"cpu": "1"}
        if gpus:
            limits[resource] = str(gpus)
        spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]}
        roll = r.random()
        if gpus and roll < 0.1:  # a GPU init container larger than the app's: the pod needs its peak
            spec["initContainers"] = [{"name": "init", "image": "busybox",
                                       "resources": {"limits": {resource: str(gpus + 1)}}}]
        elif gpus and roll < 0.15:
            spec["overhead"] = {resource: "1"}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
                "spec": spec, "status": {"phase": "Pending"}}

    # -- one random change: ("nodes"|"pods", "ADDED"|"MODIFIED"|"DELETED", object) --
    def step(self, mix: Mix) -> tuple[str, str, dict] | None:
        r = self.rnd
        ops = [(name, w) for name, w in vars(mix).items() if name not in ("drop_watch", "gone", "restart")]
        op = r.choices([o for o, _ in ops], weights=[w for _, w in ops])[0]
        return getattr(self, f"_{op}")()

    def _pod_create(self, gpus: int | None = None) -> tuple[str, str, dict] | None:
        if len(self.pods) >= self.pods_max:
            return self._pod_delete()
        r = self.rnd
        ns = r.choice(NAMESPACES)
        name = f"p{r.randrange(10**6):06d}"
        key = f"{ns}/{name}"
        if key in self.pods:
            return None
        obj = self._pod(name, ns, r.choice((1, 1, 2, 4)) if gpus is None else gpus)
        if r.random() < 0.3 and self.nodes:  # created bound (a static or DaemonSet-like pod)
            obj["spec"]["nodeName"] = r.choice(sorted(self.nodes))
            obj["status"]["phase"] = "Running"
        self.pods[key] = obj
        return "pods", "ADDED", obj

    def _cpu_pod(self) -> tuple[str, str, dict] | None:
        return self._pod_create(gpus=0)

    def _pick_pod(self, pred) -> tuple[str, dict] | None:
        keys = [k for k, p in self.pods.items() if pred(p)]
        if not keys:
            return None
        k = self.rnd.choice(keys)
        return k, self.pods[k]

    def _pod_bind(self) -> tuple[str, str, dict] | None:
        found = self._pick_pod(lambda p: not p["spec"].get("nodeName"))
        if found is None or not self.nodes:
            return self._pod_create()
        key, old = found
        new = json.loads(json.dumps(old))
        # any node, even a full or foreign one: the ledger never goes below 0 free
        new["spec"]["nodeName"] = self.rnd.choice(sorted(self.nodes) + ["gone-node"])
        new["status"]["phase"] = "Running"
        self.pods[key] = new
        return "pods", "MODIFIED", new

    def _pod_finish(self) -> tuple[str, str, dict] | None:
        found = self._pick_pod(lambda p: p["status"]["phase"] == "Running")
        if found is None:
            return None
        key, old = found
        new = json.loads(json.dumps(old))
        new["status"]["phase"] = self.rnd.choice(("Succeeded", "Failed"))
        self.pods[key] = new
        return "pods", "MODIFIED", new

    def _pod_terminate(self) -> tuple[str, str, dict] | None:
        found = self._pick_pod(lambda p: not p["metadata"].get("deletionTimestamp"))
        if found is None:
            return None
        key, old = found
        new = json.loads(json.dumps(old))
        new["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"  # still counted until gone
        self.pods[key] = new
        return "pods", "MODIFIED", new

    def _pod_delete(self) -> tuple[str, str, dict] | None:
        if not self.pods:
            return None
        key = self.rnd.choice(sorted(self.pods))
        return "pods", "DELETED", self.pods.pop(key)

    def _pick_node(self) -> tuple[str, dict] | None:
        if not self.nodes:
            return None
        name = self.rnd.choice(sorted(self.nodes))
        return name, json.loads(json.dumps(self.nodes[name]))

    def _node_ready_flap(self) -> tuple[str, str, dict] | None:
        found = self._pick_node()
        if found is None:
            return None
        name, new = found
        cond = new["status"]["conditions"][0]
        cond["status"] = self.rnd.choice(("False", "Unknown")) if cond["status"] == "True" else "True"
        self.nodes[name] = new
        return "nodes", "MODIFIED", new

    def _node_cordon(self) -> tuple[str, str, dict] | None:
        found = self._pick_node()
        if found is None:
            return None
        name, new = found
        if new["spec"].get("unschedulable"):
            new["spec"].pop("unschedulable")
        else:
            new["spec"]["unschedulable"] = True
        self.nodes[name] = new
        return "nodes", "MODIFIED", new

    def _node_relabel(self) -> tuple[str, str, dict] | None:
        found = self._pick_node()
        if found is None:
            return None
        name, new = found
        labels = new["metadata"]["labels"]
        if "nvidia.com/gpu.product" in labels and self.rnd.random() < 0.5:
            labels["nvidia.com/gpu.product"] = self.rnd.choice(PRODUCTS)  # another pool, same group
        else:
            labels[GKE] = self.rnd.choice(GROUPS)
        self.nodes[name] = new
        return "nodes", "MODIFIED", new

    def _node_resize(self) -> tuple[str, str, dict] | None:
        found = self._pick_node()
        if found is None:
            return None
        name, new = found
        alloc = new["status"]["allocatable"]
        gpu = next(k for k in alloc if "/" in k)
        alloc[gpu] = str(self.rnd.choice((0, 1, 2, 4, 8)))  # 0: the device plugin is down
        self.nodes[name] = new
        return "nodes", "MODIFIED", new

    def _node_delete(self) -> tuple[str, str, dict] | None:
        if len(self.nodes) <= 2:
            return None
        name = self.rnd.choice(sorted(self.nodes))
        return "nodes", "DELETED", self.nodes.pop(name)

    def _node_create(self) -> tuple[str, str, dict] | None:
        free = [f"n{i:02d}" for i in range(self.nodes_max) if f"n{i:02d}" not in self.nodes]
        if not free:
            return self._node_ready_flap()
        name = self.rnd.choice(free)
        self.nodes[name] = self._node(name)
        return "nodes", "ADDED", self.nodes[name]


# ---------------------------------------------------------------------------------------------
# an in-memory CoreV1Api: paged lists, watches from a resourceVersion, 410 Gone, dropped streams


class _Stream:
    """A watch response: one JSON line per event after ``rv``, until dropped; an ``ERROR`` 410
    event when the events it still needs have left the history (as the watch cache answers)."""

    def __init__(self, api: "MemoryApi", kind: str, rv: int) -> None:
        self.api, self.kind, self.rv = api, kind, rv
        self.status = 200
        self.content = self
        self.dropped = False
        self.gone = False

    async def read(self) -> bytes:
        return b""

    def release(self) -> None:
        self.api.streams.discard(self)

    def _gone(self) -> bytes:
        self.dropped = True
        status = {"kind": "Status", "code": 410, "reason": "Expired",
                  "message": f"too old resource version: {self.rv} ({self.api.first_rv})"}
        return (json.dumps({"type": "ERROR", "object": status}) + "\n").encode()

    async def readany(self) -> bytes:
        api = self.api
        while True:
            if self.dropped:
                return b""
            if self.gone or self.rv < api.first_rv - 1:
                return self._gone()
            lines = []
            for rv, kind, line in api.events_after(self.rv, 256):
                self.rv = rv
                if kind == self.kind:
                    lines.append(line)
                if len(lines) >= 64:
                    break
            if lines:
                return b"".join(lines)
            await api.wrote.wait()


class _Listing:
    def __init__(self, body: bytes) -> None:
        self.status = 200
        self._body = body

    async def read(self) -> bytes:
        return self._body

    def release(self) -> None:
        pass


class MemoryApi:
    """What the cache calls of ``CoreV1Api`` (``list_node``, ``list_pod_for_all_namespaces``,
    paged or with ``watch=True``), served from the world and a bounded event log.

    As the real API server: every page of a list is a snapshot at the first page's
    resourceVersion; a watch resumes strictly after its resourceVersion, or gets 410 once the
    history no longer holds what it needs."""

    def __init__(self, world: World, history: int = 2000, page: int = 50) -> None:
        self.world = world
        self.rv = 1
        self.history = history
        self._log: list[tuple[int, str, bytes]] = []  # contiguous resourceVersions
        self.page = page
        self.wrote = asyncio.Event()
        self.streams: set[_Stream] = set()
        self.kind_rv = {"nodes": 1, "pods": 1}
        self.lists = 0
        self.gone_next = 0
        self._snapshots: dict[str, tuple[int, list[dict]]] = {}

    @property
    def first_rv(self) -> int:
        """The oldest resourceVersion the history still holds (the next one when it is empty)."""
        return self._log[0][0] if self._log else self.rv + 1

    def record(self, kind: str, etype: str, obj: dict) -> None:
        self.rv += 1
        obj = dict(obj, metadata=dict(obj["metadata"], resourceVersion=str(self.rv)))
        self._log.append((self.rv, kind, (json.dumps({"type": etype, "object": obj}) + "\n").encode()))
        if len(self._log) > 2 * self.history:
            del self._log[: len(self._log) - self.history]
        self.kind_rv[kind] = self.rv
        self.wrote.set()
        self.wrote = asyncio.Event()

    def events_after(self, rv: int, limit: int) -> list[tuple[int, str, bytes]]:
        i = max(0, rv + 1 - self.first_rv)
        return self._log[i:i + limit]

    def drop_watches(self) -> int:
        n = len(self.streams)
        for s in list(self.streams):
            s.dropped = True
        self.wrote.set()
        self.wrote = asyncio.Event()
        return n

    async def list_node(self, **kw: Any) -> Any:
        return await self._call("nodes", kw)

    async def list_pod_for_all_namespaces(self, **kw: Any) -> Any:
        return await self._call("pods", kw)

    async def _call(self, kind: str, kw: dict) -> Any:
        await asyncio.sleep(0)
        if kw.get("watch"):
            stream = _Stream(self, kind, int(kw.get("resource_version") or 0))
            if self.gone_next > 0:
                self.gone_next -= 1
                stream.gone = True
            self.streams.add(stream)
            return stream
        token = kw.get("_continue")
        if not token:
            self.lists += 1
            objs = self.world.nodes if kind == "nodes" else self.world.pods
            token = f"{kind}-{self.lists}:0"
            # objects are replaced, never changed in place: a shallow copy is a snapshot
            self._snapshots[token.split(":")[0]] = (self.rv, [objs[k] for k in sorted(objs)])
        name, start = token.split(":")
        rv, items = self._snapshots[name]
        start_i = int(start)
        more = start_i + self.page < len(items)
        if not more:
            self._snapshots.pop(name, None)
        body = {"items": items[start_i:start_i + self.page],
                "metadata": {"resourceVersion": str(rv), "continue": f"{name}:{start_i + self.page}" if more else None}}
        return _Listing(json.dumps(body).encode())


# ---------------------------------------------------------------------------------------------
# the run


@dataclass
class Report(scenario.Report):
    events: int = 0
    checkpoints: int = 0
    dropped_watches: int = 0
    gone: int = 0
    restarts: int = 0
    lists: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        return (f"{self.events:,} events, {self.checkpoints:,} checkpoints, {self.dropped_watches:,} dropped watches, "
                f"{self.gone:,} x 410 Gone, {self.restarts:,} restarts, {self.lists:,} lists in {self.seconds:.1f} s: "
                + self.outcome("all counts equal a recount from scratch", "mismatches"))


def _new_cache(api: Any, config: CapacityConfig) -> CapacityCache:
    cache = CapacityCache(config, api_factory=lambda: api, page_size=50, backoff_base=0.001, backoff_cap=0.01,
                          rand=lambda: 0.5)
    cache._owns_api = False  # the API object outlives this cache (restarts)
    cache.start()
    return cache


async def _caught_up(cache: CapacityCache, target: dict[str, int], timeout: float) -> bool:
    """Wait until each informer has seen the newest write of its kind (or a list after it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = cache._informers  # the cache's own view of where each watch stands
        if all(infos[k].synced and int(infos[k].resource_version or 0) >= rv for k, rv in target.items()):
            return True
        await asyncio.sleep(0.001)
    return False


async def run_memory(events: int, *, seed: int = 1, checkpoint: int = 1000, mix: Mix | None = None,
                     history: int = 2000, timeout: float = 30.0) -> Report:
    """The in-memory run: :class:`World` -> :class:`MemoryApi` -> a real :class:`CapacityCache`."""
    mix = mix or Mix()
    rnd = random.Random(seed)
    world = World(random.Random(seed + 1))
    api = MemoryApi(world, history=history)
    config = CapacityConfig()
    report = Report()
    began = time.perf_counter()
    cache = _new_cache(api, config)
    try:
        while report.events < events:
            change = world.step(mix)
            if change is not None:
                api.record(*change)
                report.events += 1
            roll = rnd.random() * 100
            if roll < mix.drop_watch:
                report.dropped_watches += api.drop_watches() > 0
            elif roll < mix.drop_watch + mix.gone:
                api.gone_next += 1
                api.drop_watches()
                report.gone += 1
            elif roll < mix.drop_watch + mix.gone + mix.restart:
                await cache.stop()
                cache = _new_cache(api, config)
                report.restarts += 1
            if report.events % 64 == 0:
                await asyncio.sleep(0)  # let the cache read while the generator writes
            if report.events and report.events % checkpoint == 0 or report.events >= events:
                if not await _caught_up(cache, dict(api.kind_rv), timeout):
                    report.problems.append(f"after {report.events} events the cache did not catch up in {timeout:g} s: "
                                           f"{cache.health}")
                    break
                report.checkpoints += 1
                diff = differences(recount(world.nodes.values(), world.pods.values(), config),
                                   counted(cache.snapshot()))
                if diff:
                    report.problems.append(f"checkpoint after {report.events} events:\n  " + "\n  ".join(diff))
                    break
    finally:
        await cache.stop()
    report.lists = api.lists
    report.seconds = time.perf_counter() - began
    return report


async def run_real(events: int, control_plane: Any, *, seed: int = 1, checkpoint: int = 250,
                   mix: Mix | None = None, timeout: float = 60.0) -> Report:
    """The same generator written into a real control plane (``testcluster.ControlPlane``, started, with
    no nodes) by its admin, while the cache watches it through the fault proxy: ``close_watches``
    (dropped watches), an injected ``410`` on a watch, and hub restarts (a new cache)."""
    from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api
    from kubernetes_asyncio.config import load_kube_config

    from testcluster.faultproxy import FaultProxy
    from testcluster.nodeagent.client import ApiError, Client

    mix = mix or Mix()
    rnd = random.Random(seed)
    world = World(random.Random(seed + 1))
    admin = await Client(control_plane.kubeconfig).open()
    proxy = FaultProxy(control_plane.data_dir).start()
    conf = Configuration()
    await load_kube_config(config_file=str(proxy.kubeconfig), client_configuration=conf)
    res = {"nodes": await admin.resource("v1", "Node"), "pods": await admin.resource("v1", "Pod"),
           "namespaces": await admin.resource("v1", "Namespace"), "sa": await admin.resource("v1", "ServiceAccount")}
    config = CapacityConfig(dra_drivers=())
    clients: list[Any] = []

    def factory() -> Any:
        client = CoreV1Api(ApiClient(conf))
        clients.append(client)
        return client

    def new_cache() -> CapacityCache:
        c = CapacityCache(config, api_factory=factory, backoff_base=0.01, backoff_cap=0.05)
        c.start()
        return c

    report = Report()
    began = time.perf_counter()
    target: dict[str, int] = {"nodes": 0, "pods": 0}
    cache = None
    try:
        for ns in NAMESPACES:
            try:
                await admin.create(res["namespaces"], {"metadata": {"name": ns}})
            except ApiError as e:
                if e.code != 409:
                    raise
            while True:  # pods wait for the namespace's default ServiceAccount
                try:
                    await admin.get(res["sa"], "default", namespace=ns)
                    break
                except ApiError:
                    await asyncio.sleep(0.1)
        runtime_classes = await admin.resource("node.k8s.io/v1", "RuntimeClass")
        for resource in ("nvidia.com/gpu", "amd.com/gpu"):  # a pod's overhead comes from its RuntimeClass
            try:
                await admin.create(runtime_classes, {"metadata": {"name": _runtime_class(resource)}, "handler": "runc",
                                                     "overhead": {"podFixed": {resource: "1"}}})
            except ApiError as e:
                if e.code != 409:
                    raise
        for obj in world.nodes.values():
            target["nodes"] = max(target["nodes"], await _write_real(admin, res["nodes"], "ADDED", obj))
        cache = new_cache()
        while report.events < events:
            change = world.step(mix)
            if change is not None:
                kind, etype, obj = change
                target[kind] = max(target[kind], await _write_real(admin, res[kind], etype, obj))
                report.events += 1
            roll = rnd.random() * 100
            if roll < mix.drop_watch:
                report.dropped_watches += proxy.close_watches() > 0
            elif roll < mix.drop_watch + mix.gone:
                proxy.fail(410, 1, verb="watch")
                proxy.close_watches()
                report.gone += 1
            elif roll < mix.drop_watch + mix.gone + mix.restart:
                await cache.stop()
                cache = new_cache()
                report.restarts += 1
            if report.events and report.events % checkpoint == 0 or report.events >= events:
                # an informer whose kind did not change since catches up through a bookmark (about a
                # minute on kube-apiserver): a write to each kind brings every watch to the newest revision
                for kind in ("nodes", "pods"):
                    target[kind] = max(target[kind], await _touch(admin, res[kind]))
                if not await _caught_up(cache, target, timeout):
                    report.problems.append(f"after {report.events} events the cache did not catch up in "
                                           f"{timeout:g} s: {cache.health}")
                    break
                report.checkpoints += 1
                _, nodes = await admin.list(res["nodes"])
                _, pods = await admin.list(res["pods"])
                diff = differences(recount(nodes, pods, config), counted(cache.snapshot()))
                if diff:
                    report.problems.append(f"checkpoint after {report.events} events:\n  " + "\n  ".join(diff))
                    break
    finally:
        if cache is not None:
            await cache.stop()
        report.lists = proxy.counts("list")
        proxy.stop()
        for c in clients:
            await c.api_client.close()
        for kind in ("pods", "nodes"):  # the next user of the control plane finds none of them
            _, items = await admin.list(res[kind])
            for obj in items:
                try:
                    await admin.delete(res[kind], obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"),
                                       options={"gracePeriodSeconds": 0})
                except ApiError:
                    pass
        await admin.close()
    report.seconds = time.perf_counter() - began
    return report


async def _write_real(admin: Any, res: Any, etype: str, obj: dict) -> int:
    """One generator change as the admin's write; the revision it made (0: refused as stale or gone)."""
    from testcluster.nodeagent.client import ApiError, path_for

    meta = obj["metadata"]
    ns = meta.get("namespace")
    clean = {k: v for k, v in obj.items() if k != "metadata"}
    clean["metadata"] = {k: v for k, v in meta.items()
                         if k not in ("resourceVersion", "deletionTimestamp", "uid", "creationTimestamp")}
    overhead = (clean.get("spec") or {}).get("overhead")
    if overhead:  # kube-apiserver refuses a pod's overhead that no RuntimeClass defines
        clean["spec"] = {**clean["spec"], "runtimeClassName": _runtime_class(next(iter(overhead)))}
    try:
        if etype == "DELETED":
            await admin.delete(res, meta["name"], namespace=ns, options={"gracePeriodSeconds": 0})
            got = await admin.list(res, namespace=ns, page=1)
            return int(got[0])
        if etype == "ADDED":
            made = await admin.create(res, clean, namespace=ns)
        else:
            current = await admin.get(res, meta["name"], namespace=ns)
            clean["metadata"] = {**current["metadata"], **clean["metadata"]}
            made = await admin.request("PUT", path_for(res, ns, meta["name"]), body=clean)
        if clean.get("status") and clean["status"] != made.get("status"):
            made = await admin.request("PUT", path_for(res, ns, meta["name"], "status"), body={**made, "status": clean["status"]})
        return int(made["metadata"]["resourceVersion"])
    except ApiError as e:
        if e.code not in (404, 409, 422):
            raise
        return 0


def _runtime_class(resource: str) -> str:
    return "overhead-" + resource.replace(".", "-").replace("/", "-")


async def _touch(admin: Any, res: Any) -> int:
    """A label of some object of ``res`` changed: the newest revision its watches will see (0: none)."""
    _, items = await admin.list(res, page=1)
    if not items:
        return 0
    obj = items[0]
    made = await admin.patch(res, obj["metadata"]["name"], {"metadata": {"labels": {"fuzz-touch": str(time.time_ns())}}},
                             namespace=obj["metadata"].get("namespace"))
    return int(made["metadata"]["resourceVersion"])


async def _caught_up(cache: CapacityCache, target: dict[str, int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        infos = cache._informers
        if all(infos[k].synced and infos[k].error is None and int(infos[k].resource_version or 0) >= rv
               for k, rv in target.items()):
            return True
        await asyncio.sleep(0.01)
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=None, help="random events (default 1,000,000; 5,000 with --real)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoint", type=int, default=None, help="events between two recounts")
    parser.add_argument("--real", action="store_true",
                        help="written into Kubernetes' own control plane (the test cluster's, started here) and "
                             "watched through the fault proxy")
    args = parser.parse_args(argv)
    # the cache warns on every dropped watch and 410: thousands of lines that are the point here
    logging.getLogger("gpuspawner.capacity").setLevel(logging.ERROR)
    if args.real:
        report = _run_real_here(args.events or 5_000, args.seed, args.checkpoint or 250)
    else:
        report = asyncio.run(run_memory(args.events or 1_000_000, seed=args.seed, checkpoint=args.checkpoint or 1000))
    return scenario.finish(report)


def _run_real_here(events: int, seed: int, checkpoint: int) -> Report:
    """``run_real`` on a control plane of its own, stopped afterwards."""
    import tempfile

    from testcluster import ControlPlane

    with tempfile.TemporaryDirectory(prefix="watch-fuzz-") as d:
        cp = ControlPlane(Path(d)).start()
        try:
            return asyncio.run(run_real(events, cp, seed=seed, checkpoint=checkpoint))
        finally:
            cp.stop()


if __name__ == "__main__":
    sys.exit(main())
