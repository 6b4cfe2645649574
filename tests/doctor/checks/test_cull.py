"""doctor.checks.cull: GPU nodes whose activity the culler cannot see (``cull-no-gpu-metrics``)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import checks
from gpuspawner.doctor.checks.cull import CullSetup, check_cull_coverage
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.gather import GatherError
from gpuspawner.doctor.prometheus import series_from_vector
from gpuspawner.doctor.rbac import RbacFacts
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders.sim import node


def exporter(node_name: str, *, ready: bool = True) -> dict:
    return {"metadata": {"name": f"dcgm-{node_name}", "namespace": "gpu-operator",
                         "labels": {"app": "nvidia-dcgm-exporter"}},
            "spec": {"nodeName": node_name},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}}


NODES = [node("gpu-a", gpus=2), node("gpu-b", gpus=1), node("cpu-a")]


@pytest.mark.parametrize("pods, series, want", [
    # (pods, Prometheus label sets or None, [(node, details.missing)])
    ([exporter("gpu-a"), exporter("gpu-b")], None, []),
    ([exporter("gpu-a")], None, [("gpu-b", "exporter")]),
    ([exporter("gpu-a"), exporter("gpu-b", ready=False)], None, [("gpu-b", "exporter")]),
    ([exporter("gpu-a"), exporter("gpu-b")], [{"Hostname": "gpu-a"}], [("gpu-b", "series")]),
    ([exporter("gpu-a"), exporter("gpu-b")], [{"Hostname": "gpu-a"}, {"Hostname": "gpu-b"}], []),
    # a node without an exporter is reported for that only, not also for its missing series
    ([exporter("gpu-a")], [], [("gpu-a", "series"), ("gpu-b", "exporter")]),
    (None, [{"Hostname": "gpu-a"}], [("gpu-b", "series")]),  # pods not listed: Prometheus' view only
])
def test_each_unseen_gpu_node_is_one_finding(pods, series, want):
    found = check_cull_coverage(NODES, pods, series, "http://prom:9090" if series is not None else None)
    got = sorted(((f.objects[0].name, f.details["missing"]) for f in found))
    assert got == sorted(want)
    assert all(f.id == "cull-no-gpu-metrics" and f.severity == "warning" for f in found)
    assert all("nothing on this node is ever culled" in f.summary for f in found)


def test_run_checks_asks_only_when_culling_is_configured():
    hub = HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS)
    kw = dict(config=CapacityConfig(), hub=hub, rbac=RbacFacts("me", ()), now=0.0, pending_after=300)
    assert "cull-no-gpu-metrics" not in {f.id for f in checks.run_checks(NODES, [], **kw)}
    found = checks.run_checks(NODES, [], cull=CullSetup(), **kw)
    assert sorted(f.objects[0].name for f in found if f.id == "cull-no-gpu-metrics") == ["gpu-a", "gpu-b"]


def test_a_prometheus_answer_gives_its_label_sets_or_a_one_line_error():
    doc = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"Hostname": "gpu-a"}, "value": [1, "2"]}]}}
    assert series_from_vector("u", doc) == ({"Hostname": "gpu-a"},)
    with pytest.raises(GatherError, match="answered an error: bad_data"):
        series_from_vector("u", {"status": "error", "error": "bad_data"})
    with pytest.raises(GatherError, match="no vector"):
        series_from_vector("u", {"status": "success", "data": {"resultType": "matrix", "result": []}})
