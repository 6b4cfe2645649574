"""Asking the real kube-scheduler: nodes (and their DRA slices) loaded into the session's control
plane, then one pod at a time, bound or reported Unschedulable (``tests.testcluster.scheduler_agrees``'
harness)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
from typing import Any, AsyncIterator

from tests.builders import randcluster
from tests.testcluster.scheduler_agrees import SERVERS_NS, Harness

ROOM = {"cpu": "32", "memory": "256Gi", "pods": "110"}
_serial = itertools.count()


def schedulable(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` (a ``tests.builders.node``) marked as the harness's own, with room for pods and
    its capacity equal to its allocatable, as a kubelet registers it."""
    out = marked(node)
    out["metadata"]["labels"]["kubernetes.io/hostname"] = out["metadata"]["name"]
    alloc = {**ROOM, **(out.get("status") or {}).get("allocatable", {})}
    out["status"] = {"capacity": dict(alloc), "allocatable": alloc}
    return out


def marked(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` labelled as the harness's own (it deletes what it labelled)."""
    out = copy.deepcopy(obj)
    out["metadata"].setdefault("labels", {})[randcluster.MARK[0]] = randcluster.MARK[1]
    return out


def on_node(node: str, spec: dict[str, Any], *, resources: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod of the harness's namespace that may land on ``node`` only (``metadata.name``, ANDed into
    each of ``spec``'s required node-affinity terms, or the one term)."""
    spec = copy.deepcopy(spec)
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]})
    for term in required["nodeSelectorTerms"]:
        term.setdefault("matchFields", []).append(pin)
    spec.setdefault("automountServiceAccountToken", False)
    spec.setdefault("tolerations", [{"operator": "Exists"}])
    container = {"name": "main", "image": "busybox", "resources": resources or {}}
    spec["containers"] = [container]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"probe-{next(_serial)}", "namespace": SERVERS_NS}, "spec": spec}


class Scheduler:
    """The loaded nodes; ``binds(pod, template)``: True when kube-scheduler binds the pod, False when it
    reports it Unschedulable."""

    def __init__(self, harness: Harness):
        self.h = harness

    async def binds(self, pod: dict[str, Any], template: dict[str, Any] | None = None) -> bool:
        verdict, detail = await self.h.decide(pod, template)
        assert verdict is not None, f"kube-scheduler decided nothing about {pod['metadata']['name']}: {detail}"
        return verdict


@contextlib.asynccontextmanager
async def real_scheduler(kubeconfig: Any, nodes: list[dict[str, Any]],
                         slices: list[dict[str, Any]] = (), classes: list[dict[str, Any]] = ()) -> AsyncIterator[Scheduler]:
    """``nodes`` (see ``schedulable``) and ``slices`` Ready on the control plane, their leases renewed;
    all deleted afterwards.  ``classes``: DeviceClasses to create besides NVIDIA's two."""
    async with Harness(str(kubeconfig)) as h:
        await h.unload()  # what an interrupted run left
        for c in classes:
            await h._ignore_exists(h.res.create_device_class(c))
        await h.load(randcluster.Cluster(seed=0, nodes=[schedulable(n) for n in nodes], slices=[marked(s) for s in slices]))
        renew = asyncio.ensure_future(h.renew_leases())
        try:
            yield Scheduler(h)
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            await h.unload()
            for c in classes:
                await h.res.delete_device_class(c["metadata"]["name"])
