"""GPU nodes the culler cannot see: no exporter pod, or no series in Prometheus."""

from __future__ import annotations

from gpuspawner.cull.coverage import nodes_without_exporter, nodes_without_series, nvidia_gpu_nodes


def node(name, **alloc):
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8", **alloc}}}


NODES = [node("a100", **{"nvidia.com/gpu": "4"}), node("mig", **{"nvidia.com/mig-1g.10gb": "7", "nvidia.com/gpu": "0"}),
         node("amd", **{"amd.com/gpu": "2"}), node("cpu"), node("t4-shared", **{"nvidia.com/gpu.shared": "4"})]


def exporter(node_name, ready=True, app="nvidia-dcgm-exporter"):
    return {"metadata": {"labels": {"app": app}}, "spec": {"nodeName": node_name},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_nvidia_gpu_nodes_are_those_with_nvidia_resources():
    assert nvidia_gpu_nodes(NODES) == ["a100", "mig", "t4-shared"]


def test_nodes_without_a_ready_exporter():
    pods = [exporter("a100"), exporter("mig", ready=False), exporter("t4-shared", app="something-else")]
    assert nodes_without_exporter(NODES, pods) == ["mig", "t4-shared"]


def test_nodes_without_series_read_hostname_or_node_labels():
    series = [{"Hostname": "a100"}, {"hostname": "mig"}, {"node": "amd"}]
    assert nodes_without_series(NODES, series) == ["t4-shared"]
