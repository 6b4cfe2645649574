"""Scale-from-zero node groups, as a cluster autoscaler runs them: an unschedulable pod that a group's
node template would take gets a node of that group after the group's delay (docs/test-cluster.md).
``fits`` and ``plan`` are pure; ``Autoscaler`` polls the unscheduled pods."""

from __future__ import annotations

import asyncio
import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import yaml

from testcluster.node.pod_resources import parse_quantity

from .client import KNOWN, Client

log = logging.getLogger(__name__)
POLL = 2.0


class NodeGroupError(ValueError):
    """A node groups file that cannot be used; the message says what to fix."""


@dataclass
class NodeGroup:
    name: str
    template: dict[str, Any]
    max_nodes: int
    delay_seconds: float
    nodes: list[str] = field(default_factory=list)  # registered so far
    starting: bool = False

    @property
    def labels(self) -> dict[str, str]:
        return dict((self.template.get("metadata") or {}).get("labels") or {})

    def node(self, index: int) -> dict[str, Any]:
        """The template as node ``index`` of the group (its name and hostname label set)."""
        node = copy.deepcopy(self.template)
        name = f"{self.name}-{index}"
        meta = node.setdefault("metadata", {})
        meta["name"] = name
        meta.setdefault("labels", {})["kubernetes.io/hostname"] = name
        return node


def load_groups(path: str | Path, delay_seconds: float | None = None) -> list[NodeGroup]:
    """The groups of a node groups file; ``delay_seconds`` overrides every group's delay."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise NodeGroupError(f"node groups file {path}: {e}") from None
    groups = []
    for i, g in enumerate(doc if isinstance(doc, list) else []):
        where = f"node groups file {path}, item {i + 1}"
        if not isinstance(g, dict) or not isinstance(g.get("template"), dict) or not g.get("name"):
            raise NodeGroupError(f"{where}: give name, max_nodes, delay_seconds and template (a Node)")
        try:
            max_nodes, delay = int(g.get("max_nodes", 1)), float(g.get("delay_seconds", 60))
        except (TypeError, ValueError):
            raise NodeGroupError(f"{where}: max_nodes and delay_seconds are numbers") from None
        if max_nodes < 1 or delay < 0:
            raise NodeGroupError(f"{where}: max_nodes >= 1 and delay_seconds >= 0")
        groups.append(NodeGroup(str(g["name"]), g["template"], max_nodes,
                                delay if delay_seconds is None else delay_seconds))
    if not isinstance(doc, list):
        raise NodeGroupError(f"node groups file {path}: a YAML list of groups, not {type(doc).__name__}")
    return groups


def _tolerates(tolerations: list[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    # k8s.io/api/core/v1 Toleration.ToleratesTaint
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _extended_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for name, value in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
            if "/" in name and not name.startswith("kubernetes.io/"):
                out[name] = out.get(name, 0.0) + float(parse_quantity(value))
    return out


def fits(group: NodeGroup, pod: Mapping[str, Any]) -> bool:
    """Whether a new node of ``group`` would take ``pod``: the cluster autoscaler's scale-up simulation
    (its FAQ, "How does scale-up work?") cut down to the pod's nodeSelector, its tolerations of the
    template's NoSchedule/NoExecute taints and its extended-resource requests.  Pure."""
    spec = pod.get("spec") or {}
    labels = group.labels
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    taints = (group.template.get("spec") or {}).get("taints") or []
    if not all(_tolerates(spec.get("tolerations") or [], t) for t in taints if t.get("effect") != "PreferNoSchedule"):
        return False
    alloc = (group.template.get("status") or {}).get("allocatable") or {}
    wanted = _extended_requests(pod)
    return all(n <= float(parse_quantity(alloc.get(r, "0"))) for r, n in wanted.items())


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """The scheduler tried and found no node (PodScheduled False, reason Unschedulable)."""
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
               for c in (pod.get("status") or {}).get("conditions") or [])


def plan(groups: list[NodeGroup], pending: list[Mapping[str, Any]]) -> list[NodeGroup]:
    """The groups that start one more node now: some unschedulable pod fits them, none of their
    nodes is starting, and they are below ``max_nodes``.  Pure."""
    out = []
    for g in groups:
        if g.starting or len(g.nodes) >= g.max_nodes:
            continue
        if any(unschedulable(p) and fits(g, p) for p in pending):
            out.append(g)
    return out


class Autoscaler:
    """Polls the unscheduled pods; ``add_node(node)`` registers a group's new node with the agent."""

    def __init__(self, client: Client, groups: list[NodeGroup], add_node: Callable[[dict], Awaitable[None]]):
        self.client = client
        self.groups = groups
        self.add_node = add_node
        self._tasks: set[asyncio.Task] = set()

    async def run(self) -> None:
        while True:
            try:
                _, pending = await self.client.list(KNOWN["Pod"], field_selector="spec.nodeName=")
            except Exception as e:  # noqa: BLE001 - the API server restarting: try again next round
                log.warning("autoscaler: cannot list the pending pods: %s", e)
                pending = []
            for g in plan(self.groups, pending):
                g.starting = True
                t = asyncio.create_task(self._scale_up(g), name=f"scale-up-{g.name}")
                self._tasks.add(t)
                t.add_done_callback(self._tasks.discard)
            await asyncio.sleep(POLL)

    async def _scale_up(self, g: NodeGroup) -> None:
        node = g.node(len(g.nodes))
        log.info("autoscaler: a pod waits for node group %s: node %s in %.0f s", g.name, node["metadata"]["name"],
                 g.delay_seconds)
        try:
            await asyncio.sleep(g.delay_seconds)
            await self.add_node(node)
            g.nodes.append(node["metadata"]["name"])
        except Exception as e:  # noqa: BLE001 - logged; the next round tries again
            log.warning("autoscaler: node %s of group %s failed: %s", node["metadata"]["name"], g.name, e)
        finally:
            g.starting = False

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
