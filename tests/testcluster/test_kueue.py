"""Queueing for a GPU against the real Kueue (v0.17.0, built from its module by scripts/kueue-build.sh)
on the real control plane: Kueue gates plain pods and admits them by its quotas even with no nodes
(a Workload per pod, quota reserved or pending), its visibility API answers positions, and the hub's
view of Kueue (gpuspawner.queue.kube.KueueView) turns them into the words of the progress page.

A ClusterQueue with 2 GPUs of quota: two servers fill it, a third waits at position 1, a server
that stops lets the third in, a higher priority preempts a lower one, and a request above the quota
is never admissible.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import pytest

from jupyterhub.spawner import SpawnException

from gpuspawner.hub.kueue_wait import apply_selection, check_pod, current_message
from gpuspawner.queue.kube import KueueView
from gpuspawner.queue.pools import full_card_text, pool_queue
from gpuspawner.queue.rules import parse_rules, pod_labels
from testcluster.kueue import Kueue

NS = "queued"
QUEUE = "gpu-a100"
GATE = "kueue.x-k8s.io/admission"
RULES = parse_rules([{"match": "a100:*", "queue": QUEUE, "priority_class": "low"}])
HIGH = parse_rules([{"match": "a100:*", "queue": QUEUE, "priority_class": "high"}])

ADMIN_OBJECTS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "a100"},
     "spec": {"nodeLabels": {"cloud.google.com/gke-nodepool": "a100"}}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq-a100"},
     "spec": {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
              "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                  "flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu",
                                                                               "nominalQuota": 2}]}]}],
              "preemption": {"withinClusterQueue": "LowerPriority"}}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": NS},
     "spec": {"clusterQueue": "cq-a100"}},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "low"}, "value": 10},
    {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": "high"},
     "value": 1000},
]


def server_pod(name: str, gpus: int = 1, rules=RULES) -> dict:
    """A GPU server's pod as GPUSpawner makes it for a queued pool: Kueue's labels, GPU limits."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"component": "singleuser-server", **pod_labels(rules[0])}},
        "spec": {"containers": [{"name": "notebook", "image": "jupyter/base-notebook",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


@pytest.fixture(scope="module")
def kueue(control_plane, tmp_path_factory):
    started = time.monotonic()
    k = Kueue(control_plane.kubeconfig, tmp_path_factory.mktemp("kueue"), wait_for_pods_ready=None)
    k.start(timeout=180)
    print(f"\nKueue ready in {time.monotonic() - started:.1f}s")
    k.apply(ADMIN_OBJECTS)
    yield k
    k.stop()


def kubectl(k: Kueue, *args: str) -> str:
    return k.kubectl(*args).stdout


def create(k: Kueue, pod: dict) -> str:
    """Create the pod; its UID."""
    out = k.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(pod)).stdout
    return json.loads(out)["metadata"]["uid"]


def pod(k: Kueue, name: str) -> dict | None:
    r = k.kubectl("get", "pod", "-n", NS, name, "-o", "json", check=False)
    return json.loads(r.stdout) if r.returncode == 0 else None


def gated(p: dict | None) -> bool:
    return p is not None and any(g.get("name") == GATE for g in p["spec"].get("schedulingGates") or ())


async def until(check, timeout: float = 30.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = await check() if asyncio.iscoroutinefunction(check) else check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout:.0f} s")
        await asyncio.sleep(0.3)


@pytest.fixture
async def view(kueue):
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kueue.kubeconfig), client_configuration=cfg)
    api = client.ApiClient(configuration=cfg)

    async def factory():
        return api

    v = KueueView(NS, factory, interval=0.5)
    v.start()  # as in the hub: refreshed in the background, Workloads watched
    yield v
    await v.stop()
    await api.close()


def hub_spawner(name: str, view: KueueView):
    """A GPUSpawner whose server went into the queue of RULES (as load_user_options leaves it), reading
    Kueue through ``view``: what its progress page and its wait make of the real objects."""
    from tests.builders import make_spawner

    spawner = make_spawner(name, namespace=NS, gpu_kueue_queues=[{"match": "a100:*", "queue": QUEUE,
                                                                   "priority_class": "low"}])
    spawner.kueue_view = lambda: view
    spawner._spawn = replace(spawner._spawn, queue_base_timeout=spawner.start_timeout)
    apply_selection(spawner, "gpu", "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu", "nvidia.com/gpu")
    assert spawner.extra_labels == pod_labels(RULES[0])
    return spawner


async def test_queue_fill_wait_admit_preempt_and_never(no_kube_client, kueue, view):
    # two servers fill the 2-GPU quota: Kueue creates their Workloads and lifts their gates
    uids = {name: create(kueue, server_pod(name)) for name in ("alice", "bob")}
    await until(lambda: not gated(pod(kueue, "alice")) and not gated(pod(kueue, "bob")), what="alice and bob admitted")
    await view.refresh()
    assert view.state_of(uids["alice"], QUEUE).message == "Admitted: quota reserved in flavor a100"

    # a third waits in line: gated, first in its LocalQueue, and the page and progress say so
    uids["carol"] = create(kueue, server_pod("carol"))
    assert gated(pod(kueue, "carol"))

    async def carol_listed():
        await view.refresh()
        state = view.state_of(uids["carol"], QUEUE)
        return state is not None and "position" in state.message and state

    state = await until(carol_listed, what="carol's place in line")
    assert state.message == "Queued in gpu-a100: position 1 of 1 (priority low)"
    # what carol's progress page says, from her real pod and Workload
    carol = hub_spawner("carol", view)
    check_pod(carol, pod(kueue, "carol"))
    assert current_message(carol) == "Queued in gpu-a100: position 1 of 1 (priority low)"
    queue = pool_queue(RULES, "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu", view.queue_counts)
    assert queue == {"name": QUEUE, "pending": 1, "admitted": 2}
    assert full_card_text(queue["pending"]) == "Full — 1 waiting; you would be 2nd"

    # alice stops: carol is admitted within 30 s
    stopped = time.monotonic()
    kubectl(kueue, "delete", "pod", "-n", NS, "alice", "--wait=false")
    await until(lambda: not gated(pod(kueue, "carol")), what="carol admitted after alice stopped")
    print(f"\nfrom a freed GPU to the next server's admission: {time.monotonic() - stopped:.1f}s")
    await until(lambda: view.state_of(uids["carol"], QUEUE).kind == "admitted", what="carol's Workload admitted")
    check_pod(carol, pod(kueue, "carol"))
    assert current_message(carol) == "Admitted: quota reserved in flavor a100"
    assert carol._spawn.queued.admitted_at is not None  # start_timeout counts from here
    # and alice's Workload went with her pod
    await until(lambda: view.state_of(uids["alice"], QUEUE) is None, what="alice's Workload gone")
    assert "alice" not in kubectl(kueue, "get", "workloads", "-n", NS, "-o", "name")

    # a higher priority preempts a lower one: Kueue evicts and deletes one of bob and carol,
    # and the view keeps why for the hub to tell its user
    uids["dave"] = create(kueue, server_pod("dave", rules=HIGH))
    await until(lambda: not gated(pod(kueue, "dave")), timeout=60, what="dave admitted by preemption")

    def someone_preempted():
        return [n for n in ("bob", "carol") if view.stop_reason(uids[n]) is not None]

    (victim,) = await until(someone_preempted, what="a lower-priority server preempted")
    reason = view.stop_reason(uids[victim])
    assert reason.kind == "preempted"
    assert reason.message.startswith("Preempted in gpu-a100: a server with higher priority in the same queue "
                                     "needed its GPU quota.")
    await until(lambda: pod(kueue, victim) is None, what=f"{victim}'s pod deleted")

    # a request above what the queue can ever give is shown as never admissible
    uids["erin"] = create(kueue, server_pod("erin", gpus=3))

    async def erin_judged():
        await view.refresh()
        state = view.state_of(uids["erin"], QUEUE)
        return state is not None and state.fatal and state

    state = await until(erin_judged, what="erin judged never admissible")
    assert state.kind == "exceeds_max_quota"
    assert state.message.startswith("Never admissible in gpu-a100: this server asks for more GPUs than the "
                                    "queue's quota can ever give")
    assert gated(pod(kueue, "erin"))
    erin = hub_spawner("erin", view)
    with pytest.raises(SpawnException) as e:  # the spawn ends at once, with the words the user reads
        check_pod(erin, pod(kueue, "erin"))
    assert e.value.jupyterhub_message == state.message


async def test_doctor_reads_kueue_and_names_what_is_wrong(kueue):
    from gpuspawner.capacity.config import CapacityConfig
    from gpuspawner.doctor import gather
    from gpuspawner.doctor.checks.kueue import check_kueue

    state = await gather.gather(kubeconfig=str(kueue.kubeconfig), kueue=True, kueue_namespace=NS, kueue_queue=QUEUE)
    found = state.kueue
    assert found.served and found.visibility is True
    assert found.webhook is True, found.webhook_reason  # a dry-run pod came back gated
    assert "gpuspawner-doctor-kueue-" not in kubectl(kueue, "get", "pods", "-n", NS)  # and nothing was stored
    assert [q["metadata"]["name"] for q in found.local_queues] == [QUEUE]
    assert {q["metadata"]["name"] for q in found.cluster_queues} >= {"cq-a100"}
    assert {f["metadata"]["name"] for f in found.flavors} >= {"a100"}
    rules = parse_rules([{"match": "a100:*", "queue": QUEUE}, {"match": "h100:*", "queue": "gpu-h100"}])
    findings = check_kueue(found, rules, state.nodes, CapacityConfig())
    # no GPU node in this cluster: the a100 flavor names none; and gpu-h100 was never created
    assert sorted(f.id for f in findings) == ["kueue-flavor-matches-no-pool", "kueue-localqueue-missing"]

    # with Kueue's webhooks gone, the dry run is no longer gated: doctor says so
    kueue.kubectl("delete", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration")
    try:
        state = await gather.gather(kubeconfig=str(kueue.kubeconfig), kueue=True, kueue_namespace=NS, kueue_queue=QUEUE)
        assert state.kueue.webhook is False and "without Kueue's scheduling gate" in state.kueue.webhook_reason
        assert "kueue-webhook-unreachable" in {f.id for f in check_kueue(state.kueue, rules, state.nodes,
                                                                           CapacityConfig())}
    finally:
        kueue.apply(kueue.webhooks())



def test_the_example_objects_are_what_kueue_accepts(kueue):
    """deploy/kueue-example.yaml as docs/kueue.md tells an admin to apply it: Kueue's CRDs and its
    validating webhooks take every object (a server-side dry run: nothing of it stays)."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "deploy" / "kueue-example.yaml"
    kueue.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jhub"}}])
    r = kueue.kubectl("apply", "--dry-run=server", "-f", str(example), check=False)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for line in ("resourceflavor.kueue.x-k8s.io/a100", "clusterqueue.kueue.x-k8s.io/gpu-a100",
                 "localqueue.kueue.x-k8s.io/gpu-a100", "workloadpriorityclass.kueue.x-k8s.io/high",
                 "workloadpriorityclass.kueue.x-k8s.io/normal"):
        assert line in out, out
