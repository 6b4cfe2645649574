"""Taints on GPU nodes that no GPU server tolerates (doctor.checks.taints), judged by the spawn
layer's rule."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import checks
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders import finding_ids, gpu_node, node

CONFIG = CapacityConfig()
DEFAULT_HUB = HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS)


def taint(key, effect="NoSchedule", value=None):
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


@pytest.mark.parametrize(
    "taints, hub, expected",
    [
        pytest.param([taint("nvidia.com/gpu", value="present")], DEFAULT_HUB, [], id="gke-gpu-taint-default"),
        pytest.param([taint("sku", value="gpu")], DEFAULT_HUB, [], id="aks-sku-taint-default"),
        pytest.param([taint("dedicated", value="ml")], DEFAULT_HUB, ["untolerated-gpu-taint"], id="dedicated"),
        pytest.param([taint("dedicated", "NoExecute")], DEFAULT_HUB, ["untolerated-gpu-taint"], id="noexecute"),
        pytest.param([taint("dedicated", "PreferNoSchedule")], DEFAULT_HUB, [], id="prefer-only-steers"),
        pytest.param([taint("node.kubernetes.io/unschedulable")], DEFAULT_HUB, [], id="lifecycle-taint-ignored"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=("dedicated",), source="c.py"), [], id="allowed-key"),
        pytest.param([taint("example.com/reserved")],
                     HubFacts(tolerated_taint_keys=("example.com/*",), source="c.py"), [], id="allowed-glob"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=(), source="c.py",
                              tolerations=({"key": "dedicated", "operator": "Equal", "value": "ml",
                                            "effect": "NoSchedule"},)),
                     [], id="admin-toleration-equal"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=(), source="c.py",
                              tolerations=({"key": "dedicated", "operator": "Equal", "value": "other"},)),
                     ["untolerated-gpu-taint"], id="admin-toleration-wrong-value"),
        pytest.param([taint("dedicated", value="ml")],
                     HubFacts(tolerated_taint_keys=(), source="c.py",
                              tolerations=({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},)),
                     ["untolerated-gpu-taint"], id="admin-toleration-wrong-effect"),
        pytest.param([taint("nvidia.com/gpu")], HubFacts(tolerated_taint_keys=(), source="c.py"),
                     ["untolerated-gpu-taint"], id="admin-removed-default-keys"),
    ],
)
def test_check_taints(taints, hub, expected):
    assert finding_ids(checks.check_taints([gpu_node(taints=taints)], hub, CONFIG)) == expected


def test_taint_finding_groups_nodes_and_gives_both_fixes():
    nodes = [gpu_node("a", taints=[taint("dedicated", value="ml")]),
             gpu_node("b", taints=[taint("dedicated", value="ml")]),
             node("cpu", taints=[taint("dedicated", value="ml")])]
    (f,) = checks.check_taints(nodes, DEFAULT_HUB, CONFIG)
    assert [o.name for o in f.objects] == ["a", "b"]
    assert 'c.GPUSpawner.gpu_tolerated_taint_keys.append("dedicated")' in f.fix
    assert "kubectl taint nodes a dedicated:NoSchedule-" in f.fix
    assert "default gpu_tolerated_taint_keys" in f.summary


def test_default_tolerated_keys_match_the_spawner_trait():
    from gpuspawner.hub.spawner import GPUSpawner

    assert tuple(GPUSpawner.class_traits()["gpu_tolerated_taint_keys"].default()) == DEFAULT_TOLERATED_TAINT_KEYS
