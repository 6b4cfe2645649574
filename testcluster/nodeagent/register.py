"""Apply a cluster file to a real API server: namespaces, nodes (with status and lease), the
file's other objects (DRA objects, the node-scoped ResourceSlices as their DRA kubelet plugin
publishes them), then pods (bound ones keep the file's status).

Requests run ``concurrency`` at a time; a file's uids cannot be restored on a real API
server, so owner references to the file's objects are rewritten to the uids the server gave.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable, TypeVar

from testcluster.node import loader, timestamps

from . import nodes as N
from .client import KNOWN, ApiError, Client

log = logging.getLogger(__name__)

T = TypeVar("T")
NAMESPACES, NODES, PODS, LEASES = KNOWN["Namespace"], KNOWN["Node"], KNOWN["Pod"], KNOWN["Lease"]
SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink", "generation",
              "deletionTimestamp", "deletionGracePeriodSeconds")
SA_WAIT = 30.0  # seconds a pod waits for its namespace's default ServiceAccount
# The NodeTaint admission plugin (TaintNodesByCondition, on by default) puts this taint on every
# new Node; the node lifecycle controller lifts it once it has seen the node Ready
# (pkg/controller/nodelifecycle, doNoScheduleTaintingPass). The agent is up once that happened, as
# a cluster's nodes are: a file's pod created earlier gets a first verdict that names the taint,
# and a page read earlier offers nothing on the node.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
READY_WAIT = 60.0  # seconds the file's Ready nodes get to lose it


class RegisterError(Exception):
    """The API server refused an object of the file; the message names it and says why."""


@dataclass
class Registered:
    """What the agent registered: its nodes as the server has them, and the file's bound pods."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    loaded_pods: list[dict[str, Any]] = field(default_factory=list)
    slices: dict[str, list[str]] = field(default_factory=dict)  # node -> its ResourceSlices' names
    images: dict[str, list[dict]] = field(default_factory=dict)  # node -> the file's status.images
    seconds: float = 0.0


async def bounded(items: Iterable[T], fn: Callable[[T], Awaitable[Any]], concurrency: int) -> list[Any]:
    """``fn`` over ``items``, at most ``concurrency`` at a time; results in order."""
    sem = asyncio.Semaphore(concurrency)

    async def one(x: T) -> Any:
        async with sem:
            return await fn(x)
    return list(await asyncio.gather(*(one(x) for x in items)))


def clean(obj: dict[str, Any], uids: dict[str, str]) -> dict[str, Any]:
    """The object without server-set metadata, owner references pointing at the server's uids."""
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    for k in SERVER_SET:
        meta.pop(k, None)
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("uid") in uids:
            ref["uid"] = uids[ref["uid"]]
    return out


class Registrar:
    """Creates the file's objects; ``where`` names each object's place in the file for errors."""

    def __init__(self, client: Client, manifests: loader.Manifests, *, kubelet_port: int, concurrency: int = 16,
                 on_node: Callable[[dict], None] = lambda node: None):
        self.client = client
        self.on_node = on_node  # each node once registered with its lease (its heartbeats start)
        self.m = manifests
        self.kubelet_port = kubelet_port
        self.concurrency = concurrency
        self.uids: dict[str, str] = {}  # the file's uid -> the server's
        self.file_taints = {n["metadata"]["name"]: list((n.get("spec") or {}).get("taints") or [])
                            for n in manifests.nodes}
        self.out = Registered()

    def _where(self, obj: dict) -> str:
        return self.m.where.get(id(obj), f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}")

    def _remember(self, file_obj: dict, created: dict) -> None:
        old = (file_obj.get("metadata") or {}).get("uid")
        if old:
            self.uids[old] = created["metadata"]["uid"]

    async def run(self) -> Registered:
        t0 = time.perf_counter()
        await bounded(self.m.namespaces, self._namespace, self.concurrency)
        await bounded(self.m.nodes, self._node, self.concurrency)
        cluster = [(p, o) for p, o in self.m.others if p in ("deviceclasses", "resourceslices", "storageclasses",
                                                           "persistentvolumes", "priorityclasses")]
        rest = [x for x in self.m.others if x not in cluster]
        for group in (cluster, rest):
            await bounded(group, self._other, self.concurrency)
        await self._schedulable()
        await bounded(self.m.pods, self._pod, self.concurrency)
        self.out.seconds = time.perf_counter() - t0
        return self.out

    def _tainted(self) -> set[str]:
        """The registered nodes the file says are Ready that still carry the not-ready taint the
        file does not give them."""
        out = set()
        for name, node in self.out.nodes.items():
            if N.ready_status(node) == "True" and not any(
                    (t or {}).get("key") == NOT_READY_TAINT for t in self.file_taints.get(name, [])):
                out.add(name)
        return out

    async def _schedulable(self) -> None:
        """Wait until the node lifecycle controller lifted the not-ready taint off the file's Ready
        nodes: a list of all nodes every half second (not a read per node), usually just one."""
        waiting = self._tainted()
        deadline = time.monotonic() + READY_WAIT
        while waiting:
            _, items = await self.client.list(NODES)
            still = {n["metadata"]["name"] for n in items
                     if any((t or {}).get("key") == NOT_READY_TAINT for t in (n.get("spec") or {}).get("taints") or [])}
            waiting &= still
            if not waiting:
                return
            if time.monotonic() > deadline:
                log.warning("%d Ready nodes still carry %s after %.0f s (e.g. %s); the file's pods go on",
                            len(waiting), NOT_READY_TAINT, READY_WAIT, sorted(waiting)[0])
                return
            await asyncio.sleep(0.5)

    async def _create(self, obj: dict, namespace: str | None = None) -> tuple[dict, bool]:
        """(the server's object, True if this call created it); an existing one is read back."""
        res = await self.client.resource(obj.get("apiVersion") or "v1", obj.get("kind") or "")
        name = obj["metadata"]["name"]
        try:
            return await self.client.create(res, clean(obj, self.uids), namespace=namespace), True
        except ApiError as e:
            if e.code != 409:
                raise RegisterError(f"{self._where(obj)}: the API server refuses it: {e}") from None
        return await self.client.get(res, name, namespace=namespace), False

    async def _namespace(self, ns: dict) -> None:
        created, _ = await self._create(ns)
        self._remember(ns, created)

    async def _node(self, file_node: dict) -> None:
        name = file_node["metadata"]["name"]
        body = N.node_object(file_node, kubelet_port=self.kubelet_port)
        created, new = await self._create(body)
        status = body["status"]
        if not new or not (created.get("status") or {}).get("allocatable"):
            # registered before (an agent restarted), or the server kept no status on create
            patch = {"metadata": {"labels": body["metadata"].get("labels") or {}},
                     "spec": {"taints": (body.get("spec") or {}).get("taints")}}
            created = await self.client.patch(NODES, name, patch)
            created = await self.client.patch(NODES, name, {"status": status}, subresource="status")
        self._remember(file_node, created)
        self.out.nodes[name] = created
        self.out.images[name] = list((file_node.get("status") or {}).get("images") or [])
        try:
            await self.client.create(LEASES, N.lease(created), namespace=N.LEASE_NAMESPACE)
        except ApiError as e:
            if e.code != 409:
                raise RegisterError(f"{self._where(file_node)}: its Lease is refused: {e}") from None
        self.on_node(created)

    async def _other(self, item: tuple[str, dict]) -> None:
        plural, obj = item
        ns = obj["metadata"].get("namespace")
        if plural == "resourceslices":
            node = self.out.nodes.get(N.slice_node(obj) or "")
            if node is not None:
                obj = N.owned_slice(obj, node)
                self.out.slices.setdefault(node["metadata"]["name"], []).append(obj["metadata"]["name"])
        created, new = await self._create(obj, namespace=ns)
        self._remember(obj, created)
        if plural == "resourceclaims" and new and obj.get("status"):
            res = await self.client.resource("resource.k8s.io/v1", "ResourceClaim")
            await self.client.patch(res, created["metadata"]["name"], {"status": obj["status"]}, namespace=ns,
                                    subresource="status")

    async def _pod(self, pod: dict) -> None:
        ns = pod["metadata"]["namespace"]
        status = copy.deepcopy(pod.get("status") or {})
        body = dict(pod)
        body.pop("status", None)
        deadline = time.monotonic() + SA_WAIT
        while True:
            try:
                created, new = await self._create(body, namespace=ns)
                break
            except RegisterError as e:
                # the service account admission refuses pods until the namespace's controller
                # made its "default" ServiceAccount
                if "serviceaccount" not in str(e).lower() or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
        self._remember(pod, created)
        if not new:
            if (created.get("spec") or {}).get("nodeName"):
                self.out.loaded_pods.append(created)
            return
        if status and created["spec"].get("nodeName"):
            now = N.now_rfc3339()
            timestamps.restamp("pods", {"status": status}, now)
            merged = dict(created.get("status") or {}, **status)
            if merged.get("phase") == "Running":
                loader.fill_running(created, merged)
            try:
                created = await self.client.patch(PODS, created["metadata"]["name"], {"status": merged},
                                                  namespace=ns, subresource="status")
            except ApiError as e:
                raise RegisterError(f"{self._where(pod)}: its status is refused: {e}") from None
        if created["spec"].get("nodeName"):
            self.out.loaded_pods.append(created)
