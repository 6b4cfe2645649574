"""Missing and deprecated GPU Feature Discovery labels (doctor.checks.gfd)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import checks
from tests.builders import finding_ids, gpu_node, node

CONFIG = CapacityConfig()


DEPRECATED_ONLY = {
    "nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "183", "nvidia.com/cuda.driver.rev": "01",
    "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "2",
    "nvidia.com/gpu.product": "Tesla-T4",
}


@pytest.mark.parametrize(
    "nodes, expected",
    [
        pytest.param([gpu_node()], [], id="current-labels"),
        pytest.param([gpu_node(labels={})], ["gfd-labels-missing"], id="no-labels"),
        pytest.param([gpu_node(labels={"nvidia.com/gpu.product": "Tesla-T4"})], ["gfd-labels-missing"],
                     id="product-but-no-driver"),
        pytest.param([gpu_node(labels=DEPRECATED_ONLY)], ["gfd-labels-deprecated"], id="deprecated-names-only"),
        pytest.param([node(labels={"nvidia.com/gpu.present": "true"})], [], id="no-allocatable-left-to-node-check"),
        pytest.param([node(allocatable={"amd.com/gpu": "2"})], [], id="amd-not-judged-by-gfd"),
        pytest.param(
            [gpu_node("a", labels={"eks.amazonaws.com/nodegroup": "t4"}),
             gpu_node("b", labels={"eks.amazonaws.com/nodegroup": "t4"}),
             gpu_node("c", labels={"eks.amazonaws.com/nodegroup": "l4"})],
            ["gfd-labels-missing", "gfd-labels-missing"], id="one-finding-per-node-group",
        ),
    ],
)
def test_check_gfd_labels(nodes, expected):
    assert finding_ids(checks.check_gfd_labels(nodes, CONFIG)) == expected


def test_gfd_missing_groups_nodes_and_lists_missing_labels():
    nodes = [gpu_node("a", labels={"eks.amazonaws.com/nodegroup": "t4"}),
             gpu_node("b", labels={"eks.amazonaws.com/nodegroup": "t4"})]
    (f,) = checks.check_gfd_labels(nodes, CONFIG)
    assert [o.name for o in f.objects] == ["a", "b"]
    assert f.details["node_group"] == "t4"
    assert "nvidia.com/gpu.product" in f.details["missing_labels"]
    assert "deploy/label-node-daemonset.yaml" in f.fix
