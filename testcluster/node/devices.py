"""Device-plugin style device ids and their allocation to pods.  Pure, stdlib only.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

_NAMESPACE = uuid.UUID("6f1c1f9e-3c8e-5b7a-9a51-6a1d2b0c4e11")

NVIDIA_ENV = "NVIDIA_VISIBLE_DEVICES"
AMD_ENV = "GPUSPAWNER_SIM_AMD_DEVICES"


def is_device_resource(resource: str) -> bool:
    """Extended resources a device plugin serves (vendor-domain names such as
    ``nvidia.com/gpu``); not ``kubernetes.io/`` names nor hugepages."""
    if "/" not in resource:
        return False
    domain = resource.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def device_id(node: str, resource: str, index: int) -> str:
    """The id the vendor's plugin reports for device ``index`` of ``resource`` on ``node``."""
    u = uuid.uuid5(_NAMESPACE, f"{node}/{resource}/{index}")
    if resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/gpu."):
        return f"GPU-{u}"
    if resource.startswith("nvidia.com/mig-"):
        return f"MIG-{u}"
    if resource.startswith("amd.com/"):
        # PCI address form (bus numbers are illustrative)
        return f"0000:{(0xC1 + index * 0x10) % 0x100:02x}:00.0"
    return f"{resource.rsplit('/', 1)[-1]}-{u.hex[:12]}"


def amd_render_node(index: int) -> str:
    return f"/dev/dri/renderD{128 + index}"


def device_env(assigned: Mapping[str, Iterable[str]], node_devices: Mapping[str, list[str]] | None = None
               ) -> dict[str, str]:
    """Environment a container gets for its devices (resource -> ids)."""
    env: dict[str, str] = {}
    nvidia: list[str] = []
    amd: list[str] = []
    for resource in sorted(assigned):
        ids = list(assigned[resource])
        if resource.startswith("nvidia.com/"):
            nvidia += ids
        elif resource.startswith("amd.com/"):
            all_ids = (node_devices or {}).get(resource, [])
            amd += [amd_render_node(all_ids.index(i)) if i in all_ids else i for i in ids]
    if nvidia:
        env[NVIDIA_ENV] = ",".join(nvidia)
    if amd:
        env[AMD_ENV] = ",".join(amd)
    return env


class AllocationError(Exception):
    """Not enough free devices: the kubelet rejects the pod at admission."""

    def __init__(self, resource: str, requested: int, available: int):
        self.resource = resource
        self.requested = requested
        self.available = available
        # devicemanager.devicesToAllocate's wording
        super().__init__(
            f"Allocate failed due to requested number of devices unavailable for {resource}. "
            f"Requested: {requested}, Available: {available}, which is unexpected")


@dataclass
class _NodeDevices:
    ids: dict[str, list[str]] = field(default_factory=dict)  # resource -> ids in index order
    owner: dict[str, str] = field(default_factory=dict)  # device id -> pod key


class DeviceLedger:
    """Which pod holds which device, for every node.  Never hands one device to two pods."""

    def __init__(self) -> None:
        self._nodes: dict[str, _NodeDevices] = {}
        self._pods: dict[str, tuple[str, dict[str, list[str]]]] = {}  # pod key -> (node, resource -> ids)

    def set_node(self, node: str, capacity: Mapping[str, int]) -> None:
        """(Re)declare a node's device resources and counts; keeps current owners."""
        nd = self._nodes.setdefault(node, _NodeDevices())
        nd.ids = {r: [device_id(node, r, i) for i in range(int(n))]
                  for r, n in capacity.items() if is_device_resource(r) and int(n) > 0}

    def node_devices(self, node: str) -> dict[str, list[str]]:
        nd = self._nodes.get(node)
        return {r: list(v) for r, v in nd.ids.items()} if nd else {}

    def free(self, node: str, resource: str) -> list[str]:
        nd = self._nodes.get(node)
        if nd is None:
            return []
        return [i for i in nd.ids.get(resource, []) if i not in nd.owner]

    def holder(self, node: str, device: str) -> str | None:
        nd = self._nodes.get(node)
        return nd.owner.get(device) if nd else None

    def allocation(self, pod_key: str) -> dict[str, list[str]] | None:
        got = self._pods.get(pod_key)
        return {r: list(v) for r, v in got[1].items()} if got else None

    def allocate(self, pod_key: str, node: str, requests: Mapping[str, int]) -> dict[str, list[str]]:
        """Give the pod the lowest-index free devices of each device resource it requests.

        All or nothing: raises ``AllocationError`` and changes nothing when a
        resource is short.  Allocating again for the same pod returns what it holds.
        """
        if pod_key in self._pods:
            return self.allocation(pod_key) or {}
        nd = self._nodes.setdefault(node, _NodeDevices())
        picked: dict[str, list[str]] = {}
        for resource in sorted(requests):
            want = int(requests[resource])
            if want <= 0 or not is_device_resource(resource):
                continue
            free = self.free(node, resource)
            if len(free) < want:
                raise AllocationError(resource, want, len(free))
            picked[resource] = free[:want]
        for ids in picked.values():
            for i in ids:
                nd.owner[i] = pod_key
        self._pods[pod_key] = (node, picked)
        return {r: list(v) for r, v in picked.items()}

    def release(self, pod_key: str) -> None:
        got = self._pods.pop(pod_key, None)
        if not got:
            return
        node, picked = got
        nd = self._nodes.get(node)
        if nd is None:
            return
        for ids in picked.values():
            for i in ids:
                if nd.owner.get(i) == pod_key:
                    del nd.owner[i]


def split_for_containers(pod: Mapping[str, Any], assigned: Mapping[str, list[str]],
                         container_requests) -> dict[str, dict[str, list[str]]]:
    """Hand the pod's devices to its containers, as the device manager does.

    App containers and restartable (sidecar) init containers run together
    and get disjoint slices; a plain init container runs alone (after the
    sidecars declared before it started) and reuses devices no running
    container holds (``devicemanager``'s ``devicesToReuse``).
    ``container_requests(container) -> {resource: count}``.
    """
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    apps = spec.get("containers") or []
    out: dict[str, dict[str, list[str]]] = {}
    offset = {r: 0 for r in assigned}
    for c in inits:
        reqs = container_requests(c)
        mine: dict[str, list[str]] = {}
        for r, ids in assigned.items():
            n = int(reqs.get(r, 0))
            if n <= 0:
                continue
            if c.get("restartPolicy") == "Always":
                mine[r] = ids[offset[r]:offset[r] + n]
                offset[r] += n
            else:
                mine[r] = ids[offset[r]:offset[r] + n]
        out[c.get("name", "")] = mine
    for c in apps:
        reqs = container_requests(c)
        mine = {}
        for r, ids in assigned.items():
            n = int(reqs.get(r, 0))
            if n > 0:
                mine[r] = ids[offset[r]:offset[r] + n]
                offset[r] += n
        out[c.get("name", "")] = mine
    return out
