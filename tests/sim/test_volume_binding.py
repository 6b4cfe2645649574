"""The scheduler's volume plugins, with the real FailedScheduling words."""

from __future__ import annotations

import pytest

from gpuspawner.sim import plugins, volume_binding
from testcluster.node.pod_resources import pod_requests
from tests.builders.sim import claim, node, pod, storage_class, volume

BOUND = {"pv.kubernetes.io/bind-completed": "yes"}


def _claim(name, *, bound_to=None, **kw):
    c = claim(name, namespace="hub", **kw)
    if bound_to:
        c["spec"]["volumeName"] = bound_to
        c["metadata"]["annotations"] = dict(BOUND)
    return c


def view(claims=(), volumes=(), classes=()):
    return volume_binding.StorageView({c["metadata"]["name"]: c for c in claims}, {v["metadata"]["name"]: v for v in volumes},
                          {c["metadata"]["name"]: c for c in classes})


def run(p, nodes, v):
    infos = [plugins.NodeInfo(n) for n in nodes]
    volumes = volume_binding.prefilter(p, v)
    feasible, statuses, pre = plugins.evaluate(p, infos, pod_requests(p), plugins.MessageStyle(), volumes)
    return [i.name for i in feasible], plugins.fit_error_message(len(infos), statuses, p, plugins.MessageStyle(), pre)


NODES = [node("a-1", zone="a"), node("b-1", zone="b")]


@pytest.mark.parametrize("claims, volumes, classes, feasible, message", [
    ([], [], [], [], '0/2 nodes are available: persistentvolumeclaim "home" not found. preemption: 0/2 nodes are '
                     "available: 2 Preemption is not helpful for scheduling."),
    ([_claim("home", storage_class_name="fast")], [], [storage_class("fast", mode="Immediate")], [],
     "0/2 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/2 nodes are "
     "available: 2 Preemption is not helpful for scheduling."),
    ([_claim("home", bound_to="pv-a")], [volume("pv-a", zone="a")], [], ["a-1"], None),
    ([_claim("home", bound_to="pv-gone")], [], [], [],
     '0/2 nodes are available: persistentvolume "pv-gone" not found. preemption: 0/2 nodes are available: 2 '
     "Preemption is not helpful for scheduling."),
    ([_claim("home", storage_class_name="standard")], [], [storage_class("standard")], ["a-1", "b-1"], None),
    ([_claim("home", storage_class_name="zonal")], [], [storage_class("zonal", zones=["b"])], ["b-1"], None),
    ([_claim("home", storage_class_name="local")], [],
     [storage_class("local", provisioner="kubernetes.io/no-provisioner")], [],
     "0/2 nodes are available: 2 node(s) didn't find available persistent volumes to bind. preemption: 0/2 nodes "
     "are available: 2 Preemption is not helpful for scheduling."),
    ([_claim("home", bound_to="pv-z")], [volume("pv-z", labels={"topology.kubernetes.io/zone": "a__c"})], [],
     ["a-1"], None),
], ids=["claim-missing", "unbound-immediate", "bound-zone-fits-one", "pv-missing", "wffc-provisionable",
        "allowed-topologies", "no-provisioner", "volume-zone-label"])
def test_volume_rules(claims, volumes, classes, feasible, message):
    got, msg = run(pod("nb", claims=("home",)), NODES, view(claims, volumes, classes))
    assert got == feasible
    if message:
        assert msg == message


def test_the_gpu_server_whose_home_volume_is_in_another_zone():
    gpu = node("gpu-b", zone="b", gpus=4, taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    p = pod("jupyter-alice", gpus=1, claims=("home",),
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    got, msg = run(p, [node("cpu-a", zone="a"), gpu],
                   view([_claim("home", bound_to="pv-a")], [volume("pv-a", zone="a")]))
    assert got == []
    assert msg == ("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) had volume node affinity "
                   "conflict. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
                   "1 Preemption is not helpful for scheduling.")


def test_ephemeral_volume_claims_wait_for_their_controller():
    p = pod("nb")
    p["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    assert volume_binding.prefilter(p, view()).message == ('waiting for ephemeral volume controller to create the '
                                               'persistentvolumeclaim "nb-scratch"')


def test_decisions_prefer_a_static_volume_and_provision_the_rest():
    claims = [_claim("small", storage_class_name="s", size="1Gi"), _claim("big", storage_class_name="s", size="50Gi")]
    pv = dict(volume("pv-5", size="5Gi", storage_class_name="s", zone="a"), status={"phase": "Available"})
    volumes = volume_binding.prefilter(pod("nb", claims=("small", "big")), view(claims, [pv], [storage_class("s")]))
    static, provision = volumes.decisions(NODES[0])
    assert [(v["metadata"]["name"], c["metadata"]["name"]) for v, c in static] == [("pv-5", "small")]
    assert [c["metadata"]["name"] for c in provision] == ["big"]
    # on node b the zonal volume does not fit: both are provisioned there
    static, provision = volumes.decisions(NODES[1])
    assert static == [] and len(provision) == 2


def test_a_claim_selected_for_another_node_binds_only_there():
    c = _claim("home", storage_class_name="s")
    c["metadata"]["annotations"] = {"volume.kubernetes.io/selected-node": "b-1"}
    got, msg = run(pod("nb", claims=("home",)), NODES, view([c], [], [storage_class("s")]))
    assert got == ["b-1"]
