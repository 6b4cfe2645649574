"""The test cluster's scale-from-zero node groups: which unschedulable pod a group's new node would
take (nodeSelector, tolerations of its taints, extended resources), when a group starts a node, and
node groups files that say what to fix."""

from __future__ import annotations

import pytest

from testcluster.nodeagent.autoscale import NodeGroup, NodeGroupError, fits, load_groups, plan

TEMPLATE = {
    "apiVersion": "v1", "kind": "Node",
    "metadata": {"labels": {"pool": "h100-spot", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                        {"key": "spot", "value": "true", "effect": "PreferNoSchedule"}]},
    "status": {"allocatable": {"cpu": "200", "memory": "1800Gi", "pods": "110", "nvidia.com/gpu": "8"}},
}
UNSCHEDULABLE = {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
TOLERATE_GPU = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def group(**kw) -> NodeGroup:
    return NodeGroup(**{"name": "h100", "template": TEMPLATE, "max_nodes": 2, "delay_seconds": 5, **kw})


def pod(selector=None, tolerations=TOLERATE_GPU, gpus="1", status=UNSCHEDULABLE) -> dict:
    limits = {"nvidia.com/gpu": gpus, "cpu": "2"} if gpus else {"cpu": "2"}
    return {"spec": {"nodeSelector": {"pool": "h100-spot"} if selector is None else selector,
                     "tolerations": tolerations, "containers": [{"name": "c", "resources": {"limits": limits}}]},
            "status": status}


@pytest.mark.parametrize("p, expected", [
    (pod(), True),
    (pod(selector={}), True),
    (pod(selector={"pool": "a100"}), False),
    (pod(tolerations=[]), False),
    (pod(tolerations=[{"operator": "Exists"}]), True),
    (pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}]), True),
    (pod(tolerations=[{"key": "nvidia.com/gpu", "operator": "Equal", "value": "absent"}]), False),
    (pod(gpus="8"), True),
    (pod(gpus="9"), False),
    (pod(gpus=None), True),
], ids=["gpu-pod", "no-selector", "other-pool", "untolerated-taint", "tolerates-all", "equal-toleration",
        "wrong-value", "whole-node", "more-than-a-node", "cpu-only"])
def test_a_new_node_of_the_group_would_take_the_pod(p, expected):
    assert fits(group(), p) is expected


@pytest.mark.parametrize("g, pending, starts", [
    (group(), [pod()], True),
    (group(), [pod(status={"phase": "Pending"})], False),  # the scheduler has not tried yet
    (group(), [pod(selector={"pool": "a100"})], False),
    (group(starting=True), [pod()], False),
    (group(nodes=["h100-0", "h100-1"]), [pod()], False),
    (group(nodes=["h100-0"]), [pod()], True),
    (group(), [], False),
], ids=["waiting-pod", "not-yet-tried", "no-fit", "one-starting", "at-max-nodes", "below-max", "nothing-waits"])
def test_a_group_starts_one_node_at_a_time_up_to_its_maximum(g, pending, starts):
    assert plan([g], pending) == ([g] if starts else [])


def test_a_node_of_the_group_is_the_template_with_its_name():
    node = group().node(1)
    assert node["metadata"]["name"] == "h100-1"
    assert node["metadata"]["labels"] == {**TEMPLATE["metadata"]["labels"], "kubernetes.io/hostname": "h100-1"}
    assert "name" not in TEMPLATE["metadata"]


def test_the_delay_can_be_shortened_for_every_group(tmp_path):
    path = tmp_path / "groups.yaml"
    path.write_text("- {name: h100, max_nodes: 2, delay_seconds: 420, template: {kind: Node}}\n")
    assert [g.delay_seconds for g in load_groups(path)] == [420]
    assert [g.delay_seconds for g in load_groups(path, 8)] == [8]


@pytest.mark.parametrize("text, words", [
    ("{name: h100}", "a YAML list of groups"),
    ("- {name: h100}", "give name, max_nodes, delay_seconds and template"),
    ("- {name: h100, max_nodes: many, template: {kind: Node}}", "max_nodes and delay_seconds are numbers"),
    ("- {name: h100, max_nodes: 0, template: {kind: Node}}", "max_nodes >= 1"),
    ("- [unclosed", "node groups file"),
], ids=["not-a-list", "no-template", "not-a-number", "zero-nodes", "not-yaml"])
def test_a_bad_node_groups_file_says_what_to_fix(tmp_path, text, words):
    path = tmp_path / "groups.yaml"
    path.write_text(text)
    with pytest.raises(NodeGroupError, match=words):
        load_groups(path)


def test_the_demo_cluster_group_matches_the_demo_hub_s_declared_pool():
    """testcluster/demo-node-groups.yaml stands for the pool the demo's hub declares."""
    from pathlib import Path

    from testcluster.stack import DEMO_NODE_GROUPS

    (g,) = load_groups(DEMO_NODE_GROUPS)
    text = (Path(__file__).resolve().parents[2] / "gpuspawner" / "data" / "demo" / "jupyterhub_config.py").read_text()
    assert '"node_group": "gpu-h100-spot"' in text and '"max_nodes": 2' in text and '"gpus_per_node": 8' in text
    assert g.labels["cloud.google.com/gke-nodepool"] == "gpu-h100-spot"
    assert g.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert (g.max_nodes, g.template["status"]["allocatable"]["nvidia.com/gpu"]) == (2, "8")


async def test_an_unschedulable_pod_gets_a_node_of_its_group_after_the_delay_runs_there_and_is_measured(
        real_cluster, tmp_path):
    """On the real control plane: kube-scheduler finds no node, the agent's autoscaler registers one
    of the group after its delay, the scheduler binds the pod to it and the agent runs it; the new GPU
    node gets a DCGM exporter, as the file's GPU nodes do, whose series name the pod holding its GPU."""
    import time

    from testcluster.nodeagent import NodeAgent
    from testcluster.nodeagent.client import KNOWN, Client
    from tests.builders.kubelet import node_manifest
    from tests.builders.nodeagent import env_server_pod, pod_where, running_with_ip, wait_for, write_cluster
    from tests.testcluster.test_nodeagent_dcgm import metrics

    tag = f"as{int(time.time() * 1000) % 10**8}"
    template = {**TEMPLATE, "metadata": {"labels": {**TEMPLATE["metadata"]["labels"], "pool": tag}}}
    groups = [NodeGroup(f"{tag}-h100", template, max_nodes=1, delay_seconds=3)]
    cluster = write_cluster(tmp_path / "cluster.yaml", [node_manifest(f"{tag}-cpu")])
    new_node = f"{tag}-h100-0"
    client = await Client(real_cluster).open()
    try:
        async with NodeAgent(real_cluster, cluster, node_groups=groups, dcgm_exporter=True, dcgm_interval=0.5):
            pod = env_server_pod(f"{tag}-server", limits={"nvidia.com/gpu": "1"}, nodeSelector={"pool": tag},
                                 tolerations=TOLERATE_GPU)
            asked = time.monotonic()
            await client.create(KNOWN["Pod"], pod, namespace="default")
            running = await pod_where(client, pod["metadata"]["name"], running_with_ip, "running", timeout=90)
            assert running["spec"]["nodeName"] == new_node
            assert time.monotonic() - asked >= 3

            async def exporter_ip():
                _, pods = await client.list(KNOWN["Pod"], namespace="gpu-operator",
                                            label_selector="app=nvidia-dcgm-exporter")
                return next((x["status"]["podIP"] for x in pods
                             if x["spec"].get("nodeName") == new_node and running_with_ip(x)), None)
            ip = await wait_for(exporter_ip, f"a Ready DCGM exporter on {new_node}", timeout=60)

            async def held():
                text = await metrics(ip)
                return text if f'pod="{pod["metadata"]["name"]}"' in text else None
            text = await wait_for(held, f"{new_node}'s series naming the server", timeout=30)
            lines = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_PROF_GR_ENGINE_ACTIVE{")]
            assert len(lines) == 8  # the template's 8 GPUs
            assert groups[0].nodes == [new_node]  # no second node for a running pod
            await client.delete(KNOWN["Pod"], pod["metadata"]["name"], namespace="default")
    finally:
        for name in (f"{tag}-cpu", new_node):
            try:
                await client.delete(KNOWN["Node"], name)
            except Exception:  # noqa: BLE001 - already gone
                pass
        await client.close()
