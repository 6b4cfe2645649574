"""pods/exec and pods/attach on the wire: discovery, refusals, the channel protocols."""

from __future__ import annotations

import aiohttp
import pytest

from tests.builders.kubelet import container, pod_manifest


@pytest.fixture
async def cluster():
    """A small simulated cluster whose kubelet runs real processes."""
    from gpuspawner.sim.cluster import SimCluster
    from tests.builders.kubelet import node_manifest

    c = SimCluster(manifests=[node_manifest("node-a")], restart_backoff=(0.2, 1.0))
    await c.start()
    try:
        yield c
    finally:
        await c.stop()

pytestmark = pytest.mark.integration


async def _running(cluster, name):
    return await cluster.wait_for(
        lambda: (p := cluster.pod("default", name)) and p["status"].get("phase") == "Running" and p, 20,
        what=f"{name} Running")


async def test_discovery_lists_the_streaming_subresources(cluster):
    async with aiohttp.ClientSession() as s, s.get(f"{cluster.url}/api/v1") as r:
        listed = {x["name"]: x for x in (await r.json())["resources"]}
    assert (listed["pods/exec"]["kind"], listed["pods/exec"]["verbs"]) == ("PodExecOptions", ["create", "get"])
    assert (listed["pods/attach"]["kind"], listed["pods/attach"]["verbs"]) == ("PodAttachOptions", ["create", "get"])
    assert (listed["pods/log"]["kind"], listed["pods/log"]["verbs"]) == ("Pod", ["get"])


async def test_refusals_before_any_upgrade(cluster):
    cluster.store.create("pods", pod_manifest("p", container(command=["sleep", "60"])), namespace="default")
    await _running(cluster, "p")
    cluster.store.create("pods", dict(pod_manifest("unbound"), spec=dict(pod_manifest("unbound")["spec"],
                                                                          schedulerName="nobody")),
                         namespace="default")
    base = f"{cluster.url}/api/v1/namespaces/default/pods"
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{base}/p/exec?command=true") as r:
            assert (r.status, (await r.json())["message"]) == (400, "Upgrade request required")
        async with s.get(f"{base}/unbound/exec?command=true", headers={"Upgrade": "websocket",
                                                                       "Connection": "Upgrade"}) as r:
            assert (r.status, (await r.json())["message"]) == (400, "pod unbound does not have a host assigned")
        async with s.put(f"{base}/p/exec?command=true") as r:
            assert r.status == 405
        async with s.get(f"{base}/unbound/log") as r:
            assert (r.status, await r.text()) == (200, "")  # no node: an empty log
        with pytest.raises(aiohttp.WSServerHandshakeError) as e:
            await s.ws_connect(f"{base}/p/exec?command=true", protocols=["v3.channel.k8s.io"])
        assert e.value.status == 403


async def test_v4_exec_into_a_container_that_is_not_running(cluster):
    cluster.store.create("pods", pod_manifest("done", container(command=["true"]), restartPolicy="Never"),
                         namespace="default")
    await cluster.wait_for(lambda: (p := cluster.pod("default", "done")) and p["status"]["phase"] == "Succeeded", 20,
                           what="Succeeded")
    url = f"{cluster.url}/api/v1/namespaces/default/pods/done/exec?command=true"
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as e:
            await s.ws_connect(url, protocols=["v4.channel.k8s.io"])
        assert e.value.status == 500  # the kubelet refuses before upgrading
        async with s.ws_connect(url, protocols=["v5.channel.k8s.io"]) as ws:  # the translator upgrades first
            messages = [m.data async for m in ws]
    assert messages[-1].startswith(b'\x03{"metadata":{},"status":"Failure","message":"Internal error occurred: '
                                   b'unable to upgrade connection: container not found (\\"main\\")"')


@pytest.mark.parametrize("protocol,success_status", [("channel.k8s.io", False), ("v4.channel.k8s.io", True)])
async def test_exec_over_older_protocols(cluster, protocol, success_status):
    cluster.store.create("pods", pod_manifest("p", container(command=["sleep", "60"])), namespace="default")
    await _running(cluster, "p")
    url = (f"{cluster.url}/api/v1/namespaces/default/pods/p/exec?command=sh&command=-c"
           "&command=echo+out%3B+echo+err+%3E%262&stdout=true&stderr=true")
    async with aiohttp.ClientSession() as s, s.ws_connect(url, protocols=[protocol]) as ws:
        assert ws.protocol == protocol
        got = [m.data async for m in ws]
    assert got[0] == b"\x01"  # connected: an empty message on stdout
    assert sorted(m for m in got[1:] if m[:1] in (b"\x01", b"\x02")) == [b"\x01out\n", b"\x02err\n"]
    errors = [m for m in got if m[:1] == b"\x03"]
    assert errors == ([b'\x03{"metadata":{},"status":"Success"}'] if success_status else [])
