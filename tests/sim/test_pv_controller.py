"""The PersistentVolume controller: binding, waiting for a consumer, handing claims to provisioners."""

from __future__ import annotations

import asyncio

import pytest

from tests.builders.sim import claim, node, pod, storage_class, volume
from tests.sim.storagecluster import events, get, storage_cluster, until

pytestmark = pytest.mark.integration

EXTERNAL = ("Waiting for a volume to be created either by the external provisioner 'sim.gpuspawner.dev/hostpath' "
            "or manually by the system administrator. If volume creation is delayed, please verify that the "
            "provisioner is running and correctly registered.")


def phase(store, plural, name, ns=None):
    obj = get(store, plural, name, ns)
    return obj and obj["status"].get("phase")


async def test_a_static_volume_binds_both_ways():
    async with storage_cluster(node("n1"), volume("pv-1", storage_class_name="manual")) as c:
        s = c.store
        s.create("persistentvolumeclaims", claim("data", storage_class_name="manual"))
        await until(lambda: phase(s, "persistentvolumeclaims", "data", "default") == "Bound", what="bound")
        pvc, pv = s.get("persistentvolumeclaims", "data"), s.get("persistentvolumes", "pv-1")
        assert pvc["spec"]["volumeName"] == "pv-1"
        assert pvc["metadata"]["annotations"] == {"pv.kubernetes.io/bind-completed": "yes",
                                                  "pv.kubernetes.io/bound-by-controller": "yes"}
        assert pvc["status"] == {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}}
        assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
        assert pv["status"]["phase"] == "Bound"


async def test_wait_for_first_consumer_until_a_pod_is_scheduled():
    async with storage_cluster(node("n1", zone="z1"), storage_class("standard", default=True)) as c:
        s = c.store
        s.create("persistentvolumeclaims", claim("home"))
        await until(lambda: events(s, "home"), what="an event")
        assert events(s, "home")[0] == ("WaitForFirstConsumer",
                                        "waiting for first consumer to be created before binding")
        await asyncio.sleep(0.2)
        assert phase(s, "persistentvolumeclaims", "home", "default") == "Pending"
        s.create("pods", pod("nb", claims=("home",)))
        await until(lambda: (get(s, "pods", "nb", "default") or {}).get("spec", {}).get("nodeName"), what="pod bound")
        pvc = s.get("persistentvolumeclaims", "home")
        assert pvc["status"]["phase"] == "Bound"
        assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == "n1"
        assert ("ExternalProvisioning", EXTERNAL) in events(s, "home")


async def test_immediate_claims_are_provisioned_at_once():
    async with storage_cluster(node("n1", zone="z1"), storage_class("fast", mode="Immediate")) as c:
        s = c.store
        s.create("persistentvolumeclaims", claim("data", storage_class_name="fast"))
        await until(lambda: phase(s, "persistentvolumeclaims", "data", "default") == "Bound", what="bound")
        reasons = [r for r, _ in events(s, "data")]
        assert reasons[:2] == ["ExternalProvisioning", "Provisioning"] and "ProvisioningSucceeded" in reasons


@pytest.mark.parametrize("manifests, cls, expected", [
    ((), "", ("FailedBinding", "no persistent volumes available for this claim and no storage class is set")),
    ((), "missing", ("ProvisioningFailed", 'storageclass.storage.k8s.io "missing" not found')),
    ((storage_class("local", mode="Immediate", provisioner="kubernetes.io/no-provisioner"),), "local",
     ("ProvisioningFailed", "no volume plugin matched name: kubernetes.io/no-provisioner")),
], ids=["no-class", "class-missing", "in-tree-name"])
async def test_claims_that_cannot_be_provisioned_say_why(manifests, cls, expected):
    async with storage_cluster(node("n1"), *manifests) as c:
        c.store.create("persistentvolumeclaims", claim("data", storage_class_name=cls))
        await until(lambda: events(c.store, "data"), what="an event")
        assert events(c.store, "data")[0] == expected
        assert phase(c.store, "persistentvolumeclaims", "data", "default") == "Pending"


async def test_a_default_class_created_later_is_assigned_to_waiting_claims():
    async with storage_cluster(node("n1")) as c:
        s = c.store
        s.create("persistentvolumeclaims", claim("home"))
        await until(lambda: events(s, "home"), what="FailedBinding")
        s.create("storageclasses", storage_class("standard", default=True, mode="Immediate"))
        await until(lambda: phase(s, "persistentvolumeclaims", "home", "default") == "Bound", what="bound")
        assert s.get("persistentvolumeclaims", "home")["spec"]["storageClassName"] == "standard"


async def test_a_released_volume_with_retain_stays_released():
    async with storage_cluster(node("n1"), volume("pv-1", storage_class_name="manual")) as c:
        s = c.store
        s.create("persistentvolumeclaims", claim("data", storage_class_name="manual"))
        await until(lambda: phase(s, "persistentvolumes", "pv-1") == "Bound", what="bound")
        s.delete("persistentvolumeclaims", "data")
        await until(lambda: phase(s, "persistentvolumes", "pv-1") == "Released", what="released")
        pv = s.get("persistentvolumes", "pv-1")
        assert pv["status"]["lastPhaseTransitionTime"]


async def test_the_home_volume_in_another_zone_fixture():
    """tests/fixtures/clusters/home-volume-other-zone.yaml: the classic failure, reproduced."""
    from pathlib import Path

    from testcluster.node import loader
    from gpuspawner.sim.cluster import SimCluster

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "clusters" / "home-volume-other-zone.yaml"
    c = SimCluster(cluster_file=fixture, serve_http=False, run_pods=False)
    await c.start()
    try:
        s = c.store
        want = ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had volume node affinity conflict. "
                "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is "
                "not helpful for scheduling.")
        await until(lambda: ("FailedScheduling", want) in events(s, "jupyter-alice", "jupyterhub"), what="the conflict")
        assert phase(s, "persistentvolumeclaims", "claim-alice", "jupyterhub") == "Bound"
        cond = next(x for x in s.get("pods", "jupyter-alice", "jupyterhub")["status"]["conditions"]
                    if x["type"] == "PodScheduled")
        assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", want)
        assert loader.load_file(fixture).nodes
    finally:
        await c.stop()
