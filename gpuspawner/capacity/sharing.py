"""How a pool's GPUs are shared: time-slicing, MPS, MIG or not at all, read from node labels and DRA classes.

Pure: stdlib only. The rules and their sources are in docs/capacity.md, "Shared GPUs".
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple

__all__ = [
    "NONE",
    "TIME_SLICING",
    "MPS",
    "MIG",
    "STRATEGIES",
    "Sharing",
    "NOT_SHARED",
    "node_sharing",
    "class_sharing",
    "mig_profile_of",
    "mig_fraction",
]

# the exact values of ``"sharing"`` in GET /hub/api/gpus
NONE = "none"
TIME_SLICING = "time-slicing"
MPS = "mps"
MIG = "mig"
STRATEGIES = (NONE, TIME_SLICING, MPS, MIG)


class Sharing(NamedTuple):
    """A pool's sharing: its strategy (one of :data:`STRATEGIES`) and how many pods share one
    device (``replicas``: 1 when not shared; for MIG, how many pods share one slice)."""

    strategy: str
    replicas: int

    @property
    def shared(self) -> bool:
        """Whether several pods use one device (time-slicing or MPS, on a GPU or a MIG slice)."""
        return self.replicas > 1


NOT_SHARED = Sharing(NONE, 1)

# GPU Feature Discovery's sharing-strategy values (k8s-device-plugin internal/lm, since v0.15.0) and
# GKE's (cloud.google.com/gke-gpu-sharing-strategy: "time-sharing" / "mps", GKE GPU-sharing guides)
_STRATEGY_WORDS = {
    "time-slicing": TIME_SLICING,
    "time-sharing": TIME_SLICING,
    "mps": MPS,
    "none": NONE,
}

_MIG_PROFILE = re.compile(r"(\d+)g\.(\d+)gb(?:\+me)?")


def _count(value: Any) -> int | None:
    """A positive integer label value, else None (labels are strings; odd ones are ignored)."""
    if isinstance(value, str) and value.strip().isdigit():
        n = int(value.strip())
        return n if n > 0 else None
    return None


def _strategy(value: Any) -> str | None:
    return _STRATEGY_WORDS.get(value.strip().lower()) if isinstance(value, str) else None


def _shared(strategy: str | None, replicas: int | None, fallback: str) -> Sharing:
    """Sharing from a strategy label and a replicas label: a strategy of none, or one replica, is
    not shared; replicas above 1 with no strategy named are ``fallback`` (the device plugin's
    time-slicing, the only sharing older GFD releases label)."""
    if strategy == NONE or (replicas is not None and replicas <= 1):
        return NOT_SHARED
    if replicas is None:
        return NOT_SHARED if strategy is None else Sharing(strategy, 0)
    return Sharing(strategy or fallback, replicas)


def _replicas_from(allocatable: int | None, labels: Mapping[str, str], count_label: str) -> int | None:
    """Replicas as allocatable / physical count, when a strategy is named without replicas."""
    physical = _count(labels.get(count_label))
    if allocatable and physical and allocatable % physical == 0 and allocatable > physical:
        return allocatable // physical
    return None


def _fill(sharing: Sharing, allocatable: int | None, labels: Mapping[str, str], count_label: str) -> Sharing:
    if sharing.replicas:
        return sharing
    replicas = _replicas_from(allocatable, labels, count_label)
    return Sharing(sharing.strategy, replicas) if replicas else NOT_SHARED


def mig_profile_of(resource: str, product: str | None) -> str | None:
    """The MIG profile of a device-plugin resource (``nvidia.com/mig-1g.10gb``, mixed strategy) or of a
    product GFD rewrote for the single strategy (``NVIDIA-A100-SXM4-80GB-MIG-1g.10gb``)."""
    if resource.startswith("nvidia.com/mig-"):
        return resource[len("nvidia.com/mig-"):] or None
    if product:
        m = re.search(r"-MIG-(\d+g\.\d+gb(?:\+me)?)$", product)
        if m:
            return m.group(1)
    return None


def node_sharing(resource: str, labels: Mapping[str, str], allocatable: int | None = None) -> Sharing:
    """How the GPUs of ``resource`` on a node with ``labels`` are shared.

    GPU Feature Discovery's labels (NVIDIA/k8s-device-plugin
    ``internal/lm``): ``nvidia.com/gpu.sharing-strategy`` (``none``/``time-slicing``/``mps``, since
    v0.15.0) and ``nvidia.com/gpu.replicas`` (replicas per physical GPU; 0 or 1 when not shared); older
    releases only append ``-SHARED`` to ``nvidia.com/gpu.product``. With ``renameByDefault`` the
    resource is ``nvidia.com/gpu.shared``. MIG: the mixed strategy's per-profile resources and labels
    (``nvidia.com/mig-<profile>.replicas``/``.sharing-strategy``), or the single strategy
    (``nvidia.com/mig.strategy: single``, ``-MIG-<profile>`` in the product). GKE's
    ``cloud.google.com/gke-gpu-sharing-strategy`` and ``gke-max-shared-clients-per-gpu`` too.
    ``allocatable``: the node's count of ``resource``, for replicas when only a strategy is labelled.
    """
    if resource.startswith("nvidia.com/mig-"):
        profile = resource[len("nvidia.com/mig-"):]
        inner = _shared(
            _strategy(labels.get(f"nvidia.com/mig-{profile}.sharing-strategy")),
            _count(labels.get(f"nvidia.com/mig-{profile}.replicas")),
            TIME_SLICING,
        )
        return Sharing(MIG, inner.replicas if inner.replicas > 1 else 1)
    if not resource.startswith("nvidia.com/"):
        return NOT_SHARED
    product = labels.get("nvidia.com/gpu.product") or ""
    if labels.get("nvidia.com/mig.strategy") == "single" and mig_profile_of(resource, product):
        inner = _shared(_strategy(labels.get("nvidia.com/gpu.sharing-strategy")),
                        _count(labels.get("nvidia.com/gpu.replicas")), TIME_SLICING)
        return Sharing(MIG, inner.replicas if inner.replicas > 1 else 1)
    strategy = _strategy(labels.get("nvidia.com/gpu.sharing-strategy"))
    replicas = _count(labels.get("nvidia.com/gpu.replicas"))
    if strategy is None:
        strategy = _strategy(labels.get("cloud.google.com/gke-gpu-sharing-strategy"))
        if strategy is not None:
            replicas = _count(labels.get("cloud.google.com/gke-max-shared-clients-per-gpu"))
    renamed = resource == "nvidia.com/gpu.shared"
    suffixed = product.endswith("-SHARED")
    if strategy is None and (renamed or suffixed):
        # shared, but by an older GFD that names no strategy: the device plugin's time-slicing
        strategy = TIME_SLICING
    sharing = _shared(strategy, replicas, TIME_SLICING)
    return _fill(sharing, allocatable, labels, "nvidia.com/gpu.count")


# NVIDIA's DRA driver: GpuConfig.sharing.strategy (NVIDIA/k8s-dra-driver-gpu api/.../sharing.go)
_DRA_STRATEGIES = {"TimeSlicing": TIME_SLICING, "MPS": MPS}


def class_sharing(config: Any, driver: str | None) -> str | None:
    """The sharing strategy a DeviceClass's ``spec.config`` sets for ``driver``'s devices: an
    ``opaque`` entry of that driver whose ``parameters.sharing.strategy`` is ``TimeSlicing`` or
    ``MPS`` (the GpuConfig of NVIDIA's DRA driver). None when it sets none or cannot be read."""
    if not isinstance(config, (list, tuple)) or driver is None:
        return None
    for entry in config:
        opaque = entry.get("opaque") if isinstance(entry, Mapping) else None
        if not isinstance(opaque, Mapping) or opaque.get("driver") != driver:
            continue
        params = opaque.get("parameters")
        sharing = params.get("sharing") if isinstance(params, Mapping) else None
        strategy = sharing.get("strategy") if isinstance(sharing, Mapping) else None
        if isinstance(strategy, str) and strategy in _DRA_STRATEGIES:
            return _DRA_STRATEGIES[strategy]
    return None


def mig_fraction(profile: str, product: str | None) -> tuple[int, int, int] | None:
    """(compute slices, slices of the whole GPU, memory in GB) of a MIG ``profile`` such as ``1g.10gb``.

    A100, H100, H200 and B200 have 7 compute slices; the A30 has 4 (NVIDIA's MIG user guide,
    "Supported MIG profiles"). None when the profile is not of the ``<n>g.<m>gb`` form."""
    m = _MIG_PROFILE.fullmatch(profile or "")
    if m is None:
        return None
    whole = 4 if product and re.search(r"\bA30\b", product.replace("-", " ")) else 7
    return int(m.group(1)), whole, int(m.group(2))
