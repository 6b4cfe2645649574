"""The pre-puller on Kubernetes' own control plane: the capacity cache reads the pools from the real
API server, the DaemonSets it writes are accepted and run by the real DaemonSet controller and
scheduler on the node agent's nodes, only where each image can run, and they follow the profiles."""

from __future__ import annotations

from kubernetes_asyncio.client import AppsV1Api

from gpuspawner.cuda import decide
from gpuspawner.prepull.kube import KubeDaemonSets
from gpuspawner.prepull.plan import POOL_ANNOTATION, PrepullSettings, plan
from gpuspawner.prepull.reconcile import reconcile
from gpuspawner.spawn.cuda_fit import pool_fit
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers
from tests.builders import GFD_A100_40GB, GFD_T4_470, GKE, node
from tests.builders.nodeagent import wait_for

NAMESPACE = "pp-jhub"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# CUDA 12.4 runs on the A100s' 570 driver only; CUDA 11.4 on the T4's 470 driver too
PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "example.org/pt:cu124"},
    "pools": {"include": ["pp-*"]},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu114": {"kubespawner_override": {"image": "example.org/pt:cu114"}, "cuda": "11.4"},
    }}},
}
SETTINGS = PrepullSettings(namespace=NAMESPACE, allowed_taint_keys=("nvidia.com/gpu",))


def cluster_objects() -> list[dict]:
    a100 = [node(f"pp-a100-{i}", {"nvidia.com/gpu": "4", "pods": "110"}, {GKE: "pp-a100", **GFD_A100_40GB},
                 taints=[GPU_TAINT]) for i in range(2)]
    t4 = node("pp-t4-0", {"nvidia.com/gpu": "1", "pods": "110"},
              {GKE: "pp-t4", **GFD_T4_470, "nvidia.com/gpu.product": "Tesla-T4"})
    return [*a100, t4, node("pp-cpu-0", {"pods": "110"})]


async def test_one_daemonset_per_pool_with_only_the_images_that_run_there(agent_and_cache):
    async with agent_and_cache(cluster_objects(), NAMESPACE) as (cache, core):
        async def pools_seen():
            ids = {p.node_group for p in cache.snapshot().pools}
            return {"pp-a100", "pp-t4"} <= ids

        await wait_for(pools_seen, "the capacity cache sees both pools", timeout=90)
        daemonsets = KubeDaemonSets(core.api_client, NAMESPACE)

        def wanted(profile):
            snapshot = cache.snapshot()
            offers = build_offers([GPUProfileSpec.from_config(profile)], snapshot,
                                  fit=lambda image, pool: pool_fit(image, pool, "strict", decide))
            return plan(offers, snapshot.pools, SETTINGS)[0]

        changes = await reconcile(daemonsets, wanted(PROFILE))
        assert len(changes.created) == 2
        apps = AppsV1Api(core.api_client)
        listed = (await apps.list_namespaced_daemon_set(NAMESPACE)).items
        images = {d.metadata.annotations[POOL_ANNOTATION].split(":")[0]:
                  [c.image for c in d.spec.template.spec.init_containers] for d in listed}
        assert images == {"pp-a100": ["example.org/pt:cu114", "example.org/pt:cu124"],
                          "pp-t4": ["example.org/pt:cu114"]}

        async def placed():
            pods = (await core.list_namespaced_pod(NAMESPACE,
                                                   label_selector="app.kubernetes.io/component=gpu-image-puller")).items
            where = sorted(p.spec.node_name for p in pods if p.spec.node_name)
            return where if len(where) == 3 else None

        # the real DaemonSet controller places one puller per node of each pool, none on the CPU node
        assert await wait_for(placed, "the pullers are placed", timeout=90) == ["pp-a100-0", "pp-a100-1", "pp-t4-0"]

        async def warm():
            status = (await core.read_node("pp-a100-0")).status
            names = {n for i in status.images or [] for n in i.names or []}
            return {"example.org/pt:cu124", "example.org/pt:cu114"} <= names

        await wait_for(warm, "the A100 node reports both images pulled", timeout=90)

        # the profile leaves the T4s: their puller is removed, the A100s' is kept as it is
        only_a100 = {**PROFILE, "pools": {"include": ["pp-a100:*"]}}
        changes = await reconcile(daemonsets, wanted(only_a100))
        assert (len(changes.replaced), len(changes.deleted), changes.created) == (0, 1, ())
        assert not await reconcile(daemonsets, wanted(only_a100))  # nothing more to do
