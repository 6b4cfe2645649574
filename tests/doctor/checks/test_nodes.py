"""GPU nodes without allocatable GPUs, not Ready, cordoned; no GPU node at all (doctor.checks.nodes)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import checks
from tests.builders import GFD_A100_40GB
from tests.builders import finding_ids, gpu_node, node

CONFIG = CapacityConfig()


@pytest.mark.parametrize(
    "nodes, expected",
    [
        pytest.param([gpu_node()], [], id="healthy-gpu-node"),
        pytest.param(
            [node(labels={"feature.node.kubernetes.io/pci-10de.present": "true"}), gpu_node("ok")],
            ["gpu-node-no-allocatable"], id="nfd-nvidia-no-allocatable",
        ),
        pytest.param(
            [node(labels={"nvidia.com/gpu.present": "true"}, allocatable={"nvidia.com/gpu": "0"})],
            ["gpu-node-no-allocatable"], id="operator-label-zero-allocatable",
        ),
        pytest.param(
            [node(labels={"feature.node.kubernetes.io/pci-1002.present": "true"})],
            ["gpu-node-no-allocatable"], id="amd-pci-no-allocatable",
        ),
        pytest.param(
            [node(capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "0"})],
            ["gpu-node-no-allocatable"], id="unhealthy-gpus-capacity-only",
        ),
        pytest.param(
            [node(labels={"nvidia.com/mig.strategy": "mixed", **GFD_A100_40GB},
                  allocatable={"nvidia.com/mig-1g.10gb": "7"})],
            [], id="mig-mixed-counts-as-allocatable",
        ),
        pytest.param(
            [node(labels={"feature.node.kubernetes.io/pci-10de.present": "false"})],
            ["no-gpu-nodes"], id="nfd-label-false-is-not-a-gpu",
        ),
        pytest.param([node("cpu-0")], ["no-gpu-nodes"], id="cpu-only-cluster"),
        pytest.param([gpu_node(ready="False", reason="KubeletNotReady")], ["gpu-node-not-ready"], id="not-ready"),
        pytest.param([gpu_node(ready="Unknown")], ["gpu-node-not-ready"], id="unreachable"),
        pytest.param([gpu_node(ready=None)], ["gpu-node-not-ready"], id="no-ready-condition"),
        pytest.param([gpu_node(unschedulable=True)], ["gpu-node-cordoned"], id="cordoned"),
        pytest.param([node("cpu-0", unschedulable=True, ready="False"), gpu_node()], [], id="cpu-node-state-ignored"),
    ],
)
def test_check_nodes(nodes, expected):
    assert finding_ids(checks.check_nodes(nodes, CONFIG)) == expected


def test_no_allocatable_fix_names_the_operator_deploy_label():
    n = node("gpu-x", labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.deploy.device-plugin": "false"})
    (f,) = checks.check_nodes([n], CONFIG)
    assert f.severity == "error"
    assert f.objects[0].name == "gpu-x"
    assert "kubectl label node gpu-x nvidia.com/gpu.deploy.device-plugin=true --overwrite" in f.fix


def test_not_ready_reports_the_kubelet_reason_and_a_command():
    (f,) = checks.check_nodes([gpu_node(ready="False", reason="KubeletNotReady", message="PLEG is not healthy")],
                              CONFIG)
    assert "KubeletNotReady" in f.summary and "PLEG is not healthy" in f.summary
    assert f.fix.startswith("kubectl describe node gpu-0")


def test_cordoned_fix_is_uncordon():
    (f,) = checks.check_nodes([gpu_node("g7", unschedulable=True)], CONFIG)
    assert f.severity == "warning" and "kubectl uncordon g7" in f.fix


def test_custom_gpu_resource_is_recognised():
    config = CapacityConfig(gpu_resources=("example.com/gpu",))
    assert finding_ids(checks.check_nodes([node(allocatable={"example.com/gpu": "2"})], config)) == []
    assert finding_ids(checks.check_nodes([node(allocatable={"example.com/gpu": "2"})], CONFIG)) == ["no-gpu-nodes"]
