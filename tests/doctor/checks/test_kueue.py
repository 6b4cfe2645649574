"""Doctor's Kueue checks (gpuspawner.doctor.checks.kueue): the LocalQueue of a queue rule missing or
behind a stopped ClusterQueue, a GPU flavor whose labels match no GPU pool, a quota larger than the
pool holds, the visibility API not served.  Pure, from objects shaped as Kueue v0.17 serves them."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor.checks import run_checks
from gpuspawner.doctor.checks.kueue import KUEUE_FINDING_IDS, check_kueue
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import FINDING_IDS
from gpuspawner.doctor.kueue import KueueState
from gpuspawner.queue.rules import parse_rules
from tests.builders import GFD_A100, finding_ids, node
from tests.builders import kueue as kb

RULES = parse_rules([{"match": "a100:*", "queue": "gpu-a100"}])
POOL = {"cloud.google.com/gke-nodepool": "a100", **GFD_A100}
NODES = [node("a100-0", {"nvidia.com/gpu": "8"}, POOL), node("a100-1", {"nvidia.com/gpu": "8"}, POOL),
         node("cpu-0")]


def state(**kw):
    base = dict(served=True, namespace="jhub", local_queues=[kb.local_queue("gpu-a100", cluster_queue="cq-a100")],
                cluster_queues=[kb.cluster_queue("cq-a100", gpus=16)], flavors=[kb.resource_flavor("a100")],
                visibility=True)
    return KueueState(**{**base, **kw})


@pytest.mark.parametrize(
    "kueue, ids",
    [
        pytest.param(state(), [], id="healthy"),
        pytest.param(state(served=False), ["kueue-not-installed"], id="not-installed"),
        pytest.param(state(local_queues=[]), ["kueue-localqueue-missing"], id="localqueue-missing"),
        pytest.param(state(cluster_queues=[]), ["kueue-clusterqueue-stopped"], id="clusterqueue-missing"),
        pytest.param(state(cluster_queues=[kb.cluster_queue("cq-a100", gpus=16, stop_policy="HoldAndDrain")]),
                     ["kueue-clusterqueue-stopped"], id="clusterqueue-stopped"),
        pytest.param(state(cluster_queues=[kb.cluster_queue("cq-a100", gpus=16, active=False)]),
                     ["kueue-clusterqueue-stopped"], id="clusterqueue-inactive"),
        pytest.param(state(flavors=[kb.resource_flavor("a100", {"cloud.google.com/gke-nodepool": "a1OO"})]),
                     ["kueue-flavor-matches-no-pool"], id="flavor-typo"),
        pytest.param(state(cluster_queues=[kb.cluster_queue("cq-a100", gpus=24)]), ["kueue-quota-exceeds-pool"],
                     id="quota-above-pool"),
        pytest.param(state(cluster_queues=[kb.cluster_queue("cq-a100", gpus=12, borrowing=8)]),
                     ["kueue-quota-exceeds-pool"], id="borrowing-above-pool"),
        pytest.param(state(cluster_queues=[kb.cluster_queue("cq-a100", gpus="16")]), [], id="quota-as-string"),
        pytest.param(state(visibility=False, visibility_reason="FailedDiscoveryCheck: no response"),
                     ["kueue-visibility-not-served"], id="visibility-not-served"),
        pytest.param(state(webhook=False, webhook_reason="failed calling webhook \"mpod.kb.io\": connection refused"),
                     ["kueue-webhook-unreachable"], id="webhook-unreachable"),
        pytest.param(state(webhook=True), [], id="webhook-gates"),
        pytest.param(state(local_queues=None, cluster_queues=None, flavors=None, visibility=None), [],
                     id="nothing-readable"),
    ],
)
def test_kueue_findings(kueue, ids):
    assert finding_ids(check_kueue(kueue, RULES, NODES, CapacityConfig())) == sorted(ids)


def test_findings_say_what_to_change():
    (missing,) = check_kueue(state(local_queues=[]), RULES, NODES, CapacityConfig())
    assert "LocalQueue gpu-a100 of c.GPUSpawner.gpu_kueue_queues does not exist in namespace jhub" in missing.summary
    (quota,) = check_kueue(state(cluster_queues=[kb.cluster_queue("cq-a100", gpus=24)]), RULES, NODES, CapacityConfig())
    assert "may admit 24 nvidia.com/gpu in flavor a100, but its 2 node(s) hold 16" in quota.summary
    assert quota.details == {"quota": 24, "allocatable": 16}
    (stopped,) = check_kueue(state(cluster_queues=[kb.cluster_queue("cq-a100", stop_policy="Hold")]), RULES, NODES,
                             CapacityConfig())
    assert "its stopPolicy is Hold" in stopped.summary and "kubectl patch clusterqueue cq-a100" in stopped.fix


def test_no_queue_rules_no_kueue_checks():
    assert check_kueue(state(served=False), (), NODES, CapacityConfig()) == []
    assert check_kueue(None, RULES, NODES, CapacityConfig()) == []


def test_run_checks_runs_them_and_their_ids_are_documented():
    from pathlib import Path

    hub = HubFacts(tolerated_taint_keys=("nvidia.com/gpu",), kueue_queues=RULES)
    found = run_checks(NODES, [], config=CapacityConfig(), hub=hub, rbac=None, now=0.0, pending_after=300,
                       kueue=state(local_queues=[]))
    assert "kueue-localqueue-missing" in {f.id for f in found}
    assert set(KUEUE_FINDING_IDS) <= set(FINDING_IDS)
    doc = (Path(__file__).parents[3] / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert [i for i in KUEUE_FINDING_IDS if f"`{i}`" not in doc] == []
