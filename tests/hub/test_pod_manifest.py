"""Real pod manifests from GPUSpawner.get_pod_manifest(), checked against the
Kubernetes OpenAPI schema of the oldest and newest versions kubernetes-validate
bundles (strict: unknown fields are errors), and for what the pool needs.

No cluster: KubeSpawner's client setup is replaced (``no_kube_client``), the capacity cache faked.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
from kubernetes_asyncio.client import ApiClient

from gpuspawner.capacity.model import ScaleUp, Taint
from tests.builders import FakeCache, MockUser, make_spawner, node_view, pool_view


def _versions() -> tuple[str, str]:
    from pathlib import Path

    schema_dir = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    found = sorted(
        {d.name.split("-")[0].lstrip("v") for d in schema_dir.iterdir() if d.name.endswith("-local-strict")},
        key=lambda v: tuple(int(x) for x in v.split(".")),
    )
    return found[0], found[-1]


OLDEST, NEWEST = _versions()


def node(name, n=8):
    return node_view(name, n, n, "535.183.01", "12.2", "8.0")


def pool(group, product, resource="nvidia.com/gpu", *, labels=None, taints=(), nodes=(), scale_up=None, free=4):
    """A pool with ``free`` of ``free`` GPUs, whatever its nodes hold, pinned by ``labels``."""
    return pool_view(group, product, resource, node_views=nodes, nodes=len(nodes), total=free, free=free,
                     per_node=free, taints=taints, scale_up=scale_up, defining=labels)


GKE_A100 = pool("a100", "NVIDIA-A100-SXM4-80GB",
                labels=(("cloud.google.com/gke-nodepool", "a100"), ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB")),
                taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),), nodes=(node("gke-a100-1"),))
MIG = pool("a100", "NVIDIA-A100-SXM4-80GB", "nvidia.com/mig-1g.10gb", nodes=(node("gke-a100-2", 7),), free=7)
AKS_SPOT = pool(None, "Tesla-T4", labels=(("kubernetes.azure.com/agentpool", "gpuspot"),),
                taints=(Taint("sku", "gpu", "NoSchedule"), Taint("kubernetes.azure.com/scalesetpriority", "spot", "NoSchedule"),
                        Taint("example.com/private", None, "NoSchedule")),
                nodes=(node("aks-gpuspot-0", 1),), free=1)
AMD_UNLABELLED = pool(None, None, "amd.com/gpu", labels=(), nodes=(node("mi300-b"), node("mi300-a")), free=8)
H100_FROM_ZERO = pool("h100", "NVIDIA-H100-80GB-HBM3", taints=(Taint("nvidia.com/gpu", None, "NoSchedule"),),
                      scale_up=ScaleUp(max_nodes=2, gpus_per_node=8, minutes=6), free=0)

POOLS = (GKE_A100, MIG, AKS_SPOT, AMD_UNLABELLED, H100_FROM_ZERO)


@pytest.fixture
def spawner_factory(no_kube_client, install_cache):
    install_cache(FakeCache(*POOLS, age_seconds=0.0, reservations_count=False))

    def make(**traits):
        profiles = [{"slug": "gpu", "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-latest"}}]
        return make_spawner(user=MockUser("ada", id=7), **{"gpu_profiles": profiles, "namespace": "jhub", **traits})

    return make


async def manifest_for(spawner, options):
    spawner.user_options = options
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    async with ApiClient() as api:
        return api.sanitize_for_serialization(pod)


def required_terms(m):
    return m["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


CASES = [
    (
        GKE_A100, 2, {"nvidia.com/gpu": "2"},
        [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a100"]},
         {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]}],
        [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
    ),
    (
        MIG, 3, {"nvidia.com/mig-1g.10gb": "3"},
        [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a100"]}],
        [],
    ),
    (
        AKS_SPOT, 1, {"nvidia.com/gpu": "1"},
        [{"key": "kubernetes.azure.com/agentpool", "operator": "In", "values": ["gpuspot"]}],
        [{"key": "kubernetes.azure.com/scalesetpriority", "operator": "Equal", "value": "spot", "effect": "NoSchedule"},
         {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    ),
    (
        AMD_UNLABELLED, 8, {"amd.com/gpu": "8"},
        [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["mi300-a", "mi300-b"]}],
        [],
    ),
    (
        H100_FROM_ZERO, 8, {"nvidia.com/gpu": "8"},
        [{"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["h100"]}],
        [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    ),
]


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=["oldest-k8s", "newest-k8s"])
@pytest.mark.parametrize(
    "the_pool, gpus, resources, expressions, tolerations",
    CASES,
    ids=["gke-a100-tainted", "mig-slice", "aks-spot-two-taints", "amd-pinned-by-hostname", "scale-from-zero"],
)
async def test_manifest_valid_and_pinned(spawner_factory, version, the_pool, gpus, resources, expressions, tolerations):
    m = await manifest_for(spawner_factory(), {"profile": "gpu", "gpu_pool": the_pool.id, "gpus": gpus})
    kubernetes_validate.validate(m, version, strict=True)
    container = m["spec"]["containers"][0]
    assert container["image"] == "quay.io/jupyter/pytorch-notebook:cuda12-latest"
    for res, count in resources.items():
        assert container["resources"]["limits"][res] == count
        assert container["resources"]["requests"][res] == count
    assert required_terms(m) == [{"matchExpressions": expressions}]
    assert (m["spec"].get("tolerations") or []) == tolerations
    assert m["metadata"]["annotations"]["gpuspawner.io/pool"] == the_pool.id


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=["oldest-k8s", "newest-k8s"])
async def test_admin_constraints_are_kept(spawner_factory, version):
    s = spawner_factory(
        node_selector={"topology.kubernetes.io/region": "europe-west4"},
        node_affinity_required=[
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["europe-west4-a"]}]},
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["europe-west4-b"]}]},
        ],
        tolerations=[{"key": "example.com/hub", "operator": "Exists", "effect": "NoSchedule"}],
        extra_resource_limits={"example.com/infiniband": "1"},
        cpu_limit=4.0,
    )
    m = await manifest_for(s, {"profile": "gpu", "gpu_pool": GKE_A100.id, "gpus": 1})
    kubernetes_validate.validate(m, version, strict=True)
    assert m["spec"]["nodeSelector"] == {"topology.kubernetes.io/region": "europe-west4"}
    pool_exprs = [
        {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a100"]},
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
    ]
    terms = required_terms(m)
    assert [t["matchExpressions"][1:] for t in terms] == [pool_exprs, pool_exprs]
    assert [t["matchExpressions"][0]["values"] for t in terms] == [["europe-west4-a"], ["europe-west4-b"]]
    assert {t["key"] for t in m["spec"]["tolerations"]} == {"example.com/hub", "nvidia.com/gpu"}
    limits = m["spec"]["containers"][0]["resources"]["limits"]
    assert {k: v for k, v in limits.items() if k != "cpu"} == {"example.com/infiniband": "1", "nvidia.com/gpu": "1"}
    assert float(limits["cpu"]) == 4.0


async def test_untolerated_taint_never_added(spawner_factory):
    m = await manifest_for(spawner_factory(), {"profile": "gpu", "gpu_pool": AKS_SPOT.id, "gpus": 1})
    keys = {t["key"] for t in m["spec"]["tolerations"]}
    assert "example.com/private" not in keys
    assert all(t.get("key") and not t["key"].startswith("node.kubernetes.io/") for t in m["spec"]["tolerations"])


# --- the CUDA check: steering off nodes whose driver does not fit, and the probe

def gfd_node(name, driver, cuda, hostname=None):
    return node_view(name, 8, 8, driver, cuda, "8.0", hostname=hostname or name)


UPGRADING = pool("upgrade", "NVIDIA-A100-SXM4-80GB",
                 nodes=(gfd_node("a100-new", "550.54.15", "12.4"), gfd_node("a100-old", "470.82.01", "11.4", "ip-10-0-0-9")),
                 free=8)


@pytest.fixture
def cuda_spawner(spawner_factory, install_cache):
    """A GPU profile whose image declares CUDA 12.4, on a pool mid driver upgrade."""
    install_cache(FakeCache(UPGRADING, GKE_A100, age_seconds=0.0, reservations_count=False))

    def make(**traits):
        s = spawner_factory(**traits)
        s.gpu_profiles = [{"slug": "gpu", "cuda": {"cuda": "12.4", "require": "cuda>=12.4"},
                           "kubespawner_override": {"image": "nvcr.io/nvidia/pytorch:24.05-py3"}}]
        return s

    return make


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=["oldest-k8s", "newest-k8s"])
async def test_steering_and_probe_manifest_is_valid(cuda_spawner, version):
    s = cuda_spawner(
        cuda_probe=True,
        init_containers=[{"name": "admin-init", "image": "busybox", "command": ["true"]}],
        node_affinity_required=[
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]}]},
            {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-b"]}]},
        ],
    )
    m = await manifest_for(s, {"profile": "gpu", "gpu_pool": UPGRADING.id, "gpus": 2})
    kubernetes_validate.validate(m, version, strict=True)
    steer = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["ip-10-0-0-9"]}
    # every ORed term keeps the pod off the old-driver node (by its hostname label, not its name)
    assert [t["matchExpressions"][-1] for t in required_terms(m)] == [steer, steer]
    inits = m["spec"]["initContainers"]
    assert [c["name"] for c in inits] == ["admin-init", "gpuspawner-probe"]
    probe = inits[1]
    assert probe["image"] == "nvcr.io/nvidia/pytorch:24.05-py3"  # the server's own image by default
    assert probe["command"] == ["gpuspawner"]
    assert probe["args"] == ["probe", "--expect-gpus", "2", "--policy", "minor",
                             "--report", "/dev/termination-log", "--cuda", "12.4",
                             "--require", "cuda>=12.4"]
    assert probe["resources"] == {"limits": {"nvidia.com/gpu": "2"}, "requests": {"nvidia.com/gpu": "2"}}
    assert probe["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert probe["env"] == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]


async def test_no_probe_unless_asked_and_admin_probe_image(cuda_spawner):
    m = await manifest_for(cuda_spawner(), {"profile": "gpu", "gpus": 1})
    assert not m["spec"].get("initContainers")
    s = cuda_spawner(cuda_probe=True, cuda_probe_image="ghcr.io/example/probe:1", cuda_policy="strict")
    m = await manifest_for(s, {"profile": "gpu", "gpus": 1})
    (probe,) = m["spec"]["initContainers"]
    assert probe["image"] == "ghcr.io/example/probe:1" and "strict" in probe["args"]


async def test_respawn_does_not_stack_old_terms_or_probes(cuda_spawner):
    s = cuda_spawner(cuda_probe=True)
    first = await manifest_for(s, {"profile": "gpu", "gpu_pool": UPGRADING.id, "gpus": 1})
    again = await manifest_for(s, {"profile": "gpu", "gpu_pool": UPGRADING.id, "gpus": 1})
    assert required_terms(again) == required_terms(first)
    assert [c["name"] for c in again["spec"]["initContainers"]] == ["gpuspawner-probe"]
    # into another pool: only that pool's terms, no NotIn left from the first spawn
    other = await manifest_for(s, {"profile": "gpu", "gpu_pool": GKE_A100.id, "gpus": 1})
    assert required_terms(other) == [{"matchExpressions": [
        {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["a100"]},
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-80GB"]},
    ]}]


def preferred_terms(m):
    return (m["spec"].get("affinity") or {}).get("nodeAffinity", {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution") or []


@pytest.mark.parametrize("version", [OLDEST, NEWEST], ids=["oldest-k8s", "newest-k8s"])
async def test_the_pod_prefers_the_pools_nodes_that_hold_its_image(no_kube_client, install_cache, version):
    warm_pool = pool("a100", "NVIDIA-A100-SXM4-80GB", nodes=(node("a-cold"), node("a-warm"), node("a-full", 0)))
    cache = install_cache(FakeCache(warm_pool, age_seconds=0.0, reservations_count=False))
    image = "quay.io/jupyter/pytorch-notebook:cuda12-latest"
    cache.node_images.update("a-warm", [warm_pool.id], {image: 15 << 30})
    cache.node_images.update("a-full", [warm_pool.id], {image: 15 << 30})
    cache.node_images.update("a-cold", [warm_pool.id], {})
    cache.node_images.update("b-other-pool", ["other"], {image: 15 << 30})
    admin_term = {"weight": 10, "preference": {"matchExpressions": [
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z-a"]}]}}
    s = make_spawner(user=MockUser("ada", id=7), namespace="jhub", node_affinity_preferred=[admin_term],
                     gpu_profiles=[{"slug": "gpu", "kubespawner_override": {"image": image}}])
    m = await manifest_for(s, {"profile": "gpu", "gpu_pool": warm_pool.id, "gpus": 1})
    kubernetes_validate.validate(m, version, strict=True)
    # the admin's own term kept; then the warm node with room, then the warm one without (never the cold
    # node, nor a node of another pool); preferred only: the pool's required terms are unchanged
    assert preferred_terms(m) == [admin_term] + [
        {"weight": 50, "preference": {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [n]}]}}
        for n in ("a-warm", "a-full")]
    # a respawn does not stack the terms
    again = await manifest_for(s, {"profile": "gpu", "gpu_pool": warm_pool.id, "gpus": 1})
    assert preferred_terms(again) == preferred_terms(m)
    # turned off: the admin's own term only, the pod's other terms unchanged
    s.gpu_prefer_warm_nodes = False
    off = await manifest_for(s, {"profile": "gpu", "gpu_pool": warm_pool.id, "gpus": 1})
    kubernetes_validate.validate(off, version, strict=True)
    assert preferred_terms(off) == [admin_term]
    assert required_terms(off) == required_terms(m)
