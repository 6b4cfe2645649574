"""Taints on GPU nodes that no GPU server tolerates: finding ``untolerated-gpu-taint``.  Pure.
Design notes: docs/troubleshooting.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.model import Taint
from gpuspawner.doctor.checks.nodes import gpu_evidence
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import Finding, ObjectRef, names, node_ref, plural
from gpuspawner.kube import objects
from gpuspawner.spawn.overrides import pool_tolerations
from gpuspawner.spawn.tolerations import keeps_pods_off, tolerates

__all__ = ["check_taints", "tolerated"]


def tolerated(hub: HubFacts, taint: Taint) -> bool:
    """Whether a GPU server of this hub tolerates ``taint`` on its pool's nodes."""
    tolerations = pool_tolerations((taint,), hub.tolerated_taint_keys, hub.tolerations)
    return any(tolerates(t, taint) for t in tolerations)


def _node_taints(node: Mapping[str, Any]) -> list[Taint]:
    out = []
    for t in objects.items(objects.section(node, "spec").get("taints")):
        if isinstance(t, Mapping) and isinstance(t.get("key"), str):
            out.append(Taint(t["key"], t.get("value") or None, t.get("effect") or ""))
    return out


def _untolerated(taint: Taint, refs: list[ObjectRef], hub: HubFacts) -> Finding:
    source = (
        f"the hub's config ({hub.source})" if hub.source
        else "gpuspawner's default gpu_tolerated_taint_keys (pass --config to check your hub's)"
    )
    key, value, effect = taint.key, taint.value, taint.effect
    text = f"{key}={value}:{effect}" if value else f"{key}:{effect}"
    return Finding(
        "untolerated-gpu-taint",
        "warning",
        f"Taint {text} on {plural(len(refs), 'GPU node')} ({names(refs)}) is tolerated by no "
        f"profile according to {source}, so GPU servers can never start there: the spawn page counts none "
        "of their GPUs and says the taint keeps servers off.",
        f'Allow it in jupyterhub_config.py: c.GPUSpawner.gpu_tolerated_taint_keys.append("{key}"); '
        f"or remove it from each node: kubectl taint nodes {refs[0].name} {key}:{effect}-",
        tuple(refs),
        {"taint": {"key": key, "value": value, "effect": effect}},
    )


def check_taints(nodes: Sequence[Mapping[str, Any]], hub: HubFacts, config: CapacityConfig) -> list[Finding]:
    """``untolerated-gpu-taint``: a NoSchedule/NoExecute taint on GPU nodes that no profile tolerates.

    PreferNoSchedule only steers, and ``node.kubernetes.io/*`` taints are the
    node lifecycle controller's (not-ready, unschedulable...; covered by the
    node findings), so neither counts (``spawn.taints.keeps_pods_off``).
    """
    found: dict[Taint, list[ObjectRef]] = {}
    for node in nodes:
        if gpu_evidence(node, config).allocatable_total == 0:
            continue
        for taint in _node_taints(node):
            if keeps_pods_off(taint) and not tolerated(hub, taint):
                found.setdefault(taint, []).append(node_ref(node))
    order = sorted(found.items(), key=lambda kv: (kv[0].key, kv[0].value or "", kv[0].effect))
    return [_untolerated(taint, refs, hub) for taint, refs in order]
