"""Doctor's DRA checks (doctor.checks.dra), pure: DeviceClasses, slices, claims, nodes published
twice, DRA RBAC; and run_checks with the DRA objects."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.doctor import DRA_FINDING_IDS, FINDING_IDS, checks
from gpuspawner.doctor.checks import dra
from gpuspawner.doctor.dra_state import DraState
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.findings import SEVERITIES, Finding, ObjectRef
from gpuspawner.doctor.rbac import RbacCheck, RbacFacts
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders.dra import device_class, gpu_device, group_node, mig_device, resource_claim, resource_slice

CONFIG = CapacityConfig()
NOW = 1_800_000_000.0
CLASSES = [device_class("gpu.nvidia.com", device_type="gpu"), device_class("mig.nvidia.com", device_type="mig")]


def run(state, nodes=()):
    return dra.check_dra(state, list(nodes), config=CONFIG, subject="the hub", now=NOW, pending_after=300)


def ids(findings):
    return [f.id for f in findings]


def at(seconds_ago):
    return datetime.fromtimestamp(NOW - seconds_ago, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def healthy():
    return DraState(served=True, classes=list(CLASSES), claims=[],
                    slices=[resource_slice("d1-s", "d1", [gpu_device("gpu-0")]),
                            resource_slice("m1-s", "m1", [mig_device("gpu-0-mig-0")])])


def test_a_healthy_dra_cluster_and_one_without_dra():
    nodes = [group_node("d1", "dra"), group_node("m1", "dra")]
    assert run(healthy(), nodes) == []
    assert run(DraState(served=False), nodes) == [] and run(None, nodes) == []


def test_devices_no_class_takes():
    state = healthy()
    state.classes = [CLASSES[0], device_class("big", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0")]
    (f,) = run(state, [group_node("d1"), group_node("m1")])
    assert (f.id, f.severity, f.objects) == ("dra-no-deviceclass", "error", (ObjectRef("Node", "m1"),))
    assert "gpu.nvidia.com publishes mig devices on m1" in f.summary and "big" in f.summary
    assert "type == 'mig'" in f.fix


def test_gpus_published_by_both_paths():
    nodes = [group_node("d1", allocatable={"nvidia.com/gpu": "1"}), group_node("m1")]
    (f,) = run(healthy(), nodes)
    assert (f.id, f.severity, f.details) == ("dra-gpus-published-twice", "error", {"nodes": ["d1"]})


def test_incomplete_pool():
    state = healthy()
    state.slices.append(resource_slice("d2-a", "d2", [gpu_device("gpu-0")], count=2))
    (f,) = run(state, [group_node("d1"), group_node("m1"), group_node("d2")])
    assert (f.id, f.severity, f.details) == ("dra-slices-incomplete", "warning", {"pools": ["gpu.nvidia.com/d2"]})


@pytest.mark.parametrize(
    "claim, stuck",
    [
        ({"creationTimestamp": at(600)}, True),
        ({"creationTimestamp": at(60)}, False),
        ({"creationTimestamp": at(600), "deletionTimestamp": at(5)}, False),
    ],
    ids=["old-unallocated", "young", "being-deleted"],
)
def test_claims_without_devices(claim, stuck):
    state = healthy()
    c = resource_claim("jupyter-ada-gpuspawner-gpus-x1", owner_pod="jupyter-ada")
    c["metadata"].update(claim)
    done = resource_claim("allocated", devices=[("d1", "gpu-0")])
    done["metadata"]["creationTimestamp"] = at(3600)
    state.claims = [c, done]
    found = run(state, [group_node("d1"), group_node("m1")])
    assert ids(found) == (["dra-claim-unallocated"] if stuck else [])
    if stuck:
        assert found[0].objects == (ObjectRef("ResourceClaim", "jupyter-ada-gpuspawner-gpus-x1", "jhub"),)


def test_dra_rights_missing():
    state = healthy()
    state.rbac = (RbacCheck("list", "resourceslices", None, False, "SubjectAccessReview"),
                  RbacCheck("create", "resourceclaimtemplates", "jhub", False, "SubjectAccessReview"),
                  RbacCheck("watch", "resourceclaims", None, True, "SubjectAccessReview"))
    (f,) = run(state, [group_node("d1"), group_node("m1")])
    assert (f.id, f.severity) == ("dra-rbac-missing", "warning")
    assert "resource.k8s.io resourceslices: list at the cluster scope" in f.summary
    assert "resourceclaimtemplates: create in namespace jhub" in f.summary
    assert "device-plugin pools are unaffected" in f.summary


def test_device_plugin_findings_dra_explains_are_dropped():
    no_alloc = Finding("gpu-node-no-allocatable", "error", "x", "y", (ObjectRef("Node", "d1"),))
    other = Finding("gpu-node-no-allocatable", "error", "x", "y", (ObjectRef("Node", "old-gpu"),))
    none = Finding("no-gpu-nodes", "warning", "x", "y")
    assert dra.reconcile([no_alloc, other, none], healthy(), CONFIG) == [other]
    assert dra.reconcile([no_alloc, none], DraState(served=False), CONFIG) == [no_alloc, none]


def test_run_checks_adds_the_dra_findings_errors_first():
    hub = HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS, source="hub.py")
    # m1: GFD's GPU count but no extended resource, as on a node whose GPUs a DRA driver publishes
    nodes = [group_node("d1", allocatable={"nvidia.com/gpu": "1"}), group_node("m1", labels={"nvidia.com/gpu.count": "1"})]
    state = healthy()
    state.rbac = (RbacCheck("list", "resourceslices", None, False, "SubjectAccessReview"),)
    rbac = RbacFacts("the hub's service account", ())
    plugin = checks.run_checks(nodes, [], config=CONFIG, hub=hub, rbac=rbac, now=NOW, pending_after=300)
    found = checks.run_checks(nodes, [], config=CONFIG, hub=hub, rbac=rbac, now=NOW, pending_after=300, dra=state)
    severities = [f.severity for f in found]
    assert "dra-gpus-published-twice" not in ids(plugin) and "gpu-node-no-allocatable" in ids(plugin)
    assert "dra-gpus-published-twice" in ids(found) and severities == sorted(severities, key=SEVERITIES.index)
    (denied,) = [f for f in found if f.id == "dra-rbac-missing"]
    assert denied.summary.startswith("the hub's service account may not: resource.k8s.io resourceslices")
    # m1 publishes its GPUs through DRA: it is no "GPU node without allocatable GPUs"
    assert "gpu-node-no-allocatable" not in ids(found)


def test_every_dra_finding_is_documented():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "troubleshooting.md").read_text()
    assert set(DRA_FINDING_IDS) <= set(FINDING_IDS)
    assert [i for i in DRA_FINDING_IDS if f"`{i}`" not in doc] == []
