"""Pod overrides for a chosen pool and count (gpuspawner.spawn.overrides): pure, no network; the pools'
node affinity is also put to the real kube-scheduler."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.model import Taint
from gpuspawner.spawn.overrides import PoolNotPinnable, build_overrides, pool_tolerations
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS as DEFAULT_KEYS
from tests.builders import node_view, pool_view

GKE = "cloud.google.com/gke-nodepool"
PRODUCT = "nvidia.com/gpu.product"


def pool(*, resource="nvidia.com/gpu", labels=((GKE, "a100"), (PRODUCT, "NVIDIA-A100-SXM4-80GB")), taints=(),
         nodes=()):
    """An A100 pool defined by ``labels``, with nodes named ``nodes`` (8 GPUs counted in all)."""
    return pool_view("a100", "NVIDIA-A100-SXM4-80GB", resource, defining=labels, taints=taints,
                     node_views=[node_view(n) for n in nodes], nodes=len(nodes) or 1, total=8, free=8, per_node=8,
                     memory_mib=81920, driver="535.183.01", cuda="12.2")


GKE_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
EKS_TAINT = Taint("nvidia.com/gpu", None, "NoSchedule")
AKS_TAINT = Taint("sku", "gpu", "NoSchedule")
SPOT = Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule")
CORDON = Taint("node.kubernetes.io/unschedulable", None, "NoSchedule")
NOT_READY = Taint("node.kubernetes.io/not-ready", None, "NoExecute")
SITE = Taint("example.com/team", "ml", "NoSchedule")


@pytest.mark.parametrize(
    "taints, allowed, expected",
    [
        ((), DEFAULT_KEYS, []),
        ((GKE_TAINT,), DEFAULT_KEYS, [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]),
        ((EKS_TAINT,), DEFAULT_KEYS, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        (
            (AKS_TAINT, SPOT),
            DEFAULT_KEYS,
            [
                {"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
                {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            ],
        ),
        ((CORDON, NOT_READY, GKE_TAINT), ("*",), [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]),
        ((SITE,), DEFAULT_KEYS, []),
        ((SITE,), ("example.com/*",), [{"key": "example.com/team", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]),
        (
            (GKE_TAINT, Taint("nvidia.com/gpu", "present", "NoExecute")),
            DEFAULT_KEYS,
            [
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoExecute"},
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
            ],
        ),
    ],
    ids=["untainted", "gke-present", "eks-valueless", "aks-sku-and-spot", "never-node-kubernetes-io", "site-taint-not-allowed", "site-taint-allowed", "two-effects"],
)
def test_tolerations(taints, allowed, expected):
    o = build_overrides(pool(taints=taints), 1, allowed_taint_keys=allowed)
    assert o.tolerations == expected
    # never a key-less toleration, which would tolerate every taint
    assert all(t.get("key") for t in o.tolerations)


def test_admin_tolerations_kept_and_not_duplicated():
    admin = [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
             {"key": "example.com/x", "operator": "Exists"}]
    o = build_overrides(pool(taints=(GKE_TAINT,)), 1, allowed_taint_keys=DEFAULT_KEYS, tolerations=admin)
    assert o.tolerations == admin


@pytest.mark.parametrize(
    "labels, nodes, admin_terms, expected",
    [
        (
            ((GKE, "a100"), (PRODUCT, "NVIDIA-A100-SXM4-80GB")),
            (),
            [],
            [{"matchExpressions": [
                {"key": GKE, "operator": "In", "values": ["a100"]},
                {"key": PRODUCT, "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
            ]}],
        ),
        (
            (),
            ("node-b", "node-a"),
            [],
            [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a", "node-b"]}]}],
        ),
        (
            ((GKE, "a100"),),
            (),
            [
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]},
                {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]}]},
            ],
            [
                {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]},
                    {"key": GKE, "operator": "In", "values": ["a100"]},
                ]},
                {"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z2"]},
                    {"key": GKE, "operator": "In", "values": ["a100"]},
                ]},
            ],
        ),
    ],
    ids=["defining-labels", "no-labels-pinned-by-hostname", "ANDed-into-every-admin-term"],
)
def test_required_affinity(labels, nodes, admin_terms, expected):
    o = build_overrides(pool(labels=labels, nodes=nodes), 1, allowed_taint_keys=(), affinity_required=admin_terms)
    assert o.node_affinity_required == expected


def test_pool_without_labels_or_nodes_cannot_be_pinned():
    with pytest.raises(PoolNotPinnable, match="cannot be kept inside"):
        build_overrides(pool(labels=()), 1, allowed_taint_keys=())


@pytest.mark.parametrize(
    "resource, gpus, admin_limits, expected_limits",
    [
        ("nvidia.com/gpu", 1, {}, {"nvidia.com/gpu": "1"}),
        ("nvidia.com/mig-1g.10gb", 3, {}, {"nvidia.com/mig-1g.10gb": "3"}),
        ("amd.com/gpu", 2, {"example.com/fpga": 1}, {"example.com/fpga": "1", "amd.com/gpu": "2"}),
        # an admin's static GPU limit of another kind would make the pod fit no node
        ("amd.com/gpu", 2, {"nvidia.com/gpu": "1"}, {"amd.com/gpu": "2"}),
        ("nvidia.com/gpu", 4, {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "4"}),
    ],
    ids=["nvidia", "mig-slice", "keeps-admin-resources", "drops-other-gpu-kind", "replaces-admin-count"],
)
def test_requests_equal_limits(resource, gpus, admin_limits, expected_limits):
    o = build_overrides(
        pool(resource=resource),
        gpus,
        allowed_taint_keys=(),
        limits=admin_limits,
        guarantees=admin_limits,
        is_gpu_resource=lambda r: r in ("nvidia.com/gpu", "amd.com/gpu") or r.startswith("nvidia.com/mig-"),
    )
    assert o.extra_resource_limits == expected_limits
    assert o.extra_resource_guarantees == expected_limits


@pytest.mark.parametrize("gpus", [0, -1, True, 1.0, "1"], ids=["zero", "negative", "bool", "float", "str"])
def test_count_must_be_positive_int(gpus):
    with pytest.raises(ValueError, match="positive integer"):
        build_overrides(pool(), gpus, allowed_taint_keys=())


def test_pool_tolerations_are_the_admins_then_one_per_allowed_taint():
    admin = [{"key": "example.com/team", "operator": "Exists"}]
    tols = pool_tolerations((SITE, GKE_TAINT, AKS_TAINT, CORDON), DEFAULT_KEYS, admin)
    assert tols == admin + [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    ]
    # build_overrides gives a server exactly these
    o = build_overrides(pool(taints=(SITE, GKE_TAINT, AKS_TAINT, CORDON)), 1, allowed_taint_keys=DEFAULT_KEYS,
                        tolerations=admin)
    assert o.tolerations == tols


# --- pinning a pod to a pool, on nodes as the capacity layer reads them -------------------------

KARPENTER = "karpenter.sh/nodepool"
EKS = "eks.amazonaws.com/nodegroup"
# (name, allocatable GPUs, labels): node groups of several providers (one node with two group
# labels), GFD products or none, MIG with and without its per-profile product label, AMD
PIN_NODES = [
    ("gke-a", {"nvidia.com/gpu": "8"}, {GKE: "a100", PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ("gke-b", {"nvidia.com/gpu": "8"}, {GKE: "a100", PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ("gke-h", {"nvidia.com/gpu": "8"}, {GKE: "a100", PRODUCT: "NVIDIA-H100-80GB-HBM3"}),
    ("both", {"nvidia.com/gpu": "8"}, {GKE: "a100", KARPENTER: "gpu", PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ("karp", {"nvidia.com/gpu": "8"}, {KARPENTER: "a100", PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ("karp-noprod", {"nvidia.com/gpu": "8"}, {KARPENTER: "a100"}),
    ("eks-a100", {"nvidia.com/gpu": "8"}, {EKS: "a100", PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ("bare-1", {"nvidia.com/gpu": "4"}, {}),  # device plugin only: no GFD, no node group
    ("bare-2", {"nvidia.com/gpu": "4"}, {}),
    ("bare-prod", {"nvidia.com/gpu": "4"}, {PRODUCT: "Tesla-T4"}),
    ("mig-full", {"nvidia.com/mig-1g.10gb": "7"},
     {PRODUCT: "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}),
    ("mig-base", {"nvidia.com/mig-1g.10gb": "7"}, {PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ("mig-h100", {"nvidia.com/mig-1g.10gb": "7"}, {PRODUCT: "NVIDIA-H100-80GB-HBM3"}),
    ("mig-bare", {"nvidia.com/mig-1g.10gb": "7"}, {}),
    ("amd", {"amd.com/gpu": "8"}, {"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM"}),
    ("amd-bare", {"amd.com/gpu": "8"}, {}),
]


async def test_a_pool_is_pinned_by_labels_to_its_nodes_and_no_other(real_cluster):
    """Every pool's expressions hold on each of its nodes and on no other node with its GPU
    resource: kube-scheduler (the session's control plane) binds a pod asking for one of the pool's
    GPUs, with the pool's node affinity, to each member and to no other node."""
    from gpuspawner.capacity.config import CapacityConfig
    from gpuspawner.capacity.labels import node_record
    from gpuspawner.capacity.plugin_accounts import PluginAccounts
    from tests.builders import node
    from tests.builders.scheduling import on_node, real_scheduler

    objs = [node(name, gpus, labels) for name, gpus, labels in PIN_NODES]
    ledger = PluginAccounts()
    for obj in objs:
        ledger.upsert_node(node_record(obj, CapacityConfig()))
    pools = ledger.ledger.pools()
    assert len(pools) == 10  # a pool id names the group's value, not its label: the four "a100" groups are one
    async with real_scheduler(real_cluster, objs) as scheduler:
        for p in pools:
            o = build_overrides(p, 1, allowed_taint_keys=())
            assert all(e["key"] != "kubernetes.io/hostname"
                       for t in o.node_affinity_required for e in t["matchExpressions"])
            if p.id == "default:nvidia-a100-sxm4-80gb-mig-1g.10gb:nvidia.com/mig-1g.10gb":
                # its product is read from the MIG label on one node, derived from the GPU's on the other
                assert len(o.node_affinity_required) == 2
            spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": o.node_affinity_required}}}}
            members = {v.name for v in p.node_views}
            landing = set()
            for obj in objs:
                name = obj["metadata"]["name"]
                if await scheduler.binds(on_node(name, spec, resources={"limits": {p.resource: "1"}})):
                    landing.add(name)
            assert landing == members, (p.id, o.node_affinity_required)


def test_an_unlabelled_pool_of_thousands_of_nodes_is_pinned_by_a_few_expressions():
    from gpuspawner.capacity.config import CapacityConfig
    from gpuspawner.capacity.labels import node_record
    from gpuspawner.capacity.plugin_accounts import PluginAccounts

    from tests.builders import node

    ledger = PluginAccounts()
    for i in range(3000):
        ledger.upsert_node(node_record(node(f"gpu-{i}", {"nvidia.com/gpu": "8"}, {}), CapacityConfig()))
    (p,) = ledger.ledger.pools()
    (term,) = build_overrides(p, 1, allowed_taint_keys=()).node_affinity_required
    assert {e["operator"] for e in term["matchExpressions"]} == {"DoesNotExist"}
    assert PRODUCT in {e["key"] for e in term["matchExpressions"]} and len(term["matchExpressions"]) <= 8
