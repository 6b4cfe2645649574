"""Each pool's fitting images as the hub judges them (hub.poolimages), shared by the pre-puller and the API."""

from __future__ import annotations

from types import SimpleNamespace

from traitlets.config import Config

from gpuspawner.hub.poolimages import FittingImages
from gpuspawner.hub.prepull import HubPrepuller
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.spawner import GPUSpawner
from tests.builders import FakeCache, pool_view

A100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB", driver="550.54.15", cuda="12.4")
L4 = pool_view("l4", "NVIDIA-L4", driver="525.60.13", cuda="12.0")
PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu118": {"kubespawner_override": {"image": "pt:cu118"}, "cuda": "11.8"},
    }}},
}


def hub_config(policy: str) -> Config:
    c = Config()
    c.GPUSpawner.gpu_profiles = [PROFILE]
    c.GPUSpawner.cuda_policy = policy
    return c


def test_the_hubs_cuda_policy_decides_which_images_a_pool_gets():
    cache = FakeCache(A100, L4)
    for policy, l4_images in (("strict", ("pt:cu118",)), ("minor", ("pt:cu118", "pt:cu124"))):
        config = hub_config(policy)
        settings = GPUSpawnerSettings.from_hub_config(config, GPUSpawner)
        by_pool = FittingImages(settings, GPUSpawner, config).by_pool(cache.snapshot())
        assert by_pool == {A100.id: ("pt:cu118", "pt:cu124"), L4.id: l4_images}, policy


async def test_the_pre_puller_plans_the_same_images():
    config = hub_config("strict")
    settings = GPUSpawnerSettings.from_hub_config(config, GPUSpawner)
    puller = HubPrepuller(settings, GPUSpawner, config, FakeCache(A100, L4), SimpleNamespace(namespace="jhub"), None)
    wanted, problems = await puller.source()
    assert problems == []
    assert {p.pool_id: p.images for p in wanted.values()} == {A100.id: ("pt:cu118", "pt:cu124"), L4.id: ("pt:cu118",)}
    # while capacity is unknown, nothing is planned (and nothing touched)
    stale = HubPrepuller(settings, GPUSpawner, config, FakeCache(A100, synced=False), SimpleNamespace(namespace="jhub"),
                         None)
    assert await stale.source() is None
