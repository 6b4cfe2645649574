"""What the agent writes about a node and reads of a pod, without a network: the registered Node,
its heartbeat and Lease, a node-owned ResourceSlice, the objects a pod needs, and owner
references rewritten to the server's uids."""

from __future__ import annotations

import pytest

from testcluster.nodeagent import nodes as N
from testcluster.nodeagent.pods import references
from testcluster.nodeagent.register import clean
from tests.builders import GFD_A100_40GB, gpu_node
from tests.builders.dra import gpu_slice

NOW = "2026-11-27T01:00:00Z"


def test_the_registered_node_keeps_the_files_metadata_spec_and_devices_and_adds_the_kubelets_fields():
    f = gpu_node("g", 4, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    f["status"]["allocatable"]["pods"] = "110"
    f["metadata"].update(uid="file-uid", resourceVersion="7")
    got = N.node_object(f, kubelet_port=10250, now=NOW)
    assert got["metadata"] == {"name": "g", "labels": f["metadata"]["labels"]}
    assert got["spec"] == {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}
    assert got["status"]["allocatable"] == f["status"]["allocatable"]
    assert got["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert got["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"},
                                          {"type": "Hostname", "address": "g"}]
    assert [c["type"] for c in got["status"]["conditions"]] == ["MemoryPressure", "Ready", "DiskPressure",
                                                                "PIDPressure"]
    assert all(c["lastHeartbeatTime"] == NOW for c in got["status"]["conditions"])
    assert got["metadata"]["labels"]["nvidia.com/gpu.product"] == GFD_A100_40GB["nvidia.com/gpu.product"]


@pytest.mark.parametrize("status, reason", [("True", "KubeletReady"), ("False", "KubeletNotReady"),
                                            ("Unknown", "NodeStatusUnknown")], ids=["ready", "not-ready", "unknown"])
def test_the_ready_condition_says_what_the_file_says_in_the_kubelets_words(status, reason):
    [ready, *_] = N.conditions([{"type": "Ready", "status": status}], NOW)
    assert (ready["status"], ready["reason"]) == (status, reason)


def test_a_heartbeat_moves_only_the_heartbeat_times():
    node = {"status": {"conditions": N.conditions([{"type": "Ready", "status": "True"}], NOW)}}
    beat = N.heartbeat(node, "2026-11-27T01:05:00Z")["status"]["conditions"]
    assert [c["lastHeartbeatTime"] for c in beat] == ["2026-11-27T01:05:00Z"] * 4
    assert [c["lastTransitionTime"] for c in beat] == [NOW] * 4


def test_the_lease_and_the_slice_are_owned_by_the_node():
    node = {"metadata": {"name": "h", "uid": "u-1"}}
    lease = N.lease(node, "2026-11-27T01:00:00.000000Z")
    assert lease["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "h", "uid": "u-1"}]
    assert lease["spec"]["holderIdentity"] == "h" and lease["spec"]["leaseDurationSeconds"] == 40
    rs = gpu_slice("h", uid="file-uid")
    owned = N.owned_slice(rs, node)
    assert owned["metadata"] == {"name": rs["metadata"]["name"], "ownerReferences": [
        {"apiVersion": "v1", "kind": "Node", "name": "h", "uid": "u-1", "controller": True}]}
    assert owned["spec"] == rs["spec"] and N.slice_node(owned) == "h"


@pytest.mark.parametrize("pod, want", [
    pytest.param({"spec": {"containers": [{"name": "c"}]}}, {}, id="nothing"),
    pytest.param({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm"}},
                                       {"name": "s", "secret": {"secretName": "sec"}},
                                       {"name": "d", "persistentVolumeClaim": {"claimName": "home"}}]}},
                 {"configmaps": {"cm"}, "secrets": {"sec"}, "persistentvolumeclaims": {"home"}}, id="volumes"),
    pytest.param({"spec": {"serviceAccountName": "hub", "volumes": [{"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token"}}, {"configMap": {"name": "kube-root-ca.crt"}}]}}]}},
                 {"serviceaccounts": {"hub"}, "configmaps": {"kube-root-ca.crt"}}, id="projected-token"),
    pytest.param({"spec": {"containers": [{"name": "c", "env": [
        {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
        "envFrom": [{"configMapRef": {"name": "cm1"}}]}]}},
                 {"secrets": {"s1"}, "configmaps": {"cm1"}}, id="env"),
    pytest.param({"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
                  "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x"}]}},
                 {"resourceclaims": {"p-gpu-x"}}, id="claim-from-template"),
])
def test_the_objects_a_pod_needs_before_it_starts(pod, want):
    assert references(pod) == want


def test_owner_references_point_at_the_servers_uids_and_server_fields_go():
    obj = {"metadata": {"name": "x", "uid": "old", "resourceVersion": "3", "creationTimestamp": NOW,
                        "ownerReferences": [{"kind": "Node", "name": "n", "uid": "file-node"},
                                            {"kind": "Node", "name": "m", "uid": "elsewhere"}]}}
    got = clean(obj, {"file-node": "server-node"})
    assert got["metadata"] == {"name": "x", "ownerReferences": [{"kind": "Node", "name": "n", "uid": "server-node"},
                                                                {"kind": "Node", "name": "m", "uid": "elsewhere"}]}
    assert obj["metadata"]["uid"] == "old"  # the file's object is left as it was


def test_the_agent_and_the_node_parts_import_nothing_of_gpuspawner():
    import ast
    from pathlib import Path

    import testcluster.node
    import testcluster.nodeagent

    outside = []
    for pkg in (testcluster.node, testcluster.nodeagent):
        for path in Path(pkg.__file__).parent.rglob("*.py"):
            for n in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in n.names] if isinstance(n, ast.Import) else (
                    [n.module or ""] if isinstance(n, ast.ImportFrom) and not n.level else [])
                outside += [f"{path.name}: {m}" for m in names if m.split(".")[0] == "gpuspawner"]
    assert outside == []
