"""DRA end to end: a simulated cluster with GPUs published only as ResourceSlices, real HTTP clients
(kubernetes_asyncio and kubectl), the claim controller, the scheduler and the kubelet."""

import asyncio
import os
import shutil
import sys

import pytest

from gpuspawner.sim.cluster import SimCluster
from testcluster.node.dra import nvidia
from tests.builders.dra import A100, claim_pod, claim_template, dra_node, request

pytestmark = pytest.mark.integration
KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)
PRINT_DEVICES = [sys.executable, "-c", "import os, time; print(os.environ.get('NVIDIA_VISIBLE_DEVICES'), flush=True); "
                                       "time.sleep(60)"]


def manifests():
    return [dra_node("dra-1"), dra_node("dp-1", allocatable={"nvidia.com/gpu": "1"}),
            nvidia.node_slice("dra-1", A100), *nvidia.device_classes(),
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu-ext"},
             "spec": {"extendedResourceName": "example.com/gpu", "selectors": [
                 {"cel": {"expression": "device.driver == 'gpu.nvidia.com' && "
                                        "device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]}},
            claim_template("two", request(count=2)), claim_template("three", request(count=3))]


@pytest.fixture
async def cluster():
    async with SimCluster(manifests=manifests(), pod_subnet="127.91.0.0/16") as c:
        yield c


def scheduled(c, name):
    pod = c.pod("default", name)
    return pod if pod and pod["spec"].get("nodeName") else None


def condition(c, name):
    pod = c.pod("default", name) or {}
    return next((x for x in (pod.get("status") or {}).get("conditions") or [] if x["type"] == "PodScheduled"), None)


async def test_claim_template_gives_the_pod_n_distinct_devices_and_their_uuids(cluster):
    cluster.store.create("pods", claim_pod("nb", "two", PRINT_DEVICES), "default")
    pod = await cluster.wait_for(lambda: scheduled(cluster, "nb"), 15, what="nb scheduled")
    assert pod["spec"]["nodeName"] == "dra-1"
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = cluster.store.get("resourceclaims", status["resourceClaimName"], "default")
    assert status["name"] == "gpu" and claim["metadata"]["name"].startswith("nb-gpu-")
    assert claim["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "nb",
                                                     "uid": pod["metadata"]["uid"], "controller": True,
                                                     "blockOwnerDeletion": True}]
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/pod-claim-name": "gpu"}
    assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-1"]
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "nb", "uid": pod["metadata"]["uid"]}]
    want = ",".join(nvidia.device_uuid("dra-1", i) for i in (0, 1))
    await cluster.wait_for(lambda: want in cluster.logs("default", "nb", "main"), 15, what="device env")


async def test_exhausted_devices_give_the_real_message_and_free_when_the_pod_goes(cluster):
    cluster.store.create("pods", claim_pod("a", "three"), "default")
    await cluster.wait_for(lambda: scheduled(cluster, "a"), 15, what="a scheduled")
    cluster.store.create("pods", claim_pod("b", "two"), "default")
    cond = await cluster.wait_for(lambda: condition(cluster, "b"), 15, what="b condition")
    assert cond["reason"] == "Unschedulable"
    assert cond["message"] == ("0/2 nodes are available: 2 cannot allocate all claims. still not schedulable, "
                               "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    events = [e for e in cluster.store.list("events", namespace="default")["items"]
              if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == "b"]
    assert events and events[0]["message"] == cond["message"]
    claim_a = cluster.pod("default", "a")["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    cluster.store.delete("pods", "a", "default", grace_period_seconds=0)
    pod_b = await cluster.wait_for(lambda: scheduled(cluster, "b"), 20, what="b scheduled after a is gone")
    assert pod_b["spec"]["nodeName"] == "dra-1"
    names = await cluster.wait_for(lambda: [c["metadata"]["name"] for c in cluster.store.list("resourceclaims")["items"]
                                            if c["metadata"]["name"] != claim_a] if not any(
        c["metadata"]["name"] == claim_a for c in cluster.store.list("resourceclaims")["items"]) else None,
        15, what="a's claim deleted")
    assert len(names) == 1 and names[0].startswith("b-gpu-")


async def test_finished_pod_releases_its_devices(cluster):
    done = claim_pod("job", "three", [sys.executable, "-c", "pass"])
    done["spec"]["restartPolicy"] = "Never"
    cluster.store.create("pods", done, "default")
    await cluster.wait_for(lambda: (cluster.pod("default", "job") or {}).get("status", {}).get("phase") == "Succeeded",
                           20, what="job succeeded")
    # the claim is unreserved, deallocated and (its pod is done) deleted
    await cluster.wait_for(lambda: not cluster.store.list("resourceclaims")["items"], 15, what="claim gone")
    cluster.store.create("pods", claim_pod("next", "three"), "default")
    await cluster.wait_for(lambda: scheduled(cluster, "next"), 15, what="next scheduled")


async def test_missing_template_is_an_event_and_the_pod_waits_without_an_attempt(cluster):
    cluster.store.create("pods", claim_pod("orphan", "nope"), "default")
    ev = await cluster.wait_for(lambda: next((e for e in cluster.store.list("events")["items"]
                                              if e["reason"] == "FailedResourceClaimCreation"), None), 10,
                                what="FailedResourceClaimCreation")
    assert ev["message"] == ('PodResourceClaim gpu: resource claim template "nope": '
                             'resourceclaimtemplate.resource.k8s.io "nope" not found')
    assert condition(cluster, "orphan") is None  # PreEnqueue: no scheduling attempt yet
    cluster.store.create("resourceclaimtemplates", claim_template("nope"), "default")
    await cluster.wait_for(lambda: scheduled(cluster, "orphan"), 15, what="scheduled once the template exists")


async def test_extended_resource_backed_by_dra_is_served_once(cluster):
    def pod(name):
        return {"metadata": {"name": name}, "spec": {"containers": [
            {"name": "main", "image": "python", "command": PRINT_DEVICES,
             "resources": {"limits": {"example.com/gpu": "1"}}}]}}
    cluster.store.create("pods", pod("ext"), "default")
    p = await cluster.wait_for(lambda: scheduled(cluster, "ext"), 15, what="ext scheduled")
    assert p["spec"]["nodeName"] == "dra-1"  # dp-1 has no example.com/gpu in allocatable, dra-1 has the class
    ext = await cluster.wait_for(lambda: cluster.pod("default", "ext")["status"].get("extendedResourceClaimStatus"), 10,
                                 what="extendedResourceClaimStatus")
    assert ext["requestMappings"] == [{"containerName": "main", "resourceName": "example.com/gpu",
                                       "requestName": "container-0-request-0"}]
    claim = cluster.store.get("resourceclaims", ext["resourceClaimName"], "default")
    assert claim["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert claim["metadata"]["name"].startswith("ext-extended-resources-")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["request"] == "container-0-request-0"
    uuid = nvidia.device_uuid("dra-1", int(result["device"].split("-")[1]))
    await cluster.wait_for(lambda: uuid in cluster.logs("default", "ext", "main"), 15, what="device env")


async def test_kubernetes_asyncio_crud_and_watch(cluster, tmp_path):
    from kubernetes_asyncio import client, config, watch

    await config.load_kube_config(config_file=str(cluster.write_kubeconfig(tmp_path / "kubeconfig")))
    async with client.ApiClient() as api:
        res = client.ResourceV1Api(api)
        slices = await res.list_resource_slice(field_selector="spec.nodeName=dra-1")
        assert [s.spec.pool.name for s in slices.items] == ["dra-1"]
        assert len(slices.items[0].spec.devices) == 4
        classes = await res.list_device_class()
        assert sorted(c.metadata.name for c in classes.items) == ["gpu-ext", "gpu.nvidia.com", "mig.nvidia.com"]
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "manual"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}
        created = await res.create_namespaced_resource_claim("default", body)
        assert created.spec.devices.requests[0].exactly.count == 1
        # the generated client names the model ResourceV1ResourceClaim; its Watch guesses V1ResourceClaim
        w = watch.Watch(return_type="ResourceV1ResourceClaim")
        seen = []
        async for ev in w.stream(res.list_namespaced_resource_claim, "default", timeout_seconds=2):
            seen.append((ev["type"], ev["object"].metadata.name))
            break
        assert seen == [("ADDED", "manual")]
        await res.delete_namespaced_resource_claim("manual", "default")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine")
async def test_kubectl_shows_the_real_columns(cluster, tmp_path):
    cluster.store.create("pods", claim_pod("nb", "two"), "default")
    await cluster.wait_for(lambda: scheduled(cluster, "nb"), 15, what="nb scheduled")
    env = dict(os.environ, KUBECONFIG=str(tmp_path / "none"), KUBECACHEDIR=str(tmp_path / "cache"))

    async def kubectl(*args):
        proc = await asyncio.create_subprocess_exec(KUBECTL, "--server", cluster.url, *args, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        return [line.split() for line in out.decode().splitlines() if line.strip()]

    rows = await kubectl("get", "resourceclaims", "-A")
    assert rows[0] == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert rows[1][0] == "default" and rows[1][1].startswith("nb-gpu-") and rows[1][2] == "allocated,reserved"
    rows = await kubectl("get", "deviceclasses,resourceslices")
    assert ["NAME", "AGE"] in rows and ["NAME", "NODE", "DRIVER", "POOL", "AGE"] in rows
    assert any(r[:4] == ["resourceslice.resource.k8s.io/dra-1-gpu.nvidia.com", "dra-1", "gpu.nvidia.com", "dra-1"]
               for r in rows)
    assert any(r[0] == "deviceclass.resource.k8s.io/gpu.nvidia.com" for r in rows)
