"""What breaks GPU notebooks: findings from nodes, pods, the hub's profiles and RBAC.

Pure: takes plain Node and Pod dicts (as the API server sends them), the
hub's GPU declarations (:class:`HubFacts`) and the hub's access rights
(:class:`RbacFacts`), and returns :class:`Finding` objects.  No Kubernetes
client, no JupyterHub: ``gather`` does the I/O and ``commands.doctor`` reads
the hub's ``jupyterhub_config.py``.  GPU facts are read with the capacity
layer's readers (``capacity.labels``, ``capacity.podres``), the CUDA verdicts
from the hub's ``cuda_check`` (default ``cuda.rules.decide``) on the node view
``cudacheck.node_cuda`` builds, profiles are read by the spawner's own
``profiles.GPUProfileSpec``, and taint tolerance follows
``overrides.taint_key_allowed``, so doctor judges a cluster exactly as the
spawner will.

Label names and their sources are in the project's reference notes on CUDA
compatibility and GPU labels ("ref §x.y"; primary sources: NVIDIA/k8s-device-plugin
``docs/gpu-feature-discovery/README.md``, ROCm/k8s-device-plugin, the GKE/EKS/AKS GPU guides).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.labels import driver_versions, gpu_facts, node_group, node_record
from gpuspawner.capacity.podres import pod_usage
from gpuspawner.capacity.quantity import QuantityError, parse_count
from gpuspawner.spawn.cudafit import node_cuda
from gpuspawner.cuda.image import ImageCuda
from gpuspawner.cuda.rules import LEVELS, POLICIES, NodeCuda, Verdict, decide
from gpuspawner.cuda.table import min_driver_for_cuda
from gpuspawner.spawn.taints import DEFAULT_TOLERATED_TAINT_KEYS, HARD_EFFECTS, NEVER_TOLERATED_PREFIXES, taint_key_allowed
from gpuspawner.spawn.profiles import GPUProfileSpec
from gpuspawner.kube.times import format_duration, parse_time

__all__ = [
    "SEVERITIES",
    "DEFAULT_TOLERATED_TAINT_KEYS",
    "FINDING_IDS",
    "ObjectRef",
    "Finding",
    "ProfileImage",
    "HubFacts",
    "RbacCheck",
    "RbacFacts",
    "REQUIRED_RBAC",
    "REQUIRED_NAMESPACED_RBAC",
    "gpu_evidence",
    "check_nodes",
    "check_gfd_labels",
    "check_taints",
    "check_images",
    "check_pending_pods",
    "check_rbac",
    "run_checks",
    "exit_code",
    "group_by_severity",
    "hub_facts_from_values",
]

SEVERITIES = ("error", "warning", "info")


#: Stable ids: scripts and the troubleshooting page (docs/troubleshooting.md) key on them.
FINDING_IDS = (
    "rbac-missing",
    "no-gpu-nodes",
    "gpu-node-no-allocatable",
    "gpu-node-not-ready",
    "gpu-node-cordoned",
    "gfd-labels-missing",
    "gfd-labels-deprecated",
    "untolerated-gpu-taint",
    "image-driver-mismatch",
    "image-driver-partial",
    "cuda-check-error",
    "pod-pending-on-gpu",
    "profile-checks-skipped",
    "checks-skipped",
)


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """One object a finding concerns: a Kubernetes object or a hub setting."""

    kind: str  # Node | Pod | Profile | ClusterRole
    name: str
    namespace: str | None = None

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.kind.lower()}/{where}{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "namespace": self.namespace}


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem (or note), with its fix.

    ``summary`` is one line; ``fix`` is concrete (a kubectl command, a label,
    a ``jupyterhub_config.py`` line); ``details`` holds what a script may want
    (the scheduler's message, driver versions), all JSON-serialisable.
    """

    id: str
    severity: str  # error | warning | info
    summary: str
    fix: str
    objects: tuple[ObjectRef, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "summary": self.summary,
            "fix": self.fix,
            "objects": [o.to_json() for o in self.objects],
            "details": dict(self.details),
        }


def exit_code(findings: Iterable[Finding]) -> int:
    """0 when nothing is wrong (info findings only), 1 when a warning or error was found."""
    return 1 if any(f.severity in ("error", "warning") for f in findings) else 0


# ---------------------------------------------------------------------------
# small readers


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels = _meta(obj).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str | None:
    name = _meta(obj).get("name")
    return name if isinstance(name, str) and name else None


def _node_ref(obj: Mapping[str, Any]) -> ObjectRef:
    return ObjectRef("Node", _name(obj) or "?")


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _count(raw: Any) -> int:
    try:
        return parse_count(raw)
    except (QuantityError, TypeError):
        return 0


def _gpu_amounts(resources: Mapping[str, Any], config: CapacityConfig) -> dict[str, int]:
    return {r: _count(v) for r, v in resources.items() if isinstance(r, str) and config.is_gpu_resource(r)}


def _ready_condition(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # the node lifecycle controller's notion: condition Ready == "True"
    # (pkg/controller/nodelifecycle); no Ready condition means not ready
    for cond in _section(node, "status").get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond
    return None


def _is_ready(node: Mapping[str, Any]) -> bool:
    cond = _ready_condition(node)
    return cond is not None and cond.get("status") == "True"


def _is_cordoned(node: Mapping[str, Any]) -> bool:
    return bool(_section(node, "spec").get("unschedulable"))


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _names(refs: Sequence[ObjectRef], limit: int = 5) -> str:
    names = [r.name for r in refs]
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"


# ---------------------------------------------------------------------------
# is it a GPU node?  (ref §4.1-§4.3)

#: Labels that say a node has GPUs even when no device plugin advertises them:
#: NFD's PCI vendor labels (10de NVIDIA, 1002 AMD), the GPU Operator's
#: ``nvidia.com/gpu.present`` (set from the NFD label), the clouds' accelerator
#: labels (GKE, AKS).  (label, expected value or None for "any non-empty", vendor)
_HARDWARE_LABELS: tuple[tuple[str, str | None, str], ...] = (
    ("feature.node.kubernetes.io/pci-10de.present", "true", "nvidia"),  # ref §4.1 / §4.3 (NFD)
    ("nvidia.com/gpu.present", "true", "nvidia"),  # ref §4.1 (GPU Operator state_manager.go)
    ("cloud.google.com/gke-accelerator", None, "nvidia"),  # ref §4.3 (GKE)
    ("kubernetes.azure.com/accelerator", "nvidia", "nvidia"),  # ref §4.3 (AKS)
    ("feature.node.kubernetes.io/pci-1002.present", "true", "amd"),  # ref §4.3 (NFD, AMD vendor 1002)
)


@dataclass(frozen=True, slots=True)
class GpuEvidence:
    """Why a node is a GPU node, and what its device plugin advertises."""

    vendor: str | None  # nvidia | amd | None
    hardware_labels: tuple[str, ...]  # "label=value" that show GPU hardware
    capacity: Mapping[str, int]  # GPU resources in status.capacity
    allocatable: Mapping[str, int]  # GPU resources in status.allocatable

    @property
    def is_gpu_node(self) -> bool:
        return bool(self.hardware_labels) or any(self.capacity.values()) or any(self.allocatable.values())

    @property
    def allocatable_total(self) -> int:
        return sum(self.allocatable.values())


def gpu_evidence(node: Mapping[str, Any], config: CapacityConfig) -> GpuEvidence:
    labels = _labels(node)
    found: list[str] = []
    vendor: str | None = None
    for key, want, who in _HARDWARE_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and value and (want is None or value.lower() == want):
            found.append(f"{key}={value}")
            vendor = vendor or who
    # GFD's count of full GPUs (ref §4.1): written from NVML, so the GPUs are there
    if _count(labels.get("nvidia.com/gpu.count")) > 0:
        found.append(f"nvidia.com/gpu.count={labels['nvidia.com/gpu.count']}")
        vendor = vendor or "nvidia"
    status = _section(node, "status")
    capacity = _gpu_amounts(_section(status, "capacity"), config)
    allocatable = _gpu_amounts(_section(status, "allocatable"), config)
    if vendor is None:
        for resource in (*allocatable, *capacity):
            if resource.startswith("nvidia.com/"):
                vendor = "nvidia"
                break
            if resource.startswith("amd.com/"):
                vendor = "amd"
                break
    return GpuEvidence(vendor, tuple(found), capacity, allocatable)


# ---------------------------------------------------------------------------
# nodes: no allocatable, NotReady, cordoned


def _device_plugin_fix(node: Mapping[str, Any], ev: GpuEvidence) -> str:
    name = _name(node) or "NODE"
    labels = _labels(node)
    see = f"kubectl get pods -A -o wide --field-selector spec.nodeName={name}"
    if ev.vendor == "amd":
        return (
            f"Check that the AMD GPU device plugin (ROCm/k8s-device-plugin) runs on {name} and its log "
            f"shows the GPUs ({see}); it advertises amd.com/gpu once the amdgpu driver is loaded."
        )
    deploy = labels.get("nvidia.com/gpu.deploy.device-plugin")
    if deploy is not None and deploy != "true":
        # GPU Operator: state_manager.go deploys an operand only where its deploy label is "true" (ref §4.1)
        return (
            f"The GPU Operator does not deploy the device plugin on {name} "
            f"(nvidia.com/gpu.deploy.device-plugin={deploy}): "
            f"kubectl label node {name} nvidia.com/gpu.deploy.device-plugin=true --overwrite"
        )
    if labels.get("cloud.google.com/gke-accelerator") and not labels.get("nvidia.com/gpu.present"):
        return (
            f"On GKE the driver installer DaemonSet must run on {name} before nvidia.com/gpu appears: "
            f"check {see} (nvidia-driver-installer / nvidia-gpu-device-plugin), or create the node pool "
            "with --accelerator ...,gpu-driver-version=default."
        )
    if any(ev.capacity.values()):
        return (
            f"The device plugin reports the GPUs of {name} as unhealthy (capacity > allocatable): "
            f"look for Xid errors in its log ({see}) and in `dmesg` on the node; reboot or drain the node."
        )
    return (
        f"Make sure the NVIDIA driver, container toolkit and device plugin run on {name} ({see}; "
        "GPU Operator: kubectl get pods -n gpu-operator -o wide) and that the device plugin's log lists "
        "the GPUs; with MIG, check that nvidia.com/mig.config.state is success."
    )


def check_nodes(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Finding]:
    """``gpu-node-no-allocatable``, ``gpu-node-not-ready``, ``gpu-node-cordoned``, ``no-gpu-nodes``."""
    out: list[Finding] = []
    gpu_nodes = 0
    for node in nodes:
        ev = gpu_evidence(node, config)
        if not ev.is_gpu_node:
            continue
        gpu_nodes += 1
        ref = _node_ref(node)
        if ev.allocatable_total == 0:
            why = ", ".join(ev.hardware_labels) or (
                "capacity " + ", ".join(f"{r}={n}" for r, n in sorted(ev.capacity.items()))
            )
            out.append(
                Finding(
                    "gpu-node-no-allocatable",
                    "error",
                    f"Node {ref.name} has GPUs ({why}) but its device plugin advertises none "
                    "(allocatable GPU resources are 0), so no GPU server can start there.",
                    _device_plugin_fix(node, ev),
                    (ref,),
                    {"vendor": ev.vendor, "hardware_labels": list(ev.hardware_labels),
                     "capacity": dict(ev.capacity), "allocatable": dict(ev.allocatable)},
                )
            )
        if not _is_ready(node):
            cond = _ready_condition(node) or {}
            state = cond.get("status", "missing")
            reason = cond.get("reason") or ""
            message = cond.get("message") or ""
            tail = f": {reason}" if reason else ""
            tail += f" ({message})" if message else ""
            out.append(
                Finding(
                    "gpu-node-not-ready",
                    "error",
                    f"GPU node {ref.name} is not Ready (Ready={state}{tail}); the scheduler keeps new "
                    "pods off it and its GPUs do not count.",
                    f"kubectl describe node {ref.name}; then check the kubelet and container runtime "
                    "on the node (journalctl -u kubelet), or replace the node.",
                    (ref,),
                    {"ready": state, "reason": reason, "message": message},
                )
            )
        if _is_cordoned(node):
            out.append(
                Finding(
                    "gpu-node-cordoned",
                    "warning",
                    f"GPU node {ref.name} is cordoned (spec.unschedulable): its "
                    f"{_plural(ev.allocatable_total, 'GPU')} cannot take new servers.",
                    f"kubectl uncordon {ref.name} (once its maintenance is over)",
                    (ref,),
                )
            )
    if gpu_nodes == 0:
        out.append(
            Finding(
                "no-gpu-nodes",
                "warning",
                f"None of the {_plural(len(nodes), 'node')} has GPUs: no GPU resource "
                f"({', '.join(config.gpu_resources)}, {', '.join(p + '*' for p in config.gpu_resource_prefixes)}) "
                "and no GPU hardware label (NFD pci-10de/pci-1002, nvidia.com/gpu.present).",
                "Add a GPU node group, or if GPU nodes exist install Node Feature Discovery and the "
                "device plugin (NVIDIA GPU Operator: helm install gpu-operator nvidia/gpu-operator -n "
                "gpu-operator --create-namespace); if your GPUs use another resource name set "
                'c.GPUSpawner.gpu_resources = ["example.com/gpu"].',
            )
        )
    return out


# ---------------------------------------------------------------------------
# GPU Feature Discovery labels (ref §4.1)

_GFD_DEPRECATED_ONLY = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.runtime.major")
_GFD_CURRENT = ("nvidia.com/cuda.driver-version.full", "nvidia.com/cuda.runtime-version.full")


def _group_key(node: Mapping[str, Any], config: CapacityConfig) -> tuple[str | None, str | None]:
    return node_group(_labels(node), config.node_group_labels)


def check_gfd_labels(nodes: Sequence[Mapping[str, Any]], config: CapacityConfig) -> list[Finding]:
    """``gfd-labels-missing`` (per node group) and ``gfd-labels-deprecated``.

    Without ``nvidia.com/gpu.product`` pools are named "unknown" and cannot be
    told apart; without the driver labels the CUDA check cannot run and
    steering by driver is impossible (ref §4.1; ``capacity.labels``).
    """
    missing: dict[tuple[str | None, str | None], list[tuple[ObjectRef, list[str]]]] = {}
    deprecated: list[ObjectRef] = []
    for node in nodes:
        ev = gpu_evidence(node, config)
        # a node whose device plugin advertises nothing is gpu-node-no-allocatable
        # first: GFD runs beside the device plugin and is fixed with it
        if ev.vendor != "nvidia" or ev.allocatable_total == 0:
            continue
        labels = _labels(node)
        driver, cuda, _cc = driver_versions(labels)
        lacks = []
        if not labels.get("nvidia.com/gpu.product"):
            lacks.append("nvidia.com/gpu.product")
        if driver is None:
            lacks.append("nvidia.com/cuda.driver-version.*")
        if cuda is None:
            lacks.append("nvidia.com/cuda.runtime-version.*")
        ref = _node_ref(node)
        if lacks:
            missing.setdefault(_group_key(node, config), []).append((ref, lacks))
        elif all(labels.get(k) for k in _GFD_DEPRECATED_ONLY) and not any(labels.get(k) for k in _GFD_CURRENT):
            deprecated.append(ref)
    out: list[Finding] = []
    for (label, group), entries in sorted(missing.items(), key=lambda kv: (kv[0][1] or "", kv[0][0] or "")):
        refs = tuple(r for r, _ in entries)
        lacks = sorted({x for _, ls in entries for x in ls})
        where = f"node group {group} ({label})" if group else "GPU nodes without a node-group label"
        out.append(
            Finding(
                "gfd-labels-missing",
                "warning",
                f"{where}: {_plural(len(refs), 'node')} ({_names(refs)}) lack GPU Feature Discovery "
                f"labels {', '.join(lacks)}; pools show an unknown GPU and the CUDA/driver check is skipped.",
                "Run GPU Feature Discovery on these nodes (GPU Operator: it is on by default; "
                "device plugin chart: helm upgrade -i nvdp nvdp/nvidia-device-plugin -n nvidia-device-plugin "
                "--set gfd.enabled=true), check that its DaemonSet's nodeSelector/tolerations admit them, "
                "or run gpuspawner's labeller: kubectl apply -f deploy/label-node-daemonset.yaml",
                refs,
                {"node_group_label": label, "node_group": group, "missing_labels": lacks},
            )
        )
    if deprecated:
        out.append(
            Finding(
                "gfd-labels-deprecated",
                "info",
                f"{_plural(len(deprecated), 'GPU node')} ({_names(deprecated)}) carry only the deprecated "
                "GFD driver labels (nvidia.com/cuda.driver.*, cuda.runtime.*) of GFD before v0.15.0; "
                "gpuspawner reads them, but newer tools read nvidia.com/cuda.driver-version.*.",
                "Upgrade GPU Feature Discovery (k8s-device-plugin v0.15.0 or newer, or a current GPU Operator).",
                tuple(deprecated),
            )
        )
    return out


# ---------------------------------------------------------------------------
# the hub's side: profiles, images, tolerations


@dataclass(frozen=True)
class ProfileImage:
    """One image a GPU profile (or one of its choices) starts, with its CUDA declaration."""

    profile: str  # the profile's slug
    image: str | None
    cuda: ImageCuda
    choice: str | None = None  # "<option>:<choice>" when a profile option sets the image
    spec: GPUProfileSpec | None = None  # for its pool include/exclude globs

    @property
    def label(self) -> str:
        return f"{self.profile} ({self.choice})" if self.choice else self.profile

    def admits(self, pool_id: str) -> bool:
        return self.spec is None or self.spec.admits(pool_id)


@dataclass(frozen=True)
class HubFacts:
    """What doctor knows of the hub: from ``--config``, or gpuspawner's defaults."""

    tolerated_taint_keys: tuple[str, ...]
    tolerations: tuple[Mapping[str, Any], ...] = ()  # the admin's own (spawner-wide and per profile)
    images: tuple[ProfileImage, ...] = ()
    profiles: tuple[str, ...] = ()  # GPU profile slugs
    cuda_policy: str = "minor"
    # the hub's c.GPUSpawner.cuda_check: (ImageCuda, NodeCuda, policy) -> Verdict
    cuda_check: Callable[[ImageCuda, NodeCuda, str], Verdict] = decide
    source: str | None = None  # the config file; None: defaults (no --config)


def _toleration_matches(tol: Mapping[str, Any], key: str, value: str | None, effect: str) -> bool:
    # kubernetes.io "Taints and Tolerations": an empty key with Exists matches
    # every taint; an empty effect matches every effect; Equal compares values.
    tkey = tol.get("key") or ""
    op = tol.get("operator") or "Equal"
    teffect = tol.get("effect") or ""
    if teffect and teffect != effect:
        return False
    if not tkey:
        return op == "Exists"
    if tkey != key:
        return False
    if op == "Exists":
        return True
    return (tol.get("value") or "") == (value or "")


def _tolerations(value: Any, where: str) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if isinstance(value, Mapping):  # KubeSpawner also accepts a dict of tolerations (sorted by key)
        value = [value[k] for k in sorted(value)]
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, Mapping) for t in value):
        raise ValueError(f"{where}: tolerations must be a list of dicts like "
                         "{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}")
    return list(value)


def hub_facts_from_values(
    values: Mapping[str, Any],
    *,
    source: str,
    cuda_policy: str | None = None,
    cuda_check: Callable[[ImageCuda, NodeCuda, str], Verdict] = decide,
) -> HubFacts:
    """The hub's GPU facts from resolved spawner settings (plain values).

    ``values`` holds ``gpu_profiles``, ``gpu_tolerated_taint_keys``,
    ``tolerations``, ``image``, ``profile_list`` and ``cuda_policy`` as the
    hub would see them (``commands.doctor`` resolves them from
    ``jupyterhub_config.py``); ``cuda_policy`` given here overrides the
    config's.  Profiles are validated by the spawner's own
    ``GPUProfileSpec.from_config``, which reads each image's ``cuda``
    declaration (on the profile, or on the profile-option choice that sets the
    image: ``cudacheck.profile_images``).  Raises ValueError naming the
    setting to fix.
    """
    keys = values.get("gpu_tolerated_taint_keys")
    if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"gpu_tolerated_taint_keys must be a list of strings, got {keys!r}")
    policy = cuda_policy if cuda_policy is not None else values.get("cuda_policy", "minor")
    if policy not in POLICIES:
        raise ValueError(f"cuda_policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    tolerations = _tolerations(values.get("tolerations"), "c.GPUSpawner.tolerations")
    default_image = values.get("image") if isinstance(values.get("image"), str) else None
    static = values.get("profile_list")
    if isinstance(static, (list, tuple)):
        for i, p in enumerate(static):
            if isinstance(p, Mapping):
                override = p.get("kubespawner_override")
                if isinstance(override, Mapping):
                    tolerations += _tolerations(override.get("tolerations"), f"profile_list[{i}]")
    raw_profiles = values.get("gpu_profiles") or []
    if not isinstance(raw_profiles, (list, tuple)):
        raise ValueError(f"gpu_profiles must be a list of dicts, got {type(raw_profiles).__name__}")
    images: list[ProfileImage] = []
    slugs: list[str] = []
    for i, raw in enumerate(raw_profiles):
        where = f"gpu_profiles[{i}]"
        spec = GPUProfileSpec.from_config(raw, where=where)
        where = f"{where} (slug {spec.slug!r})"
        slugs.append(spec.slug)
        tolerations += _tolerations(spec.kubespawner_override.get("tolerations"), where)
        for name, option in spec.profile_options.items():
            for key, choice in ((option or {}).get("choices") or {}).items():
                override = choice.get("kubespawner_override") if isinstance(choice, Mapping) else None
                if isinstance(override, Mapping):
                    tolerations += _tolerations(override.get("tolerations"), f"{where} choice {key!r}")
        declared = spec.images
        for key, cuda in declared.images.items():
            images.append(ProfileImage(
                spec.slug,
                cuda.name or default_image,
                cuda,
                choice=f"{declared.option}:{key}" if declared.option else None,
                spec=spec,
            ))
    return HubFacts(
        tolerated_taint_keys=tuple(keys),
        tolerations=tuple(tolerations),
        images=tuple(images),
        profiles=tuple(slugs),
        cuda_policy=policy,
        cuda_check=cuda_check,
        source=source,
    )


def _tolerated(hub: HubFacts, key: str, value: str | None, effect: str) -> bool:
    # GPUSpawner adds a toleration for each pool taint whose key the admin
    # allows (overrides.build_overrides); the admin's own tolerations add to it
    if taint_key_allowed(key, hub.tolerated_taint_keys):
        return True
    return any(_toleration_matches(t, key, value, effect) for t in hub.tolerations)


def check_taints(nodes: Sequence[Mapping[str, Any]], hub: HubFacts, config: CapacityConfig) -> list[Finding]:
    """``untolerated-gpu-taint``: a NoSchedule/NoExecute taint on GPU nodes that no profile tolerates.

    PreferNoSchedule only steers, and ``node.kubernetes.io/*`` taints are the
    node lifecycle controller's (not-ready, unschedulable...; covered by the
    node findings), so neither counts (kubernetes.io "Taints and Tolerations").
    """
    found: dict[tuple[str, str | None, str], list[ObjectRef]] = {}
    for node in nodes:
        if gpu_evidence(node, config).allocatable_total == 0:
            continue
        for t in _section(node, "spec").get("taints") or ():
            if not isinstance(t, Mapping) or not isinstance(t.get("key"), str):
                continue
            key, value, effect = t["key"], t.get("value") or None, t.get("effect") or ""
            if effect not in HARD_EFFECTS or key.startswith(NEVER_TOLERATED_PREFIXES):
                continue
            if not _tolerated(hub, key, value, effect):
                found.setdefault((key, value, effect), []).append(_node_ref(node))
    out = []
    source = (
        f"the hub's config ({hub.source})" if hub.source
        else "gpuspawner's default gpu_tolerated_taint_keys (pass --config to check your hub's)"
    )
    for (key, value, effect), refs in sorted(found.items(), key=lambda kv: (kv[0][0], kv[0][1] or "", kv[0][2])):
        text = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
        out.append(
            Finding(
                "untolerated-gpu-taint",
                "warning",
                f"Taint {text} on {_plural(len(refs), 'GPU node')} ({_names(refs)}) is tolerated by no "
                f"profile according to {source}, so GPU servers can never start there.",
                f'Allow it in jupyterhub_config.py: c.GPUSpawner.gpu_tolerated_taint_keys.append("{key}"); '
                f"or remove it from each node: kubectl taint nodes {refs[0].name} {key}:{effect}-",
                tuple(refs),
                {"taint": {"key": key, "value": value, "effect": effect}},
            )
        )
    return out


def _node_cuda(node: Mapping[str, Any]) -> NodeCuda:
    # the same view of a node the spawner builds (cudacheck.node_cuda)
    labels = _labels(node)
    driver, cuda, cc = driver_versions(labels)
    return node_cuda(_name(node), driver, cuda, cc, gpu_facts("nvidia.com/gpu", labels).product)


def _verdict(hub: HubFacts, image: ImageCuda, node: NodeCuda) -> Verdict:
    """The hub's ``cuda_check`` on one node; an admin's callable that raises or
    returns something else gives a ``check-error`` skip (as the spawner does)."""
    try:
        v = hub.cuda_check(image, node, hub.cuda_policy)
    except Exception as e:  # the admin's callable
        return Verdict("skip", "check-error", f"c.GPUSpawner.cuda_check raised {type(e).__name__}: {e}",
                       policy=hub.cuda_policy)
    if not isinstance(v, Verdict) or v.level not in LEVELS:
        return Verdict("skip", "check-error",
                       f"c.GPUSpawner.cuda_check returned {type(v).__name__}, not a Verdict", policy=hub.cuda_policy)
    return v


def _image_fix(img: ProfileImage, failing: Sequence[tuple[ObjectRef, Verdict]], bad_pools: Sequence[str]) -> str:
    """What the admin can do: driver, image, or pools (the verdicts' own fixes are worded for users)."""
    parts = []
    refs = [r for r, _ in failing]
    arch = [r for r, v in failing if v.rule == "arch-floor"]
    cuda = img.cuda.effective_cuda
    if len(arch) < len(failing):
        row = min_driver_for_cuda(cuda) if cuda else None
        driver = f"NVIDIA driver {row.min_driver_text} or newer" if row and row.min_driver else "a newer NVIDIA driver"
        parts.append(f"install {driver} on {_names([r for r in refs if r not in arch])}")
        olds = sorted({v.driver_cuda for _, v in failing if v.driver_cuda}, key=lambda t: tuple(map(int, t.split("."))))
        if olds:
            parts.append(f"use an image built with CUDA {olds[0]} or older")
    if arch:
        parts.append(f"use an image of an older CUDA major version for the GPUs of {_names(arch)} "
                     f"({failing[[r for r, _ in failing].index(arch[0])][1].reason})")
    if bad_pools:
        parts.append(f'keep the profile off those pools: "pools": {{"exclude": {json.dumps(list(bad_pools))}}}')
    parts.append("or correct the profile's \"cuda\" declaration if it is wrong")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def check_images(
    nodes: Sequence[Mapping[str, Any]],
    hub: HubFacts,
    config: CapacityConfig,
) -> list[Finding]:
    """``image-driver-mismatch`` (the image fits no node of its profile's
    pools: the spawner refuses every such spawn), ``image-driver-partial``
    (info: some nodes do not fit; the spawner keeps servers off them,
    ``cudacheck.steering_expression``) and ``cuda-check-error`` (the hub's
    ``cuda_check`` fails).

    Only Ready, schedulable NVIDIA nodes with allocatable GPUs in a pool the
    profile admits are judged, with the hub's ``cuda_check`` and
    ``cuda_policy`` (default ``cuda.rules.decide``, reference §2); nodes
    without driver labels give a ``skip`` and are left to ``gfd-labels-missing``.
    """
    if hub.cuda_policy not in POLICIES:
        raise ValueError(f"unknown CUDA policy {hub.cuda_policy!r}: use one of {', '.join(POLICIES)}")
    records = []
    for node in nodes:
        rec = node_record(node, config)
        if rec is None or not rec.contributes:
            continue
        nvidia_pools = [g.pool_id for g in rec.gpus if g.resource.startswith("nvidia.com/")]
        if nvidia_pools:
            records.append((node, nvidia_pools))
    out: list[Finding] = []
    for img in hub.images:
        if not img.cuda.has_cuda:
            continue
        verdicts: list[tuple[ObjectRef, Verdict]] = []
        errors: list[tuple[ObjectRef, Verdict]] = []
        for node, pools in records:
            if any(img.admits(p) for p in pools):
                v = _verdict(hub, img.cuda, _node_cuda(node))
                if v.rule == "check-error":
                    errors.append((_node_ref(node), v))
                elif v.level != "skip":
                    verdicts.append((_node_ref(node), v))
        if errors:
            out.append(
                Finding(
                    "cuda-check-error",
                    "warning",
                    f"Profile {img.label}: the hub's CUDA check failed on "
                    f"{_plural(len(errors), 'node')} ({_names([r for r, _ in errors])}): {errors[0][1].reason}; "
                    "the spawner then lets servers start unchecked.",
                    "Fix the callable in c.GPUSpawner.cuda_check (it must return a gpuspawner.cuda.Verdict), "
                    'or remove the setting to use the default "gpuspawner.cuda:decide".',
                    (ObjectRef("Profile", img.label), *(r for r, _ in errors)),
                    {"reason": errors[0][1].reason},
                )
            )
        if not verdicts:
            continue
        failing = [(r, v) for r, v in verdicts if v.level == "fail"]
        if not failing:
            continue
        ref = ObjectRef("Profile", img.label)
        cuda = img.cuda.cuda_text or "?"
        name = img.image or "the default image"
        details = {
            "image": img.image,
            "image_cuda": img.cuda.cuda_text,
            "policy": hub.cuda_policy,
            "verdicts": {r.name: v.to_json() for r, v in verdicts},
        }
        nodes_failing = tuple(r for r, _ in failing)
        failing_names = {r.name for r in nodes_failing}
        fits_names = {r.name for r, v in verdicts if v.level != "fail"}
        # pools whose every judged node fails: what the profile could exclude
        bad_pools = sorted({p for n, pools in records if _name(n) in failing_names for p in pools
                            if img.admits(p)} - {p for n, pools in records if _name(n) in fits_names
                                                 for p in pools})
        if len(failing) == len(verdicts):
            first = failing[0][1]
            out.append(
                Finding(
                    "image-driver-mismatch",
                    "error",
                    f"Profile {img.label}: image {name} (CUDA {cuda}) fits the NVIDIA driver of none of "
                    f"its {_plural(len(verdicts), 'GPU node')}. {first.reason}",
                    _image_fix(img, failing, ()),  # excluding every pool would leave nothing
                    (ref, *nodes_failing),
                    details,
                )
            )
        else:
            fits = len(verdicts) - len(failing)
            out.append(
                Finding(
                    "image-driver-partial",
                    "info",
                    f"Profile {img.label}: image {name} (CUDA {cuda}) fits {fits} of "
                    f"{_plural(len(verdicts), 'GPU node')}; the drivers of {_names(nodes_failing)} are too old "
                    "for it, so the spawner keeps its servers off them"
                    + (f" and pools {', '.join(bad_pools)} cannot serve it." if bad_pools else "."),
                    _image_fix(img, failing, bad_pools),
                    (ref, *nodes_failing),
                    {**details, "pools_failing": bad_pools},
                )
            )
    return out


# ---------------------------------------------------------------------------
# pods stuck Pending on GPUs


def _epoch(value: Any) -> float | None:
    """RFC 3339 timestamp of the API -> epoch seconds, None if unreadable."""
    when = parse_time(value)
    return when.timestamp() if when is not None else None


def _pending_fix(message: str, ns: str, name: str, usage: Mapping[str, int]) -> str:
    # the scheduler's FailedScheduling message lists each filter's reason
    # ("0/5 nodes are available: 2 Insufficient nvidia.com/gpu, 3 node(s) had
    # untolerated taint {...}"; pkg/scheduler/framework/plugins/*)
    describe = f"kubectl describe pod -n {ns} {name}"
    m = message.lower()
    if "untolerated taint" in m or "had taint" in m:
        return (
            f"A taint keeps it off the GPU nodes: allow its key in c.GPUSpawner.gpu_tolerated_taint_keys "
            f"(see untolerated-gpu-taint) or remove the taint; details: {describe}"
        )
    if "insufficient" in m:
        wanted = ", ".join(f"{n} x {r}" for r, n in sorted(usage.items()))
        return (
            f"No node has {wanted} free: wait for GPUs to be released, stop idle servers "
            f"(jupyterhub-idle-culler), add GPU nodes or let the cluster autoscaler scale the pool; {describe}"
        )
    if "affinity" in m or "selector" in m:
        return (
            f"No GPU node matches the pod's node affinity/selector: check the pool's labels "
            f"(kubectl get nodes -L nvidia.com/gpu.product) and the profile's node_selector; {describe}"
        )
    if "unschedulable" in m:
        return f"The GPU nodes it fits are cordoned (see gpu-node-cordoned): kubectl uncordon NODE; {describe}"
    return describe


def check_pending_pods(
    pods: Sequence[Mapping[str, Any]],
    config: CapacityConfig,
    now: float,
    pending_after: float,
) -> list[Finding]:
    """``pod-pending-on-gpu``: Pending pods that request GPUs, have
    ``PodScheduled=False`` and are older than ``pending_after`` seconds."""
    out: list[Finding] = []
    for pod in pods:
        status = _section(pod, "status")
        if status.get("phase") != "Pending" or _section(pod, "spec").get("nodeName"):
            continue
        cond = next(
            (c for c in status.get("conditions") or () if isinstance(c, Mapping) and c.get("type") == "PodScheduled"),
            None,
        )
        if cond is None or cond.get("status") != "False":
            continue
        usage = pod_usage(_section(pod, "spec"), config.is_gpu_resource)
        if not usage:
            continue
        meta = _meta(pod)
        created = _epoch(meta.get("creationTimestamp"))
        age = (now - created) if created is not None else None
        if age is not None and age < pending_after:
            continue
        ns = meta.get("namespace") or "default"
        name = _name(pod) or "?"
        message = str(cond.get("message") or cond.get("reason") or "no message from the scheduler")
        wanted = ", ".join(f"{n} x {r}" for r, n in sorted(usage.items()))
        age_text = f"for {format_duration(age)}" if age is not None else "(age unknown)"
        out.append(
            Finding(
                "pod-pending-on-gpu",
                "warning",
                f"Pod {ns}/{name} asks for {wanted} and has been Pending {age_text}: {message}",
                _pending_fix(message, ns, name, usage),
                (ObjectRef("Pod", name, ns),),
                {"requests": dict(usage), "age_seconds": round(age, 1) if age is not None else None,
                 "reason": cond.get("reason"), "message": message},
            )
        )
    return out


# ---------------------------------------------------------------------------
# RBAC


@dataclass(frozen=True, slots=True)
class RbacCheck:
    """One access the hub needs, and whether it has it (None: could not tell)."""

    verb: str
    resource: str
    namespace: str | None  # None: cluster scope
    allowed: bool | None
    how: str  # "SubjectAccessReview" | "SelfSubjectAccessReview" | "list call"
    reason: str = ""

    @property
    def rule(self) -> str:
        scope = f"in namespace {self.namespace}" if self.namespace else "at the cluster scope"
        return f"{self.resource}: {self.verb} {scope}"


@dataclass(frozen=True)
class RbacFacts:
    subject: str  # whose rights: "system:serviceaccount:jhub:hub" or "the current credentials"
    checks: tuple[RbacCheck, ...]


#: (verb, resource, cluster scope) the capacity cache needs: deploy/rbac.yaml
REQUIRED_RBAC: tuple[tuple[str, str], ...] = (
    ("get", "nodes"),
    ("list", "nodes"),
    ("watch", "nodes"),
    ("list", "pods"),
    ("watch", "pods"),
)
#: what KubeSpawner does in the hub's namespace (Zero to JupyterHub's hub Role)
REQUIRED_NAMESPACED_RBAC: tuple[tuple[str, str], ...] = (
    ("create", "pods"),
    ("delete", "pods"),
    ("get", "pods"),
)


def check_rbac(rbac: RbacFacts | None) -> list[Finding]:
    """``rbac-missing``: access the hub needs and does not have."""
    if rbac is None:
        return []
    denied = [c for c in rbac.checks if c.allowed is False]
    unknown = [c for c in rbac.checks if c.allowed is None]
    out = []
    if denied:
        cluster = [c for c in denied if c.namespace is None]
        rules = "; ".join(c.rule for c in denied)
        fix = (
            "kubectl apply -f deploy/rbac.yaml (ClusterRole gpuspawner-capacity-reader: nodes get/list/watch, "
            "pods list/watch; bind it to the hub's ServiceAccount)"
            if cluster
            else "Grant the hub's Role these verbs in its namespace (Zero to JupyterHub's hub Role has them)."
        )
        out.append(
            Finding(
                "rbac-missing",
                "error",
                f"{rbac.subject} may not: {rules} (checked by {denied[0].how}); without them the hub "
                "shows GPU capacity as unknown" + (" and cannot start servers." if len(cluster) < len(denied) else "."),
                fix,
                tuple(ObjectRef("ClusterRole" if c.namespace is None else "Role", c.rule) for c in denied),
                {"subject": rbac.subject, "denied": [
                    {"verb": c.verb, "resource": c.resource, "namespace": c.namespace, "how": c.how,
                     "reason": c.reason} for c in denied]},
            )
        )
    if unknown:
        out.append(
            Finding(
                "checks-skipped",
                "info",
                f"Could not tell whether {rbac.subject} may: " + "; ".join(c.rule for c in unknown) + ".",
                "Run doctor with credentials that may create SubjectAccessReviews, or inside the hub's pod.",
                (),
                {"unknown": [c.rule for c in unknown]},
            )
        )
    return out


# ---------------------------------------------------------------------------
# everything


def run_checks(
    nodes: Sequence[Mapping[str, Any]] | None,
    pods: Sequence[Mapping[str, Any]] | None,
    *,
    config: CapacityConfig,
    hub: HubFacts,
    rbac: RbacFacts | None,
    now: float,
    pending_after: float,
) -> list[Finding]:
    """All checks, errors first.  ``nodes``/``pods`` None: they could not be
    listed (the reason is then an ``rbac-missing`` finding) and their checks
    are reported as skipped."""
    out: list[Finding] = list(check_rbac(rbac))
    skipped = []
    if nodes is None:
        skipped.append("node, label, taint and image checks (nodes could not be listed)")
    else:
        out += check_nodes(nodes, config)
        out += check_gfd_labels(nodes, config)
        out += check_taints(nodes, hub, config)
        out += check_images(nodes, hub, config)
    if pods is None:
        skipped.append("Pending-pod check (pods could not be listed)")
    else:
        out += check_pending_pods(pods, config, now, pending_after)
    if skipped:
        out.append(
            Finding(
                "checks-skipped",
                "info",
                "Skipped: " + "; ".join(skipped) + ".",
                "Give the credentials doctor runs with cluster-wide read access to nodes and pods "
                "(e.g. kubectl apply -f deploy/rbac.yaml and run doctor in the hub's pod).",
            )
        )
    if hub.source is None:
        out.append(
            Finding(
                "profile-checks-skipped",
                "info",
                "No --config given: the image/driver check was skipped and taints were judged against "
                "gpuspawner's default gpu_tolerated_taint_keys.",
                "Pass the hub's config: gpuspawner doctor --config /usr/local/etc/jupyterhub/jupyterhub_config.py",
            )
        )
    elif not any(img.cuda.has_cuda for img in hub.images):
        out.append(
            Finding(
                "profile-checks-skipped",
                "info",
                f"No GPU profile in {hub.source} declares its image's CUDA, so the image/driver check was skipped.",
                'Declare it on the profile (or its image choice), e.g. "cuda": "12.4" or '
                '"cuda": {"cuda": "12.4", "compat": true}.',
                tuple(ObjectRef("Profile", s) for s in hub.profiles),
            )
        )
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(out, key=lambda f: rank[f.severity])


def group_by_severity(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    groups: dict[str, list[Finding]] = {s: [] for s in SEVERITIES}
    for f in findings:
        groups[f.severity].append(f)
    return groups
