"""The real kubectl (1.32) as admins use it against a GPU cluster, end to end against a SimCluster.

Each test starts the whole simulated cluster (API server, controllers, scheduler, kubelet with
pods marked Running without processes) and drives it with /usr/bin/kubectl.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

from gpuspawner.sim.cluster import SimCluster
from gpuspawner.sim.errors import ApiError
from tests.builders.sim import node, owner_ref, pod, storage_class

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine"),
]

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
RUNNING = dict(pod("train", namespace="research", node_name="gpu-1", gpus=2), status={"phase": "Running"})
RUNNING["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2", "cpu": "2", "memory": "4Gi"}}
MANIFESTS = [node("gpu-1", zone="us-central1-b", gpus=4, taints=[GPU_TAINT]), node("cpu-1", zone="us-central1-a"),
             storage_class("standard", default=True), RUNNING]


@pytest.fixture
async def cluster():
    c = SimCluster(manifests=json.loads(json.dumps(MANIFESTS)), run_pods=False)
    await c.start()
    yield c
    await c.stop()


async def kubectl(c, tmp_path, *args, timeout=60):
    env = dict(os.environ, KUBECONFIG=str(tmp_path / "no-kubeconfig"), KUBECACHEDIR=str(tmp_path / "cache"))
    proc = await asyncio.create_subprocess_exec(KUBECTL, "--server", c.url, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=env, cwd=tmp_path)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


def get(c, plural, name, ns=None):
    try:
        return c.store.get(plural, name, ns)
    except ApiError as e:
        assert e.code == 404
        return None


async def test_create_subcommands_send_protobuf_that_the_server_decodes(cluster, tmp_path):
    for args, printed in [
        (("create", "namespace", "hub"), "namespace/hub created"),
        (("create", "configmap", "cfg", "-n", "hub", "--from-literal=a=b"), "configmap/cfg created"),
        (("create", "secret", "generic", "tok", "-n", "hub", "--from-literal=token=s3cr3t"), "secret/tok created"),
        (("create", "serviceaccount", "spawner", "-n", "hub"), "serviceaccount/spawner created"),
        (("create", "service", "clusterip", "web", "-n", "hub", "--tcp=80:8888"), "service/web created"),
    ]:
        rc, out, err = await kubectl(cluster, tmp_path, *args)
        assert (rc, out.strip()) == (0, printed), err
    assert cluster.store.get("namespaces", "hub")["status"] == {"phase": "Active"}
    assert cluster.store.get("configmaps", "cfg", "hub")["data"] == {"a": "b"}
    assert cluster.store.get("secrets", "tok", "hub")["data"] == {"token": "czNjcjN0"}
    svc = cluster.store.get("services", "web", "hub")
    assert svc["spec"]["ports"][0]["targetPort"] == 8888 and svc["spec"]["selector"] == {"app": "web"}
    rc, out, err = await kubectl(cluster, tmp_path, "get", "svc", "-n", "hub", "-o", "wide")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]
    assert row.split()[:5] == ["web", "ClusterIP", svc["spec"]["clusterIP"], "<none>", "80/TCP"]
    assert row.split()[-1] == "app=web"


async def test_apply_client_side_and_the_server_side_refusal(cluster, tmp_path):
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: research}"
                                      "\ndata: {a: '1', b: '2'}\n")
    rc, out, err = await kubectl(cluster, tmp_path, "apply", "-f", "cm.yaml")
    assert (rc, out.strip()) == (0, "configmap/settings created"), err
    (tmp_path / "cm.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: research}"
                                      "\ndata: {a: '3'}\n")
    rc, out, err = await kubectl(cluster, tmp_path, "apply", "-f", "cm.yaml")
    assert (rc, out.strip()) == (0, "configmap/settings configured"), err
    cm = cluster.store.get("configmaps", "settings", "research")
    assert cm["data"] == {"a": "3"}  # b was in the last applied configuration: removed
    applied = json.loads(cm["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"])
    assert applied["data"] == {"a": "3"}
    rc, out, err = await kubectl(cluster, tmp_path, "apply", "--server-side", "-f", "cm.yaml")
    assert rc != 0
    assert err.strip() == ("error: Server-side apply not available on the server: (the body of the request was in an "
                           "unknown format - accepted media types include: application/json-patch+json, "
                           "application/merge-patch+json, application/strategic-merge-patch+json)")


async def test_label_taint_cordon_and_the_api_servers_taint_validation(cluster, tmp_path):
    rc, out, err = await kubectl(cluster, tmp_path, "label", "node", "cpu-1", "pool=cpu")
    assert (rc, out.strip()) == (0, "node/cpu-1 labeled"), err
    rc, out, err = await kubectl(cluster, tmp_path, "taint", "node", "cpu-1", "dedicated=notebooks:NoSchedule")
    assert (rc, out.strip()) == (0, "node/cpu-1 tainted"), err
    assert cluster.store.get("nodes", "cpu-1")["spec"]["taints"] == [
        {"key": "dedicated", "value": "notebooks", "effect": "NoSchedule"}]
    patch = json.dumps({"spec": {"taints": [{"key": "x", "value": "<svg onload=alert(1)>", "effect": "NoSchedule"}]}})
    rc, out, err = await kubectl(cluster, tmp_path, "patch", "node", "cpu-1", "-p", patch)
    assert rc != 0
    assert err.strip().startswith('The Node "cpu-1" is invalid: spec.taints[0].value: Invalid value: '
                                  '"<svg onload=alert(1)>": a valid label must be an empty string')
    rc, out, err = await kubectl(cluster, tmp_path, "cordon", "gpu-1")
    assert (rc, out.strip()) == (0, "node/gpu-1 cordoned"), err
    rc, out, err = await kubectl(cluster, tmp_path, "get", "nodes", "-L", "topology.kubernetes.io/zone")
    rows = {r.split()[0]: r.split() for r in out.splitlines()[1:]}
    assert out.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "ZONE"]
    assert rows["gpu-1"][1] == "Ready,SchedulingDisabled" and rows["gpu-1"][-1] == "us-central1-b"
    rc, out, err = await kubectl(cluster, tmp_path, "uncordon", "gpu-1")
    assert (rc, out.strip()) == (0, "node/gpu-1 uncordoned"), err
    assert not cluster.store.get("nodes", "gpu-1")["spec"].get("unschedulable")


async def test_describe_node_shows_allocated_gpus_the_lease_and_events(cluster, tmp_path):
    await kubectl(cluster, tmp_path, "cordon", "gpu-1")
    for _ in range(100):  # the kubelet records NodeNotSchedulable
        if any(e["reason"] == "NodeNotSchedulable" for e in cluster.store.list("events")["items"]):
            break
        await asyncio.sleep(0.05)
    rc, out, err = await kubectl(cluster, tmp_path, "describe", "node", "gpu-1")
    assert rc == 0, err
    assert "Lease:\n  HolderIdentity:  gpu-1\n" in out
    assert "Non-terminated Pods:          (1 in total)" in out
    pods_line = next(line for line in out.splitlines() if line.strip().startswith("research"))
    assert pods_line.split()[:4] == ["research", "train", "2", "(25%)"]
    allocated = out.split("Allocated resources:")[1]
    assert [line.split() for line in allocated.splitlines() if line.strip().startswith("nvidia.com/gpu")] == [
        ["nvidia.com/gpu", "2", "2"]]
    assert "NodeNotSchedulable" in out.split("Events:")[1] and "Node gpu-1 status is now: NodeNotSchedulable" in out
    rc, out, err = await kubectl(cluster, tmp_path, "get", "nodes", "-o", "wide")
    header, *rows = out.splitlines()
    assert header.split()[:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    assert all(r.split()[4:6] == ["v1.32.0", "127.0.0.1"] for r in rows)


async def test_describe_pod_shows_the_volume_conflict(cluster, tmp_path):
    cluster.store.create("persistentvolumes", {
        "metadata": {"name": "home-alice"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                 "hostPath": {"path": str(tmp_path / "home-alice")}, "claimRef": {"namespace": "research",
                                                                                   "name": "claim-alice"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-central1-a"]}]}]}}}})
    cluster.store.create("persistentvolumeclaims", {
        "metadata": {"name": "claim-alice"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "home-alice",
                                                      "resources": {"requests": {"storage": "10Gi"}}}}, "research")
    cluster.store.create("pods", pod("jupyter-alice", gpus=1, claims=("claim-alice",), tolerations=TOLERATE_GPU),
                         "research")
    want = "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had volume node affinity conflict."
    for _ in range(200):
        rc, out, err = await kubectl(cluster, tmp_path, "describe", "pod", "jupyter-alice", "-n", "research")
        if want in out:
            break
        await asyncio.sleep(0.1)
    assert "Warning  FailedScheduling" in out and want in out
    assert "ClaimName:   claim-alice" in out
    rc, out, err = await kubectl(cluster, tmp_path, "get", "pvc,pv", "-n", "research")
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS",
                                "VOLUMEATTRIBUTESCLASS", "AGE"]
    assert lines[1].split()[:6] == ["persistentvolumeclaim/claim-alice", "Bound", "home-alice", "10Gi", "RWO",
                                    "standard"]


async def test_drain_evicts_the_pods_of_a_node(cluster, tmp_path):
    rc, out, err = await kubectl(cluster, tmp_path, "drain", "gpu-1", "--force", "--timeout=30s")
    assert rc == 0, err
    assert "evicting pod research/train" in out and "pod/train evicted" in out and "node/gpu-1 drained" in out
    assert cluster.apiserver.counters.count(verb="create", resource="pods/eviction") == 1
    assert get(cluster, "pods", "train", "research") is None


@pytest.mark.parametrize("cascade", ["background", "foreground", "orphan"])
async def test_delete_cascade_reaches_the_pods_service_and_secret(cluster, tmp_path, cascade):
    owner = cluster.store.create("pods", pod("jupyter-bob", node_name="cpu-1"), "research")
    ref = owner_ref(owner, block=True, controller=False)  # as KubeSpawner's make_owner_reference
    cluster.store.create("services", {"metadata": {"name": "jupyter-bob", "ownerReferences": [ref]},
                                      "spec": {"ports": [{"port": 8888}]}}, "research")
    cluster.store.create("secrets", {"metadata": {"name": "jupyter-bob", "ownerReferences": [ref]}}, "research")
    rc, out, err = await kubectl(cluster, tmp_path, "delete", "pod", "jupyter-bob", "-n", "research",
                                 f"--cascade={cascade}")
    assert (rc, out.strip()) == (0, 'pod "jupyter-bob" deleted from research namespace'), err
    for _ in range(200):
        svc, secret = get(cluster, "services", "jupyter-bob", "research"), get(cluster, "secrets", "jupyter-bob",
                                                                               "research")
        if cascade == "orphan" or (svc is None and secret is None):
            break
        await asyncio.sleep(0.05)
    if cascade == "orphan":
        assert "ownerReferences" not in svc["metadata"] and "ownerReferences" not in secret["metadata"]
    else:
        assert svc is None and secret is None


async def test_delete_namespace_terminates_refuses_new_content_then_goes(cluster, tmp_path):
    cluster.store.create("configmaps", {"metadata": {"name": "held", "finalizers": ["example.com/keep"]}}, "research")
    rc, out, err = await kubectl(cluster, tmp_path, "delete", "namespace", "research", "--wait=false")
    assert (rc, out.strip()) == (0, 'namespace "research" deleted'), err  # cluster-scoped: no namespace
    rc, out, err = await kubectl(cluster, tmp_path, "get", "namespace", "research")
    assert out.splitlines()[1].split()[:2] == ["research", "Terminating"]
    rc, out, err = await kubectl(cluster, tmp_path, "create", "configmap", "late", "-n", "research")
    assert rc != 0
    assert err.strip() == ('error: failed to create configmap: configmaps "late" is forbidden: unable to create new '
                           "content in namespace research because it is being terminated")
    for _ in range(200):  # the pods go, the held configmap stays
        if get(cluster, "pods", "train", "research") is None:
            break
        await asyncio.sleep(0.05)
    rc, out, err = await kubectl(cluster, tmp_path, "get", "namespace", "research", "-o",
                                 "jsonpath={.status.conditions[?(@.type=='NamespaceFinalizersRemaining')].message}")
    assert out == ("Some content in the namespace has finalizers remaining: example.com/keep in 1 resource "
                   "instances")
    rc, out, err = await kubectl(cluster, tmp_path, "patch", "configmap", "held", "-n", "research", "--type=merge",
                                 "-p", '{"metadata":{"finalizers":null}}')
    assert rc == 0, err
    rc, out, err = await kubectl(cluster, tmp_path, "wait", "--for=delete", "namespace/research", "--timeout=30s")
    assert rc == 0, err


async def test_get_storage_columns(cluster, tmp_path):
    rc, out, err = await kubectl(cluster, tmp_path, "get", "storageclass")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION",
                              "AGE"]
    assert row.split()[:6] == ["standard", "(default)", "sim.gpuspawner.dev/hostpath", "Delete",
                               "WaitForFirstConsumer", "false"]
    rc, out, err = await kubectl(cluster, tmp_path, "get", "pods", "-A", "--show-labels")
    assert out.splitlines()[0].split()[-1] == "LABELS"
