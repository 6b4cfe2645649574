"""kube-scheduler's own FailedScheduling messages, one per scenario, as the session's control plane words
them; recorded into tests/fixtures/scheduler_messages.json by
``python -m tests.testcluster.scheduler_messages`` (it starts a control plane of its own)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.builders import node
from tests.builders.dra import claim_template, gpu_device, request, resource_slice
from tests.builders.scheduling import on_node, real_scheduler
from tests.testcluster.scheduler_agrees import SERVERS_NS

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "scheduler_messages.json"
GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
MIG = "nvidia.com/mig-1g.10gb"


def _pod(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None, *,
         tolerate: bool = False, selector: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A pod of the harness's namespace; not pinned to a node: every node of the cluster is weighed."""
    pod = on_node("-", spec)
    del pod["spec"]["affinity"]
    if not tolerate:
        del pod["spec"]["tolerations"]
    if selector:
        pod["spec"]["nodeSelector"] = selector
    pod["spec"]["containers"][0]["resources"] = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    return pod


def _mixed() -> dict[str, Any]:
    """Four nodes, four reasons: too little CPU and GPU, too few GPUs, an untolerated taint, the wrong labels."""
    return {"nodes": [node("gpu-1", {"nvidia.com/gpu": "1", "cpu": "1"}, {"pool": "a100"}),
                      node("gpu-2", {"nvidia.com/gpu": "1"}, {"pool": "a100"}),
                      node("other-1", {"nvidia.com/gpu": "8"}, {"pool": "a100"}, taints=[GPU_TAINT]),
                      node("cpu-1", {}, {"pool": "cpu"})],
            "pod": _pod({"nvidia.com/gpu": "2"}, {"cpu": "2"}, selector={"pool": "a100"})}


def _cordoned() -> dict[str, Any]:
    return {"nodes": [node(f"gpu-{i}", {"nvidia.com/gpu": "8"}, unschedulable=True) for i in range(2)],
            "pod": _pod({"nvidia.com/gpu": "1"})}


def _mig() -> dict[str, Any]:
    return {"nodes": [node(f"mig-{i}", {MIG: "1"}) for i in range(2)], "pod": _pod({MIG: "2"})}


def _too_many_pods() -> dict[str, Any]:
    return {"nodes": [node("full", {"pods": "0", "nvidia.com/gpu": "8"}, {"pool": "a100"}),
                      node("elsewhere", {"nvidia.com/gpu": "8"}, {"pool": "other"})],
            "pod": _pod({"nvidia.com/gpu": "1"}, selector={"pool": "a100"})}


def _dra() -> dict[str, Any]:
    """A claim for two GPUs on DRA nodes with one each."""
    nodes = [node(f"dra-{i}", {}) for i in range(2)]
    slices = [resource_slice(f"dra-{i}-slice", f"dra-{i}", [gpu_device("gpu-0")]) for i in range(2)]
    template = claim_template("two-gpus", request(count=2), namespace=SERVERS_NS)
    pod = _pod(tolerate=True, resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "two-gpus"}])
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return {"nodes": nodes, "slices": slices, "template": template, "pod": pod}


def _unbound_claim() -> dict[str, Any]:
    pod = _pod({"nvidia.com/gpu": "1"}, volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "home"}}])
    return {"nodes": [node("gpu-1", {"nvidia.com/gpu": "8"})], "pod": pod,
            "claim": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                      "metadata": {"name": "home", "namespace": SERVERS_NS},
                      "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": "1Gi"}}}}}


SCENARIOS = {"mixed": _mixed, "cordoned": _cordoned, "mig": _mig, "too-many-pods": _too_many_pods, "dra": _dra,
             "unbound-claim": _unbound_claim}


async def record(kubeconfig: Any) -> dict[str, str]:
    """Scenario name -> the message kube-scheduler gives its pod (the pod's PodScheduled condition)."""
    out: dict[str, str] = {}
    for name, build in SCENARIOS.items():
        s = build()
        async with real_scheduler(kubeconfig, s["nodes"], s.get("slices", [])) as scheduler:
            h = scheduler.h
            nodes = (await h.core.list_node()).items
            others = sorted(n.metadata.name for n in nodes if n.metadata.name not in {x["metadata"]["name"] for x in s["nodes"]})
            if others:
                raise RuntimeError(f"the cluster has nodes of its own ({', '.join(others)}): messages count every node")
            if s.get("claim"):
                await h.core.create_namespaced_persistent_volume_claim(SERVERS_NS, s["claim"])
            try:
                verdict, message = await h.decide(s["pod"], s.get("template"))
            finally:
                if s.get("claim"):
                    await h.core.delete_namespaced_persistent_volume_claim("home", SERVERS_NS)
                if s.get("template"):
                    await h.res.delete_namespaced_resource_claim_template(s["template"]["metadata"]["name"], SERVERS_NS)
            if verdict is not False:
                raise RuntimeError(f"scenario {name}: the pod was not refused ({message})")
            out[name] = message
    return out


def main(argv: list[str] | None = None) -> int:
    from testcluster import ControlPlane

    argparse.ArgumentParser(description=__doc__).parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        cp = ControlPlane(Path(d))
        cp.start()
        try:
            messages = asyncio.run(record(cp.kubeconfig))
        finally:
            cp.stop()
    FIXTURE.write_text(json.dumps(messages, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(messages)} messages to {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
