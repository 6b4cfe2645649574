"""``NodeAgent``: every node of a cluster file, on any API server, in one process.

It registers the nodes, keeps their leases and heartbeats, applies the file's other objects and
pods, and runs the pods the scheduler binds to its nodes as processes::

    async with NodeAgent("kubeconfig", "cluster.yaml") as agent:
        ...   # kubectl get nodes: Ready; pods bound to them run

``stop()`` kills every process it started; the objects stay on the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from pathlib import Path
from typing import Any

from testcluster.node import loader
from testcluster.node.devices import DeviceLedger

from .nodes import pulled_images, ready_status
from .apistore import ApiStore, EventWrites, PodWrites
from .autoscale import Autoscaler, NodeGroup
from .client import KNOWN, Client
from .dcgm import AgentDcgm
from .heartbeat import Heartbeats
from .informer import Informer
from .kubeletapi import KubeletApi, KubeletApiError, Tls
from .pods import AgentKubelet, PodFeed
from .register import Registered, Registrar

log = logging.getLogger(__name__)

WATCHED = ("configmaps", "secrets", "resourceclaims", "resourceslices")
LIST_CHUNK = 1000  # pods handed to the kubelet between two yields to the loop


def _allocatable(node: dict | None) -> Any:
    return ((node or {}).get("status") or {}).get("allocatable")


class NodeAgent:
    """The simulated nodes of ``cluster_file`` (or ``manifests``) on the API server of ``kubeconfig``."""

    def __init__(self, kubeconfig: str | Path, cluster_file: str | Path | None = None, *,
                 manifests: list[dict] | None = None, run_pods: bool = True, kubelet_port: int = 10250,
                 lease_interval: float = 10.0, status_interval: float = 300.0, max_rate: float = 200.0,
                 concurrency: int = 16, pod_subnet: str | None = None,
                 restart_backoff: tuple[float, float] = (10.0, 300.0), workdir: str | None = None,
                 dcgm_exporter: bool = False, dcgm_interval: float = 1.0, kubelet_api: bool = False,
                 kubelet_tls: Tls | None = None, image_sizes: dict[str, int] | None = None,
                 pull_bytes_per_second: float | None = None, node_groups: list[NodeGroup] | None = None):
        if (cluster_file is None) == (manifests is None):
            raise ValueError("give a cluster_file or manifests (one of them)")
        self.kubeconfig = kubeconfig
        self.cluster_file = cluster_file
        self.manifests = manifests
        self.run_pods = run_pods
        self.kubelet_port = kubelet_port
        self.concurrency = concurrency
        self.client = Client(kubeconfig, connections=concurrency * 2 + 16)
        self.heartbeats = Heartbeats(self.client, lease_interval=lease_interval, status_interval=status_interval,
                                     max_rate=max_rate, concurrency=concurrency, images=self.images)
        self.pod_writes = PodWrites(self.client, concurrency)
        self.event_writes = EventWrites(self.client)
        self.caches: dict[str, Informer] = {p: Informer(self.client, next(r for r in KNOWN.values() if r.plural == p))
                                            for p in WATCHED}
        self.store = ApiStore(self.caches, self.pod_writes, self.event_writes, self._pod_uid)
        self.kubelet = AgentKubelet(self.store, ledger=DeviceLedger(), run_pods=run_pods,
                                    api_url=self.client.server, restart_backoff=restart_backoff,
                                    pod_subnet=pod_subnet, workdir=workdir, image_sizes=image_sizes,
                                    pull_bytes_per_second=pull_bytes_per_second)
        self.dcgm: AgentDcgm | None = None
        if dcgm_exporter:
            if not run_pods:
                raise ValueError("the DCGM exporter pods run as processes: dcgm_exporter needs run_pods=True")
            self.dcgm = AgentDcgm(self.client, lambda: self.kubelet.node_objs, self.caches, lambda: self.pods,
                                  self.kubelet.ledger, self.kubelet.pod_pids, interval=dcgm_interval)
        self.kubelet_api: KubeletApi | None = None
        if kubelet_api or kubelet_tls is not None:
            self.kubelet_api = KubeletApi(self.kubelet, self._informer_pod, port=kubelet_port,
                                          tls=kubelet_tls or self._kubeconfig_tls(),
                                          workdir=f"{self.kubelet.workdir}/kubelet-api")
        self.registered: Registered | None = None
        self.ours: set[str] = set()  # the names of the agent's nodes (the file's, then the autoscaler's)
        self.autoscaler = Autoscaler(self.client, node_groups, self.add_node) if node_groups else None
        self.feed: PodFeed | None = None
        self.pods: Informer | None = None
        self.node_informer: Informer | None = None
        self.load_seconds: float | None = None
        self._tasks: list[asyncio.Task] = []
        self._node_updates: asyncio.Queue[dict] = asyncio.Queue()
        self._image_counts: dict[str, int] = {}
        self._listing: list[dict] = []
        self._seen_while_listing: set[str] = set()
        self.pods_synced = asyncio.Event()

    # -- what the nodes report ----------------------------------------------------------

    @property
    def node_names(self) -> list[str]:
        return list(self.registered.nodes) if self.registered else []

    def images(self, node: str) -> list[dict]:
        """``status.images``: the file's, then those the node pulled for its pods."""
        mine = {img for n, img in self.kubelet.pulled if n == node}
        have = list((self.registered.images.get(node) if self.registered else None) or [])
        named = {name for i in have for name in i.get("names") or []}
        return have + pulled_images({i for i in mine if i not in named}, self.kubelet.image_size)

    def _pod_uid(self, key: str) -> str | None:
        w = self.kubelet.workers.get(key)
        if w is not None:
            return w.pod["metadata"].get("uid")
        pod = self.kubelet.static.get(key) or (self.pods.items.get(key) if self.pods else None)
        return (pod or {}).get("metadata", {}).get("uid")

    def _informer_pod(self, namespace: str, name: str) -> dict | None:
        key = f"{namespace}/{name}"
        return self.kubelet.static.get(key) or (self.pods.items.get(key) if self.pods else None)

    def _kubeconfig_tls(self) -> Tls:
        """Without a control plane's cluster.json: trust the kubeconfig's CA for client
        certificates (one CA signs everything in many clusters); the serving CA is made here."""
        ca = self.client.config.get("ca")
        if not ca:
            raise KubeletApiError("the kubelet API needs the CA that signs the API server's kubelet client "
                             "certificate: give kubelet_tls (or --cluster-info), or a kubeconfig with "
                             "certificate-authority(-data)")
        path = Path(self.kubelet.workdir) / "kubeconfig-ca.crt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ca)
        return Tls(str(path))

    # -- lifecycle ------------------------------------------------------------------------

    def _load(self) -> loader.Manifests:
        if self.manifests is not None:
            return loader.load_objects(self.manifests)
        return loader.load_file(self.cluster_file)

    async def start(self) -> None:
        t0 = time.perf_counter()
        manifests = await asyncio.to_thread(self._load)  # a file of 5,000 nodes parses for seconds
        await self.client.open()
        try:
            await self._start(manifests)
        except BaseException:
            await self.stop()
            raise
        self.load_seconds = time.perf_counter() - t0

    async def _start(self, manifests: loader.Manifests) -> None:
        self._spawn(self.pod_writes.run(), "pod-writes")
        self._spawn(self.event_writes.run(), "event-writes")
        # each node's heartbeats start once it is registered: registering 1,000s takes longer than
        # the node lifecycle controller waits for a lease
        self._spawn(self.heartbeats.run(), "heartbeats")
        if self.kubelet_api is not None:
            await self.kubelet_api.start()  # before the nodes say where their kubelet listens
        self.registered = await Registrar(self.client, manifests, kubelet_port=self.kubelet_port,
                                          concurrency=self.concurrency, on_node=self._registered).run()
        ours = self.ours
        ours.update(self.registered.nodes)
        log.info("registered %d nodes and %d pods in %.1f s", len(ours), len(self.registered.loaded_pods),
                 self.registered.seconds)
        if self.run_pods:
            await asyncio.to_thread(lambda: self.kubelet.isolation)  # the check runs processes
        # a node may claim 100,000s of devices, and a file 100,000s of bound pods: off the loop
        await asyncio.to_thread(self.kubelet.set_nodes, list(self.registered.nodes.values()))
        await asyncio.to_thread(self.kubelet.keep_loaded, self.registered.loaded_pods)
        log.info("devices of the nodes and loaded pods declared")
        # what was loaded lives as long as the agent: out of the collector's full passes (a
        # collection first would stall the loop for as long as the heap is big)
        gc.freeze()
        for p, inf in self.caches.items():
            self._spawn(inf.run(), f"watch-{p}")
        self.node_informer = Informer(self.client, KNOWN["Node"], on_event=self._on_node,
                                      keep=lambda n: n["metadata"]["name"] in ours)
        self._spawn(self.node_informer.run(), "watch-nodes")
        self._spawn(self._node_update_loop(), "node-updates")
        await asyncio.gather(*(i.synced.wait() for i in self.caches.values()), self.node_informer.synced.wait())
        log.info("watches synced")
        self.feed = PodFeed(self.client, self.kubelet, self.store, self.caches, ours, self.concurrency)
        self.pods = Informer(self.client, KNOWN["Pod"], on_list=self._on_pod_list, on_event=self._on_pod,
                             field_selector="spec.nodeName!=", keep=self.feed.mine)
        self._spawn(self.pods.run(), "watch-pods")
        self._spawn(self._image_loop(), "node-images")
        await self.pods_synced.wait()
        if self.dcgm is not None:
            await self.dcgm.start()
        if self.autoscaler is not None:
            self._spawn(self.autoscaler.run(), "autoscaler")

    async def add_node(self, file_node: dict) -> None:
        """Register one more node (a node group's, once started) and run the pods bound to it."""
        name = file_node["metadata"]["name"]
        manifests = await asyncio.to_thread(loader.load_objects, [file_node])
        # the agent takes the node's pods from the moment it exists: the scheduler may bind one at once
        self.ours.add(name)
        self.feed.nodes.add(name)

        def registered(node: dict) -> None:
            self.kubelet.node_event("ADDED", node)
            self._registered(node)
        added = await Registrar(self.client, manifests, kubelet_port=self.kubelet_port, concurrency=1,
                                on_node=registered).run()
        self.registered.nodes.update(added.nodes)
        self.registered.images.update(added.images)
        log.info("node %s registered", name)

    async def stop(self) -> None:
        """Kill every process the agent started; leaves the API server's objects as they are."""
        if self.autoscaler is not None:
            await self.autoscaler.stop()
        if self.dcgm is not None:
            with contextlib.suppress(Exception):
                await self.dcgm.stop()
        if self.feed is not None:
            await self.feed.stop()
        for t in self._tasks:
            if t.get_name() != "pod-writes":
                t.cancel()
        await self.heartbeats.stop()
        if self.kubelet_api is not None:
            with contextlib.suppress(Exception):
                await self.kubelet_api.stop()
        with contextlib.suppress(Exception):
            await self.kubelet.stop()
        # what the workers wrote last (a removal, a final status) goes out before the client closes
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(self.pod_writes.idle(), 5)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self.client.close()

    async def __aenter__(self) -> "NodeAgent":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    def _spawn(self, coro, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    # -- informers to the kubelet -------------------------------------------------------------

    def _registered(self, node: dict) -> None:
        # a node the file says is Unknown has a kubelet that stopped posting: no lease, no status
        if ready_status(node) != "Unknown":
            self.heartbeats.add(node)

    def _on_node(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.heartbeats.remove(name)
            self.kubelet.node_event("DELETED", node)
            return
        posted = self.heartbeats.nodes.get(name)
        if posted is not None and ready_status(node) != ready_status(posted):
            # the node lifecycle controller marked it Unknown (a late lease): the kubelet corrects it
            self.heartbeats.mark_dirty(name)
        if _allocatable(self.kubelet.node_objs.get(name)) == _allocatable(node):
            self.kubelet.node_objs[name] = node  # nothing for the device ledger to redo
        else:
            self._node_updates.put_nowait(node)

    async def _node_update_loop(self) -> None:
        while True:
            node = await self._node_updates.get()
            await asyncio.to_thread(self.kubelet.node_event, "MODIFIED", node)

    def _on_pod_list(self, items: list[dict]) -> None:
        self._listing = items
        self._spawn(self._hand_over_list(), "pods-listed")

    async def _hand_over_list(self) -> None:
        """The first list, in chunks: 100,000s of pods must not hold the loop."""
        items, self._listing = self._listing, []
        for i in range(0, len(items), LIST_CHUNK):
            for p in items[i:i + LIST_CHUNK]:
                key = f"{p['metadata'].get('namespace')}/{p['metadata']['name']}"
                if key not in self._seen_while_listing:
                    self.feed.on_event("ADDED", p)
            await asyncio.sleep(0)
        self._seen_while_listing.clear()
        self.pods_synced.set()

    def _on_pod(self, kind: str, pod: dict) -> None:
        if not self.pods_synced.is_set():
            self._seen_while_listing.add(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
        self.feed.on_event(kind, pod)

    async def _image_loop(self) -> None:
        """A node that pulled a new image reports it in its next status post."""
        while True:
            await asyncio.sleep(2)
            counts: dict[str, int] = {}
            for node, _ in list(self.kubelet.pulled):
                counts[node] = counts.get(node, 0) + 1
            for node, n in counts.items():
                if self._image_counts.get(node) != n:
                    self.heartbeats.mark_dirty(node)
            self._image_counts = counts

    # -- for tests ---------------------------------------------------------------------------

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait until every queued pod write went out."""
        await asyncio.wait_for(self.pod_writes.idle(), timeout)
