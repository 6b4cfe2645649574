"""The node agent on an API server: nodes registered Ready with what their kubelet, device
plugins, GFD and DRA plugin report; leases renewed; pods bound by the scheduler run as processes
that answer at their pod IP, with their devices; deletion kills them."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import pytest

from testcluster.node.pod_resources import parse_quantity
from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN, ssl_context
from tests.builders import GFD_A100_40GB, node
from tests.builders.dra import claim_template, device_classes, dra_node, gpu_slice, request
from tests.builders.kubelet import marker, pids_with_marker
from tests.builders.nodeagent import (PORT, TOLERATE_ALL, LoopStalls, env_server_pod, pod_where, running_with_ip,
                                      wait_for, write_cluster)

NODES, PODS, LEASES = KNOWN["Node"], KNOWN["Pod"], KNOWN["Lease"]
SLICES, CLAIMS = KNOWN["ResourceSlice"], KNOWN["ResourceClaim"]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def file_nodes(api) -> list[dict]:
    """One node per kind of device: NVIDIA (device plugin, tainted), MIG, AMD, CPU only."""
    return [
        node(api.name("a100"), {"pods": "110", "nvidia.com/gpu": "4"}, dict(GFD_A100_40GB),
             taints=[GPU_TAINT], capacity={"nvidia.com/gpu": "4"}),
        node(api.name("mig"), {"pods": "110", "nvidia.com/mig-1g.10gb": "7", "nvidia.com/mig-3g.40gb": "2"},
             {"nvidia.com/mig.strategy": "mixed"}),
        node(api.name("mi300"), {"pods": "110", "amd.com/gpu": "2"}, {"amd.com/gpu.product-name": "MI300X"}),
        node(api.name("cpu"), {"pods": "110"}),
    ]


async def http_get(url: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
            return await r.text()


async def answer(url: str, timeout: float = 15.0) -> str:
    """The body at ``url`` once something listens there."""
    async def get():
        try:
            return [await http_get(url)]
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None
    return (await wait_for(get, f"an answer at {url}", timeout))[0]


async def test_nodes_register_ready_with_their_devices_labels_taints_and_lease(api, tmp_path):
    nodes = file_nodes(api)
    cluster = write_cluster(tmp_path / "cluster.yaml", nodes)
    async with NodeAgent(api.kubeconfig, cluster, lease_interval=0.5, kubelet_port=10350):
        for want in nodes:
            name = want["metadata"]["name"]
            got = await api.client.get(NODES, name)
            st = got["status"]
            # quantities as the API serves them: strings, what the file says
            for res, qty in want["status"]["allocatable"].items():
                assert st["allocatable"][res] == qty, (name, res)
                assert st["capacity"][res] == want["status"].get("capacity", want["status"]["allocatable"])[res]
            assert got["metadata"]["labels"].items() >= want["metadata"]["labels"].items()
            # the agent is up once the node lifecycle controller lifted the not-ready taint that
            # admission puts on every new node: a pod created now gets the scheduler's verdict on
            # the node's devices, not on that taint
            assert got["spec"].get("taints", []) == want["spec"].get("taints", []), name
            ready = next(c for c in st["conditions"] if c["type"] == "Ready")
            assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
            assert {"type": "InternalIP", "address": "127.0.0.1"} in st["addresses"]
            assert st["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10350
            lease = await api.client.get(LEASES, name, namespace="kube-node-lease")
            assert lease["spec"]["holderIdentity"] == name
            assert lease["metadata"]["ownerReferences"][0]["uid"] == got["metadata"]["uid"]
        # the lease is renewed while the agent runs
        first = lease["spec"]["renewTime"]

        async def renewed():
            again = await api.client.get(LEASES, name, namespace="kube-node-lease")
            return again["spec"]["renewTime"] != first
        await wait_for(renewed, "a lease renewal", timeout=10)


async def test_a_node_marked_unknown_by_the_controller_posts_ready_again(api, tmp_path):
    name = api.name("back")
    cluster = write_cluster(tmp_path / "cluster.yaml", [node(name, {"pods": "110"})])
    async with NodeAgent(api.kubeconfig, cluster, lease_interval=1.0):
        got = await api.client.get(NODES, name)
        conds = [dict(c, status="Unknown", reason="NodeStatusUnknown") if c["type"] == "Ready" else c
                 for c in got["status"]["conditions"]]
        await api.client.patch(NODES, name, {"status": {"conditions": conds}}, subresource="status")

        async def ready_again():
            st = (await api.client.get(NODES, name))["status"]
            return next(c["status"] for c in st["conditions"] if c["type"] == "Ready") == "True"
        await wait_for(ready_again, "the kubelet's Ready status posted again", timeout=10)


async def test_a_node_the_file_says_is_unknown_renews_no_lease(api, tmp_path):
    gone, alive = api.name("gone"), api.name("alive")
    cluster = write_cluster(tmp_path / "cluster.yaml", [node(gone, {"pods": "110"}, ready="Unknown"),
                                                       node(alive, {"pods": "110"})])
    async with NodeAgent(api.kubeconfig, cluster, lease_interval=0.5) as agent:
        assert set(agent.heartbeats.nodes) == {alive}
        first = (await api.client.get(LEASES, gone, namespace="kube-node-lease"))["spec"]["renewTime"]
        await asyncio.sleep(2)
        assert (await api.client.get(LEASES, gone, namespace="kube-node-lease"))["spec"]["renewTime"] == first


async def test_dra_node_publishes_its_slice_owned_by_the_node(api, tmp_path):
    name = api.name("h100")
    rs = gpu_slice(name, product="NVIDIA H100 80GB HBM3", count=2)
    cluster = write_cluster(tmp_path / "cluster.yaml", [dra_node(name), rs, *device_classes().values()])
    async with NodeAgent(api.kubeconfig, cluster):
        got = await api.client.get(SLICES, rs["metadata"]["name"])
        node_uid = (await api.client.get(NODES, name))["metadata"]["uid"]
        assert got["spec"]["nodeName"] == name
        assert [d["name"] for d in got["spec"]["devices"]] == ["gpu-0", "gpu-1"]
        assert got["spec"]["devices"][0]["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
        assert got["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid, "controller": True}]


async def test_a_bound_pod_of_the_file_keeps_its_status_and_runs_nothing(api, tmp_path):
    gpu = api.name("a100")
    mark = marker()
    loaded = env_server_pod(api.name("loaded"), marker=mark, nodeName=gpu, limits={"nvidia.com/gpu": "2"})
    loaded["status"] = {"phase": "Running"}
    cluster = write_cluster(tmp_path / "cluster.yaml", [*file_nodes(api)[:1], loaded])
    async with NodeAgent(api.kubeconfig, cluster) as agent:
        got = await api.client.get(PODS, loaded["metadata"]["name"], namespace="default")
        assert got["status"]["phase"] == "Running"
        assert got["status"]["containerStatuses"][0]["ready"] is True
        await asyncio.sleep(1)
        assert pids_with_marker(mark) == []
        # it holds its two GPUs: the ledger gives a new pod the other two
        held = agent.kubelet.ledger.allocation(f"default/{loaded['metadata']['name']}")
        assert len(held["nvidia.com/gpu"]) == 2


async def test_a_scheduled_pod_runs_answers_at_its_pod_ip_with_its_gpus_and_dies_when_deleted(api, tmp_path):
    cluster = write_cluster(tmp_path / "cluster.yaml", file_nodes(api))
    mark = marker()
    name = api.name("web")
    async with NodeAgent(api.kubeconfig, cluster, lease_interval=1.0) as agent:
        await api.client.create(PODS, env_server_pod(name, marker=mark, limits={"nvidia.com/gpu": "2"}),
                                namespace="default")
        pod = await pod_where(api.client, name, running_with_ip, "Running with a pod IP")
        assert pod["spec"]["nodeName"] == api.name("a100")  # the only node with nvidia.com/gpu
        ip = pod["status"]["podIP"]
        assert pod["status"]["podIPs"] == [{"ip": ip}]
        assert pod["status"]["hostIP"] == "127.0.0.1"
        conds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conds["Ready"] == conds["ContainersReady"] == conds["PodScheduled"] == "True"
        assert await answer(f"http://{ip}:{PORT}/POD_IP") == ip
        gpus = (await answer(f"http://{ip}:{PORT}/NVIDIA_VISIBLE_DEVICES")).split(",")
        assert len(gpus) == 2 and all(g.startswith("GPU-") for g in gpus)
        assert gpus == agent.kubelet.ledger.allocation(f"default/{name}")["nvidia.com/gpu"]

        async def events():
            _, evs = await api.client.list(KNOWN["Event"], namespace="default")
            mine = {e["reason"] for e in evs if e["involvedObject"]["name"] == name}
            return mine if {"Scheduled", "Pulled", "Created", "Started"} <= mine else None
        await wait_for(events, "the pod's events")
        assert pids_with_marker(mark)

        async def image_listed():
            st = (await api.client.get(NODES, pod["spec"]["nodeName"]))["status"]
            return any("python:3.12" in i["names"] for i in st.get("images") or [])
        await wait_for(image_listed, "the pulled image in the node's status.images", timeout=15)

        await api.client.delete(PODS, name, namespace="default")

        async def gone():
            _, pods = await api.client.list(PODS, namespace="default")
            return all(p["metadata"]["name"] != name for p in pods)
        await wait_for(gone, "the pod object removed by its kubelet")
        assert pids_with_marker(mark) == []


async def test_a_container_that_fails_reports_its_exit_code(api, tmp_path):
    cluster = write_cluster(tmp_path / "cluster.yaml", file_nodes(api)[3:])
    name = api.name("fails")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"restartPolicy": "Never", "tolerations": TOLERATE_ALL,
                    "containers": [{"name": "main", "image": "busybox",
                                    "command": ["sh", "-c", "echo bye > /dev/termination-log; exit 3"]}]}}
    async with NodeAgent(api.kubeconfig, cluster):
        await api.client.create(PODS, pod, namespace="default")
        got = await pod_where(api.client, name, lambda p: p["status"].get("phase") == "Failed", "Failed")
        term = got["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term["reason"], term.get("message")) == (3, "Error", "bye\n")


async def test_a_pod_with_no_command_is_running_without_a_process(api, tmp_path):
    cluster = write_cluster(tmp_path / "cluster.yaml", file_nodes(api)[3:])
    name = api.name("idle")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"tolerations": TOLERATE_ALL,
                    "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}
    async with NodeAgent(api.kubeconfig, cluster) as agent:
        await api.client.create(PODS, pod, namespace="default")
        await pod_where(api.client, name, running_with_ip, "Running")
        assert agent.kubelet.pod_pids("default", name) == []


async def test_a_dra_pod_is_allocated_by_the_scheduler_and_gets_its_devices(api, tmp_path):
    name = api.name("h100")
    rs = gpu_slice(name, product="NVIDIA H100 80GB HBM3", count=4)
    objects = [dra_node(name), rs, *device_classes().values(), claim_template(api.name("one-gpu"))]
    cluster = write_cluster(tmp_path / "cluster.yaml", objects)
    pod_name = api.name("dra")
    mark = marker()
    pod = env_server_pod(pod_name, marker=mark)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": api.name("one-gpu")}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    async with NodeAgent(api.kubeconfig, cluster):
        await api.client.create(PODS, pod, namespace="default")
        got = await pod_where(api.client, pod_name, running_with_ip, "Running")
        assert got["spec"]["nodeName"] == name
        claim_name = got["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        claim = await api.client.get(CLAIMS, claim_name, namespace="default")
        [result] = claim["status"]["allocation"]["devices"]["results"]
        uuid = next(d["attributes"]["uuid"]["string"] for d in rs["spec"]["devices"] if d["name"] == result["device"])
        assert await answer(f"http://{got['status']['podIP']}:{PORT}/NVIDIA_VISIBLE_DEVICES") == uuid
        assert pids_with_marker(mark)
        await api.client.delete(PODS, pod_name, namespace="default")

        async def gone():
            _, pods = await api.client.list(PODS, namespace="default")
            return all(p["metadata"]["name"] != pod_name for p in pods)
        await wait_for(gone, "the DRA pod removed")
        assert pids_with_marker(mark) == []


@pytest.mark.parametrize("gpus", [400_000], ids=["400k-gpus"])
async def test_a_node_claiming_huge_device_counts_does_not_stall_the_loop(api, tmp_path, gpus):
    cluster = write_cluster(tmp_path / "cluster.yaml",
                            [node(api.name("huge"), {"pods": "110", "nvidia.com/gpu": str(gpus)})])
    async with LoopStalls() as stalls:
        async with NodeAgent(api.kubeconfig, cluster):
            got = await api.client.get(NODES, api.name("huge"))
            # a real API server writes quantities in canonical form ("400k")
            assert parse_quantity(got["status"]["allocatable"]["nvidia.com/gpu"]) == gpus
    assert stalls.worst < 0.1, f"the event loop stalled {stalls.worst * 1000:.0f} ms"


@pytest.mark.parametrize("api", ["real"], indirect=True)
async def test_a_pods_service_account_token_is_one_the_api_server_accepts(api, tmp_path):
    cluster = write_cluster(tmp_path / "cluster.yaml", file_nodes(api)[3:])
    name = api.name("token")
    async with NodeAgent(api.kubeconfig, cluster) as agent:
        await api.client.create(PODS, env_server_pod(name), namespace="default")
        pod = await pod_where(api.client, name, running_with_ip, "Running")
        # the admission plugin gave it the kube-api-access volume; the kubelet asked TokenRequest for it
        [token] = [t for (uid, _), t in agent.kubelet.tokens.items() if uid == pod["metadata"]["uid"]]
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as s:
            async with s.post(f"{api.client.server}/apis/authentication.k8s.io/v1/selfsubjectreviews", json=review,
                              ssl=ssl_context(dict(api.client.config, cert=None, key=None))) as r:
                got = await r.json()
        assert got["status"]["userInfo"]["username"] == "system:serviceaccount:default:default"


async def test_a_dra_object_the_api_server_refuses_names_its_place_in_the_file_and_the_servers_words(api, tmp_path):
    """The loader leaves DRA validation to the API server: a claim template asking for -2 devices
    stops the agent with where it is in the file and the server's own message."""
    from testcluster.nodeagent.register import RegisterError

    bad = claim_template(api.name("minus-two"), request(count=-2))
    cluster = write_cluster(tmp_path / "cluster.yaml", [bad])
    with pytest.raises(RegisterError) as e:
        async with NodeAgent(api.kubeconfig, cluster, kubelet_port=10350):
            pass
    words = str(e.value)
    assert f"document 1, item 0 (ResourceClaimTemplate {api.name('minus-two')})" in words
    assert "spec.spec.devices.requests[0].exactly.count: Invalid value: -2: must be greater than zero" in words


# what KubeSpawner's load_config does in a pod: in-cluster config, else the kubeconfig
IN_CLUSTER_CLIENT = """
import asyncio
import sys
from kubernetes_asyncio import client, config

async def main():
    try:
        config.load_incluster_config()
    except config.ConfigException:
        await config.load_kube_config()
    async with client.ApiClient() as api:
        review = await client.AuthenticationV1Api(api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    print(review.status.user_info.username)

asyncio.run(main())
"""


@pytest.mark.parametrize("api", ["real"], indirect=True)
async def test_without_mount_namespaces_a_pod_reaches_the_api_server_as_its_service_account(api, tmp_path,
                                                                                            monkeypatch):
    # "processes" isolation mounts nothing: the kube-api-access volume's token, ca.crt and namespace
    # are read where the volume holds them, through the KUBECONFIG the kubelet gives the container
    monkeypatch.setenv("GPUSPAWNER_SIM_ISOLATION", "processes")
    cluster = write_cluster(tmp_path / "cluster.yaml", file_nodes(api)[3:])
    name = api.name("in-cluster")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"restartPolicy": "Never", "tolerations": TOLERATE_ALL,
                    "containers": [{"name": "main", "image": "python:3.12",
                                    "command": [sys.executable, "-c", IN_CLUSTER_CLIENT]}]}}
    async with NodeAgent(api.kubeconfig, cluster) as agent:
        assert agent.kubelet.isolation == "processes"
        await api.client.create(PODS, pod, namespace="default")
        done = await pod_where(api.client, name, lambda p: p["status"].get("phase") in ("Succeeded", "Failed"),
                               "ended", timeout=60)
        log = agent.kubelet.logs("default", name)
        assert done["status"]["phase"] == "Succeeded", (done["status"], log)
        assert log.strip() == "system:serviceaccount:default:default"
        await api.client.delete(PODS, name, namespace="default", options={"gracePeriodSeconds": 0})
