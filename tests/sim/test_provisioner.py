"""The simulated dynamic provisioner: volumes where the pod goes, deleted with their claim."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.builders.sim import claim, node, pod, storage_class
from tests.sim.storagecluster import events, get, storage_cluster, until

pytestmark = pytest.mark.integration

ZONE = "topology.kubernetes.io/zone"


def volume_of(store, claim_name):
    pvc = store.get("persistentvolumeclaims", claim_name)
    return store.get("persistentvolumes", pvc["spec"]["volumeName"]) if pvc["spec"].get("volumeName") else None


async def test_a_volume_follows_the_pod_to_its_zone_and_goes_with_its_claim():
    gpu_taint = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    async with storage_cluster(node("cpu-a", zone="zone-a"), node("gpu-b", zone="zone-b", gpus=2, taints=[gpu_taint]),
                               storage_class("standard", default=True)) as c:
        s = c.store
        s.create("persistentvolumeclaims", claim("home", size="5Gi"))
        s.create("pods", pod("nb", gpus=1, claims=("home",),
                             tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]))
        await until(lambda: (get(s, "pods", "nb", "default") or {}).get("spec", {}).get("nodeName"), what="scheduled")
        assert s.get("pods", "nb")["spec"]["nodeName"] == "gpu-b"
        pv = volume_of(s, "home")
        pvc = s.get("persistentvolumeclaims", "home")
        assert pv["metadata"]["name"] == f"pvc-{pvc['metadata']['uid']}"
        assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "sim.gpuspawner.dev/hostpath"
        assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"] == [
            {"key": ZONE, "operator": "In", "values": ["zone-b"]}]
        assert (pv["spec"]["capacity"], pv["spec"]["persistentVolumeReclaimPolicy"]) == ({"storage": "5Gi"}, "Delete")
        path = Path(pv["spec"]["hostPath"]["path"])
        assert path.is_dir()
        assert ("Provisioning", 'External provisioner is provisioning volume for claim "default/home"') in \
            events(s, "home")
        assert ("ProvisioningSucceeded", f"Successfully provisioned volume {pv['metadata']['name']}") in \
            events(s, "home")
        # the claim is in use: deleting it waits for the pod (pvc-protection)
        s.delete("persistentvolumeclaims", "home")
        assert get(s, "persistentvolumeclaims", "home", "default")["metadata"]["deletionTimestamp"]
        s.delete("pods", "nb", grace_period_seconds=0)
        await until(lambda: get(s, "persistentvolumes", pv["metadata"]["name"]) is None, what="the volume deleted")
        assert get(s, "persistentvolumeclaims", "home", "default") is None
        assert not path.exists()


async def test_immediate_volumes_go_to_the_first_allowed_zone():
    async with storage_cluster(node("n-a", zone="a"), node("n-b", zone="b"), node("n-c", zone="c"),
                               storage_class("zonal", mode="Immediate", zones=["c", "b"])) as c:
        c.store.create("persistentvolumeclaims", claim("data", storage_class_name="zonal"))
        await until(lambda: volume_of(c.store, "data"), what="provisioned")
        terms = volume_of(c.store, "data")["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == ["b"]


async def test_a_selected_node_that_is_gone_fails_provisioning_and_is_unselected():
    async with storage_cluster(node("n1"), storage_class("standard")) as c:
        s = c.store
        s.create("persistentvolumeclaims", {**claim("home", storage_class_name="standard"),
                                            "metadata": {"name": "home", "annotations": {
                                                "volume.kubernetes.io/selected-node": "gone"}}})
        await until(lambda: any(r == "ProvisioningFailed" for r, _ in events(s, "home")), what="failure")
        assert ("ProvisioningFailed", 'failed to provision volume with StorageClass "standard": failed to get '
                'target node: nodes "gone" not found') in events(s, "home")
        await until(lambda: "volume.kubernetes.io/selected-node" not in
                    (s.get("persistentvolumeclaims", "home")["metadata"].get("annotations") or {}), what="unselected")
