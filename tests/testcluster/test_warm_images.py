"""Warm images on Kubernetes' own control plane: the node agent's kubelets pull with a delay
proportional to the image's size and report what they hold in ``status.images``; the capacity cache
counts it per pool as the pulls finish; a server spawned by GPUSpawner lands on a warm node when one
has room, and on a cold one when none has (a preference, never a requirement)."""

from __future__ import annotations

import time

from kubernetes_asyncio.client import ApiClient

from gpuspawner.cuda import decide
from gpuspawner.hub.poolimages import images_json
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.prepull.kube import KubeDaemonSets
from gpuspawner.prepull.plan import PrepullSettings, plan
from gpuspawner.prepull.reconcile import reconcile
from gpuspawner.spawn.cuda_fit import pool_fit
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers
from tests.builders import GFD_A100_40GB, GKE, MockUser, make_spawner, node
from tests.builders.dra import device_classes, dra_node, gpu_slice
from tests.builders.nodeagent import wait_for

NAMESPACE = "pw-jhub"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
CU124, CU114 = "example.org/pt:cu124", "example.org/pt:cu114"
# 2 GB and 1 GB at 500 MB/s: a first pull takes 4 s and 2 s on each node
SIZES = {CU124: 2_000_000_000, CU114: 1_000_000_000}
RATE = 500e6
PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": CU124},
    "pools": {"include": ["pw-*"]},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu114": {"kubespawner_override": {"image": CU114}, "cuda": "11.4"},
    }}},
}
NODES = [f"pw-a100-{i}" for i in range(3)]
WARM = "pw-a100-1"


def cluster_objects() -> list[dict]:
    return [node(n, {"nvidia.com/gpu": "4", "pods": "110"}, {GKE: "pw-a100", **GFD_A100_40GB}, taints=[GPU_TAINT])
            for n in NODES]


def pinned_pod(name: str, on: str, image: str, gpus: int = 0) -> dict:
    """A pod bound to node ``on`` (no scheduler), tolerating the GPU taint."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": on, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                     "containers": [{"name": "c", "image": image, "resources": {"limits": limits}}]}}


async def test_cached_counts_rise_as_pulls_finish_and_a_spawn_prefers_a_warm_node(agent_and_cache, no_kube_client,
                                                                                   monkeypatch):
    async with agent_and_cache(cluster_objects(), NAMESPACE, image_sizes=SIZES, pull_bytes_per_second=RATE) \
            as (cache, core):
        monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", lambda self: cache)

        async def the_pool():
            return next((p for p in cache.snapshot().pools if p.node_group == "pw-a100" and p.nodes == 3), None)

        pool = await wait_for(the_pool, "the capacity cache sees the pool's 3 nodes", timeout=90)

        def cached(image: str) -> int:
            entry = images_json(pool.id, (image,), cache.node_images)[image]
            assert entry["nodes"] == 3
            return entry["cached_nodes"]

        assert (cached(CU124), cached(CU114)) == (0, 0)

        # one node pulls the image: counted once the pull is done (4 s), not when it starts
        began = time.monotonic()
        await core.create_namespaced_pod(NAMESPACE, pinned_pod("warm-up", WARM, CU124))
        seen: list[int] = []

        async def one_warm():
            seen.append(cached(CU124))
            return seen[-1] == 1

        await wait_for(one_warm, "the node that pulled the image is counted", timeout=90)
        assert time.monotonic() - began >= 3.5 and seen[0] == 0 and sorted(seen) == seen
        assert cache.node_images.size(CU124) == SIZES[CU124]  # the size the kubelet reports

        async def spawn(name: str) -> tuple[dict, str]:
            """GPUSpawner's pod for 1 GPU of the pool, created; (its manifest, the node it lands on)."""
            spawner = make_spawner(name, user=MockUser(name), namespace=NAMESPACE, gpu_profiles=[PROFILE],
                                   cuda_policy="strict")
            spawner.user_options = {"profile": "gpu", "gpu_pool": pool.id, "gpus": 1}
            await spawner.load_user_options()
            async with ApiClient() as api:
                manifest = api.sanitize_for_serialization(await spawner.get_pod_manifest())
            await core.create_namespaced_pod(NAMESPACE, manifest)

            async def bound():
                return (await core.read_namespaced_pod(manifest["metadata"]["name"], NAMESPACE)).spec.node_name

            return manifest, await wait_for(bound, f"{name}'s server is scheduled", timeout=90)

        # a warm node with room: the server lands there, whichever node the scheduler would pick
        manifest, landed = await spawn("ada")
        preferred = manifest["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert [t["preference"]["matchFields"][0]["values"] for t in preferred] == [[WARM]]
        assert landed == WARM

        # the warm node full (3 more GPUs): the next server goes to a cold node at once
        await core.create_namespaced_pod(NAMESPACE, pinned_pod("fill", WARM, CU124, gpus=3))

        async def warm_full():
            snap = cache.snapshot().pool(pool.id)
            return snap is not None and [v.free for v in snap.node_views if v.name == WARM] == [0]

        await wait_for(warm_full, "the warm node's GPUs are all taken", timeout=90)
        _, landed = await spawn("bea")
        assert landed in set(NODES) - {WARM}

        # the pre-puller warms the whole pool: the counts rise to every node as the pulls finish
        def wanted():
            snapshot = cache.snapshot()
            offers = build_offers([GPUProfileSpec.from_config(PROFILE)], snapshot,
                                  fit=lambda image, p: pool_fit(image, p, "strict", decide))
            return plan(offers, snapshot.pools, PrepullSettings(namespace=NAMESPACE,
                                                                allowed_taint_keys=("nvidia.com/gpu",)))[0]

        await reconcile(KubeDaemonSets(core.api_client, NAMESPACE), wanted())
        rising: list[tuple[int, int]] = []

        async def all_warm():
            rising.append((cached(CU124), cached(CU114)))
            return rising[-1] == (3, 3)

        await wait_for(all_warm, "every node of the pool holds both images", timeout=90)
        assert rising[0][1] < 3 and all(a[0] <= b[0] and a[1] <= b[1] for a, b in zip(rising, rising[1:]))


DRA_NODES = [f"pw-h100-{i}" for i in range(2)]


async def test_a_dra_pools_cached_count_rises_on_the_nodes_its_slices_name(agent_and_cache):
    """A DRA pool's nodes publish no extended resource: the count follows the nodes its ResourceSlices
    name, as the capacity cache's DRA informers see them on Kubernetes' own API server."""
    objects = [*device_classes().values()]
    for name in DRA_NODES:
        objects += [dra_node(name, {GKE: "pw-h100"}), gpu_slice(name, product="NVIDIA H100 80GB HBM3", count=2)]
    namespace = NAMESPACE + "-dra"
    async with agent_and_cache(objects, namespace, image_sizes=SIZES, pull_bytes_per_second=RATE) as (cache, core):
        async def the_pool():
            return next((p for p in cache.snapshot().pools
                         if p.node_group == "pw-h100" and p.dra is not None and p.nodes == 2), None)

        pool = await wait_for(the_pool, "the capacity cache sees the DRA pool's 2 nodes", timeout=90)
        counts = cache.node_images
        assert (counts.cached(pool.id, CU124), counts.nodes(pool.id)) == (0, 2)
        pod = pinned_pod("warm-up", DRA_NODES[1], CU124)
        await core.create_namespaced_pod(namespace, pod)

        async def one_warm():
            return counts.cached(pool.id, CU124) == 1

        await wait_for(one_warm, "the DRA node that pulled the image is counted", timeout=90)
        assert counts.warm_nodes(pool.id, CU124) == {DRA_NODES[1]} and counts.nodes(pool.id) == 2
        assert images_json(pool.id, (CU124,), counts) == {CU124: {"cached_nodes": 1, "nodes": 2}}
