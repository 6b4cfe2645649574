"""The GPU-hour ledger's hub glue on SQLite and PostgreSQL: a launch checked against the budget, holdings
recorded as servers start and stop, open ones closed from the cluster, 50 concurrent servers exact."""

from __future__ import annotations

import asyncio
import concurrent.futures
from datetime import timedelta
from types import SimpleNamespace

import pytest
from jupyterhub.spawner import SpawnException
from prometheus_client import CollectorRegistry

from gpuspawner.hub import gpu_hours as gpu_hours
from gpuspawner.usage import clock, store
from gpuspawner.usage.store import UsageStore
from gpuspawner.hub import spawn_page
from tests.builders import FakeCache, MockUser, pool_view
from tests.builders import make_spawner as build_spawner
from tests.builders.usage import NOW, at, hours, session

A100 = pool_view("a100", "NVIDIA-A100-SXM4-80GB", total=16, free=8, per_node=8)
GPU_PROFILES = [{"slug": "gpu", "display_name": "GPU server"}]


@pytest.fixture
def now():
    """The ledger's clock, moved by the test (``now[0] += hours(1)``)."""
    current = [NOW]
    clock.set_source(lambda: current[0])
    yield current
    clock.set_source(None)


@pytest.fixture
def db(db_url):
    """The hub's session on a database with JupyterHub's tables, as the hub has it."""
    from jupyterhub import orm

    s = session(db_url)
    orm.Base.metadata.create_all(s.get_bind())
    store._ready.clear()
    gpu_hours._sweep_state.update(last=None, task=None)
    yield s
    s.close()
    s.get_bind().dispose()


@pytest.fixture
def cache(install_cache):
    # reservations are not taken off the counts: the concurrency test's 50 servers all find room
    return install_cache(FakeCache(A100, reservations_count=False))


def spawner(db, name="alice", server="", groups=(), **traits):
    user = MockUser(name, groups=groups)
    user.db = db  # the hub's session, as JupyterHub's User holds it
    s = build_spawner(name, user=user, gpu_profiles=GPU_PROFILES, namespace="jhub", **traits)
    if server:  # JupyterHub names a server by its orm record
        s.orm_spawner = SimpleNamespace(name=server, user_options={}, server=None, state={})
    s.metrics_registry = CollectorRegistry()
    return s


def running_pod(s, uid="uid-1", node="node-1", **status):
    return {"metadata": {"name": s.pod_name, "namespace": "jhub", "uid": uid},
            "spec": {"nodeName": node, "containers": [
                {"name": "notebook", "ports": [{"name": "notebook-port", "containerPort": 8888}]}]},
            "status": {"phase": "Running", **status}}


class Reflector:
    """What KubeSpawner's pod reflector offers: its loaded pods by ``namespace/name``."""

    def __init__(self, *pods):
        self.pods = {}
        for p in pods:
            self.add(p)
        self.first_load_future = concurrent.futures.Future()  # its first list is done
        self.first_load_future.set_result(None)
        self.watch_task = concurrent.futures.Future()  # and its watch runs
        self._stopping = False

    def add(self, pod):
        self.pods[f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"] = pod

    def remove(self, pod):
        self.pods.pop(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", None)


@pytest.fixture
def cluster(monkeypatch):
    """The pods of namespace ``jhub`` as KubeSpawner's (class-wide) pod reflector sees them."""
    from gpuspawner.hub.spawner import GPUSpawner

    reflector = Reflector()
    monkeypatch.setitem(GPUSpawner.reflectors, ("pods", "jhub"), reflector)
    return reflector


async def start(s, pod):
    """A GPU spawn through load_user_options, then its pod running: the holding recorded."""
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    await s.load_user_options()
    s._reflected_pod = lambda: pod
    return await gpu_hours.record_start(s, s._spawn.info)


def budget(gpu_hours_value, window="1d", scope="everyone"):
    return [{"scope": scope, "gpu_hours": gpu_hours_value, "window": window}]


async def test_a_spent_budget_refuses_with_403_and_the_retry_time(no_kube_client, cache, db, now):
    UsageStore(db).ready().open(holding_of("alice", "2026-11-27 09:00", "2026-11-27 11:00", gpus=1))
    s = spawner(db, gpu_hour_budgets=budget(2))
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 1}
    with pytest.raises(SpawnException) as e:
        await s.load_user_options()
    assert e.value.status_code == 403 and e.value.reason == "gpu-budget"
    # 10 minutes of 1 GPU must be free: 9:00-9:10 leaves the 1-day window at 9:10 tomorrow
    assert e.value.jupyterhub_message == (
        "You have used 2 of your 2 GPU-hours in the last day; 0.17 GPU-hours come back on 28 November at 09:10 UTC.")
    assert cache.reservations == {}
    sample = s.metrics_registry.get_sample_value
    assert sample("gpuspawner_budget_refusals_total", {"pool": A100.id}) == 1
    assert sample("gpuspawner_spawns_total", {"pool": A100.id, "outcome": "refused", "reason": "budget"}) == 1
    assert sample("gpuspawner_spawns_total", {"pool": A100.id, "outcome": "failed", "reason": "error"}) is None


@pytest.mark.parametrize("minimum, spent, allowed", [
    (10, 1.9, False), (10, 1.5, True), (0, 1.99, True), (0, 2.0, False),
], ids=["minimum-not-covered", "minimum-covered", "minimum-0-anything-left", "minimum-0-nothing-left"])
async def test_the_minimum_of_the_asked_gpus(no_kube_client, cache, db, now, minimum, spent, allowed):
    # 2 GPUs asked: 10 minutes of them need 1/3 GPU-hour
    UsageStore(db).ready().open(holding_of("alice", NOW - timedelta(hours=spent), NOW, gpus=1))
    s = spawner(db, gpu_hour_budgets=budget(2), gpu_hour_minimum_minutes=minimum)
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    if allowed:
        await s.load_user_options()
    else:
        with pytest.raises(SpawnException):
            await s.load_user_options()


async def test_weights_count_in_the_verdict(no_kube_client, cache, db, now):
    s = spawner(db, gpu_hour_budgets=budget(1), gpu_hour_weights={"NVIDIA A100 SXM4 80GB": 4})
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}  # 10 minutes x 2 GPUs x 4 = 1.33
    with pytest.raises(SpawnException):
        await s.load_user_options()


async def test_no_budget_no_database_read(no_kube_client, cache, now):
    s = spawner(None)  # no ledger at all: the spawn is not held up
    s.user_options = {"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}
    await s.load_user_options()
    assert s.extra_resource_limits == {"nvidia.com/gpu": "2"}


async def test_start_and_stop_are_recorded_once(no_kube_client, cache, db, now):
    s = spawner(db, groups=["research"], gpu_hour_weights={"a100:*": 2})
    pod = running_pod(s)
    hid = await start(s, pod)
    assert hid == await gpu_hours.record_start(s, s._spawn.info)  # the same pod is never recorded twice
    now[0] += hours(1.5)
    assert gpu_hours.record_stop(s, gpu_hours.pod_end_now(pod)) == 1
    assert gpu_hours.record_stop(s, None) == 0
    [h] = UsageStore(db).for_user("alice", None)
    assert (h.pool, h.product, h.gpus, h.share, h.weight) == (A100.id, A100.product, 2, 1.0, 2.0)
    assert h.hours(None, now[0]) == pytest.approx(6.0)
    # counted once on /hub/metrics, for each of the user's groups
    assert s.metrics_registry.get_sample_value("gpuspawner_gpu_hours_total",
                                               {"pool": A100.id, "group": "research"}) == pytest.approx(6.0)


async def test_a_pod_that_ended_before_the_stop_closes_at_its_end(no_kube_client, cache, db, now):
    s = spawner(db)
    await start(s, running_pod(s))
    ended = running_pod(s, phase="Failed", containerStatuses=[
        {"name": "notebook", "state": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-27T12:20:00Z"}}}])
    now[0] += hours(2)
    gpu_hours.record_stop(s, gpu_hours.pod_end_now(ended))
    [h] = UsageStore(db).for_user("alice", None)
    assert (h.stop, h.hours(None, now[0])) == (at("2026-11-27 12:20"), pytest.approx(2 / 3))


@pytest.mark.parametrize("pod, stop, reason", [
    (None, "2026-11-27 13:00", "pod-gone"),
    ({"uid": "uid-2"}, "2026-11-27 13:00", "pod-replaced"),
    ({"finished": "2026-11-27T12:30:00Z"}, "2026-11-27 12:30", "pod-ended"),
    ({}, None, None),
], ids=["deleted-behind-the-hubs-back", "replaced", "terminated", "still-running"])
async def test_the_sweep_closes_from_what_the_cluster_says(no_kube_client, cache, db, now, cluster, pod, stop,
                                                          reason):
    s = spawner(db)
    await start(s, running_pod(s))
    now[0] += hours(1)
    if pod is not None:
        p = running_pod(s, uid=pod.get("uid", "uid-1"))  # the cluster as KubeSpawner's reflector sees it
        if "finished" in pod:
            p["status"]["containerStatuses"] = [{"name": "notebook", "state": {
                "terminated": {"exitCode": 0, "finishedAt": pod["finished"]}}}]
        cluster.add(p)
    assert await gpu_hours.sweep(s) == (1 if stop else 0)
    assert await gpu_hours.sweep(s) == 0  # never twice
    [h] = UsageStore(db).for_user("alice", None)
    assert h.stop == (at(stop) if stop else None)
    if stop:
        row = db.execute(store.holdings.select()).first()
        assert row.stop_reason == reason


async def test_fifty_concurrent_starts_and_stops_keep_the_books_exact(no_kube_client, cache, db, now, cluster):
    users = [f"user{i}" for i in range(50)]

    async def one(i, name):
        s = spawner(db, name=name, server="" if i % 2 else "train")
        pod = running_pod(s, uid=f"uid-{i}")
        cluster.add(pod)
        await start(s, pod)
        await asyncio.sleep(0)
        await gpu_hours.sweep(s)  # sweeps race the stops: a running pod is never closed
        await asyncio.sleep(0)
        return s, pod

    started = await asyncio.gather(*(one(i, n) for i, n in enumerate(users)))
    ledger = UsageStore(db)
    assert ledger.count_open() == 50
    now[0] += hours(1)

    async def stop(s, pod):
        await asyncio.sleep(0)
        cluster.remove(pod)  # the pod is gone: a sweep and the stop both try to close it
        both = await asyncio.gather(gpu_hours.sweep(s), asyncio.to_thread(lambda: None))
        return gpu_hours.record_stop(s, None) + both[0]

    closed = await asyncio.gather(*(stop(s, pod) for s, pod in started))
    assert sum(closed) == 50  # each holding closed exactly once, whoever got there first
    assert ledger.count_open() == 0
    books = ledger.for_users(None, None)
    assert len(books) == 50
    assert sum(h.hours(None, now[0]) for h in books) == pytest.approx(50 * 2 * 1.0)


def holding_of(user, start_, stop_, **kw):
    from tests.builders.usage import holding

    return holding(start_, stop_, user=user, pool=A100.id, product=A100.product, **kw)



async def test_a_server_found_stopped_by_poll_is_closed_at_its_pods_end(no_kube_client, cache, db, now, cluster):
    # JupyterHub calls no stop() for a server its poll finds stopped: the poll closes the holding
    s = spawner(db)
    pod = running_pod(s)
    await start(s, pod)
    del s._reflected_pod  # from here the pod is read from the (class-wide) reflector, as KubeSpawner does
    cluster.add(running_pod(s, phase="Failed", containerStatuses=[{"name": "notebook", "state": {
        "terminated": {"exitCode": 137, "finishedAt": "2026-11-27T12:45:00Z"}}}]))
    now[0] += hours(2)
    s.delete_stopped_pods = False  # KubeSpawner would delete it (an API call this test has no cluster for)
    assert await s.poll() == 137
    [h] = UsageStore(db).for_user("alice", None)
    assert h.stop == at("2026-11-27 12:45")


async def test_the_spawn_page_shows_what_is_left_and_each_pools_rate(no_kube_client, cache, db, now):
    UsageStore(db).ready().open(holding_of("alice", "2026-11-27 09:00", "2026-11-27 10:30", gpus=1))
    s = spawner(db, gpu_hour_budgets=budget(2), gpu_hour_weights={"a100:*": 1.5})
    html = await spawn_page.render_page(s)
    assert "You have 0.5 of your 2 GPU-hours left in the last day." in html
    assert f'{{"{A100.id}": 1.5}}' in html  # one GPU of the pool: 1.5 weighted GPU-hours an hour
    assert html.index('id="gs-gpu-hours"') < html.index('name="profile"')  # above the form



async def test_a_time_sliced_share_counts_its_fraction_of_the_gpu(no_kube_client, install_cache, db, now):
    shared = pool_view("t4", "Tesla-T4-SHARED", resource="nvidia.com/gpu.shared", total=16, free=16, per_node=16)
    install_cache(FakeCache(shared, reservations_count=False))
    gpu_hours.known_replicas.clear()
    s = spawner(db)

    async def read_node(name):  # the node as the API server returns it (GPU Feature Discovery's labels)
        assert name == "node-1"
        return SimpleNamespace(metadata=SimpleNamespace(labels={"nvidia.com/gpu.replicas": "4"}))

    s.api = SimpleNamespace(read_node=read_node)
    s.user_options = {"profile": "gpu", "gpu_pool": shared.id, "gpus": 2}
    await s.load_user_options()
    s._reflected_pod = lambda: running_pod(s)
    await gpu_hours.record_start(s, s._spawn.info)
    now[0] += hours(1)
    gpu_hours.record_stop(s, None)
    [h] = UsageStore(db).for_user("alice", None)
    assert (h.share, h.hours(None, now[0])) == (0.25, 0.5)  # 2 of 4 replicas for an hour: half a GPU-hour
    html = await spawn_page.render_page(s)
    assert f'{{"{shared.id}": 0.25}}' in html  # the page's rate learns the pool's replicas


async def test_a_running_server_the_hub_never_recorded_is_adopted_from_its_pod(no_kube_client, cache, db, now,
                                                                                cluster):
    # the hub went down between the pod running and its record: the first poll after it comes back
    # records it from the pod (GPUSpawner's annotations, the containers' startedAt), once
    s = spawner(db)
    pod = running_pod(s, podIP="127.0.0.1", containerStatuses=[{"name": "notebook", "ready": True, "state": {
        "running": {"startedAt": "2026-11-27T11:00:00Z"}}}])
    pod["metadata"]["annotations"] = {"gpuspawner.io/pool": A100.id, "gpuspawner.io/gpus": "2"}
    cluster.add(pod)
    assert await s.poll() is None
    assert await s.poll() is None
    [h] = UsageStore(db).for_user("alice", None)
    assert (h.pool, h.product, h.gpus, h.start, h.stop) == (A100.id, A100.product, 2, at("2026-11-27 11:00"), None)
    # a closed holding of the same pod is never opened again
    gpu_hours.record_stop(s, None)
    again = spawner(db)
    assert await again.poll() is None
    assert len(UsageStore(db).for_user("alice", None)) == 1
