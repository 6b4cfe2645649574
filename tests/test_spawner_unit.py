"""GPUSpawner glue: traits, load_user_options, reservations, the spawn form.

No cluster: KubeSpawner's client setup is replaced by stand-ins and the shared
capacity cache by a fake that serves CapacitySnapshots and counts
reservations against them, as the real cache does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
from pathlib import Path

import kubespawner.spawner
import pytest
from jupyterhub.objects import Hub, Server
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.model import CapacitySnapshot, PoolView, Taint, pool_id
from gpuspawner.hub.settings import GPUCapacitySettings
from gpuspawner.hub.spawner import GPUSpawner, capacity_settings_class
from gpuspawner.hub.templates import template_dirs

GKE = "cloud.google.com/gke-nodepool"
REPO = Path(__file__).resolve().parent.parent


def make_pool(group, product, *, total=8, free=8, per_node=None, taints=(), resource="nvidia.com/gpu"):
    return PoolView(
        id=pool_id(group, product, resource),
        resource=resource,
        product=product,
        memory_mib=81920,
        node_group_label=GKE,
        node_group=group,
        nodes=1,
        total=total,
        free=free,
        max_free_per_node=free if per_node is None else per_node,
        driver_version="535.183.01",
        cuda_version="12.2",
        scale_up=None,
        defining_labels=((GKE, group),),
        taints=tuple(taints),
    )


A100 = make_pool("a100", "NVIDIA-A100-SXM4-80GB", total=16, free=5, per_node=3,
                 taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))
LAST = make_pool("t4", "Tesla-T4", total=4, free=1, per_node=1)


class FakeCache:
    """Serves snapshots; a reservation counts against its pool at once."""

    def __init__(self, *pools, synced=True, error=None):
        self.pools = {p.id: p for p in pools}
        self.synced, self.error = synced, error
        self.reservations: dict[str, tuple[str, int]] = {}
        self.released: list[str] = []

    async def wait_synced(self, timeout):
        return self.synced

    def snapshot(self):
        pools = []
        for p in self.pools.values():
            held = sum(n for pid, n in self.reservations.values() if pid == p.id)
            pools.append(dataclasses.replace(p, free=max(p.free - held, 0), max_free_per_node=max(p.max_free_per_node - held, 0)))
        return CapacitySnapshot(pools=tuple(pools), synced=self.synced, age_seconds=0.1, generation=1,
                                healthy=self.error is None and self.synced, error=self.error)

    def reserve(self, owner, pool_id, count):
        self.reservations[owner] = (pool_id, count)

    def release(self, owner):
        self.released.append(owner)
        self.reservations.pop(owner, None)


class MockUser:
    def __init__(self, name):
        self.name = name
        self.id = len(name)
        self.url = f"/user/{name}/"
        self.escaped_name = name


@pytest.fixture
def no_cluster(monkeypatch):
    """KubeSpawner loads a kube config and makes an API client in __init__."""
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **kw: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda *a, **kw: object())


@pytest.fixture
def cache(monkeypatch):
    fake = FakeCache(A100, LAST)
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: fake)
    return fake


GPU_PROFILES = [
    {
        "slug": "gpu",
        "display_name": "GPU server",
        "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-latest"},
        "profile_options": {
            "image": {
                "display_name": "Image",
                "choices": {
                    "torch": {"display_name": "PyTorch", "kubespawner_override": {"image": "quay.io/jupyter/pytorch-notebook:cuda12-latest"}},
                    "tf": {"display_name": "TensorFlow", "kubespawner_override": {"image": "quay.io/jupyter/tensorflow-notebook:cuda-latest"}},
                },
            }
        },
    }
]
STATIC = [{"display_name": "CPU only", "slug": "cpu", "default": True, "kubespawner_override": {"cpu_limit": 2.0}}]


def make_spawner(name="alice", **traits):
    config = Config()
    config.GPUSpawner.gpu_profiles = GPU_PROFILES
    config.GPUSpawner.profile_list = STATIC
    config.GPUSpawner.namespace = "jhub"
    for k, v in traits.items():
        config.GPUSpawner[k] = v
    spawner = GPUSpawner(config=config, user=MockUser(name), hub=Hub(), _mock=True)
    spawner.server = Server(ip="127.0.0.1", port=8888, base_url=f"/user/{name}/")
    return spawner


async def test_gpu_spawn_applies_pool_overrides_and_reserves(no_cluster, cache):
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": "2", "image": "tf"}
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "2"}
    assert s.extra_resource_guarantees == {"nvidia.com/gpu": "2"}
    assert s.node_affinity_required == [{"matchExpressions": [{"key": GKE, "operator": "In", "values": ["a100"]}]}]
    assert s.tolerations == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}]
    assert s.image == "quay.io/jupyter/tensorflow-notebook:cuda-latest"
    assert s.extra_annotations["gpuspawner.io/pool"] == A100.id
    assert cache.reservations == {f"jhub/{s.pod_name}": (A100.id, 2)}


async def test_cpu_profile_keeps_kubespawner_behaviour(no_cluster, cache):
    s = make_spawner()
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()
    assert s.cpu_limit == 2.0
    assert s.extra_resource_limits == {}
    assert s.node_affinity_required == []
    assert cache.reservations == {}


@pytest.mark.parametrize(
    "options, status, message",
    [
        ({"profile": "gpu", "gpus": 4, "gpu_pool": A100.id}, 400, "choose between 1 and 3 GPUs in pool"),
        ({"profile": "gpu", "node_selector": {"x": "y"}}, 400, "may not set `node_selector`"),
        ({"profile": "cpu", "image": "evil"}, 400, "may not set `image`"),
        ({"profile": "gpu", "start_timeout": 1}, 400, "may not set `start_timeout`"),
        ({"profile": "gpu", "gpus": "2.5"}, 400, "whole number"),
        ({"profile": "nope"}, 400, "unknown profile 'nope'"),
    ],
    ids=["too-many", "node-selector", "static-image", "any-trait-name", "fraction", "unknown-profile"],
)
async def test_user_mistakes_are_http_400_without_reservation(no_cluster, cache, options, status, message):
    s = make_spawner()
    s.user_options = options
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == status
    assert message in e.value.log_message
    assert cache.reservations == {}


async def test_capacity_unknown_refuses_gpu_with_503_and_serves_cpu(no_cluster, monkeypatch):
    forbidden = FakeCache(synced=False, error="forbidden: list nodes at the cluster scope needs ClusterRole rule nodes: list, watch")
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: forbidden)
    s = make_spawner()
    s.user_options = {"profile": "gpu"}
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 503
    assert "forbidden" in e.value.log_message
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()
    assert s.cpu_limit == 2.0


async def test_capacity_unknown_admitted_when_admin_opts_in(no_cluster, monkeypatch):
    stale = FakeCache(A100, synced=True, error="pods: watch failed: connection reset")
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: stale)
    s = make_spawner(gpu_admit_without_capacity=True)
    s.user_options = {"profile": "gpu", "gpus": 4}
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "4"}
    assert stale.reservations == {}  # nothing is counted against unknown numbers


async def test_no_cache_at_all_still_serves_static_profiles(no_cluster, monkeypatch):
    def broken(self):
        raise RuntimeError("no kube config found")

    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", broken)
    s = make_spawner()
    form = await s._render_gpu_options_form(s)
    assert "CPU only" in form and "GPU capacity is unknown" in form
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()


async def test_concurrent_spawns_are_not_offered_the_same_last_gpu(no_cluster, cache):
    spawners = [make_spawner(f"user{i}") for i in range(3)]
    for s in spawners:
        s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": 1}
    results = await asyncio.gather(*(s.load_user_options() for s in spawners), return_exceptions=True)
    ok = [r for r in results if r is None]
    refused = [r for r in results if isinstance(r, web.HTTPError)]
    assert len(ok) == 1 and len(refused) == 2
    assert all(r.status_code == 400 and "cannot give any GPU now" in r.log_message for r in refused)


async def test_reservation_released_when_start_fails_and_on_stop(no_cluster, cache, monkeypatch):
    async def watch_fails(self, replace=False):
        raise RuntimeError("api server unreachable")

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start_watching_pods", watch_fails)
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 1}
    with pytest.raises(RuntimeError, match="unreachable"):
        await s.start()
    owner = f"jhub/{s.pod_name}"
    assert cache.reservations == {} and cache.released == [owner]

    async def no_delete(self, now=False):
        return None

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "stop", no_delete)
    s2 = make_spawner("bob")
    s2.user_options = {"profile": "gpu", "gpus": 1}
    await s2.load_user_options()
    assert f"jhub/{s2.pod_name}" in cache.reservations
    await s2.stop()
    assert cache.reservations == {}


async def test_respawn_does_not_count_its_own_old_reservation(no_cluster, cache):
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": 1}
    await s.load_user_options()
    await s.load_user_options()  # e.g. a retried start: the old hold is given back first
    assert cache.reservations == {f"jhub/{s.pod_name}": (LAST.id, 1)}


async def test_form_renders_cards_escaped_and_limited(no_cluster, monkeypatch):
    evil = dataclasses.replace(make_pool("evil", "<script>alert(1)</script>", free=0, total=2), node_group="g\"><img src=x>")
    fake = FakeCache(A100, evil)
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: fake)
    s = make_spawner(gpu_pool_rules=[{"match": "a100:*", "display_name": "A100 <80 GB>"}])
    form = await s.get_options_form()
    assert "<script>alert(1)</script>" not in form and "<img src=x>" not in form
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in form
    assert "A100 &lt;80 GB&gt;" in form
    # the full pool is shown, disabled, with the reason
    evil_radio = re.search(r'<input type="radio" name="profile-option-gpu--gpu_pool"[^>]*value="%s"[^>]*>' % re.escape(html.escape(evil.id)), form)
    assert evil_radio and "disabled" in evil_radio.group(0)
    assert "all 2 GPUs are in use" in form
    # the count select offers what the best pool can give
    counts = re.search(r'<select[^>]*name="profile-option-gpu--gpus".*?</select>', form, re.S).group(0)
    assert re.findall(r'value="(\d+)"', counts) == ["1", "2", "3"]
    # static profiles still render, and the default is checked
    assert re.search(r'<input type="radio" name="profile" id="profile-item-cpu" value="cpu"\s+checked', form)


async def test_form_posts_become_the_same_user_options_as_rest(no_cluster, cache):
    s = make_spawner()
    formdata = {
        "profile": ["gpu"],
        "profile-option-gpu--gpu_pool": [A100.id],
        "profile-option-gpu--gpus": ["2"],
        "profile-option-gpu--image": ["torch"],
        "profile-option-cpu--ignored": ["x"],
    }
    options = s.options_from_form(formdata)
    assert options == {"profile": "gpu", "gpu_pool": A100.id, "gpus": "2", "image": "torch"}
    s.user_options = options
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "2"}


def test_template_dirs_are_the_packages_own():
    assert template_dirs() == [str((REPO / "gpuspawner" / "hub" / "templates").resolve())]


def test_default_template_path_is_ours(no_cluster):
    s = make_spawner()
    assert s.additional_profile_form_template_paths == template_dirs()


@pytest.mark.parametrize(
    "trait, value, message",
    [
        ("gpu_profiles", [{"slug": "gpu"}, {"slug": "gpu"}], "used twice"),
        ("gpu_profiles", [{"slug": "gpu", "max_gpus": -1}], "gpu_profiles[0] (slug 'gpu'): 'max_gpus' must be a positive integer"),
        ("gpu_tolerated_taint_keys", ["node.kubernetes.io/unreachable"], "may not contain 'node.kubernetes.io/unreachable'"),
        ("gpu_tolerated_taint_keys", [""], "may not contain ''"),
        ("gpu_pool_rules", [{"hide": True}], "gpu_pool_rules[0]: 'match' is required"),
        ("gpu_reservation_ttl", 0, "must be a positive number"),
        ("gpu_capacity_sync_timeout", -1, "0 or more seconds"),
        ("gpu_declared_pools", [{"resource": "nvidia.com/gpu"}], "gpu_declared_pools[0]"),
    ],
    ids=["duplicate-slug", "bad-max", "lifecycle-taint", "empty-taint-key", "rule-no-match", "ttl", "sync-timeout", "declared-pool"],
)
def test_trait_validation_messages(no_cluster, trait, value, message):
    s = make_spawner()
    with pytest.raises(TraitError) as e:
        setattr(s, trait, value)
    assert message in str(e.value)


def test_capacity_config_from_hub_config_reads_every_section():
    class SiteSpawner(GPUSpawner):
        pass

    c = Config()
    c.GPUCapacitySettings.gpu_reservation_ttl = 60.0
    c.GPUSpawner.gpu_resources = ["nvidia.com/gpu"]
    c.SiteSpawner.gpu_node_group_labels = ["example.com/rack"]
    c.GPUSpawner.gpu_pool_rules = [{"match": "x:*", "hide": True}]
    c.GPUSpawner.image = "not-a-capacity-setting"
    settings = GPUCapacitySettings.from_hub_config(c, SiteSpawner)
    config = settings.capacity_config()
    assert isinstance(config, CapacityConfig)
    assert config.gpu_resources == ("nvidia.com/gpu",)
    assert config.node_group_labels == ("example.com/rack",)
    assert config.reservation_ttl == 60.0
    assert config.gpu_resource_prefixes == CapacityConfig().gpu_resource_prefixes
    assert [r.match for r in settings.pool_rules()] == ["x:*"]
    # a hub whose spawner is not a GPUSpawner still reads c.GPUSpawner
    assert GPUCapacitySettings.from_hub_config(c, capacity_settings_class(object)).capacity_config().gpu_resources == ("nvidia.com/gpu",)


def test_declared_pools_reach_capacity_config():
    c = Config()
    c.GPUSpawner.gpu_declared_pools = [{
        "resource": "nvidia.com/gpu", "product": "NVIDIA-H100-80GB-HBM3",
        "node_group_label": GKE, "node_group": "h100",
        "gpus_per_node": 8, "max_nodes": 2, "minutes": 6,
    }]
    config = GPUCapacitySettings.from_hub_config(c, GPUSpawner).capacity_config()
    assert [p.id for p in config.declared_pools] == [pool_id("h100", "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu")]


async def test_free_text_only_option_without_value_is_400(no_cluster, cache):
    s = make_spawner(profile_list=[{
        "display_name": "Custom", "slug": "custom",
        "profile_options": {"image": {"display_name": "Image", "unlisted_choice": {"enabled": True, "kubespawner_override": {"image": "{value}"}}}},
    }])
    s.user_options = {"profile": "custom"}
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 400 and "default choice for image" in e.value.get_message()
    s.user_options = {"profile": "custom", "image--unlisted-choice": "quay.io/jupyter/base-notebook"}
    await s.load_user_options()
    assert s.image == "quay.io/jupyter/base-notebook"


# --- the CUDA driver check ----------------------------------------------------

from gpuspawner.capacity.model import NodeView  # noqa: E402
from jupyterhub.spawner import SpawnException  # noqa: E402


def gfd(name, driver, cuda):
    return NodeView(name=name, allocatable=4, free=4, driver_version=driver, cuda_version=cuda,
                    compute_capability="8.0", labels=(("kubernetes.io/hostname", name),))


def driver_pool(group, *nodes):
    return dataclasses.replace(make_pool(group, "NVIDIA-A100-SXM4-80GB", total=4 * len(nodes), free=4 * len(nodes),
                                         per_node=4), nodes=len(nodes), node_views=tuple(nodes),
                               driver_version=min(n.driver_version for n in nodes),
                               cuda_version=min(n.cuda_version for n in nodes))


OLD_POOL = driver_pool("old", gfd("old-1", "470.82.01", "11.4"))
MVC_POOL = driver_pool("mvc", gfd("mvc-1", "535.183.01", "12.2"))
NEW_POOL = driver_pool("new", gfd("new-1", "550.54.15", "12.4"), gfd("new-2", "470.82.01", "11.4"))
UNLABELLED = dataclasses.replace(make_pool("bare", "NVIDIA-A100-SXM4-80GB", total=4, free=4),
                                 driver_version=None, cuda_version=None,
                                 node_views=(NodeView("bare-1", 4, 4, None, None, None),))

CUDA_PROFILES = [{
    "slug": "gpu",
    "display_name": "GPU server",
    "cuda": "12.4",
    "kubespawner_override": {"image": "pytorch:cu124"},
    "profile_options": {"image": {"display_name": "Image", "choices": {
        "cu124": {"display_name": "PyTorch (CUDA 12.4)", "default": True},
        "cu118": {"display_name": "PyTorch (CUDA 11.8)", "kubespawner_override": {"image": "pytorch:cu118"},
                  "cuda": "11.8"},
        "cpu": {"display_name": "SciPy", "kubespawner_override": {"image": "scipy"}},
    }}},
}]


@pytest.fixture
def driver_cache(monkeypatch):
    fake = FakeCache(OLD_POOL, MVC_POOL, NEW_POOL, UNLABELLED)
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: fake)
    return fake


def cuda_spawner(**traits):
    return make_spawner(gpu_profiles=CUDA_PROFILES, **traits)


async def test_no_fitting_node_refuses_before_any_pod(no_cluster, driver_cache):
    s = cuda_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": OLD_POOL.id, "image": "cu124"}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    message = e.value.log_message
    assert e.value.status_code == 400 and e.value.reason == "cuda-driver"
    for part in ("pytorch:cu124 (CUDA 12.4)", "driver 470.82.01, CUDA up to 11.4", "rule: driver-too-old",
                 "ask the admin to install driver 550.54.14 or newer",
                 f"GPU pools whose drivers fit this image: {UNLABELLED.id}, {MVC_POOL.id}, {NEW_POOL.id}"):
        assert part in message, (part, message)
    assert driver_cache.reservations == {}


@pytest.mark.parametrize(
    "options, pool, excluded, warned",
    [
        ({"profile": "gpu", "gpu_pool": OLD_POOL.id, "image": "cpu"}, OLD_POOL, None, False),
        ({"profile": "gpu", "gpu_pool": NEW_POOL.id, "image": "cu118"}, NEW_POOL, None, True),
        ({"profile": "gpu", "gpu_pool": MVC_POOL.id}, MVC_POOL, None, True),
        ({"profile": "gpu", "gpu_pool": NEW_POOL.id}, NEW_POOL, ["new-2"], False),
        ({"profile": "gpu", "gpu_pool": UNLABELLED.id}, UNLABELLED, None, False),
        ({"profile": "gpu"}, NEW_POOL, ["new-2"], False),  # fits best: not OLD (refused), bare (unknown), mvc (caveat)
    ],
    ids=["cpu-image-unchecked", "caveat-on-some-nodes", "minor-version-warns", "steered-off-old-node",
         "driver-unknown-admitted", "default-pool-fits"],
)
async def test_fitting_spawns_are_steered_and_warned(no_cluster, driver_cache, options, pool, excluded, warned):
    s = cuda_spawner()
    s.user_options = options
    await s.load_user_options()
    assert s.extra_annotations["gpuspawner.io/pool"] == pool.id
    (term,) = s.node_affinity_required
    steer = [e for e in term["matchExpressions"] if e["operator"] == "NotIn"]
    assert steer == ([{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": excluded}] if excluded else [])
    assert bool(s._cuda_warnings) is warned
    if warned:
        assert "minor-version compatibility" in s._cuda_warnings[0]
        assert s._cuda_warnings[0].startswith("CUDA check: ")


async def test_strict_policy_refuses_what_minor_warns(no_cluster, driver_cache):
    s = cuda_spawner(cuda_policy="strict")
    s.user_options = {"profile": "gpu", "gpu_pool": MVC_POOL.id}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    assert "policy: strict" in e.value.log_message


async def test_admin_check_replaces_the_rules(no_cluster, driver_cache):
    from gpuspawner.cuda import Verdict

    def site_check(image, node, policy):
        return Verdict("fail" if node.driver == "535.183.01" else "ok", "site", "Our cluster rule.", "Ask #gpu-help.")

    s = cuda_spawner(cuda_check=site_check)
    s.user_options = {"profile": "gpu", "gpu_pool": MVC_POOL.id}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    assert "Our cluster rule. (rule: site, policy: minor) Ask #gpu-help." in e.value.log_message
    s.user_options = {"profile": "gpu", "gpu_pool": OLD_POOL.id}
    await s.load_user_options()  # the site's rule accepts what the default refuses


async def test_progress_shows_the_warning_before_kubespawners_events(no_cluster, driver_cache, monkeypatch):
    async def events(self):
        yield {"progress": 50, "message": "Pulling image"}

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", events)
    s = cuda_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": MVC_POOL.id}
    s._cuda_notes = asyncio.get_running_loop().create_future()
    gen = s.progress()
    first = asyncio.ensure_future(gen.__anext__())
    await asyncio.sleep(0.05)
    assert not first.done()  # waits for this spawn's check, not a previous one's
    await s.load_user_options()
    event = await asyncio.wait_for(first, 30)
    assert event["message"].startswith("CUDA check: The image is built with CUDA 12.4")
    assert [e async for e in gen] == [{"progress": 50, "message": "Pulling image"}]


def failed_probe_pod(message):
    return {
        "metadata": {"name": "jupyter-alice"},
        "spec": {"nodeName": "new-1"},
        "status": {"phase": "Pending", "initContainerStatuses": [{
            "name": "gpuspawner-probe", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}},
        }]},
    }


async def test_failed_probe_ends_the_wait_with_its_message(no_cluster, driver_cache):
    s = cuda_spawner(cuda_probe=True)
    s.user_options = {"profile": "gpu", "gpu_pool": NEW_POOL.id}
    await s.load_user_options()
    report = '{"ok": false, "check": "gpu-count", "message": "the pod asked for 1 GPU(s) but only 0 are visible"}'
    with pytest.raises(SpawnException) as e:
        s.is_pod_running(failed_probe_pod(report))
    assert e.value.reason == "gpu-probe"
    assert e.value.log_message == ("The GPU check on node new-1 failed before your server started: "
                                   "the pod asked for 1 GPU(s) but only 0 are visible")
    s._watch_probe = False  # after start (poll): KubeSpawner's own answer
    assert s.is_pod_running(failed_probe_pod(report)) is False


async def test_form_shows_fit_per_pool_and_image(no_cluster, driver_cache):
    s = cuda_spawner()
    form = await s.get_options_form()
    cards = {}
    for pid in (OLD_POOL.id, MVC_POOL.id, NEW_POOL.id, UNLABELLED.id):
        card = re.search(r'value="%s".*?</div>' % re.escape(pid), form, re.S).group(0)
        cards[pid] = {
            key: (level, label, text.strip())
            for level, key, label, text in re.findall(
                r'<p class="gs-cuda gs-cuda-(\w+)"\s+data-gs-image-field="profile-option-gpu--image" '
                r'data-gs-image-choice="(\w+)">\s*<strong>CUDA for (.*?):</strong> ([^<]*)</p>', card)
        }
    old, mvc, new, bare = (cards[p] for p in (OLD_POOL.id, MVC_POOL.id, NEW_POOL.id, UNLABELLED.id))
    assert old["cu124"][0] == "fail" and old["cu124"][1] == "PyTorch (CUDA 12.4)"
    assert old["cu124"][2].startswith("does not fit: The image is built with CUDA 12.4 but the node has NVIDIA "
                                      "driver 470.82.01")
    assert old["cu118"][0] == "warn" and old["cu118"][2].startswith("fits with a caveat:")
    assert mvc["cu124"][0] == "warn"
    assert new["cu124"] == ("ok", "PyTorch (CUDA 12.4)",
                            "fits (1 of 2 nodes of this pool do not fit (driver 470.82.01); "
                            "the server is kept off them)")
    assert bare["cu124"] == ("skip", "PyTorch (CUDA 12.4)", "driver unknown")
    assert all("cpu" not in c for c in cards.values())  # an undeclared image shows no line
    assert "<dt>Driver</dt><dd>mixed: 470.82.01, 550.54.15</dd>" in form  # a pool mid upgrade


@pytest.mark.parametrize(
    "trait, value, message",
    [
        ("cuda_policy", "lenient", "cuda_policy must be one of strict, minor, forward"),
        ("cuda_check", "gpuspawner.cuda:nope", "cuda_check 'gpuspawner.cuda:nope' cannot be imported"),
        ("cuda_check", 42, "cuda_check must be a callable"),
        ("cuda_probe_image", " ", "cuda_probe_image must be an image reference"),
        ("gpu_profiles", [{"slug": "gpu", "cuda": 12.4}], "gpu_profiles[0] (slug 'gpu'): 'cuda': the image's"),
    ],
    ids=["policy", "check-import", "check-type", "probe-image", "profile-cuda"],
)
def test_cuda_trait_validation_messages(no_cluster, trait, value, message):
    s = make_spawner()
    with pytest.raises(TraitError) as e:
        setattr(s, trait, value)
    assert message in str(e.value)


def test_cuda_check_import_string(no_cluster):
    from gpuspawner.cuda import decide

    assert make_spawner(cuda_check="gpuspawner.cuda:decide").cuda_check is decide
    assert make_spawner(cuda_check="gpuspawner.cuda.decide").cuda_check is decide
    assert make_spawner().cuda_check is decide and make_spawner().cuda_policy == "minor"


# --- the bound on GPUs per server -------------------------------------------------------


@pytest.mark.parametrize("value, message", [(0, "from 1 to 1024"), (1025, "from 1 to 1024"), (-3, "from 1 to 1024")])
def test_gpu_max_per_server_validation(no_cluster, value, message):
    with pytest.raises(TraitError, match=message):
        make_spawner(gpu_max_per_server=value)
    assert make_spawner().gpu_max_per_server == 16


@pytest.mark.parametrize("limit", [None, 8])
async def test_a_node_claiming_400000_gpus_offers_a_bounded_count(no_cluster, monkeypatch, limit):
    import time

    huge = make_pool("bogus", "NVIDIA-A100-SXM4-80GB", total=400_000, free=400_000)
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: FakeCache(huge))
    s = make_spawner(**({} if limit is None else {"gpu_max_per_server": limit}))
    t = time.perf_counter()
    form = await s.get_options_form()
    elapsed = time.perf_counter() - t
    expected = limit or 16
    counts = re.search(r'id="profile-option-gpu--gpus".*?</select>', form, re.S).group(0)
    assert re.findall(r'<option value="(\d+)"', counts) == [str(n) for n in range(1, expected + 1)]
    assert f'data-gs-max="{expected}"' in form and f'"cap": {expected}' in html.unescape(form)
    assert elapsed < 1.0  # was ~7 s and 24 MB per view with one choice per GPU
    s.user_options = {"profile": "gpu", "gpu_pool": huge.id, "gpus": str(expected + 1)}
    with pytest.raises(web.HTTPError, match=f"choose between 1 and {expected} GPUs"):
        await s.load_user_options()
