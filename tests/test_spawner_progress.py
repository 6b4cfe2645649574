"""GPUSpawner while a server starts: progress in GPU words, an early end when
the pod can never start, and the spawn metrics (started / refused / failed,
the wait for a GPU).

No cluster: KubeSpawner's client setup and its ``_start`` are replaced by
stand-ins that feed pods to ``is_pod_running`` as KubeSpawner's wait does
(``exponential_backoff(lambda: self.is_pod_running(pod))``); the pod and event
reflectors are fakes holding core/v1 dicts as KubeSpawner's do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import kubespawner.spawner
import pytest
from jupyterhub.objects import Hub, Server
from prometheus_client import CollectorRegistry
from tornado import web
from traitlets.config import Config

from gpuspawner.hub import metrics
from gpuspawner.hub import settings as settings_module
from gpuspawner.hub import spawner as spawner_module
from gpuspawner.capacity.model import CapacitySnapshot, NodeView, PoolView, ScaleUp, Taint, pool_id
from gpuspawner.hub.errors import GPUSpawnFailure
from gpuspawner.hub.metrics import REFUSAL_REASONS
from gpuspawner.spawn.pending import fatal_verdict, queued_before
from gpuspawner.spawn.progress import SpawnContext
from gpuspawner.hub.settings import GPUCapacitySettings
from gpuspawner.hub.spawner import GPUSpawner, applied_in_load_user_options

GKE = "cloud.google.com/gke-nodepool"
NS = "jhub"
SKU = Taint("sku", "gpu", "NoSchedule")


def make_pool(group, product, *, nodes=2, per_node=4, free=None, taints=(), scale_up=None):
    views = tuple(
        NodeView(f"{group}-{i}", per_node, per_node, "570.172.08", "12.8", "8.0",
                 (("kubernetes.io/hostname", f"{group}-{i}"),))
        for i in range(nodes)
    )
    total = nodes * per_node
    return PoolView(
        id=pool_id(group, product, "nvidia.com/gpu"),
        resource="nvidia.com/gpu",
        product=product,
        memory_mib=40960,
        node_group_label=GKE,
        node_group=group,
        nodes=nodes,
        total=total,
        free=total if free is None else free,
        max_free_per_node=per_node if free is None else min(free, per_node),
        driver_version="570.172.08",
        cuda_version="12.8",
        scale_up=scale_up,
        defining_labels=((GKE, group),),
        taints=tuple(taints),
        node_views=views,
    )


A100 = make_pool("a100", "NVIDIA-A100-SXM4-40GB", taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))
T4 = make_pool("t4", "Tesla-T4", nodes=2, per_node=1, taints=(SKU,))  # "sku" is not tolerated below
H100 = make_pool("h100", "NVIDIA-H100-80GB-HBM3", nodes=0, per_node=8,
                 scale_up=ScaleUp(max_nodes=2, gpus_per_node=8, minutes=7))


class FakeCache:
    def __init__(self, *pools, synced=True, healthy=True):
        self.pools = {p.id: p for p in pools}
        self.synced, self.healthy = synced, healthy
        self.reservations: dict[str, tuple[str, int]] = {}

    async def wait_synced(self, timeout):
        return self.synced

    def snapshot(self):
        return CapacitySnapshot(pools=tuple(self.pools.values()), synced=self.synced, age_seconds=0.5,
                                generation=1, healthy=self.healthy)

    def reserve(self, owner, pool_id, count):
        self.reservations[owner] = (pool_id, count)

    def release(self, owner):
        self.reservations.pop(owner, None)


class FakeReflector:
    def __init__(self):
        self.pods: dict[str, dict] = {}


class MockUser:
    def __init__(self, name):
        self.name = name
        self.id = len(name)
        self.url = f"/user/{name}/"
        self.escaped_name = name
        self.spawners = {}


@pytest.fixture
def registry(monkeypatch):
    reg = CollectorRegistry()
    monkeypatch.setattr(GPUSpawner, "metrics_registry", reg)
    return reg


@pytest.fixture
def cluster(monkeypatch, registry):
    """No Kubernetes: a fake capacity cache, pod reflector and event list."""
    monkeypatch.setattr(kubespawner.spawner, "load_config", lambda **kw: None)
    monkeypatch.setattr(kubespawner.spawner, "shared_client", lambda *a, **kw: object())
    cache = FakeCache(A100, T4, H100)
    monkeypatch.setattr(GPUCapacitySettings, "shared_capacity_cache", lambda self: cache)
    reflector = FakeReflector()
    events: list[dict] = []
    monkeypatch.setattr(GPUSpawner, "pod_reflector", property(lambda self: reflector))
    monkeypatch.setattr(GPUSpawner, "events", property(lambda self: list(events)))
    return dataclasses.make_dataclass("Cluster", ["cache", "reflector", "events"])(cache, reflector, events)


GPU_PROFILES = [{"slug": "gpu", "display_name": "GPU server", "kubespawner_override": {"image": "pytorch:cu124"}}]
STATIC = [{"display_name": "CPU only", "slug": "cpu", "default": True, "kubespawner_override": {"cpu_limit": 2.0}}]


def make_spawner(name="alice", **traits):
    config = Config()
    config.GPUSpawner.gpu_profiles = GPU_PROFILES
    config.GPUSpawner.profile_list = STATIC
    config.GPUSpawner.namespace = NS
    config.GPUSpawner.gpu_tolerated_taint_keys = ["nvidia.com/gpu"]
    config.GPUSpawner.gpu_pool_rules = [{"match": "t4:*", "display_name": "T4"}]
    for k, v in traits.items():
        config.GPUSpawner[k] = v
    s = GPUSpawner(config=config, user=MockUser(name), hub=Hub(), _mock=True)
    s.server = Server(ip="127.0.0.1", port=8888, base_url=f"/user/{name}/")
    return s


def pod(name, pool=None, *, created="2026-11-22T01:00:00Z", phase="Pending", node=None, priority=None,
        uid=None, deleting=False, conditions=(), **status):
    p = {
        "metadata": {"name": name, "namespace": NS, "uid": uid or f"uid-{name}", "creationTimestamp": created,
                     "annotations": {"gpuspawner.io/pool": pool} if pool else {}},
        "spec": {},
        "status": {"phase": phase, "conditions": list(conditions), **status},
    }
    if node:
        p["spec"]["nodeName"] = node
    if priority is not None:
        p["spec"]["priority"] = priority
    if deleting:
        p["metadata"]["deletionTimestamp"] = "2026-11-22T01:00:09Z"
    return p


def event(reason, message, *, pod_name="jupyter-alice", uid="uid-jupyter-alice"):
    return {"reason": reason, "message": message, "type": "Warning",
            "involvedObject": {"kind": "Pod", "name": pod_name, "uid": uid}, "metadata": {"uid": f"ev-{reason}"}}


def scheduled(at):
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}


def running(name, pool, created="2026-11-22T01:00:00Z", at="2026-11-22T01:00:07Z"):
    return pod(name, pool, created=created, phase="Running", node="n-0", conditions=[scheduled(at)],
               podIP="10.0.0.9", containerStatuses=[{"name": "notebook", "ready": True}])


TAINTED = ("0/7 nodes are available: 2 node(s) had untolerated taint {sku: gpu}, "
           "5 node(s) didn't match Pod's node affinity/selector. preemption: 0/7 nodes are available: "
           "7 Preemption is not helpful for scheduling.")
BUSY = ("0/7 nodes are available: 2 Insufficient nvidia.com/gpu, 5 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/7 nodes are available: 7 Preemption is not helpful for scheduling.")


def spawn_sample(registry, pool, outcome, reason):
    return registry.get_sample_value("gpuspawner_spawns_total", {"pool": pool, "outcome": outcome, "reason": reason})


# --- who is queued before whom ------------------------------------------------------------------

ME = pod("jupyter-alice", A100.id, created="2026-11-22T01:00:10Z")


@pytest.mark.parametrize(
    "others, expected",
    [
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z")], 1),
        ([pod("a", A100.id, created="2026-11-22T01:00:15Z")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:10Z")], 0),
        ([pod("a", T4.id, created="2026-11-22T01:00:05Z")], 0),
        ([pod("a", None, created="2026-11-22T01:00:05Z")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", node="gke-0")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", phase="Running", node="gke-0")], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", deleting=True)], 0),
        ([pod("a", A100.id, created="2026-11-22T01:00:15Z", priority=1000)], 1),
        ([pod("a", A100.id, created="2026-11-22T01:00:05Z", priority=-5)], 0),
        ([ME, pod("a", A100.id, created="2026-11-22T01:00:01Z"), pod("b", A100.id, created="2026-11-22T01:00:02Z"),
          pod("c", A100.id, created="2026-11-22T01:00:20Z")], 2),
        ([pod("a", A100.id, created="not a time"), "not a pod"], 0),
    ],
    ids=["earlier", "later", "same-second", "other-pool", "cpu-pod", "bound", "running", "deleting",
         "higher-priority-jumps-ahead", "lower-priority-waits", "counts-only-others-before", "garbage-ignored"],
)
def test_queued_before_follows_the_schedulers_queue_order(others, expected):
    assert queued_before(others, ME, A100.id) == expected


def test_queued_before_without_a_pod_yet_is_zero():
    assert queued_before([pod("a", A100.id)], None, A100.id) == 0
    assert queued_before([pod("a", A100.id)], pod("me", A100.id, created=None), A100.id) == 0


# --- when a pod can never start -----------------------------------------------------------------


def t4_ctx(**kw):
    return SpawnContext.from_pool(T4, pool_id=T4.id, gpus=1, tolerated_taint_keys=("nvidia.com/gpu",),
                                  pool_name="T4", **kw)


FAILED_SCHEDULING = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": TAINTED}


@pytest.mark.parametrize(
    "the_pod, events, kind",
    [
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED)], "untolerated_taint"),
        (pod("jupyter-alice", T4.id, conditions=[FAILED_SCHEDULING]), [], "untolerated_taint"),
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", BUSY)], None),
        # the scheduler's newest word counts: it found room after all
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED), event("FailedScheduling", BUSY)], None),
        # bound to a node since: an old FailedScheduling is history
        (pod("jupyter-alice", T4.id, node="t4-0"), [event("FailedScheduling", TAINTED)], None),
        # an event of an earlier pod with the same name
        (pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED, uid="older-pod")], None),
        (pod("jupyter-alice", T4.id, node="t4-0"),
         [event("Failed", 'Failed to pull image "nope:1": rpc error: code = NotFound desc = failed to pull and '
                          'unpack image "docker.io/library/nope:1": not found')], "image_not_found"),
        (pod("jupyter-alice", T4.id, node="t4-0"), [event("Pulling", 'Pulling image "pytorch:cu124"')], None),
        (pod("jupyter-alice", T4.id, phase="Failed", reason="UnexpectedAdmissionError",
             message="Allocate failed due to no healthy devices present"), [], "gpu_allocation_failed"),
    ],
    ids=["taint-event", "taint-condition", "waiting-for-gpu", "newest-wins", "bound-since", "older-pod",
         "image-not-found", "pulling", "admission"],
)
def test_fatal_verdict(the_pod, events, kind):
    verdict = fatal_verdict(the_pod, events, t4_ctx())
    assert (verdict.kind if verdict else None) == kind
    if verdict:
        assert verdict.fatal and verdict.reason


def test_a_pool_that_can_scale_up_keeps_waiting():
    ctx = SpawnContext.from_pool(dataclasses.replace(T4, scale_up=ScaleUp(3, 1, 5)), pool_id=T4.id, gpus=1,
                                 tolerated_taint_keys=("nvidia.com/gpu",))
    assert fatal_verdict(pod("jupyter-alice", T4.id), [event("FailedScheduling", TAINTED)], ctx) is None


# --- progress in GPU words ------------------------------------------------------------------------


def fake_kubespawner_progress(events):
    async def progress(self):
        for i, e in enumerate(events):
            yield {"progress": 5 * i, "message": f"[{e['type']}] {e['message']}", "raw_event": e}
        yield {"progress": 30, "message": "Spawn is taking a while (61 seconds)..."}

    return progress


async def test_progress_speaks_of_gpus_pools_and_the_queue(cluster, monkeypatch):
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", fake_kubespawner_progress([
        event("FailedScheduling", BUSY),
        event("Scheduled", "Successfully assigned jhub/jupyter-alice to t4-1"),
        event("Pulling", 'Pulling image "pytorch:cu124"'),
    ]))
    s = make_spawner(gpu_tolerated_taint_keys=["nvidia.com/gpu", "sku"])
    s.user_options = {"profile": "gpu", "gpu_pool": T4.id, "gpus": 1}
    await s.load_user_options()
    cluster.cache.pools[T4.id] = dataclasses.replace(T4, free=0, max_free_per_node=0)  # others took them since
    me = pod(s.pod_name, T4.id, created="2026-11-22T01:00:10Z")
    cluster.reflector.pods = {
        f"{NS}/{s.pod_name}": me,
        f"{NS}/jupyter-bob": pod("jupyter-bob", T4.id, created="2026-11-22T01:00:01Z"),
        f"{NS}/jupyter-carol": pod("jupyter-carol", T4.id, created="2026-11-22T01:00:02Z"),
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
    raw = event("Scheduled", "Successfully assigned jhub/jupyter-alice to cpu-0")
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", fake_kubespawner_progress([raw]))
    s = make_spawner()
    s.user_options = {"profile": "cpu"}
    await s.load_user_options()
    items = [e async for e in s.progress()]
    assert items[0]["message"] == "[Warning] Successfully assigned jhub/jupyter-alice to cpu-0"


async def test_progress_with_unknown_capacity_concludes_nothing(cluster, monkeypatch):
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress",
                        fake_kubespawner_progress([event("FailedScheduling", TAINTED)]))
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": T4.id}
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
    s = make_spawner()

    def tainted(spawner):
        cluster.events.append(event("FailedScheduling", TAINTED, pod_name=spawner.pod_name,
                                    uid=f"uid-{spawner.pod_name}"))
        return pod(spawner.pod_name, T4.id)

    never_reached = []
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start",
                        fake_start([lambda sp: pod(sp.pod_name, T4.id), tainted, never_reached.append]))
    s.user_options = {"profile": "gpu", "gpu_pool": T4.id, "gpus": 1}
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
    assert spawn_sample(registry, T4.id, "failed", "untolerated_taint") == 1
    assert cluster.cache.reservations == {}  # the GPU it held is given back


async def test_a_started_spawn_is_counted_with_its_wait_for_a_gpu(cluster, registry, monkeypatch):
    s = make_spawner()
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([
        lambda sp: pod(sp.pod_name, A100.id, created="2026-11-22T01:00:00Z"),
        lambda sp: pod(sp.pod_name, A100.id, created="2026-11-22T01:00:00Z", node="a100-1",
                       conditions=[scheduled("2026-11-22T01:00:42Z")]),
        lambda sp: running(sp.pod_name, A100.id, at="2026-11-22T01:00:42Z"),
    ]))
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    assert await s.start() == "http://10.0.0.9:8888"
    assert spawn_sample(registry, A100.id, "started", "") == 1
    # once per spawn, though is_pod_running saw the scheduled pod twice
    assert registry.get_sample_value("gpuspawner_gpu_wait_seconds_count", {"pool": A100.id}) == 1
    assert registry.get_sample_value("gpuspawner_gpu_wait_seconds_sum", {"pool": A100.id}) == 42
    assert spawn_sample(registry, A100.id, "failed", "timeout") is None


async def test_a_cpu_spawn_counts_nothing(cluster, registry, monkeypatch):
    s = make_spawner()
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
    s = make_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id}
    with pytest.raises(type(error)):
        await s.start()
    assert spawn_sample(registry, A100.id, "failed", reason) == 1


async def test_the_hubs_start_timeout_counts_as_timeout_an_early_cancel_does_not(cluster, registry, monkeypatch):
    async def _start(self):
        await self.load_user_options()
        await asyncio.Event().wait()  # a pod that never runs

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", _start)
    clock = [1000.0]
    monkeypatch.setattr(spawner_module, "_clock", lambda: clock[0])
    for elapsed, counted in ((5.0, None), (180.0, 1)):
        s = make_spawner(start_timeout=180)
        s.user_options = {"profile": "gpu", "gpu_pool": A100.id}
        f = s.start()
        await asyncio.sleep(0.01)
        clock[0] += elapsed
        f.cancel()  # what asyncio.wait_for(start, start_timeout) does in jupyterhub/user.py
        with pytest.raises(asyncio.CancelledError):
            await f
        assert spawn_sample(registry, A100.id, "failed", "timeout") == counted


REFUSALS = [
    ({"profile": "gpu", "gpu_pool": "made:up:nvidia.com/gpu"}, "unknown_pool", ""),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": "two"}, "bad_count", A100.id),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 0}, "bad_count", A100.id),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 5}, "too_many_gpus", A100.id),
    ({"profile": "gpu", "gpu_pool": A100.id, "node_selector": {"a": "b"}}, "forbidden_option", A100.id),
    ({"profile": "gpu", "gpu_pool": A100.id, "colour": "red"}, "forbidden_option", A100.id),
    ({"profile": "cpu", "gpus": 1}, "forbidden_option", ""),
    ({"profile": "gpu", "gpu_pool": 7}, "unknown_pool", ""),
]


@pytest.mark.parametrize("options, reason, pool", REFUSALS,
                         ids=["unknown-pool", "not-a-number", "zero", "too-many", "trait", "unknown-option",
                              "gpus-on-cpu-profile", "pool-not-a-string"])
async def test_refusals_are_counted_with_their_reason(cluster, registry, options, reason, pool):
    s = make_spawner()
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
    s = make_spawner()
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
    s = make_spawner()
    assert s.apply_user_options is applied_in_load_user_options
    with caplog.at_level(logging.DEBUG):
        await s._run_apply_user_options({"profile": "gpu", "gpu_pool": A100.id, "gpus": 1})
    assert not [r for r in caplog.records if "unhandled user_options" in r.getMessage().lower()]
    assert s.image != A100.id and s.user_options == {}  # nothing was applied here


def test_an_admins_apply_user_options_wins(cluster):
    def hook(spawner, user_options):
        spawner.environment = {"OPTS": ",".join(user_options)}

    c = Config()
    c.Spawner.apply_user_options = hook  # on the base class, as JupyterHub's docs show
    assert GPUSpawner(config=c, user=MockUser("a"), hub=Hub(), _mock=True).apply_user_options is hook
    c = Config()
    c.GPUSpawner.apply_user_options = {"image_choice": "image"}
    s = GPUSpawner(config=c, user=MockUser("a"), hub=Hub(), _mock=True)
    assert s.apply_user_options == {"image_choice": "image"}
    assert s._admin_option_keys() == ("image_choice",)


# --- /hub/metrics reads the shared cache ----------------------------------------------------------


async def test_the_first_cache_user_points_the_metrics_at_it(monkeypatch):
    from gpuspawner.capacity import cache as cache_module

    installed = []
    caches = [FakeCache(A100), FakeCache(T4)]
    monkeypatch.setattr(settings_module, "_metrics_cache", None)
    monkeypatch.setattr(metrics, "install",
                        lambda registry=None, snapshot=None: installed.append(snapshot))
    monkeypatch.setattr(cache_module.CapacityCache, "shared", classmethod(lambda cls, config, **kw: caches[0]))
    settings = GPUCapacitySettings()
    assert settings.shared_capacity_cache() is caches[0]
    settings.shared_capacity_cache()  # the same cache: installed once
    assert installed == [caches[0].snapshot]
    caches.reverse()  # e.g. a new event loop in tests: the new cache's snapshot is read
    settings.shared_capacity_cache()
    assert installed == [caches[1].snapshot, caches[0].snapshot]
