"""The resource pools a node can draw devices from.  Pure.  Design notes: docs/simulated-cluster.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..plugins import term_matches

__all__ = ["Pool", "gather_pools", "node_selector_matches", "device_node_matches"]


@dataclass
class Pool:
    driver: str
    name: str
    generation: int = -1
    slices: list[Mapping[str, Any]] = field(default_factory=list)  # newest generation, targeting the node
    seen: int = 0  # slices of the newest generation, for any node
    slice_count: int = 0
    invalid: bool = False

    @property
    def incomplete(self) -> bool:
        return self.seen < self.slice_count

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.name}"


def node_selector_matches(selector: Mapping[str, Any] | None, node: Mapping[str, Any]) -> bool:
    """``nodeaffinity.NodeSelector.Match``: terms ORed, requirements within a term ANDed."""
    terms = (selector or {}).get("nodeSelectorTerms") or []
    return any(term_matches(t, node) for t in terms)


def _targets(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    if spec.get("nodeName"):
        return spec["nodeName"] == (node.get("metadata") or {}).get("name")
    if spec.get("allNodes") or spec.get("perDeviceNodeSelection"):
        return True
    if spec.get("nodeSelector") is not None:
        return node_selector_matches(spec["nodeSelector"], node)
    return False


def device_node_matches(device: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """A device of a ``perDeviceNodeSelection`` slice names its own node(s)."""
    if device.get("nodeName"):
        return device["nodeName"] == (node.get("metadata") or {}).get("name")
    if device.get("allNodes"):
        return True
    return node_selector_matches(device.get("nodeSelector"), node)


def gather_pools(slices: Iterable[Mapping[str, Any]], node: Mapping[str, Any]) -> list[Pool]:
    """The pools with at least one slice for ``node``, sorted by driver and pool name."""
    pools: dict[tuple[str, str], Pool] = {}
    for rs in slices:
        spec = rs.get("spec") or {}
        pool_spec = spec.get("pool") or {}
        key = (str(spec.get("driver", "")), str(pool_spec.get("name", "")))
        gen = int(pool_spec.get("generation") or 0)
        pool = pools.setdefault(key, Pool(*key))
        if gen > pool.generation:
            pool.generation, pool.slices, pool.seen = gen, [], 0
        if gen < pool.generation:
            continue
        pool.seen += 1
        pool.slice_count = int(pool_spec.get("resourceSliceCount") or 0)
        if _targets(spec, node):
            pool.slices.append(rs)
    out = []
    for key in sorted(pools):
        pool = pools[key]
        if not pool.slices:
            continue
        names = [d.get("name") for rs in pool.slices for d in (rs.get("spec") or {}).get("devices") or []]
        pool.invalid = len(names) != len(set(names))
        out.append(pool)
    return out
