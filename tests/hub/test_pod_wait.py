"""The wait for a GPU server pod (gpuspawner.hub.pod_wait): progress in GPU words, the early end, what is counted."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import replace

import kubespawner.spawner
import pytest
from jupyterhub.spawner import SpawnException
from prometheus_client import CollectorRegistry

from gpuspawner.capacity.model import ScaleUp, Taint
from gpuspawner.hub import pod_wait
from gpuspawner.hub.errors import GPUSpawnFailure
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.spawner import GPUSpawner

from tests.builders import FakeCache, group_nodes, pod_event, pool_view, server_pod
from tests.builders import make_spawner as build_spawner
from tests.hub.test_spawner import (  # noqa: F401 (fixtures)
    A100,
    MVC_POOL,
    NEW_POOL,
    STATIC,
    cache,
    cuda_spawner,
    driver_cache,
    make_spawner,
)


# --- admitted with room, but the scheduler finds none: the early end -----------------------------------------

INSUFFICIENT = ("0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node "
                "affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")


class RecheckingCache(FakeCache):
    def __init__(self, *pools):
        super().__init__(*pools)
        self.rechecks = 0
        self.done = False

    def recheck(self):
        self.rechecks += 1
        return 7.0

    def rechecked_since(self, token):
        return self.done and token == 7.0


def pending(pod_name):
    return {"metadata": {"name": pod_name, "namespace": "jhub", "uid": "u1"},
            "spec": {"containers": [{"name": "notebook"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": INSUFFICIENT}]}}


async def test_a_pool_found_full_ends_the_spawn_after_the_grace_and_a_recheck(no_kube_client, monkeypatch):
    fake = RecheckingCache(A100)
    monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", lambda self: fake)
    now = [100.0]
    monkeypatch.setattr(pod_wait, "_clock", lambda: now[0])
    s = make_spawner(gpu_full_pool_grace=30)
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 3}
    await s.load_user_options()
    assert fake.reservations  # admitted on counts with room (3 free on one node)
    s._spawn = dataclasses.replace(s._spawn, starting=True)
    pod = pending(s.pod_name)
    pod_wait.check_pod(s, pod)  # first sight: the reservation goes back, the cache re-lists
    assert fake.rechecks == 1 and fake.reservations == {}
    # meanwhile another workload took the GPUs: the fresh counts have 1 free
    fake.pools[A100.id] = dataclasses.replace(A100, free=1, max_free_per_node=1)
    now[0] += 29
    fake.done = True
    pod_wait.check_pod(s, pod)  # within the grace: keep waiting
    now[0] += 2
    with pytest.raises(GPUSpawnFailure) as e:
        pod_wait.check_pod(s, pod)
    assert e.value.kind == "no_free_gpu" and e.value.status_code == 500
    assert e.value.jupyterhub_message.startswith("Pool NVIDIA A100 80GB has no node with 3 free GPUs on one node")


async def test_a_pool_with_room_again_keeps_waiting(no_kube_client, monkeypatch):
    fake = RecheckingCache(A100)
    monkeypatch.setattr(GPUSpawnerSettings, "shared_capacity_cache", lambda self: fake)
    now = [100.0]
    monkeypatch.setattr(pod_wait, "_clock", lambda: now[0])
    s = make_spawner(gpu_full_pool_grace=0)
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 3}
    await s.load_user_options()
    s._spawn = dataclasses.replace(s._spawn, starting=True)
    pod = pending(s.pod_name)
    pod_wait.check_pod(s, pod)
    fake.done = True
    now[0] += 60
    pod_wait.check_pod(s, pod)  # the fresh counts still have a node with 3 free: the scheduler will retry
    assert fake.rechecks == 1


async def test_progress_shows_the_warning_before_kubespawners_events(no_kube_client, driver_cache, monkeypatch):
    async def events(self):
        yield {"progress": 50, "message": "Pulling image"}

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", events)
    s = cuda_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": MVC_POOL.id}
    s._spawn = replace(s._spawn, notes=asyncio.get_running_loop().create_future())
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
    # no server listens at the stand-in's pod IP: the wait for it is tests/hub/test_listen_wait.py's
    gpu_listen_check_interval=0,
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


async def test_a_pull_on_a_cold_node_is_estimated_from_the_size_other_nodes_report(cluster, monkeypatch):
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "progress", fake_kubespawner_progress([
        pod_event("Scheduled", "Successfully assigned jhub/jupyter-alice to t4-1"),
        pod_event("Pulling", 'Pulling image "pytorch:cu124"'),
    ]))
    # t4-0 holds the image (as containerd names it); the pod landed on t4-1, which pulls it
    cluster.cache.node_images.update("t4-0", [POOL_T4.id], {"docker.io/library/pytorch:cu124": 15_032_385_536})
    s = starting_spawner(gpu_tolerated_taint_keys=["nvidia.com/gpu", "sku"], gpu_image_pull_mb_per_second=30)
    s.user_options = {"profile": "gpu", "gpu_pool": POOL_T4.id, "gpus": 1}
    await s.load_user_options()
    messages = [e["message"] async for e in s.progress()]
    assert messages[1] == ("Downloading the image pytorch:cu124: pulling 15 GB image, about 8 min on a node that "
                           "does not have it yet.")


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
