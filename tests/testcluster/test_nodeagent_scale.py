"""Many idle nodes cost little: 500 register, stay Ready and have their leases renewed, from one
task that paces the renewals."""

from __future__ import annotations

import asyncio
import time

from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN
from tests.builders.kubelet import node_manifest
from tests.builders.nodeagent import LoopStalls, wait_for, write_cluster

COUNT = 500


async def test_500_idle_nodes_register_and_stay_ready_with_renewed_leases(api, tmp_path):
    names = [api.name(f"idle-{i:04d}") for i in range(COUNT)]
    cluster = write_cluster(tmp_path / "cluster.yaml", [node_manifest(n, **{"nvidia.com/gpu": "8"}) for n in names])
    # the node lifecycle controller's grace period is 50 s: hold past it
    hold = 60
    t0 = time.perf_counter()
    async with LoopStalls() as stalls, NodeAgent(api.kubeconfig, cluster, lease_interval=2.0,
                                                 max_rate=200.0) as agent:
        print(f"\n{COUNT} nodes registered in {time.perf_counter() - t0:.1f} s, "
              f"worst loop stall {stalls.worst * 1000:.0f} ms")
        assert stalls.worst < 0.1, f"the event loop stalled {stalls.worst * 1000:.0f} ms"
        assert agent.heartbeats.period() == COUNT / 200.0
        _, leases = await api.client.list(KNOWN["Lease"], namespace="kube-node-lease")
        first = {le["metadata"]["name"]: le["spec"]["renewTime"] for le in leases if le["metadata"]["name"] in names}
        assert set(first) == set(names)

        async def all_renewed():
            _, now = await api.client.list(KNOWN["Lease"], namespace="kube-node-lease")
            return all(le["spec"]["renewTime"] != first[le["metadata"]["name"]] for le in now
                       if le["metadata"]["name"] in first)
        await wait_for(all_renewed, "every lease renewed", timeout=20)
        await asyncio.sleep(hold)
        _, nodes = await api.client.list(KNOWN["Node"])
        mine = [n for n in nodes if n["metadata"]["name"] in first]
        assert len(mine) == COUNT
        not_ready = [n["metadata"]["name"] for n in mine
                     if next(c["status"] for c in n["status"]["conditions"] if c["type"] == "Ready") != "True"]
        assert not_ready == []
        assert agent.heartbeats.failures == 0, agent.heartbeats.last_error
