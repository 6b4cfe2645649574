"""GPUSpawner (gpuspawner.hub.spawner): its traits, load_user_options and reservations, the spawn
form, the CUDA driver check, and a GPU server while it starts: progress in GPU words, an early
end when the pod can never start, the spawn metrics.

No cluster: KubeSpawner's client setup is replaced by stand-ins (the ``no_kube_client``
fixture) and the shared capacity cache by ``builders.FakeCache``, which serves
CapacitySnapshots and counts reservations against them, as the real cache does.  While a
server starts, KubeSpawner's ``_start`` is replaced by a stand-in that feeds pods to
``is_pod_running`` as KubeSpawner's wait does
(``exponential_backoff(lambda: self.is_pod_running(pod))``); the pod and event reflectors are
fakes holding core/v1 dicts as KubeSpawner's do.
"""

from __future__ import annotations

import asyncio
import html
import re
from functools import partial

import kubespawner.spawner
import pytest
from jupyterhub.spawner import SpawnException
from tornado import web
from traitlets import TraitError

from gpuspawner.capacity.model import Taint
from gpuspawner.hub import spawn_page
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.templates import template_dirs
from tests.builders import GKE, FakeCache, node_view, pool_view
from tests.builders import make_spawner as build_spawner


# the pools of these tests: one node each, 80 GB cards, driver 535 (CUDA 12.2)
pool = partial(pool_view, memory_mib=81920, driver="535.183.01", cuda="12.2")


A100 = pool("a100", "NVIDIA-A100-SXM4-80GB", total=16, free=5, per_node=3,
            taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))
LAST = pool("t4", "Tesla-T4", total=4, free=1, per_node=1)


@pytest.fixture
def cache(install_cache):
    return install_cache(FakeCache(A100, LAST))


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


BASE = dict(gpu_profiles=GPU_PROFILES, profile_list=STATIC, namespace="jhub")


def make_spawner(name="alice", **traits):
    return build_spawner(name, **{**BASE, **traits})


async def test_gpu_spawn_applies_pool_overrides_and_reserves(no_kube_client, cache):
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


async def test_cpu_profile_keeps_kubespawner_behaviour(no_kube_client, cache):
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
        ({"profile": "gpu", "gpus": 4, "gpu_pool": A100.id}, 400, "choose between 1 and 3 GPUs in NVIDIA A100 80GB (asked for 4)"),
        ({"profile": "gpu", "node_selector": {"x": "y"}}, 400, "may not set `node_selector`"),
        ({"profile": "cpu", "image": "evil"}, 400, "may not set `image`"),
        ({"profile": "gpu", "start_timeout": 1}, 400, "may not set `start_timeout`"),
        ({"profile": "gpu", "gpus": "2.5"}, 400, "whole number"),
        ({"profile": "nope"}, 400, "unknown profile 'nope'"),
    ],
    ids=["too-many", "node-selector", "static-image", "any-trait-name", "fraction", "unknown-profile"],
)
async def test_user_mistakes_are_http_400_without_reservation(no_kube_client, cache, options, status, message):
    s = make_spawner()
    s.user_options = options
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == status
    assert message in e.value.log_message
    assert cache.reservations == {}


async def test_capacity_unknown_refuses_gpu_with_503_and_serves_cpu(no_kube_client, install_cache):
    forbidden = FakeCache(synced=False, error="forbidden: list nodes at the cluster scope needs ClusterRole rule nodes: list, watch")
    install_cache(forbidden)
    s = make_spawner()
    s.user_options = {"profile": "gpu"}
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 503
    assert "forbidden" in e.value.log_message
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()
    assert s.cpu_limit == 2.0


async def test_capacity_unknown_admitted_when_admin_opts_in(no_kube_client, install_cache):
    stale = FakeCache(A100, synced=True, error="pods: watch failed: connection reset")
    install_cache(stale)
    s = make_spawner(gpu_admit_without_capacity=True)
    s.user_options = {"profile": "gpu", "gpus": 4}
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "4"}
    assert stale.reservations == {}  # nothing is counted against unknown numbers


async def test_no_cache_at_all_still_serves_static_profiles(no_kube_client, monkeypatch):
    def broken(self):
        raise RuntimeError("no kube config found")

    monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", broken)
    s = make_spawner()
    form = await spawn_page.render_page(s)
    assert "CPU only" in form and "GPU capacity is unknown" in form
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()


async def test_concurrent_spawns_are_not_offered_the_same_last_gpu(no_kube_client, cache):
    spawners = [make_spawner(f"user{i}") for i in range(3)]
    for s in spawners:
        s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": 1}
    results = await asyncio.gather(*(s.load_user_options() for s in spawners), return_exceptions=True)
    ok = [r for r in results if r is None]
    refused = [r for r in results if isinstance(r, web.HTTPError)]
    assert len(ok) == 1 and len(refused) == 2
    assert all(r.status_code == 400 and "cannot give any GPU now" in r.log_message for r in refused)


async def test_reservation_released_when_start_fails_and_on_stop(no_kube_client, cache, monkeypatch):
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


async def test_respawn_does_not_count_its_own_old_reservation(no_kube_client, cache):
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": 1}
    await s.load_user_options()
    await s.load_user_options()  # e.g. a retried start: the old hold is given back first
    assert cache.reservations == {f"jhub/{s.pod_name}": (LAST.id, 1)}


async def test_a_spawn_is_checked_against_the_current_counts(no_kube_client, cache):
    s = make_spawner()
    await s.get_options_form()
    s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": "1"}
    await s.load_user_options()
    assert cache.max_ages == [2.0, 0.0]  # the page's default age, then the spawn's: none


def test_default_template_path_is_ours(no_kube_client):
    s = make_spawner()
    assert s.additional_profile_form_template_paths == template_dirs()


@pytest.mark.parametrize(
    "trait, value, message",
    [
        ("gpu_profiles", [{"slug": "gpu"}, {"slug": "gpu"}], "used twice"),
        ("gpu_profiles", [{"slug": "gpu", "max_gpus": -1}], "gpu_profiles[0] (slug 'gpu'): 'max_gpus' must be a positive integer"),
        ("gpu_tolerated_taint_keys", ["node.kubernetes.io/unreachable"], "'node.kubernetes.io/unreachable' may not be tolerated"),
        ("gpu_tolerated_taint_keys", [""], "'' is not a taint key: an empty key would tolerate every taint"),
        ("gpu_tolerated_taint_keys", ["*"], "'*' would tolerate any taint (a wildcard is refused)"),
        ("gpu_resources", ["cpu"], "'cpu' is not a device's extended resource"),
        ("gpu_pool_rules", [{"hide": True}], "gpu_pool_rules[0]: 'match' is required"),
        ("gpu_reservation_ttl", 0, "must be a positive number"),
        ("gpu_capacity_sync_timeout", -1, "0 or more seconds"),
        ("gpu_declared_pools", [{"resource": "nvidia.com/gpu"}], "gpu_declared_pools[0]"),
        ("gpu_capacity_page_max_age", -0.5, "gpu_capacity_page_max_age must be 0 or more seconds"),
        ("gpu_capacity_page_max_age", float("inf"), "gpu_capacity_page_max_age must be 0 or more seconds"),
    ],
    ids=["duplicate-slug", "bad-max", "lifecycle-taint", "empty-taint-key", "wildcard-taint-key", "cpu-as-gpu",
         "rule-no-match", "ttl", "sync-timeout",
         "declared-pool", "page-age-negative", "page-age-infinite"],
)
def test_trait_validation_messages(no_kube_client, trait, value, message):
    s = make_spawner()
    with pytest.raises(TraitError) as e:
        setattr(s, trait, value)
    assert message in str(e.value)


async def test_free_text_only_option_without_value_is_400(no_kube_client, cache):
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

def gfd(name, driver, cuda):
    return node_view(name, 4, 4, driver, cuda, "8.0", hostname=name)


def driver_pool(group, *nodes):
    return pool(group, node_views=nodes, driver=min(n.driver_version for n in nodes),
                cuda=min(n.cuda_version for n in nodes))


OLD_POOL = driver_pool("old", gfd("old-1", "470.82.01", "11.4"))
MVC_POOL = driver_pool("mvc", gfd("mvc-1", "535.183.01", "12.2"))
NEW_POOL = driver_pool("new", gfd("new-1", "550.54.15", "12.4"), gfd("new-2", "470.82.01", "11.4"))
UNLABELLED = pool_view("bare", memory_mib=81920, node_views=(node_view("bare-1", 4),))

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
def driver_cache(install_cache):
    return install_cache(FakeCache(OLD_POOL, MVC_POOL, NEW_POOL, UNLABELLED))


def cuda_spawner(**traits):
    return make_spawner(gpu_profiles=CUDA_PROFILES, **traits)


async def test_no_fitting_node_refuses_before_any_pod(no_kube_client, driver_cache):
    s = cuda_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": OLD_POOL.id, "image": "cu124"}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    message = e.value.log_message
    assert e.value.status_code == 400 and e.value.reason == "cuda-driver"
    for part in ("pytorch:cu124 (CUDA 12.4)", "driver 470.82.01, CUDA up to 11.4",
                 "ask the admin to install driver 550.54.14 or newer",
                 "GPU pools whose drivers fit this image: ",
                 *{p.display_name for p in (UNLABELLED, MVC_POOL, NEW_POOL)}):
        assert part in message, (part, message)
    # pools by the names users read: no pool id, no rule name
    for internal in (UNLABELLED.id, MVC_POOL.id, NEW_POOL.id, "rule:", "driver-too-old"):
        assert internal not in message, (internal, message)
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
async def test_fitting_spawns_are_steered_and_warned(no_kube_client, driver_cache, options, pool, excluded, warned):
    s = cuda_spawner()
    s.user_options = options
    await s.load_user_options()
    assert s.extra_annotations["gpuspawner.io/pool"] == pool.id
    (term,) = s.node_affinity_required
    steer = [e for e in term["matchExpressions"] if e["operator"] == "NotIn"]
    assert steer == ([{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": excluded}] if excluded else [])
    assert bool(s._spawn.warnings) is warned
    if warned:
        assert "minor-version compatibility" in s._spawn.warnings[0]
        assert s._spawn.warnings[0].startswith("CUDA check: ")


async def test_strict_policy_refuses_what_minor_warns(no_kube_client, driver_cache):
    s = cuda_spawner(cuda_policy="strict")
    s.user_options = {"profile": "gpu", "gpu_pool": MVC_POOL.id}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    assert "the strict policy accepts only backward compatibility" in e.value.log_message


async def test_admin_check_replaces_the_rules(no_kube_client, driver_cache):
    from gpuspawner.cuda import Verdict

    def site_check(image, node, policy):
        return Verdict("fail" if node.driver == "535.183.01" else "ok", "site", "Our cluster rule.", "Ask #gpu-help.")

    s = cuda_spawner(cuda_check=site_check)
    s.user_options = {"profile": "gpu", "gpu_pool": MVC_POOL.id}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    assert "Our cluster rule. Ask #gpu-help." in e.value.log_message  # the site's words, not its rule's name
    s.user_options = {"profile": "gpu", "gpu_pool": OLD_POOL.id}
    await s.load_user_options()  # the site's rule accepts what the default refuses


@pytest.mark.parametrize("limit", [None, 8])
async def test_a_node_claiming_400000_gpus_offers_a_bounded_count(no_kube_client, install_cache, limit):
    import time

    huge = pool("bogus", "NVIDIA-A100-SXM4-80GB", total=400_000, free=400_000)
    install_cache(FakeCache(huge))
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

