"""``gpuspawner doctor`` on a GPU server stuck on its storage: the ``pod-pending-on-gpu`` fix
names the volume problem (doctor.checks.pending), purely and against the test cluster (the session's
control plane, kube-scheduler's own words) loaded with ``tests/fixtures/clusters/home-volume-other-zone.yaml``."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.commands import doctor
from gpuspawner.doctor import checks
from gpuspawner.doctor.checks.pending import claim_names
from testcluster.nodeagent.client import KNOWN, Client
from tests.builders.nodeagent import loaded, wait_for

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "clusters" / "home-volume-other-zone.yaml"
NOW = 1_800_000_000.0
# kube-scheduler v1.37's VolumeBinding reason (binder.go's ErrReasonNodeConflict)
ZONE_WORDS = "node(s) didn't match PersistentVolume's node affinity"


def pending_pod(message: str, claims: tuple[str, ...] = ("claim-alice",)) -> dict:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return {
        "metadata": {"name": "jupyter-alice", "namespace": "jupyterhub", "creationTimestamp": "2027-01-15T07:00:00Z"},
        "spec": {"containers": [{"name": "nb", "resources": {"limits": {"nvidia.com/gpu": "1"}}}], "volumes": volumes},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]},
    }


@pytest.mark.parametrize(
    "message, phrases",
    [
        pytest.param("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had volume node affinity "
                     "conflict.", ("claim claim-alice", "zone", "WaitForFirstConsumer", "move the data",
                                   "kubectl get pvc -n jupyterhub claim-alice"), id="zone-before-insufficient"),
        pytest.param("0/2 nodes are available: 2 node(s) had no available volume zone.", ("WaitForFirstConsumer",),
                     id="volume-zone-label"),
        pytest.param("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match "
                     "PersistentVolume's node affinity.", ("claim claim-alice", "zone", "WaitForFirstConsumer"),
                     id="zone-1.37-wording"),
        pytest.param('0/2 nodes are available: persistentvolumeclaim "claim-alice" not found.',
                     ("claim-alice does not exist", "storage_pvc_ensure"), id="claim-missing"),
        pytest.param("0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
                     ("claim-alice is not bound", "ProvisioningFailed"), id="unbound-immediate"),
        pytest.param('0/2 nodes are available: persistentvolume "home-alice" not found.',
                     ("home-alice, which no longer exists",), id="volume-gone"),
        # a taint still comes first, as the scheduler's TaintToleration filter does
        pytest.param("0/2 nodes are available: 1 node(s) had untolerated taint {sku: gpu}, 1 node(s) had volume "
                     "node affinity conflict.", ("gpu_tolerated_taint_keys",), id="taint-first"),
    ],
)
def test_the_fix_names_the_volume_problem(message, phrases):
    (f,) = checks.check_pending_pods([pending_pod(message)], CapacityConfig(), NOW, 300)
    for phrase in phrases:
        assert phrase in f.fix, f.fix


def test_claim_names_reads_the_pods_claims_once_in_order():
    pod = pending_pod("x", ("claim-alice", "shared", "claim-alice"))
    pod["spec"]["volumes"].append({"name": "cfg", "configMap": {"name": "c"}})
    assert claim_names(pod) == ("claim-alice", "shared")
    assert claim_names({"spec": {"volumes": ["junk", {"persistentVolumeClaim": "junk"}]}}) == ()


async def test_doctor_names_the_home_volume_in_another_zone(real_cluster):
    async with loaded(real_cluster, FIXTURE):
        client = await Client(real_cluster).open()
        try:
            async def conflict():
                pod = await client.get(KNOWN["Pod"], "jupyter-alice", namespace="jupyterhub")
                return any(c.get("type") == "PodScheduled" and ZONE_WORDS in (c.get("message") or "")
                           for c in pod.get("status", {}).get("conditions") or [])

            await wait_for(conflict, "the scheduler's volume node affinity conflict")
        finally:
            await client.close()
        parser = argparse.ArgumentParser()
        doctor.add_arguments(parser)
        out, err = io.StringIO(), io.StringIO()
        rc = await doctor.run(parser.parse_args(["--kubeconfig", str(real_cluster), "--pending-after", "0", "--json"]),
                              out, err)
    assert rc == 1, err.getvalue()
    alice = [{"kind": "Pod", "name": "jupyter-alice", "namespace": "jupyterhub"}]
    (f,) = [f for f in json.loads(out.getvalue())["findings"] if f["id"] == "pod-pending-on-gpu" and f["objects"] == alice]
    assert ZONE_WORDS in f["summary"]  # the scheduler's own words
    for phrase in ("claim claim-alice", "another zone than the GPU pool", "add GPU nodes in the volume's zone",
                   "volumeBindingMode: WaitForFirstConsumer"):
        assert phrase in f["fix"], f["fix"]
