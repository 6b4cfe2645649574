"""The simulated kube-scheduler's loop (gpuspawner.sim.scheduler) against an in-process Store:
binding, the FailedScheduling verdict, the queue's backoff, retries on cluster events, the
queue order, and never handing one GPU to two pods.  The filter and score rules themselves
are tested in test_plugins.py."""

from __future__ import annotations

import asyncio

import pytest

from testcluster.node.controller import MERGE
from gpuspawner.sim.errors import ApiError
from gpuspawner.sim.scheduler import Scheduler
from gpuspawner.sim.storage_api import ANN_BIND_COMPLETED, ANN_SELECTED_NODE
from gpuspawner.sim.store import Store
from tests.builders import sim
from tests.builders.dra import claim as dra_claim, device_classes, dra_node, gpu_slice
from tests.builders.sim import storage_class


def gpu_node(name, gpus=1):
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_pod(name, gpus=1, priority=None, **spec):
    limits = {"nvidia.com/gpu": str(gpus)}
    pod_spec = {"containers": [{"name": "nb", "image": "x", "resources": {"limits": limits, "requests": limits}}],
                **spec}
    if priority is not None:
        pod_spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": pod_spec}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture
async def cluster():
    store = Store()
    for ns in ("default",):
        try:
            store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        except ApiError:
            pass
    clock = Clock()
    scheduler = Scheduler(store, clock=clock)
    await scheduler.start()
    try:
        yield store, scheduler, clock
    finally:
        await scheduler.stop()


def node_of(store, name):
    return (store.get("pods", name, namespace="default").get("spec") or {}).get("nodeName")


def condition(store, name):
    pod = store.get("pods", name, namespace="default")
    return next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")


def events(store, name, reason):
    items = store.list("events", namespace="default")["items"]
    return [e for e in items if e.get("reason") == reason and (e.get("regarding") or e.get("involvedObject") or {})
            .get("name") == name]


async def until(check, timeout=10.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():
        if loop.time() > end:
            raise AssertionError("timed out")
        await asyncio.sleep(0.01)


async def test_a_pending_pod_is_bound_with_its_event(cluster):
    store, scheduler, _ = cluster
    store.create("nodes", gpu_node("gpu-0"))
    store.create("pods", gpu_pod("a"), namespace="default")
    await until(lambda: node_of(store, "a") == "gpu-0")
    assert condition(store, "a")["status"] == "True"
    await until(lambda: events(store, "a", "Scheduled"))
    (ev,) = events(store, "a", "Scheduled")
    assert ev.get("note", ev.get("message")) == "Successfully assigned default/a to gpu-0"


async def test_a_pod_that_fits_nowhere_is_told_why_and_backs_off(cluster):
    store, scheduler, clock = cluster
    store.create("nodes", gpu_node("gpu-0", gpus=1))
    store.create("pods", gpu_pod("big", gpus=2), namespace="default")
    await until(lambda: events(store, "big", "FailedScheduling"))
    cond = condition(store, "big")
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    assert node_of(store, "big") is None
    # the queue's backoff: 1 s after the first attempt (podInitialBackoffSeconds), doubling
    assert scheduler._not_before["default/big"] == clock.t + Scheduler.INITIAL_BACKOFF
    clock.t += Scheduler.INITIAL_BACKOFF
    store.create("nodes", gpu_node("gpu-1", gpus=1))  # a cluster event that does not help: tried again
    await until(lambda: scheduler._attempts.get("default/big") == 2)
    assert scheduler._not_before["default/big"] == clock.t + 2 * Scheduler.INITIAL_BACKOFF
    assert condition(store, "big")["message"].startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")


async def test_a_parked_pod_is_retried_when_a_node_arrives(cluster):
    store, scheduler, clock = cluster
    store.create("pods", gpu_pod("waiting"), namespace="default")
    await until(lambda: events(store, "waiting", "FailedScheduling"))
    clock.t += Scheduler.INITIAL_BACKOFF  # the backoff has passed
    store.create("nodes", gpu_node("gpu-new"))  # a cluster event: the unschedulable pods move to active
    await until(lambda: node_of(store, "waiting") == "gpu-new")


async def test_one_gpu_is_never_handed_to_two_pods(cluster):
    store, scheduler, _ = cluster
    store.create("nodes", gpu_node("gpu-0", gpus=1))
    for name in ("a", "b", "c"):
        store.create("pods", gpu_pod(name), namespace="default")
    await until(lambda: len(events(store, "a", "Scheduled") + events(store, "b", "Scheduled")
                            + events(store, "c", "Scheduled")) == 1
                and sum(bool(events(store, n, "FailedScheduling")) for n in "abc") == 2)
    assert sorted(bool(node_of(store, n)) for n in "abc") == [False, False, True]


async def test_higher_priority_goes_first(cluster):
    store, scheduler, clock = cluster
    store.create("pods", gpu_pod("low", priority=0), namespace="default")
    store.create("pods", gpu_pod("high", priority=1000), namespace="default")
    await until(lambda: events(store, "low", "FailedScheduling") and events(store, "high", "FailedScheduling"))
    clock.t += Scheduler.INITIAL_BACKOFF  # both may be tried again
    store.create("nodes", gpu_node("gpu-0", gpus=1))
    await until(lambda: node_of(store, "high") == "gpu-0")
    assert node_of(store, "low") is None


async def test_a_deleted_pod_frees_its_gpu_for_a_waiting_one(cluster):
    store, scheduler, clock = cluster
    store.create("nodes", gpu_node("gpu-0", gpus=1))
    store.create("pods", gpu_pod("first"), namespace="default")
    await until(lambda: node_of(store, "first") == "gpu-0")
    store.create("pods", gpu_pod("second"), namespace="default")
    await until(lambda: events(store, "second", "FailedScheduling"))
    clock.t += Scheduler.INITIAL_BACKOFF
    store.delete("pods", "first", namespace="default", grace_period_seconds=0)
    await until(lambda: node_of(store, "second") == "gpu-0")


async def test_other_schedulers_pods_and_gated_pods_are_left_alone(cluster):
    store, scheduler, _ = cluster
    store.create("nodes", gpu_node("gpu-0", gpus=2))
    store.create("pods", gpu_pod("mine"), namespace="default")
    store.create("pods", gpu_pod("theirs", schedulerName="volcano"), namespace="default")
    store.create("pods", gpu_pod("gated", schedulingGates=[{"name": "example.com/quota"}]), namespace="default")
    await until(lambda: node_of(store, "mine") == "gpu-0")
    await asyncio.sleep(0.1)
    assert node_of(store, "theirs") is None and node_of(store, "gated") is None
    assert not events(store, "theirs", "FailedScheduling") and not events(store, "gated", "FailedScheduling")


# -- a pod with volumes to bind and DRA claims: VolumeBinding's PreBind, then DynamicResources' --

def dra_world(store):
    """One node whose single GPU is published as a ResourceSlice; a WaitForFirstConsumer class whose
    provisioner never answers, so a pod's volume binding waits until the test binds the claim."""
    store.create("nodes", dict(dra_node("dra-1"), spec={}))
    store.create("resourceslices", gpu_slice("dra-1", count=1))
    for c in device_classes().values():
        store.create("deviceclasses", c)
    store.create("storageclasses", storage_class("slow", provisioner="example.com/nobody"))
    store.create("persistentvolumeclaims", sim.claim("home-a", storage_class_name="slow"), namespace="default")
    for name in ("ca", "cb"):
        store.create("resourceclaims", dra_claim(name), namespace="default")


def dra_pod(name, claim, volume_claim=None):
    p = gpu_pod(name, gpus=0)
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    if volume_claim:
        p["spec"]["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": volume_claim}}]
    return p


def allocation(store, claim):
    return (store.get("resourceclaims", claim, namespace="default").get("status") or {}).get("allocation")


NO_DEVICE = ("0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, preemption: 0/1 nodes "
             "are available: 1 Preemption is not helpful for scheduling.")


async def waiting_for_volumes(store):
    """Pod a is reserved on dra-1 and waits for its volume; pod b wants the same (only) GPU."""
    dra_world(store)
    store.create("pods", dra_pod("a", "ca", "home-a"), namespace="default")
    await until(lambda: (store.get("persistentvolumeclaims", "home-a", "default")["metadata"].get("annotations")
                         or {}).get(ANN_SELECTED_NODE) == "dra-1")
    store.create("pods", dra_pod("b", "cb"), namespace="default")
    await until(lambda: events(store, "b", "FailedScheduling"))


async def test_devices_reserved_for_a_pod_binding_its_volumes_go_to_no_other(cluster):
    store, scheduler, clock = cluster
    await waiting_for_volumes(store)
    assert condition(store, "b")["message"] == NO_DEVICE
    assert allocation(store, "ca") is None  # DynamicResources' PreBind runs after VolumeBinding's
    store.patch("persistentvolumeclaims", "home-a", {"spec": {"volumeName": "pv-a"}, "metadata": {
        "annotations": {ANN_BIND_COMPLETED: "yes"}}}, MERGE, namespace="default")
    await until(lambda: node_of(store, "a") == "dra-1")
    assert [r["device"] for r in allocation(store, "ca")["devices"]["results"]] == ["gpu-0"]
    assert node_of(store, "b") is None and allocation(store, "cb") is None


async def test_a_failed_volume_binding_gives_the_devices_back(cluster):
    store, scheduler, clock = cluster
    await waiting_for_volumes(store)
    store.delete("pods", "a", namespace="default", grace_period_seconds=0)  # the binding cycle fails (Unreserve)
    await until(lambda: not scheduler.dra.in_flight)
    clock.t += Scheduler.MAX_BACKOFF  # b's backoff is over: it goes when the failure moves it to active
    await until(lambda: node_of(store, "b") == "dra-1")
    assert [r["device"] for r in allocation(store, "cb")["devices"]["results"]] == ["gpu-0"]
    assert allocation(store, "ca") is None and not scheduler.dra.in_flight
