"""``SimCluster``: the whole simulated cluster in one object.
Design notes: docs/simulated-cluster.md.
"""

from __future__ import annotations

import asyncio
import gc
import contextlib
import time
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import yaml

from testcluster.node import loader, timestamps
from testcluster.node.controller import MERGE, now_rfc3339
from testcluster.node.devices import DeviceLedger

from .errors import ApiError
from .dra.claim_controller import ResourceClaimController
from .garbage_collector import GarbageCollector
from .namespace_controller import NamespaceController
from .node_lease import NodeLeases
from .node_lifecycle import NodeLifecycleController
from .provisioner import HostPathProvisioner
from .pv_controller import PersistentVolumeController
from .volume_protection import VolumeProtectionController
from .plugins import MessageStyle
from .scheduler import Scheduler
from .store import Store


def default_cluster_file() -> Path:
    """The packaged demo cluster."""
    return Path(str(resources.files("gpuspawner") / "data" / "clusters" / "default.yaml"))


class SimCluster:
    """Store + API server + controllers + provisioner + scheduler + kubelet."""

    def __init__(self, cluster_file: str | Path | None = None, manifests: list[dict] | None = None, *,
                 host: str = "127.0.0.1", port: int = 0, run_pods: bool = True, stand_in: bool = False,
                 message_style: MessageStyle = MessageStyle(), restart_backoff: tuple[float, float] = (10.0, 300.0),
                 serve_http: bool = True, store: Store | None = None, pod_subnet: str | None = None,
                 dcgm_exporter: bool = False, dcgm_interval: float = 1.0, keep_timestamps: bool = False,
                 tls: bool = False, simulate_nodes: bool = True):
        if cluster_file is not None and manifests is not None:
            raise ValueError("give either cluster_file or manifests, not both")
        if dcgm_exporter and (stand_in or not run_pods):
            raise ValueError("the DCGM exporter pods run as processes: dcgm_exporter needs run_pods=True "
                             "and stand_in=False")
        self.cluster_file = cluster_file
        self.manifests = manifests
        self.host, self.port = host, port
        self.run_pods = run_pods
        self.stand_in = stand_in
        self.message_style = message_style
        self.restart_backoff = restart_backoff
        self.serve_http = serve_http
        # False: no kubelet and no node leases; another program stands in for the nodes over the
        # HTTP API (testcluster.nodeagent)
        self.simulate_nodes = simulate_nodes
        if dcgm_exporter and not simulate_nodes:
            raise ValueError("the DCGM exporter pods run on the simulated nodes: dcgm_exporter needs simulate_nodes")
        self.tls = tls  # serve HTTPS with a self-signed CA, which the kubeconfig carries (tls.py)
        self.pod_subnet = pod_subnet
        # keep the file's creationTimestamp and status times (a snapshot replays with its ages)
        self.keep_timestamps = keep_timestamps
        self.store = store or Store()
        self.apiserver = None
        self.ledger = DeviceLedger()
        self.scheduler: Scheduler | None = None
        self.node_lifecycle: NodeLifecycleController | None = None
        self.claim_controller: ResourceClaimController | None = None
        self.garbage_collector: GarbageCollector | None = None
        self.namespace_controller: NamespaceController | None = None
        self.pv_controller: PersistentVolumeController | None = None
        self.volume_protection: VolumeProtectionController | None = None
        self.provisioner: HostPathProvisioner | None = None
        self.node_leases: NodeLeases | None = None
        self.kubelet = None
        self.dcgm_exporter, self.dcgm_interval = dcgm_exporter, dcgm_interval
        self.dcgm = None  # sim/dcgm.py's Dcgm when dcgm_exporter: GPU activity and the exporter pods
        self.url: str | None = None
        self.load_seconds: float | None = None
        self._started = False

    # -- lifecycle --------------------------------------------------------

    def load(self) -> loader.Manifests:
        """Read and validate the cluster (raises ``loader.LoadError``)."""
        if self.manifests is not None:
            return loader.load_objects(self.manifests)
        return loader.load_file(self.cluster_file or default_cluster_file())

    async def start(self) -> str | None:
        """Load the cluster, start every component; returns the API server's URL."""
        if self._started:
            raise RuntimeError("SimCluster already started")
        from testcluster.node.kubelet import Kubelet

        t0 = time.perf_counter()
        apply(self.store, self.load(), keep_timestamps=self.keep_timestamps)
        self.load_seconds = time.perf_counter() - t0
        # a loaded cluster is long-lived: move it out of the cyclic collector's reach, whose full
        # passes over 100,000s of stored objects would otherwise stall the loop for seconds
        gc.collect()
        gc.freeze()
        self._started = True
        try:
            if self.serve_http:
                from .apiserver import ApiServer

                self.apiserver = ApiServer(self.store, self.host, self.port, tls=self.tls)
                self.url = await self.apiserver.start()
            self.node_lifecycle = NodeLifecycleController(self.store)
            await self.node_lifecycle.start()
            self.garbage_collector = GarbageCollector(self.store)
            await self.garbage_collector.start()
            self.namespace_controller = NamespaceController(self.store)
            await self.namespace_controller.start()
            self.pv_controller = PersistentVolumeController(self.store)
            await self.pv_controller.start()
            self.volume_protection = VolumeProtectionController(self.store)
            await self.volume_protection.start()
            self.provisioner = HostPathProvisioner(self.store)
            await self.provisioner.start()
            if self.simulate_nodes:
                self.node_leases = NodeLeases(self.store)
                await self.node_leases.start()
            self.claim_controller = ResourceClaimController(self.store)
            await self.claim_controller.start()
            if self.simulate_nodes:
                # the kubelet first: loaded pods take their devices before anything new is bound
                self.kubelet = Kubelet(self.store, ledger=self.ledger, run_pods=self.run_pods,
                                       stand_in=self.stand_in, api_url=self.url,
                                       restart_backoff=self.restart_backoff, pod_subnet=self.pod_subnet)
                await self.kubelet.start()
                if self.apiserver is not None:
                    self.apiserver.kubelet = self.kubelet  # pods/log, pods/exec, pods/attach
            self.scheduler = Scheduler(self.store, style=self.message_style)
            await self.scheduler.start()
            if self.dcgm_exporter:
                from testcluster.node.dcgm import Dcgm

                self.dcgm = Dcgm(self.store, self.ledger, self.kubelet.pod_pids, interval=self.dcgm_interval)
                await self.dcgm.start()
        except BaseException:
            await self.stop()
            raise
        return self.url

    async def stop(self) -> None:
        """Stop every component; kills every process the kubelet started."""
        for part in (self.dcgm, self.scheduler, self.kubelet, self.claim_controller, self.node_leases, self.provisioner,
                     self.volume_protection, self.pv_controller, self.namespace_controller, self.garbage_collector,
                     self.node_lifecycle):
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.stop()
        if self.apiserver is not None:
            with contextlib.suppress(Exception):
                await self.apiserver.stop()
        self.store.close_watchers()

    async def __aenter__(self) -> "SimCluster":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # -- clients ----------------------------------------------------------

    def kubeconfig(self) -> dict[str, Any]:
        if not self.url:
            raise RuntimeError("start the cluster (with serve_http=True) before asking for a kubeconfig")
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gpuspawner-sim", "cluster": self._kubeconfig_cluster()}],
            # over HTTPS kubectl asks for a user name unless the user has credentials: a bearer
            # token, which the simulated API server (it authenticates nobody) accepts as any other
            "users": [{"name": "gpuspawner-sim", "user": {"token": "gpuspawner-sim"} if self.tls else {}}],
            "contexts": [{"name": "gpuspawner-sim",
                          "context": {"cluster": "gpuspawner-sim", "user": "gpuspawner-sim",
                                      "namespace": "default"}}],
            "current-context": "gpuspawner-sim",
            "preferences": {},
        }

    def _kubeconfig_cluster(self) -> dict[str, Any]:
        cert = self.apiserver.serving_cert if self.apiserver is not None else None
        if cert is None:
            return {"server": self.url}
        return {"server": self.url, "certificate-authority-data": cert.ca_data}

    def write_kubeconfig(self, path: str | Path) -> Path:
        """Write a kubeconfig (no auth; plain HTTP, or HTTPS with the CA's data) that kubectl,
        kubernetes_asyncio and KubeSpawner accept."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(yaml.safe_dump(self.kubeconfig(), sort_keys=False))
        return p

    # -- helpers for tests and demos -----------------------------------------

    def set_node_ready(self, name: str, ready: bool | None) -> dict:
        """Set the node's Ready condition (True/False, or None for Unknown: the node stopped posting)."""
        node = self.store.get("nodes", name)
        status = {True: "True", False: "False", None: "Unknown"}[ready]
        reason = {True: "KubeletReady", False: "KubeletNotReady", None: "NodeStatusUnknown"}[ready]
        message = {True: "kubelet is posting ready status",
                   False: "container runtime network not ready: NetworkReady=false",
                   None: "Kubelet stopped posting node status."}[ready]
        now = now_rfc3339()
        conds = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
        conds.append({"type": "Ready", "status": status, "reason": reason, "message": message,
                      "lastHeartbeatTime": now, "lastTransitionTime": now})
        return self.store.patch("nodes", name, {"status": {"conditions": conds}}, MERGE, subresource="status")

    def cordon(self, name: str, unschedulable: bool = True) -> dict:
        """``kubectl cordon`` (``uncordon`` with ``unschedulable=False``)."""
        return self.store.patch("nodes", name, {"spec": {"unschedulable": True if unschedulable else None}}, MERGE)

    def add_node(self, manifest: dict) -> dict:
        """Add a node (validated like the cluster file's)."""
        m = loader.load_objects([dict(manifest, kind="Node", apiVersion="v1")], "add_node")
        return self.store.create("nodes", m.nodes[0])

    def logs(self, namespace: str, name: str, container: str | None = None) -> str:
        """The pod's log (kept in memory by the kubelet)."""
        if self.kubelet is None:
            raise RuntimeError("the cluster is not started")
        return self.kubelet.logs(namespace, name, container)

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
                       what: str = "condition") -> Any:
        """Poll ``predicate`` until it returns something truthy (returned); TimeoutError names ``what``."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
            await asyncio.sleep(interval)

    def pod(self, namespace: str, name: str) -> dict | None:
        try:
            return self.store.get("pods", name, namespace=namespace)
        except Exception as e:
            if getattr(e, "code", None) == 404:
                return None
            raise


def apply(store, manifests: loader.Manifests, *, keep_timestamps: bool = False) -> None:
    """Create the objects in the store: namespaces, nodes, other objects, pods.

    The store discards a pod's status on create (as the API server does), so
    a pod with a status in the file gets it back through ``pods/status``.
    An object the store refuses raises ``LoadError`` with the server's message.
    """
    now = store.now()
    restore = ("uid", "creationTimestamp") if keep_timestamps else ("uid",)

    def create(plural: str, obj: dict) -> dict:
        if not keep_timestamps:
            timestamps.restamp(plural, obj, now)
        try:
            return store.create(plural, obj, namespace=obj["metadata"].get("namespace"), restore=restore)
        except ApiError as e:
            raise _load_error(manifests.where.get(id(obj), "manifests"), e) from None

    for ns in manifests.namespaces:
        create("namespaces", ns)
    for n in manifests.nodes:
        timestamps.fill_node_conditions(n, now)
        create("nodes", n)
    for plural, obj in manifests.others:
        created = create(plural, obj)
        if plural == "resourceclaims" and obj.get("status"):
            # the server drops a new claim's status: an allocated claim gets it back through /status
            store.replace(plural, created["metadata"]["name"], dict(created, status=obj["status"]),
                          namespace=created["metadata"].get("namespace"), subresource="status")
    for p in manifests.pods:
        created = create("pods", p)
        status = p.get("status")
        if status:
            merged = dict(created.get("status") or {})
            merged.update(status)
            if merged.get("phase") == "Running":
                loader.fill_running(created, merged)
            store.replace("pods", created["metadata"]["name"], {"metadata": {}, "status": merged},
                          namespace=created["metadata"]["namespace"], subresource="status")


def _load_error(where: str, e: ApiError) -> loader.LoadError:
    """The API server's refusal, as the loader words errors: where, the field, the real message."""
    causes = (e.details or {}).get("causes") or []
    if not causes or not causes[0].get("field"):
        return loader.LoadError(where, None, f"the API server refuses it: {e.message}")
    first, rest = causes[0], causes[1:]
    text = first.get("message") or ""
    if rest:
        text += "; and " + "; ".join(f"{c.get('field')}: {c.get('message')}" for c in rest)
    return loader.LoadError(where, first["field"], text)
