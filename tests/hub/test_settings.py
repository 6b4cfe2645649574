"""The GPUSpawner settings GET /hub/api/gpus reads too (gpuspawner.hub.settings): rebuilt from
the hub's config without a spawner, the CapacityConfig they describe, the shared cache they
start, and the settings class's former name as a config section."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.model import pool_id
from gpuspawner.hub import gpu_metrics
from gpuspawner.hub import settings as settings_module
from gpuspawner.hub.settings import LEGACY_SECTION, GPUSpawnerSettings
from gpuspawner.hub.spawner import GPUSpawner, capacity_settings_class
from tests.builders import GKE, FakeCache, make_spawner, pool_view


def test_capacity_config_from_hub_config_reads_every_section():
    class SiteSpawner(GPUSpawner):
        pass

    c = Config()
    c.GPUSpawnerSettings.gpu_reservation_ttl = 60.0
    c.GPUSpawner.gpu_resources = ["nvidia.com/gpu"]
    c.SiteSpawner.gpu_node_group_labels = ["example.com/rack"]
    c.GPUSpawner.gpu_pool_rules = [{"match": "x:*", "hide": True}]
    c.GPUSpawner.image = "not-a-capacity-setting"
    settings = GPUSpawnerSettings.from_hub_config(c, SiteSpawner)
    config = settings.capacity_config()
    assert isinstance(config, CapacityConfig)
    assert config.gpu_resources == ("nvidia.com/gpu",)
    assert config.node_group_labels == ("example.com/rack",)
    assert config.reservation_ttl == 60.0
    assert config.gpu_resource_prefixes == CapacityConfig().gpu_resource_prefixes
    assert [r.match for r in settings.pool_rules()] == ["x:*"]
    # a hub whose spawner is not a GPUSpawner still reads c.GPUSpawner
    assert GPUSpawnerSettings.from_hub_config(c, capacity_settings_class(object)).capacity_config().gpu_resources == ("nvidia.com/gpu",)


def test_declared_pools_reach_capacity_config():
    c = Config()
    c.GPUSpawner.gpu_declared_pools = [{
        "resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3",
        "node_group_label": GKE, "node_group": "h100",
        "gpus_per_node": 8, "max_nodes": 2, "minutes": 6,
    }]
    config = GPUSpawnerSettings.from_hub_config(c, GPUSpawner).capacity_config()
    assert [p.id for p in config.declared_pools] == [pool_id("h100", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu")]


def test_the_former_class_name_is_still_a_config_section_just_below_the_class():
    assert LEGACY_SECTION == "GPUCapacitySettings"
    names = GPUSpawner.section_names()
    assert names.index("GPUCapacitySettings") == names.index("GPUSpawnerSettings") - 1
    assert names[-1] == "GPUSpawner"  # c.GPUSpawner still wins over both


@pytest.mark.parametrize("section", ["GPUCapacitySettings", "GPUSpawnerSettings", "GPUSpawner"])
def test_every_section_name_reaches_the_endpoint_and_the_spawner(section, no_kube_client):
    c = Config()
    c[section].gpu_reservation_ttl = 61.0
    c[section].gpu_pool_rules = [{"match": "x:*", "hide": True}]
    assert GPUSpawnerSettings.from_hub_config(c, GPUSpawner).gpu_reservation_ttl == 61.0
    spawner = make_spawner(config=c, server=False)
    assert spawner.gpu_reservation_ttl == 61.0
    assert [r.match for r in spawner.pool_rules()] == ["x:*"]


def test_the_spawner_section_wins_over_the_former_name():
    c = Config()
    c.GPUCapacitySettings.gpu_reservation_ttl = 61.0
    c.GPUSpawner.gpu_reservation_ttl = 62.0
    assert GPUSpawnerSettings.from_hub_config(c, GPUSpawner).gpu_reservation_ttl == 62.0


async def test_the_first_cache_user_points_the_metrics_at_it(monkeypatch):
    from gpuspawner.capacity import cache as cache_module

    installed = []
    caches = [FakeCache(pool_view("a100")), FakeCache(pool_view("t4", "Tesla-T4"))]
    monkeypatch.setattr(settings_module, "_metrics_cache", None)
    monkeypatch.setattr(gpu_metrics, "install",
                        lambda registry=None, snapshot=None: installed.append(snapshot))
    monkeypatch.setattr(cache_module.CapacityCache, "shared", classmethod(lambda cls, config, **kw: caches[0]))
    settings = GPUSpawnerSettings()
    assert settings.shared_capacity_cache() is caches[0]
    settings.shared_capacity_cache()  # the same cache: installed once
    assert installed == [caches[0].snapshot]
    caches.reverse()  # e.g. a new event loop in tests: the new cache's snapshot is read
    settings.shared_capacity_cache()
    assert installed == [caches[1].snapshot, caches[0].snapshot]


async def test_the_shared_cache_is_found_once_per_configuration_and_again_after_a_reset(monkeypatch):
    """A spawn-page view asks for the cache several times: the one found is kept while the
    configuration is the same object and it is still the loop's shared cache; once the shared
    caches are reset (a new one started), the new one is found; a new configuration asks again."""
    made = []

    class Quiet(settings_module.CapacityCache):  # the real shared() and reset; no informers started
        asked = 0

        @classmethod
        def shared(cls, config, **kw):
            cls.asked += 1
            return super().shared(config, **kw)

        def start(self):
            made.append(self)

    monkeypatch.setattr(settings_module, "CapacityCache", Quiet)
    monkeypatch.setattr(settings_module, "_metrics_cache", None)
    monkeypatch.setattr(gpu_metrics, "install", lambda registry=None, snapshot=None: None)
    settings = GPUSpawnerSettings()
    try:
        first = settings.shared_capacity_cache()
        assert settings.shared_capacity_cache() is first and made == [first] and Quiet.asked == 1
        await Quiet.reset_shared()
        second = settings.shared_capacity_cache()
        assert second is not first and made == [first, second] and Quiet.asked == 2
        settings.gpu_reservation_ttl = 61.0  # a new configuration: asked again; the running cache stays
        assert settings.shared_capacity_cache() is second and Quiet.asked == 3
    finally:
        await Quiet.reset_shared()


def test_cull_rules_are_a_mapping_or_the_culler_s_file_and_bad_ones_say_what_to_write(tmp_path):
    from traitlets import TraitError

    assert GPUSpawnerSettings().cull_rules() is None and GPUSpawnerSettings().idle_rule("gpu", "p") is None
    rules = tmp_path / "cull.yaml"
    rules.write_text("idle_timeout: 30m\npools:\n  p: {idle_timeout: 2h}\n")
    s = GPUSpawnerSettings(gpu_cull_rules=str(rules))
    assert s.idle_rule("gpu", "other").startswith("This server is stopped after 30m ")
    assert s.idle_rule("gpu", "p").startswith("This server is stopped after 2h00m ")
    with pytest.raises(TraitError, match=r"gpu_cull_rules: gpu_cull_rules.idle_timeout: 'soon'"):
        GPUSpawnerSettings(gpu_cull_rules={"idle_timeout": "soon"})
    with pytest.raises(TraitError, match="cannot read it"):
        GPUSpawnerSettings(gpu_cull_rules=str(tmp_path / "missing.yaml"))
