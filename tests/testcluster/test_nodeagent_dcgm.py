"""DCGM metrics for every GPU node of the agent, DRA nodes included: an exporter pod per node,
scheduled by the scheduler, run by the agent, whose series name the pod holding each GPU."""

from __future__ import annotations

import aiohttp

from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN
from testcluster.nodeagent.dcgm import claim_containers, dra_gpus, dra_holders
from tests.builders import GFD_A100_40GB, node
from tests.builders.dra import claim_template, device_classes, dra_node, gpu_slice
from tests.builders.nodeagent import env_server_pod, pod_where, running_with_ip, wait_for, write_cluster


def test_a_dra_nodes_gpus_and_their_holders_come_from_its_slice_and_claims():
    rs = gpu_slice("n", count=3, mig={"2": [{"profile": "1g.10gb", "count": 2}]})
    gpus = dra_gpus([rs])
    assert [(g.index, len(g.instances)) for g in gpus] == [(0, 0), (1, 0), (2, 2)]
    assert gpus[0].memory_mib == 80 * 1024 and gpus[2].instances[0].profile == "1g.10gb"
    mig_dev = rs["spec"]["devices"][2]
    claim = {"metadata": {"name": "p-gpu", "namespace": "ns"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n", "device": mig_dev["name"]}]}},
                 "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}
    uuid = mig_dev["attributes"]["uuid"]["string"]
    assert dra_holders("n", [rs], [claim]) == {uuid: ("ns/p", "p-gpu")}
    pod = {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
                    "containers": [{"name": "side"}, {"name": "main", "resources": {"claims": [{"name": "gpu"}]}}]},
           "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}]}}
    assert claim_containers(pod, "p-gpu") == ["main"]


async def metrics(ip: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://{ip}:9400/metrics", timeout=aiohttp.ClientTimeout(total=2)) as r:
            return await r.text() if r.status == 200 else ""


async def test_every_gpu_node_serves_dcgm_metrics_naming_the_pod_that_holds_each_gpu(api, tmp_path):
    plugin, dra = api.name("a100"), api.name("h100")
    gfd = dict(GFD_A100_40GB, **{"nvidia.com/gpu.count": "2"})
    objects = [node(plugin, {"pods": "110", "nvidia.com/gpu": "2"}, gfd),
               dra_node(dra), gpu_slice(dra, count=2), *device_classes().values(), claim_template(api.name("one"))]
    cluster = write_cluster(tmp_path / "cluster.yaml", objects + [node(api.name("cpu"), {"pods": "110"})])
    dp_pod, dra_pod = api.name("dp"), api.name("dra")
    async with NodeAgent(api.kubeconfig, cluster, dcgm_exporter=True, dcgm_interval=0.5):
        await api.client.create(KNOWN["Pod"], env_server_pod(dp_pod, limits={"nvidia.com/gpu": "1"}),
                                namespace="default")
        p = env_server_pod(dra_pod)
        p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": api.name("one")}]
        p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
        await api.client.create(KNOWN["Pod"], p, namespace="default")
        await pod_where(api.client, dp_pod, running_with_ip, "Running")
        await pod_where(api.client, dra_pod, running_with_ip, "Running")

        async def exporters():
            _, pods = await api.client.list(KNOWN["Pod"], namespace="gpu-operator",
                                            label_selector="app=nvidia-dcgm-exporter")
            ready = {x["spec"].get("nodeName"): x["status"]["podIP"] for x in pods if running_with_ip(x)}
            return ready if {plugin, dra} <= set(ready) else None
        ips = await wait_for(exporters, "a Ready exporter on both GPU nodes", timeout=60)
        assert api.name("cpu") not in ips  # no GPU, no exporter
        for where, holder in ((plugin, dp_pod), (dra, dra_pod)):
            async def held(ip=ips[where], holder=holder):
                text = await metrics(ip)
                return text if f'pod="{holder}"' in text else None
            text = await wait_for(held, f"{where}'s series naming {holder}", timeout=30)
            lines = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{")]
            assert len(lines) == 2  # both GPUs of the node
            assert sum(f'pod="{holder}"' in ln and 'container="main"' in ln for ln in lines) == 1
