"""The grammar of the messages Kubernetes writes about a pod that waits: the kube-scheduler's
``FailedScheduling``, the cluster autoscaler's and Karpenter's scale-up events, the kubelet's
image, container and admission events.  Pure, stdlib (and the taint policy's rule of passing taints)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuspawner.capacity.taintrule import is_passing_taint

__all__ = [
    "INSUFFICIENT", "TAINT", "CONDITION_TAINT", "AFFINITY", "NODE_NAME", "UNSCHEDULABLE", "VOLUME_ZONE",
    "VOLUME", "POD_AFFINITY", "TOPOLOGY_SPREAD", "PORTS", "DRA", "UNKNOWN", "PERMANENT_KINDS",
    "NO_NODES_MESSAGE", "KARPENTER_FAILED", "ReasonCount", "SchedulingFailure", "ScaleUpStep",
    "is_condition_taint", "classify_reason", "taint_in", "parse_scheduling_message", "parse_scale_up",
    "parse_no_scale_up", "image_in", "pull_duration", "image_not_found", "cuda_refusal",
    "is_admission_failure", "scheduled_node", "UNBOUND_IMMEDIATE", "missing_claim",
]

# Kinds of scheduler reasons (ReasonCount.kind).  "Permanent" ones are not
# fixed by waiting: only an admin (or a new node from an autoscaler) changes them.
INSUFFICIENT = "insufficient"
TAINT = "taint"
CONDITION_TAINT = "condition_taint"
AFFINITY = "affinity"
NODE_NAME = "node_name"
UNSCHEDULABLE = "unschedulable"
VOLUME_ZONE = "volume_zone"
VOLUME = "volume"
POD_AFFINITY = "pod_affinity"
TOPOLOGY_SPREAD = "topology_spread"
PORTS = "ports"
DRA = "dra"
UNKNOWN = "unknown"
PERMANENT_KINDS = frozenset({TAINT, AFFINITY, NODE_NAME, VOLUME_ZONE})

@dataclass(frozen=True, slots=True)
class ReasonCount:
    """One entry of the scheduler's (or autoscaler's) reason histogram."""

    count: int | None  # None: a PreFilter message, which speaks for every node
    text: str  # verbatim
    kind: str  # one of the kinds above
    detail: str | None = None  # the resource of "Insufficient X"; the taint key of a taint


@dataclass(frozen=True, slots=True)
class SchedulingFailure:
    """A parsed ``FailedScheduling`` message of the kube-scheduler."""

    total_nodes: int
    reasons: tuple[ReasonCount, ...]
    post_filter: str | None = None  # "preemption: ..." verbatim

    def count(self, *kinds: str) -> int:
        return sum(r.count if r.count is not None else self.total_nodes for r in self.reasons if r.kind in kinds)

    def insufficient(self, resource: str) -> int:
        return sum(r.count or 0 for r in self.reasons if r.kind == INSUFFICIENT and r.detail == resource)


@dataclass(frozen=True, slots=True)
class ScaleUpStep:
    """One node group a cluster autoscaler grows (``ScaleUpInfo``)."""

    group: str
    current: int
    new: int
    max: int


NO_NODES_MESSAGE = "no nodes available to schedule pods"
_FIT_HEADER = re.compile(r"^\s*0/(\d+) nodes are available:\s*")
_ENTRY_SPLIT = re.compile(r", (?=\d+ )")
_COUNTED = re.compile(r"^(\d+) (.+)$", re.S)
_INSUFFICIENT = re.compile(r"^Insufficient (\S+)$")
_TAINT_DETAIL = re.compile(r"^node\(s\) had (?:untolerated )?taint \{([^{}:]*):\s?([^{}]*)\}")


def is_condition_taint(key: str) -> bool:
    """Whether a taint comes and goes with a node's health or life cycle (the one rule:
    ``capacity.taintrule.is_passing_taint``)."""
    return is_passing_taint(key)


def classify_reason(text: str) -> tuple[str, str | None]:
    """The kind of one scheduler filter reason, and its detail (resource, taint key)."""
    m = _INSUFFICIENT.match(text)
    if m:
        return INSUFFICIENT, m.group(1)
    if text == "Too many pods":
        return INSUFFICIENT, "pods"
    m = _TAINT_DETAIL.match(text)
    if m:
        key = m.group(1).strip()
        return (CONDITION_TAINT if is_condition_taint(key) else TAINT), key
    if text.startswith(("node(s) had untolerated taint", "node(s) had taint")):
        return TAINT, None  # 1.35 wording (and pre-1.25 "taints that the pod didn't tolerate"): no key
    if text in ("node(s) were not ready", "node(s) were out of disk space", "node(s) had memory pressure",
                "node(s) had disk pressure", "node(s) had pid pressure"):
        return CONDITION_TAINT, None  # the old CheckNodeCondition predicates
    if text.startswith(("node(s) didn't match Pod's node affinity", "node(s) didn't match node selector")):
        return AFFINITY, None
    if text.startswith("node(s) didn't match the requested node name") or text.startswith(
        "node(s) didn't match the requested hostname"
    ):
        return NODE_NAME, None
    if text == "node(s) were unschedulable":
        return UNSCHEDULABLE, None
    # VolumeBinding's ErrReasonNodeConflict: "node(s) didn't match PersistentVolume's node affinity" in
    # Kubernetes v1.37 (pkg/scheduler/framework/plugins/volumebinding/binder.go), "node(s) had volume node
    # affinity conflict" before
    if text in ("node(s) didn't match PersistentVolume's node affinity", "node(s) had volume node affinity conflict",
                "node(s) had no available volume zone"):
        return VOLUME_ZONE, None
    if ("PersistentVolumeClaim" in text or "persistentvolumeclaim" in text or "volume" in text or "storage" in text
            or "pv(s)" in text):  # "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
        return VOLUME, None
    if "pod affinity" in text or "anti-affinity" in text:
        return POD_AFFINITY, None
    if "topology spread" in text:
        return TOPOLOGY_SPREAD, None
    if "free ports" in text:
        return PORTS, None
    if "claim" in text or "resourceslice" in text.lower() or "device class" in text:
        return DRA, None  # dynamicresources plugin: "cannot allocate all claims", ...
    return UNKNOWN, None


#: VolumeBinding's PreFilter: a claim of an Immediate class (or one pre-bound by ``volumeName``)
#: that the PV controller has not bound yet (``volume_binding.go``)
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
_MISSING_CLAIM = re.compile(r'^persistentvolume(claim)? "([^"]+)" (not found|is being deleted)$')


def missing_claim(text: str) -> tuple[str, str, bool] | None:
    """What a VolumeBinding / VolumeZone PreFilter reason says is missing: ``(kind, name,
    being_deleted)`` with kind ``"claim"`` (``persistentvolumeclaim "x" not found`` or ``is
    being deleted``) or ``"volume"`` (``persistentvolume "x" not found``: the claim is bound to
    a volume that is gone); None for any other reason."""
    m = _MISSING_CLAIM.match(text.strip())
    if not m:
        return None
    return ("claim" if m.group(1) else "volume"), m.group(2), m.group(3) == "is being deleted"


def taint_in(text: str) -> tuple[str, str] | None:
    """``(key, value)`` of the taint a filter reason names (``node(s) had untolerated taint
    {sku: gpu}``; value ``""`` when the taint has none); None when it names none (1.35+)."""
    m = _TAINT_DETAIL.match(text)
    return (m.group(1).strip(), m.group(2).strip()) if m else None


def _histogram(text: str) -> tuple[ReasonCount, ...]:
    out = []
    for entry in _ENTRY_SPLIT.split(text.strip()):
        entry = entry.strip()
        if not entry:
            continue
        m = _COUNTED.match(entry)
        count, reason = (int(m.group(1)), m.group(2).strip()) if m else (None, entry)
        kind, detail = classify_reason(reason)
        out.append(ReasonCount(count, reason, kind, detail))
    return tuple(out)


def parse_scheduling_message(message: Any) -> SchedulingFailure | None:
    """Parse the kube-scheduler's ``FailedScheduling`` message (also the
    ``PodScheduled`` condition's message); None when it is not in that format.

    The histogram ends at the first ``". "`` (or the final ``"."``): no known
    reason contains one, while taint keys and resource names contain bare dots.
    """
    if not isinstance(message, str):
        return None
    if message.strip().rstrip(".") == NO_NODES_MESSAGE:
        return SchedulingFailure(total_nodes=0, reasons=())
    m = _FIT_HEADER.match(message)
    if not m:
        return None
    rest = message[m.end():]
    cut = re.search(r"\.(?:\s|$)", rest)
    hist, post = (rest[: cut.start()], rest[cut.end():].strip()) if cut else (rest, "")
    return SchedulingFailure(total_nodes=int(m.group(1)), reasons=_histogram(hist), post_filter=post or None)


_SCALE_UP_STEP = re.compile(r"\{(\S+) (\d+)->(\d+) \(max: (\d+)\)\}")


def parse_scale_up(message: Any) -> tuple[ScaleUpStep, ...]:
    """The node groups of a ``TriggeredScaleUp`` message (empty when none parse)."""
    if not isinstance(message, str):
        return ()
    return tuple(
        ScaleUpStep(group=g, current=int(c), new=int(n), max=int(mx)) for g, c, n, mx in _SCALE_UP_STEP.findall(message)
    )


_NO_SCALE_UP = re.compile(r"^pod didn't trigger scale-up(?: \([^)]*\))?:\s*")


def parse_no_scale_up(message: Any) -> tuple[ReasonCount, ...] | None:
    """The reasons of a ``NotTriggerScaleUp`` message; None when not in that format."""
    if not isinstance(message, str):
        return None
    m = _NO_SCALE_UP.match(message)
    if not m:
        return None
    return _histogram(message[m.end():].rstrip("."))


# ---------------------------------------------------------------------------
# Karpenter and the kubelet
# ---------------------------------------------------------------------------

#: Karpenter's ``FailedScheduling`` prefix (its own provisioner, not the kube-scheduler)
KARPENTER_FAILED = "Failed to schedule pod, "

_IMAGE = re.compile(r'image "([^"]*)"')
_PULL_TIME = re.compile(r'" in (\S+?)(?: \(|\.?$| )')
_CUDA_REFUSED = re.compile(r"unsatisfied condition: ([^,\s:]+)")
_SCHEDULED_TO = re.compile(r" to (\S+)$")


def image_in(message: str) -> str | None:
    """The image a kubelet image event names (``Pulling image "<image>"``, ``Failed to pull
    image "<image>": ...``, ``Back-off pulling image "<image>"``...)."""
    m = _IMAGE.search(message)
    return m.group(1) if m else None


def pull_duration(message: str) -> str | None:
    """How long a pull took, as the kubelet wrote it (``Successfully pulled image "x" in 1m2.5s
    (1m2.5s including waiting)``)."""
    m = _PULL_TIME.search(message)
    return m.group(1) if m else None


def image_not_found(message: str) -> bool:
    """Whether a failed pull says the image does not exist."""
    # containerd/CRI: "rpc error: code = NotFound desc = failed to pull and unpack image ...: not found";
    # registries: "manifest unknown"
    return "code = NotFound" in message or "manifest unknown" in message


def cuda_refusal(message: str) -> str | None:
    """The condition libnvidia-container refused (``cuda>=12.8``) in a container's failure
    (``nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please
    update your driver ...``, libnvidia-container ``src/cli/dsl.c``)."""
    m = _CUDA_REFUSED.search(message)
    return m.group(1) if m and "nvidia-container-cli" in message else None


def is_admission_failure(reason: str) -> bool:
    """Whether an event or a ``Failed`` pod's reason is the kubelet's admission refusal:
    ``UnexpectedAdmissionError`` (device manager) or ``OutOf<resource>``
    (``pkg/kubelet/lifecycle/predicate.go``)."""
    return reason == "UnexpectedAdmissionError" or (reason.startswith("OutOf") and len(reason) > len("OutOf"))


def scheduled_node(message: str) -> str | None:
    """The node of a ``Scheduled`` event (``Successfully assigned <ns>/<pod> to <node>``)."""
    m = _SCHEDULED_TO.search(message)
    return m.group(1) if m else None
