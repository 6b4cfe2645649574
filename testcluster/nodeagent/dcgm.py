"""DCGM on the agent's nodes: the simulated host engine and exporter pods of ``testcluster.node.dcgm``,
for device-plugin nodes and NVIDIA DRA nodes alike.

A DRA node's GPUs are the ``gpu.nvidia.com`` devices of its ResourceSlices (a GPU in MIG mode
is published as its MIG devices, grouped here under their ``parentUUID``), and a device's holder
is the pod its allocated claim is reserved for (``status.reservedFor``), in the containers that
use the claim.  The exporter pods are kept as the GPU Operator's DaemonSet keeps them, through
the API: one per GPU node not labelled ``nvidia.com/gpu.deploy.dcgm-exporter=false``.  A node
claiming more than ``MAX_GPUS`` GPUs (no real machine does) gets no DCGM.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Mapping

from testcluster.node.dcgm import APP_LABEL, DEPLOY_LABEL, NAMESPACE, Dcgm
from testcluster.node.devices import DeviceLedger
from testcluster.node.dra.nvidia import DRIVER
from testcluster.node.gpu_hardware import Gpu, MigInstance, has_nvidia_gpus
from testcluster.node.pod_resources import QuantityError, parse_quantity

from .client import KNOWN, ApiError, Client
from .informer import Informer

log = logging.getLogger(__name__)

MAX_GPUS = 1024
MEMO_SECONDS = 0.2
PODS = KNOWN["Pod"]


def _attr(device: Mapping[str, Any], name: str) -> Any:
    a = (device.get("attributes") or {}).get(name) or {}
    return next(iter(a.values()), None) if isinstance(a, Mapping) else None


def _mib(device: Mapping[str, Any]) -> int:
    try:
        return int(parse_quantity(((device.get("capacity") or {}).get("memory") or {}).get("value", "0")) / 2**20)
    except QuantityError:
        return 0


def dra_gpus(slices: list[Mapping[str, Any]]) -> list[Gpu]:
    """The NVIDIA GPUs a node's ResourceSlices publish, in index order.  Pure."""
    full: dict[str, Gpu] = {}
    mig: dict[str, list[tuple[Mapping[str, Any], str]]] = {}  # parent uuid -> [(device, its uuid)]
    for rs in slices:
        if (rs.get("spec") or {}).get("driver") != DRIVER:
            continue
        for d in (rs.get("spec") or {}).get("devices") or []:
            uuid, index = _attr(d, "uuid"), _attr(d, "index")
            if not uuid or index is None:
                continue
            if _attr(d, "type") == "mig" and _attr(d, "parentUUID"):
                mig.setdefault(_attr(d, "parentUUID"), []).append((d, uuid))
            elif _attr(d, "type") == "gpu":
                full[uuid] = Gpu(int(index), uuid, str(_attr(d, "productName") or "NVIDIA GPU"), _mib(d),
                                 f"00000000:{0x10 + int(index):02X}:00.0")
    gpus = list(full.values())
    for parent, devs in mig.items():
        first = devs[0][0]
        index = int(_attr(first, "index"))
        instances = tuple(MigInstance(n + 1, str(_attr(d, "profile") or ""), uuid, _mib(d))
                          for n, (d, uuid) in enumerate(devs))
        gpus.append(Gpu(index, parent, str(_attr(first, "productName") or "NVIDIA GPU"),
                        sum(i.memory_mib for i in instances), f"00000000:{0x10 + index:02X}:00.0",
                        instances=instances))
    return sorted(gpus, key=lambda g: g.index)


def dra_holders(node: str, slices: list[Mapping[str, Any]], claims: list[Mapping[str, Any]]
                ) -> dict[str, tuple[str, str]]:
    """device uuid -> (pod key, claim name) for the node's allocated NVIDIA devices.  Pure."""
    uuids = {}
    for rs in slices:
        spec = rs.get("spec") or {}
        if spec.get("driver") == DRIVER and spec.get("nodeName") == node:
            for d in spec.get("devices") or []:
                uuids[((spec.get("pool") or {}).get("name"), d.get("name"))] = _attr(d, "uuid")
    out: dict[str, tuple[str, str]] = {}
    for c in claims:
        st = c.get("status") or {}
        pods = [r for r in st.get("reservedFor") or [] if r.get("resource") == "pods"]
        if not pods:
            continue
        ns, name = c["metadata"].get("namespace"), c["metadata"]["name"]
        for r in ((st.get("allocation") or {}).get("devices") or {}).get("results") or []:
            uuid = uuids.get((r.get("pool"), r.get("device"))) if r.get("driver") == DRIVER else None
            if uuid:
                out[uuid] = (f"{ns}/{pods[0].get('name')}", name)
    return out


def claim_containers(pod: Mapping[str, Any], claim: str) -> list[str]:
    """The containers of ``pod`` that use the ResourceClaim named ``claim``.  Pure."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {s.get("name"): s.get("resourceClaimName") for s in status.get("resourceClaimStatuses") or []}
    refs = {rc.get("name") for rc in spec.get("resourceClaims") or []
            if (rc.get("resourceClaimName") or generated.get(rc.get("name"))) == claim}
    return [c.get("name", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
            if any(ref.get("name") in refs for ref in (c.get("resources") or {}).get("claims") or [])]


class AgentDcgm(Dcgm):
    """``Dcgm`` reading the agent's caches and writing the exporter pods through the API."""

    def __init__(self, client: Client, nodes: Callable[[], dict[str, dict]], caches: dict[str, Informer],
                 pods: Callable[[], Informer | None], ledger: DeviceLedger,
                 pod_pids: Callable[[str, str], list[int]], *, interval: float = 1.0):
        super().__init__(None, ledger, pod_pids, interval=interval)
        self.client = client
        self.nodes = nodes
        self.caches = caches
        self.pods = pods
        self._too_many: set[str] = set()
        self._dra_memo: dict[str, tuple[float, dict[str, tuple[str, str]]]] = {}

    def _slices(self, node: str) -> list[dict]:
        return [rs for rs in self.caches["resourceslices"].items.values()
                if (rs.get("spec") or {}).get("nodeName") == node]

    def _dra(self, node: str) -> dict[str, tuple[str, str]]:
        """``dra_holders`` of the node, worked out once per tick."""
        now = time.monotonic()
        got = self._dra_memo.get(node)
        if got is None or now - got[0] > MEMO_SECONDS:
            got = (now, dra_holders(node, self._slices(node), list(self.caches["resourceclaims"].items.values())))
            self._dra_memo[node] = got
        return got[1]

    def gpus(self, node: Mapping[str, Any]) -> list[Gpu]:
        name = node["metadata"]["name"]
        if name in self._too_many:
            return []
        gpus = super().gpus(node) if has_nvidia_gpus(node) else []
        return gpus + dra_gpus(self._slices(name))

    def holder(self, node: str, device: str) -> str | None:
        return self.ledger.holder(node, device) or self._dra(node).get(device, (None, ""))[0]

    def holders_of(self, key: str, pod: Mapping[str, Any]) -> dict[str, str]:
        out = super().holders_of(key, pod)
        for uuid, (holder, claim) in self._dra(pod["spec"].get("nodeName") or "").items():
            if holder == key:
                out[uuid] = next(iter(claim_containers(pod, claim)), "")
        return out

    def _held_keys(self, node: str) -> set[str]:
        return super()._held_keys(node) | {k for k, _ in self._dra(node).values()}

    def _pod(self, key: str) -> dict | None:
        inf = self.pods()
        return inf.items.get(key) if inf is not None else None

    def node_obj(self, name: str) -> dict | None:
        return self.nodes().get(name)

    def dcgm_nodes(self) -> list[dict]:
        out = []
        for n in self.nodes().values():
            name = n["metadata"]["name"]
            dp = has_nvidia_gpus(n)
            if dp and name not in self._too_many:
                try:
                    count = int(parse_quantity(n["status"]["allocatable"].get("nvidia.com/gpu", "0")))
                except QuantityError:
                    count = 0
                if count > MAX_GPUS:
                    self._too_many.add(name)
                    log.warning("node %s claims %d GPUs (more than %d): it gets no DCGM", name, count, MAX_GPUS)
            if name not in self._too_many and (dp or any(
                    (rs.get("spec") or {}).get("driver") == DRIVER for rs in self._slices(name))):
                out.append(n)
        return out

    def reconcile_exporters(self) -> None:
        """The exporter pods are kept through the API, in ``_reconcile``."""

    async def _reconcile(self) -> None:
        want = {n["metadata"]["name"] for n in self.dcgm_nodes()
                if ((n["metadata"].get("labels") or {}).get(DEPLOY_LABEL) or "true") != "false"}
        _, pods = await self.client.list(PODS, namespace=NAMESPACE, label_selector=f"app={APP_LABEL}")
        have: dict[str, list[dict]] = {}
        for pod in pods:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if (pod.get("status") or {}).get("phase") == "Failed":
                await self._remove(pod)
                continue
            terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            have.setdefault(terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0], []).append(pod)
        for node, on in have.items():
            for pod in on[1:] if node in want else on:
                await self._remove(pod)
        for node in sorted(want - set(have)):
            await self.client.create(PODS, self.exporter_pod(node), namespace=NAMESPACE)

    async def _remove(self, pod: dict) -> None:
        try:
            await self.client.delete(PODS, pod["metadata"]["name"], namespace=NAMESPACE)
        except ApiError as e:
            if e.code != 404:
                raise

    async def _loop(self) -> None:
        while True:
            try:
                self.sample()
                await self._reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep measuring: one bad tick must not end the simulated DCGM
                log.exception("DCGM of the node agent")
            await asyncio.sleep(self.interval)

    async def start(self) -> str:
        await self.serve()
        try:
            await self.client.create(KNOWN["Namespace"], {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": NAMESPACE}})
        except ApiError as e:
            if e.code != 409:
                raise
        self._task = asyncio.create_task(self._loop(), name="nodeagent-dcgm")
        return self.address or ""
