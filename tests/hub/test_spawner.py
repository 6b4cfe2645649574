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
import dataclasses
import html
import logging
import re
from functools import partial

import kubespawner.spawner
import pytest
from jupyterhub.spawner import SpawnException
from prometheus_client import CollectorRegistry
from tornado import web
from traitlets import TraitError
from traitlets.config import Config

from gpuspawner.capacity.model import ScaleUp, Taint
from gpuspawner.hub import pod_wait, spawn_page
from gpuspawner.hub.errors import GPUSpawnFailure
from gpuspawner.hub.gpu_metrics import REFUSAL_REASONS
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.spawner import GPUSpawner, applied_in_load_user_options
from gpuspawner.hub.templates import template_dirs
from tests.builders import GKE, FakeCache, group_nodes, node_view, pod_event, pool_view, server_pod
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
        ({"profile": "gpu", "gpus": 4, "gpu_pool": A100.id}, 400, "choose between 1 and 3 GPUs in pool"),
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


async def test_form_renders_cards_escaped_and_limited(no_kube_client, install_cache):
    evil = dataclasses.replace(pool("evil", "<script>alert(1)</script>", free=0, total=2), node_group="g\"><img src=x>")
    install_cache(FakeCache(A100, evil))
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


async def test_form_posts_become_the_same_user_options_as_rest(no_kube_client, cache):
    s = make_spawner()
    formdata = {
        "profile": ["gpu"],
        "profile-option-gpu--gpu_pool": [A100.id],
        "profile-option-gpu--gpus": ["2"],
        "profile-option-gpu--image": ["torch"],
    }
    options = await s.run_options_from_form(formdata)  # as JupyterHub's spawn page calls it
    assert options == {"profile": "gpu", "gpu_pool": A100.id, "gpus": "2", "image": "torch"}
    s.user_options = options
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "2"}


async def test_page_reuses_its_offers_and_form_until_a_count_changes(no_kube_client, cache):
    # the page asks for counts at most gpu_capacity_page_max_age old, and while the snapshot's
    # pools are the same it serves the form it rendered, not a new one
    s = make_spawner(gpu_capacity_page_max_age=3)
    first = await s.get_options_form()
    cache.pools[A100.id] = dataclasses.replace(A100, free=2, max_free_per_node=2)
    cache.clock[0] += 1  # the counts held for the page are 1 s old: still good
    again = await s.get_options_form()
    assert again is first
    assert cache.max_ages == [3.0, 3.0]
    await asyncio.sleep(0.01)  # (no renewal under way: 1 s is less than half the interval)
    assert cache.renewals == 0
    cache.clock[0] += 2.5  # 3.5 s: too old, counted anew
    changed = await s.get_options_form()
    assert "5 of 16 GPUs" in first and "2 of 16 GPUs" in changed


async def test_past_half_the_interval_the_page_is_renewed_after_the_view(no_kube_client, cache):
    # stale-while-revalidate: the view that finds the counts 1.5 s old (of 2) is answered at
    # once with them; then, in the background, the counts are taken anew and its form rendered,
    # so the next view finds the new counts without rendering anything
    s = make_spawner(gpu_capacity_page_max_age=2)
    memo = spawn_page.PAGE_CACHE
    first = await s.get_options_form()
    cache.pools[A100.id] = dataclasses.replace(A100, free=2, max_free_per_node=2)
    cache.clock[0] += 1.5
    assert await s.get_options_form() is first  # answered from the held counts
    for _ in range(5):  # the renewal runs after the view
        await asyncio.sleep(0)
    assert cache.renewals == 1
    renders = memo.misses
    cache.clock[0] += 0.1
    renewed = await s.get_options_form()
    assert "2 of 16 GPUs" in renewed and memo.misses == renders  # served, not rendered


async def test_remembered_form_follows_the_user_options_and_the_users_groups(no_kube_client, cache):
    s = make_spawner(gpu_profiles=[{**GPU_PROFILES[0], "allowed_groups": ["ml"]}])
    hidden = await s.get_options_form()
    assert 'value="gpu"' not in hidden  # alice is in no group: no GPU profile
    s.user.groups = [dataclasses.make_dataclass("Group", ["name"])("ml")]
    shown = await s.get_options_form()
    assert 'id="profile-item-gpu" value="gpu"' in shown
    s.user_options = {"profile": "gpu", "gpu_pool": LAST.id, "gpus": "1", "image": "tf"}
    chosen = await s.get_options_form()
    assert re.search(r'value="tf"\s+selected', chosen) and not re.search(r'value="tf"\s+selected', shown)


async def test_users_who_see_the_same_page_share_one_rendered_form(no_kube_client, cache):
    profiles = [{**GPU_PROFILES[0], "allowed_groups": ["ml"]}]
    ml = [dataclasses.make_dataclass("Group", ["name"])("ml")]
    ana, bo, cy = (make_spawner(name, gpu_profiles=profiles) for name in ("ana", "bo", "cy"))
    ana.user.groups = bo.user.groups = ml
    form = await ana.get_options_form()
    assert await bo.get_options_form() is form  # the same groups, no saved options: one form
    other = await cy.get_options_form()  # in no group: no GPU profile
    assert 'value="gpu"' in form and 'value="gpu"' not in other


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
    assert "policy: strict" in e.value.log_message


async def test_admin_check_replaces_the_rules(no_kube_client, driver_cache):
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


async def test_progress_shows_the_warning_before_kubespawners_events(no_kube_client, driver_cache, monkeypatch):
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


async def test_failed_probe_ends_the_wait_with_its_message(no_kube_client, driver_cache):
    s = cuda_spawner(cuda_probe=True)
    s.user_options = {"profile": "gpu", "gpu_pool": NEW_POOL.id}
    await s.load_user_options()
    report = '{"ok": false, "check": "gpu-count", "message": "the pod asked for 1 GPU(s) but only 0 are visible"}'
    with pytest.raises(SpawnException) as e:
        s.is_pod_running(failed_probe_pod(report))
    assert e.value.reason == "gpu-probe"
    assert e.value.log_message == ("The GPU check on node new-1 failed before your server started: "
                                   "the pod asked for 1 GPU(s) but only 0 are visible")
    s._spawn = dataclasses.replace(s._spawn, watch_probe=False)  # after start (poll): KubeSpawner's own answer
    assert s.is_pod_running(failed_probe_pod(report)) is False


async def test_form_shows_fit_per_pool_and_image(no_kube_client, driver_cache):
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
def test_cuda_trait_validation_messages(no_kube_client, trait, value, message):
    s = make_spawner()
    with pytest.raises(TraitError) as e:
        setattr(s, trait, value)
    assert message in str(e.value)


def test_cuda_check_import_string(no_kube_client):
    from gpuspawner.cuda import decide

    assert make_spawner(cuda_check="gpuspawner.cuda:decide").cuda_check is decide
    assert make_spawner(cuda_check="gpuspawner.cuda.decide").cuda_check is decide
    assert make_spawner().cuda_check is decide and make_spawner().cuda_policy == "minor"


# --- the bound on GPUs per server -------------------------------------------------------


@pytest.mark.parametrize("value, message", [(0, "from 1 to 1024"), (1025, "from 1 to 1024"), (-3, "from 1 to 1024")])
def test_gpu_max_per_server_validation(no_kube_client, value, message):
    with pytest.raises(TraitError, match=message):
        make_spawner(gpu_max_per_server=value)
    assert make_spawner().gpu_max_per_server == 16


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


# ============================================================================================
# A GPU server while it starts: progress in GPU words, the early end, what is counted
# ============================================================================================

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
SKU = Taint("sku", "gpu", "NoSchedule")  # "sku" is not tolerated below
# two A100 nodes of 4 GPUs; two T4 nodes of 1 GPU behind an untolerated taint; an H100 pool
# that scales from zero
POOL_A100 = pool_view("a100", "NVIDIA-A100-SXM4-40GB", node_views=group_nodes("a100", 2, 4, "570.172.08", "12.8", "8.0"),
                 memory_mib=40960, driver="570.172.08", cuda="12.8", taints=(GPU_TAINT,))
POOL_T4 = pool_view("t4", "Tesla-T4", node_views=group_nodes("t4", 2, 1, "570.172.08", "12.8", "8.0"),
               memory_mib=40960, driver="570.172.08", cuda="12.8", taints=(SKU,))
POOL_H100 = pool_view("h100", "NVIDIA-H100-80GB-HBM3", nodes=0, total=0, per_node=8, memory_mib=40960, driver="570.172.08",
                 cuda="12.8", scale_up=ScaleUp(max_nodes=2, gpus_per_node=8, minutes=7))
NS = "jhub"


class FakeReflector:
    def __init__(self):
        self.pods: dict[str, dict] = {}


@pytest.fixture
def registry(monkeypatch):
    reg = CollectorRegistry()
    monkeypatch.setattr(GPUSpawner, "metrics_registry", reg)
    return reg


@pytest.fixture
def cluster(no_kube_client, install_cache, monkeypatch, registry):
    """No Kubernetes: a fake capacity cache, pod reflector and event list."""
    cache = install_cache(FakeCache(POOL_A100, POOL_T4, POOL_H100, age_seconds=0.5, reservations_count=False))
    reflector = FakeReflector()
    events: list[dict] = []
    monkeypatch.setattr(GPUSpawner, "pod_reflector", property(lambda self: reflector))
    monkeypatch.setattr(GPUSpawner, "events", property(lambda self: list(events)))
    return dataclasses.make_dataclass("Cluster", ["cache", "reflector", "events"])(cache, reflector, events)


START_BASE = dict(
    gpu_profiles=[{"slug": "gpu", "display_name": "GPU server", "kubespawner_override": {"image": "pytorch:cu124"}}],
    profile_list=STATIC,
    namespace=NS,
    gpu_tolerated_taint_keys=["nvidia.com/gpu"],
    gpu_pool_rules=[{"match": "t4:*", "display_name": "T4"}],
)


def starting_spawner(name="alice", **traits):
    return build_spawner(name, **{**START_BASE, **traits})


def scheduled(at):
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}


def running(name, pool, created="2026-11-22T01:00:00Z", at="2026-11-22T01:00:07Z"):
    return server_pod(name, pool, created=created, phase="Running", node="n-0", conditions=[scheduled(at)],
                      podIP="10.0.0.9", containerStatuses=[{"name": "notebook", "ready": True}])


TAINTED = ("0/7 nodes are available: 2 node(s) had untolerated taint {sku: gpu}, "
           "5 node(s) didn't match Pod's node affinity/selector. preemption: 0/7 nodes are available: "
           "7 Preemption is not helpful for scheduling.")
BUSY = ("0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.")


def spawn_sample(registry, pool, outcome, reason):
    return registry.get_sample_value("gpuspawner_spawns_total", {"pool": pool, "outcome": outcome, "reason": reason})


# --- progress in GPU words ------------------------------------------------------------------------


def fake_kubespawner_progress(events):
    async def progress(self):
        for i, e in enumerate(events):
            yield {"progress": 5 * i, "message": f"[{e['type']}] {e['message']}", "raw_event": e}
        yield {"progress": 30, "message": "Spawn is taking a while (61 seconds)..."}

    return progress


async def test_progress_speaks_of_gpus_pools_and_the_queue(cluster, monkeypatch):
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", fake_kubespawner_progress([
        pod_event("FailedScheduling", BUSY),
        pod_event("Scheduled", "Successfully assigned jhub/jupyter-alice to t4-1"),
        pod_event("Pulling", 'Pulling image "pytorch:cu124"'),
    ]))
    s = starting_spawner(gpu_tolerated_taint_keys=["nvidia.com/gpu", "sku"])
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_T4.id, "gpus": 1}
    await s.load_user_options()
    cluster.cache.pools[POOL_T4.id] = dataclasses.replace(POOL_T4, free=0, max_free_per_node=0)  # others took them since
    me = server_pod(s.pod_name, POOL_T4.id, created="2026-11-22T01:00:10Z")
    cluster.reflector.pods = {
        f"{NS}/{s.pod_name}": me,
        f"{NS}/jupyter-bob": server_pod("jupyter-bob", POOL_T4.id, created="2026-11-22T01:00:01Z"),
        f"{NS}/jupyter-carol": server_pod("jupyter-carol", POOL_T4.id, created="2026-11-22T01:00:02Z"),
    }
    items = [e async for e in s.progress()]
    messages = [e["message"] for e in items]
    assert messages[0] == ("Waiting for a free GPU in pool T4: all 2 of its GPUs are in use; "
                           "2 servers are queued before you.")
    assert messages[1] == "Got 1 GPU in pool T4 on node t4-1; preparing your server."
    assert messages[2].startswith("Downloading the image pytorch:cu124. GPU images are large")
    assert messages[3] == "Spawn is taking a while (61 seconds)..."  # KubeSpawner's own notice, unchanged
    assert [e["progress"] for e in items[:3]] == [10, 40, 50]  # moved by what happened, never backwards
    assert items[0]["raw_event"]["reason"] == "FailedScheduling"  # kept for JupyterHub's event log


async def test_progress_of_a_cpu_spawn_is_kubespawners(cluster, monkeypatch):
    raw = pod_event("Scheduled", "Successfully assigned jhub/jupyter-alice to cpu-0")
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", fake_kubespawner_progress([raw]))
    s = starting_spawner()
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()
    items = [e async for e in s.progress()]
    assert items[0]["message"] == "[Warning] Successfully assigned jhub/jupyter-alice to cpu-0"


async def test_progress_with_unknown_capacity_concludes_nothing(cluster, monkeypatch):
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress",
                        fake_kubespawner_progress([pod_event("FailedScheduling", TAINTED)]))
    s = starting_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_T4.id}
    await s.load_user_options()
    cluster.cache.healthy = False  # the watch went stale after the spawn began
    items = [e async for e in s.progress()]
    # nothing concluded: the scheduler's reasons as they are, no "Cannot start"
    assert items[0]["message"] == ("Waiting for a node in pool T4 (5 node(s) didn't match Pod's node "
                                   "affinity/selector; 2 node(s) had untolerated taint {sku: gpu}); "
                                   "you are next in line.")


# --- starting: the early end, and what is counted -------------------------------------------------


def fake_start(pods):
    """KubeSpawner's _start, reduced to its seams: load_user_options, then the
    wait on is_pod_running over the pods the reflector shows in turn."""

    async def _start(self):
        await self.load_user_options()
        key = f"{NS}/{self.pod_name}"
        reflector = self.pod_reflector
        for p in pods:
            if callable(p):
                p = p(self)
            reflector.pods[key] = p
            if self.is_pod_running(p):
                return "http://10.0.0.9:8888"
            await asyncio.sleep(0)
        raise TimeoutError(f"pod {key} did not start in {self.start_timeout} seconds!")

    return _start


async def test_a_pod_that_can_never_start_fails_at_once_with_the_reason(cluster, registry, monkeypatch):
    s = starting_spawner()

    def tainted(spawner):
        cluster.events.append(pod_event("FailedScheduling", TAINTED, pod_name=spawner.pod_name,
                                    uid=f"uid-{spawner.pod_name}"))
        return server_pod(spawner.pod_name, POOL_T4.id)

    never_reached = []
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start",
                        fake_start([lambda sp: server_pod(sp.pod_name, POOL_T4.id), tainted, never_reached.append]))
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_T4.id, "gpus": 1}
    with pytest.raises(GPUSpawnFailure) as e:
        await s.start()
    assert not never_reached
    message = e.value.jupyterhub_message
    assert message.startswith("The nodes of pool T4 carry the taint sku=gpu:NoSchedule, which this server "
                              "does not tolerate")
    assert "c.GPUSpawner.gpu_tolerated_taint_keys (add 'sku')" in message
    # what JupyterHub shows: the REST answer (SpawnException.message) and the progress stream's
    # "Spawn failed: <jupyterhub_message>"
    assert e.value.message == message and e.value.reason == "untolerated_taint"
    assert spawn_sample(registry, POOL_T4.id, "failed", "untolerated_taint") == 1
    assert cluster.cache.reservations == {}  # the GPU it held is given back


async def test_a_started_spawn_is_counted_with_its_wait_for_a_gpu(cluster, registry, monkeypatch):
    s = starting_spawner()
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([
        lambda sp: server_pod(sp.pod_name, POOL_A100.id, created="2026-11-22T01:00:00Z"),
        lambda sp: server_pod(sp.pod_name, POOL_A100.id, created="2026-11-22T01:00:00Z", node="a100-1",
                       conditions=[scheduled("2026-11-22T01:00:42Z")]),
        lambda sp: running(sp.pod_name, POOL_A100.id, at="2026-11-22T01:00:42Z"),
    ]))
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 2}
    assert await s.start() == "http://10.0.0.9:8888"
    assert spawn_sample(registry, POOL_A100.id, "started", "") == 1
    # once per spawn, though is_pod_running saw the scheduled pod twice
    assert registry.get_sample_value("gpuspawner_gpu_wait_seconds_count", {"pool": POOL_A100.id}) == 1
    assert registry.get_sample_value("gpuspawner_gpu_wait_seconds_sum", {"pool": POOL_A100.id}) == 42
    assert spawn_sample(registry, POOL_A100.id, "failed", "timeout") is None


async def test_a_cpu_spawn_counts_nothing(cluster, registry, monkeypatch):
    s = starting_spawner()
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start",
                        fake_start([lambda sp: running(sp.pod_name, None)]))
    s.user_options = {"profile": "cpu"}
    await s.start()
    assert not [m for m in registry.collect() if m.name == "gpuspawner_spawns" and m.samples]


@pytest.mark.parametrize(
    "error, reason",
    [(TimeoutError("pod did not start in 180 seconds!"), "timeout"), (RuntimeError("api server unreachable"), "error")],
    ids=["kubespawner-timeout", "error"],
)
async def test_failed_spawns_are_counted_by_reason(cluster, registry, monkeypatch, error, reason):
    async def _start(self):
        await self.load_user_options()
        raise error

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", _start)
    s = starting_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_A100.id}
    with pytest.raises(type(error)):
        await s.start()
    assert spawn_sample(registry, POOL_A100.id, "failed", reason) == 1


async def test_the_hubs_start_timeout_counts_as_timeout_an_early_cancel_does_not(cluster, registry, monkeypatch):
    async def _start(self):
        await self.load_user_options()
        await asyncio.Event().wait()  # a pod that never runs

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", _start)
    clock = [1000.0]
    monkeypatch.setattr(pod_wait, "_clock", lambda: clock[0])
    for elapsed, counted in ((5.0, None), (180.0, 1)):
        s = starting_spawner(start_timeout=180)
        s.user_options = {"profile": "gpu", "gpu_pool": POOL_A100.id}
        f = s.start()
        await asyncio.sleep(0.01)
        clock[0] += elapsed
        f.cancel()  # what asyncio.wait_for(start, start_timeout) does in jupyterhub/user.py
        with pytest.raises(asyncio.CancelledError):
            await f
        assert spawn_sample(registry, POOL_A100.id, "failed", "timeout") == counted


REFUSALS = [
    ({"profile": "gpu", "gpu_pool": "made:up:nvidia.com/gpu"}, "unknown_pool", ""),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": "two"}, "bad_count", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 0}, "bad_count", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 5}, "too_many_gpus", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "node_selector": {"a": "b"}}, "forbidden_option", POOL_A100.id),
    ({"profile": "gpu", "gpu_pool": POOL_A100.id, "colour": "red"}, "forbidden_option", POOL_A100.id),
    ({"profile": "cpu", "gpus": 1}, "forbidden_option", ""),
    ({"profile": "gpu", "gpu_pool": 7}, "unknown_pool", ""),
]


@pytest.mark.parametrize("options, reason, pool", REFUSALS,
                         ids=["unknown-pool", "not-a-number", "zero", "too-many", "trait", "unknown-option",
                              "gpus-on-cpu-profile", "pool-not-a-string"])
async def test_refusals_are_counted_with_their_reason(cluster, registry, options, reason, pool):
    s = starting_spawner()
    s.user_options = options
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 400
    assert e.value.jupyterhub_message == e.value.log_message  # the progress stream's words
    assert reason in REFUSAL_REASONS
    assert spawn_sample(registry, pool, "refused", reason) == 1


async def test_capacity_unknown_is_counted_and_cpu_refusals_are_not(cluster, registry):
    cluster.cache.synced = cluster.cache.healthy = False
    cluster.cache.pools.clear()
    s = starting_spawner()
    s.user_options = {"profile": "gpu"}
    with pytest.raises(web.HTTPError) as e:
        await s.load_user_options()
    assert e.value.status_code == 503
    assert spawn_sample(registry, "", "refused", "capacity_unknown") == 1
    s.user_options = {"profile": "cpu", "image": "evil"}
    with pytest.raises(web.HTTPError):
        await s.load_user_options()
    assert spawn_sample(registry, "", "refused", "forbidden_option") is None


# --- apply_user_options ---------------------------------------------------------------------------


async def test_user_options_are_not_reported_as_unhandled(cluster, caplog):
    s = starting_spawner()
    assert s.apply_user_options is applied_in_load_user_options
    with caplog.at_level(logging.DEBUG):
        await s._run_apply_user_options({"profile": "gpu", "gpu_pool": POOL_A100.id, "gpus": 1})
    assert not [r for r in caplog.records if "unhandled user_options" in r.getMessage().lower()]
    assert s.image != POOL_A100.id and s.user_options == {}  # nothing was applied here


def test_an_admins_apply_user_options_wins(cluster):
    def hook(spawner, user_options):
        spawner.environment = {"OPTS": ",".join(user_options)}

    c = Config()
    c.Spawner.apply_user_options = hook  # on the base class, as JupyterHub's docs show
    assert build_spawner("a", config=c, server=False).apply_user_options is hook
    c = Config()
    c.GPUSpawner.apply_user_options = {"image_choice": "image"}
    s = build_spawner("a", config=c, server=False)
    assert s.apply_user_options == {"image_choice": "image"}
    assert spawn_page.admin_option_keys(s) == ("image_choice",)
