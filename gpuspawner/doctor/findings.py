"""Doctor's findings: what is wrong (or worth knowing), on which objects, and the fix.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuspawner.kube import objects

__all__ = [
    "SEVERITIES",
    "FINDING_IDS",
    "DRA_FINDING_IDS",
    "ObjectRef",
    "Finding",
    "exit_code",
    "group_by_severity",
    "by_severity",
    "node_ref",
    "plural",
    "names",
]

SEVERITIES = ("error", "warning", "info")


#: The DRA checks' ids (``checks.dra``).
DRA_FINDING_IDS = (
    "dra-no-deviceclass",
    "dra-gpus-published-twice",
    "dra-slices-incomplete",
    "dra-claim-unallocated",
    "dra-rbac-missing",
)

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
    "scale-up-too-slow",
    "image-not-cached",
    "profile-checks-skipped",
    "checks-skipped",
    "cull-no-gpu-metrics",
) + DRA_FINDING_IDS + (
    # Kueue (checks.kueue.KUEUE_FINDING_IDS)
    "kueue-not-installed",
    "kueue-localqueue-missing",
    "kueue-clusterqueue-stopped",
    "kueue-flavor-matches-no-pool",
    "kueue-quota-exceeds-pool",
    "kueue-visibility-not-served",
    "kueue-webhook-unreachable",
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


def group_by_severity(findings: Iterable[Finding]) -> dict[str, list[Finding]]:
    groups: dict[str, list[Finding]] = {s: [] for s in SEVERITIES}
    for f in findings:
        groups[f.severity].append(f)
    return groups


def by_severity(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then notes; the checks' own order within each."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: rank[f.severity])


# ---------------------------------------------------------------------------
# wording shared by the checks


def node_ref(node: Mapping[str, Any]) -> ObjectRef:
    return ObjectRef("Node", objects.name(node) or "?")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def names(refs: Sequence[ObjectRef], limit: int = 5) -> str:
    shown = [r.name for r in refs]
    if len(shown) <= limit:
        return ", ".join(shown)
    return ", ".join(shown[:limit]) + f" and {len(shown) - limit} more"
