"""GPUSpawner's side of queueing through Kueue (gpuspawner.hub.kueue_wait): a full queued pool can be
chosen and its pod gets Kueue's labels; gpuspawner's quota still applies first; while queued the
start timeout does not run, the queue's limit does; the queue's words reach the progress stream; a
state that can never end in a running server ends the spawn with its reason; a server Kueue stopped
is explained on the spawn page.

No cluster: KubeSpawner's ``_start`` is the stand-in of test_spawner (pods fed to
``is_pod_running``), and Kueue's side is a fake ``KueueView`` holding Workloads as Kueue v0.17
writes them (the real view is tested in tests/queue/test_kube.py, against real Kueue in
tests/testcluster).
"""

from __future__ import annotations

import dataclasses

import asyncio
import re

import kubespawner.spawner
import pytest
from jupyterhub.spawner import SpawnException

from gpuspawner.hub import kueue_wait as queue_glue
from gpuspawner.hub.spawner import GPUSpawner
from gpuspawner.queue.status import Position, workload_state
from gpuspawner.hub import spawn_page
from tests.builders import FakeCache, node_view, pool_view, server_pod
from tests.builders import kueue as kb
from tests.hub.test_pod_wait import NS, FakeReflector, fake_start, starting_spawner

QUEUES = [{"match": "a100:*", "queue": "gpu-a100", "priority_class": "high"}]
MAX = ("couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor a100, "
       "previously considered podsets requests (0) + current podset request (4) > maximum capacity (2)")


class FakeView:
    """Kueue as the hub's shared view sees it: Workloads by pod UID and places in line."""

    def __init__(self):
        self.workloads: dict[str, dict] = {}
        self.positions: dict[str, Position] = {}
        self.stopped: dict[str, dict] = {}
        self.pokes = 0

    def state_of(self, uid, queue, resource="nvidia.com/gpu"):
        wl = self.workloads.get(uid)
        return workload_state(wl, queue, self.positions.get(uid), resource) if wl is not None else None

    def stop_reason(self, uid):
        wl = self.stopped.get(uid)
        return workload_state(wl, "gpu-a100") if wl is not None else None

    def poke(self):
        self.pokes += 1

    def queue_counts(self, queue):
        return (3, 2)


@pytest.fixture
def kueue(no_kube_client, install_cache, monkeypatch):
    # a full pool: two nodes of 4 GPUs, none free
    pool = pool_view("a100", "NVIDIA-A100-SXM4-40GB",
                     node_views=(node_view("a100-0", 4, 0, hostname="a100-0"), node_view("a100-1", 4, 0, hostname="a100-1")),
                     memory_mib=40960)
    cache = install_cache(FakeCache(pool, reservations_count=False))
    view = FakeView()
    reflector = FakeReflector()
    monkeypatch.setattr(GPUSpawner, "kueue_view", lambda self: view)
    monkeypatch.setattr(GPUSpawner, "pod_reflector", property(lambda self: reflector))
    monkeypatch.setattr(GPUSpawner, "events", property(lambda self: []))
    return type("Kueue", (), {"view": view, "pool": pool, "cache": cache, "reflector": reflector})


def queued_spawner(**traits):
    return starting_spawner(gpu_kueue_queues=QUEUES, **traits)


def gated(spawner, **kw):
    pod = server_pod(spawner.pod_name, "a100:nvidia-a100-sxm4-40gb:nvidia.com/gpu", **kw)
    pod["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return pod


async def test_a_full_queued_pool_is_chosen_and_its_pod_labelled_for_kueue(kueue):
    s = queued_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 2}
    await s.load_user_options()
    assert s.extra_labels == {"kueue.x-k8s.io/queue-name": "gpu-a100", "kueue.x-k8s.io/priority-class": "high"}
    assert s.extra_resource_limits == {"nvidia.com/gpu": "2"}
    assert kueue.cache.reservations == {}  # Kueue holds the place in line, not gpuspawner's reservation
    assert kueue.view.pokes == 1


async def test_without_a_queue_the_full_pool_is_refused_and_no_label_is_left_behind(kueue):
    s = queued_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    await s.load_user_options()
    s.gpu_kueue_queues = []
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    with pytest.raises(SpawnException, match="cannot give any GPU now"):
        await s.load_user_options()
    assert "kueue.x-k8s.io/queue-name" not in s.extra_labels


async def test_gpuspawners_quota_applies_before_a_pod_is_queued(kueue):
    s = queued_spawner(gpu_quota=1)
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 2}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    assert e.value.status_code == 403
    assert "kueue.x-k8s.io/queue-name" not in s.extra_labels


async def test_the_wait_in_line_does_not_count_against_start_timeout(kueue, monkeypatch):
    s = queued_spawner(start_timeout=300, gpu_kueue_queue_wait_limit=3600)
    seen = []

    def pending(sp):
        seen.append(sp.start_timeout)
        kueue.view.workloads[f"uid-{sp.pod_name}"] = kb.pending(priority_class="high")
        kueue.view.positions[f"uid-{sp.pod_name}"] = Position(2, 3)
        return gated(sp)

    def admitted(sp):
        kueue.view.workloads[f"uid-{sp.pod_name}"] = kb.admitted("a100")
        return server_pod(sp.pod_name, kueue.pool.id)

    def running(sp):
        return server_pod(sp.pod_name, kueue.pool.id, phase="Running", node="a100-0", podIP="10.0.0.9",
                          containerStatuses=[{"name": "notebook", "ready": True}])

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([pending, pending, admitted, running]))
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    await s.start()
    assert seen == [3900, 3900]  # JupyterHub's wait: start_timeout plus the queue's limit
    assert s.start_timeout == 300  # the admin's value again after the start
    assert s._spawn.queued.state.message == "Admitted: quota reserved in flavor a100"


@pytest.mark.parametrize(
    "workload, words",
    [
        pytest.param(kb.pending(MAX), "Never admissible in gpu-a100: this server asks for more GPUs than the "
                     "queue's quota can ever give", id="ExceedsMaxQuota"),
        pytest.param(kb.pending(active=False), "Deactivated: Kueue will not admit this server in gpu-a100 again",
                     id="deactivated"),
        pytest.param(kb.evicted("PodsReadyTimeout", "Exceeded the PodsReady timeout"),
                     "did not become ready within Kueue's waitForPodsReady timeout", id="PodsReadyTimeout"),
    ],
)
async def test_a_state_that_can_never_start_ends_the_spawn_with_its_reason(kueue, monkeypatch, workload, words):
    s = queued_spawner()

    def pod(sp):
        kueue.view.workloads[f"uid-{sp.pod_name}"] = workload
        return gated(sp)

    never = []
    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([pod, never.append]))
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    with pytest.raises(SpawnException) as e:
        await s.start()
    assert words in e.value.jupyterhub_message and e.value.status_code == 500
    assert not never


async def test_a_pod_preempted_while_it_waited_says_so(kueue, monkeypatch):
    s = queued_spawner()

    def pod(sp):
        kueue.view.workloads[f"uid-{sp.pod_name}"] = kb.pending()
        return gated(sp)

    def gone(sp):
        kueue.view.stopped[f"uid-{sp.pod_name}"] = kb.evicted("Preempted", "Preempted to accommodate", "InClusterQueue")
        return None

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([pod, gone]))
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    with pytest.raises(SpawnException, match="Preempted in gpu-a100: a server with higher priority"):
        await s.start()


async def test_the_queue_wait_has_its_own_limit(kueue, monkeypatch):
    s = queued_spawner(gpu_kueue_queue_wait_limit=600)
    now = [1000.0]
    monkeypatch.setattr(queue_glue, "_clock", lambda: now[0])

    def pod(sp):
        kueue.view.workloads[f"uid-{sp.pod_name}"] = kb.pending()
        kueue.view.positions[f"uid-{sp.pod_name}"] = Position(4, 4)
        now[0] += 400
        return gated(sp)

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([pod, pod]))
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    with pytest.raises(SpawnException) as e:
        await s.start()
    assert e.value.jupyterhub_message.startswith("Waited 10 minutes in queue gpu-a100 without getting a GPU "
                                                 "(Queued in gpu-a100: position 4 of 4). Try again later")


async def test_an_admitted_server_gets_the_admins_start_timeout_from_its_admission(kueue, monkeypatch):
    s = queued_spawner(start_timeout=120)
    now = [1000.0]
    monkeypatch.setattr(queue_glue, "_clock", lambda: now[0])

    def admitted(sp):
        kueue.view.workloads[f"uid-{sp.pod_name}"] = kb.admitted()
        now[0] += 100
        return server_pod(sp.pod_name, kueue.pool.id)

    monkeypatch.setattr(kubespawner.spawner.KubeSpawner, "_start", fake_start([admitted, admitted, admitted]))
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    with pytest.raises(TimeoutError, match="did not start in 120 seconds after Kueue admitted it"):
        await s.start()


async def test_the_queues_words_reach_the_progress_stream(kueue):
    s = queued_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    await s.load_user_options()
    uid = f"uid-{s.pod_name}"
    kueue.reflector.pods[f"{NS}/{s.pod_name}"] = gated(s)
    kueue.view.workloads[uid] = kb.pending(priority_class="high")
    kueue.view.positions[uid] = Position(3, 7)
    release = asyncio.Event()

    async def kubespawners_events():
        yield {"progress": 20, "message": "pod event"}
        await release.wait()

    got = []
    async for item in queue_glue.with_queue_messages(s, kubespawners_events(), interval=0.01):
        got.append(item["message"])
        if item["message"].startswith("Queued") and not kueue.view.workloads[uid].get("status", {}).get("admission"):
            kueue.view.workloads[uid] = kb.admitted("a100")
        if item["message"].startswith("Admitted"):
            release.set()
    assert "Queued in gpu-a100: position 3 of 7 (priority high)" in got
    assert "pod event" in got
    assert got[-1] == "Admitted: quota reserved in flavor a100"


async def test_a_server_kueue_preempted_is_explained_on_the_spawn_page(kueue):
    s = queued_spawner()
    s.user_options = {"profile": "gpu", "gpu_pool": kueue.pool.id, "gpus": 1}
    await s.load_user_options()
    s._spawn = dataclasses.replace(s._spawn, queued=dataclasses.replace(s._spawn.queued, pod_uid="uid-x"))
    kueue.view.stopped["uid-x"] = kb.evicted("Preempted", "Preempted to accommodate", "InClusterQueue")
    queue_glue.note_stopped(s)
    notice = queue_glue.stop_notice(s)
    assert "Your last server was stopped: Preempted in gpu-a100" in notice
    assert "<script" not in queue_glue.stop_notice(type("S", (), {"gpu_stop_message": "<script>x</script>"})())


async def test_a_full_queued_card_can_be_chosen_and_says_it_queues(kueue):
    s = queued_spawner()
    page = await spawn_page.render_page(s)
    radio = re.search(r'<input type="radio"[^>]*value="' + re.escape(kueue.pool.id) + '"[^>]*>', page).group(0)
    assert "disabled" not in radio and 'data-gs-queue-max="4"' in radio
    assert "Full — you can queue for a GPU here (Kueue queue gpu-a100)." in page
    assert "<p class=\"gs-reason\">" not in page
    s.gpu_stop_message = "Preempted in gpu-a100: <b>x</b>"
    page = await spawn_page.render_page(s)
    assert page.startswith('<p class="gs-warning gs-queue-stopped" role="status">Your last server was stopped: '
                           "Preempted in gpu-a100: &lt;b&gt;x&lt;/b&gt;</p>")
