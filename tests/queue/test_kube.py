"""The hub's shared view of Kueue (gpuspawner.queue.kube.KueueView): what one refresh reads (LocalQueues,
Workloads, the visibility API's pending lists of queues with servers waiting) and what the hub asks
of it.  The API client is a stand-in answering the paths Kueue v0.17 serves."""

from __future__ import annotations

import pytest

from gpuspawner.queue.kube import KueueView, pending_path
from tests.builders import kueue

BASE = "/apis/kueue.x-k8s.io/v1beta2/namespaces/jhub"


class FakeClient:
    def __init__(self, answers):
        self.answers = answers
        self.paths = []

    async def call_api(self, path, method, **kw):
        self.paths.append((method, path))
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        return answer


def view_of(answers):
    client = FakeClient(answers)

    async def factory():
        return client

    return KueueView("jhub", factory, watch=False), client


ANSWERS = {
    f"{BASE}/localqueues": {"items": [kueue.local_queue("gpu-a100", pending=2, admitted=2), kueue.local_queue("gpu-t4")]},
    f"{BASE}/workloads": {"items": [
        kueue.admitted(name="w-alice", pod_uid="uid-alice"),
        kueue.pending(name="w-bob", pod_uid="uid-bob", priority_class="high"),
        kueue.pending(name="w-carol", pod_uid="uid-carol"),
        kueue.evicted("Preempted", "Preempted to accommodate", "InClusterQueue", name="w-dave", pod_uid="uid-dave"),
        {"metadata": {"name": "no-uid-label"}},
    ]},
    pending_path("jhub", "gpu-a100"): {"items": [kueue.pending_entry("w-bob", 0, priority=100),
                                                 kueue.pending_entry("w-carol", 1)]},
}


async def test_one_refresh_reads_queues_workloads_and_the_positions_of_waiting_queues():
    view, client = view_of(ANSWERS)
    await view.refresh()
    # the visibility API is asked only for the queue with servers waiting
    assert client.paths == [("GET", f"{BASE}/localqueues"), ("GET", f"{BASE}/workloads"),
                            ("GET", "/apis/visibility.kueue.x-k8s.io/v1beta2/namespaces/jhub/localqueues/gpu-a100/"
                                    "pendingworkloads")]
    assert view.error is None
    assert view.queue_counts("gpu-a100") == (2, 2) and view.queue_counts("gpu-t4") == (0, 0)
    assert view.queue_counts("missing") is None
    assert view.state_of("uid-bob", "gpu-a100").message == "Queued in gpu-a100: position 1 of 2 (priority high)"
    assert view.state_of("uid-carol", "gpu-a100").message == "Queued in gpu-a100: position 2 of 2"
    assert view.state_of("uid-alice", "gpu-a100").message == "Admitted: quota reserved in flavor a100"
    assert view.state_of("uid-nobody", "gpu-a100") is None


async def test_why_kueue_stopped_a_server_outlives_its_workload():
    view, client = view_of(ANSWERS)
    await view.refresh()
    assert view.stop_reason("uid-dave").kind == "preempted"
    client.answers = {**ANSWERS, f"{BASE}/workloads": {"items": []}}
    await view.refresh()
    assert view.state_of("uid-dave", "gpu-a100") is None
    assert view.stop_reason("uid-dave").message.startswith("Preempted in gpu-a100")
    assert view.stop_reason("uid-alice") is None


@pytest.mark.parametrize(
    "status",
    [
        pytest.param({"pendingWorkloads": "3", "admittedWorkloads": 1}, id="string"),
        pytest.param({"pendingWorkloads": -1, "admittedWorkloads": 1}, id="negative"),
        pytest.param({"pendingWorkloads": True, "admittedWorkloads": 1}, id="bool"),
    ],
)
async def test_malformed_queue_figures_read_as_unknown(status):
    lq = kueue.local_queue("gpu-a100")
    lq["status"] = status
    view, _ = view_of({**ANSWERS, f"{BASE}/localqueues": {"items": [lq]}})
    await view.refresh()
    assert view.queue_counts("gpu-a100") is None


async def test_a_failed_read_keeps_the_last_figures_and_says_why():
    view, client = view_of(ANSWERS)
    await view.refresh()
    client.answers = {**ANSWERS, f"{BASE}/workloads": RuntimeError("403 Forbidden")}
    view.start()
    await view.refreshed.wait()
    await view.stop()
    assert view.error == "RuntimeError: 403 Forbidden"
    assert view.queue_counts("gpu-a100") == (2, 2)


def test_deploy_rbac_yaml_gives_the_hub_what_the_view_reads():
    from pathlib import Path

    import yaml

    from gpuspawner.queue.kube import KUEUE_ROLE_NAME, KUEUE_ROLE_RULES

    docs = list(yaml.safe_load_all((Path(__file__).parents[2] / "deploy" / "rbac.yaml").read_text(encoding="utf-8")))
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == KUEUE_ROLE_NAME]
    granted = {(g, r, tuple(rule["verbs"])) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert granted == set(KUEUE_ROLE_RULES)
    assert any(d["kind"] == "RoleBinding" and d["roleRef"]["name"] == KUEUE_ROLE_NAME for d in docs)


async def test_a_watch_event_keeps_why_kueue_stopped_a_server_the_list_never_saw():
    view, _ = view_of(ANSWERS)
    await view.refresh()
    evicted = kueue.evicted("Preempted", "Preempted to accommodate a workload", "InClusterQueue", name="w-carol",
                         pod_uid="uid-carol")
    view.observe("MODIFIED", evicted)
    view.observe("DELETED", evicted)
    assert view.state_of("uid-carol", "gpu-a100") is None
    assert view.stop_reason("uid-carol").message.startswith("Preempted in gpu-a100")
    view.observe("ADDED", {"metadata": {"name": "no-label"}})  # not a plain pod's Workload: ignored


async def test_stop_returns_even_when_a_cancelled_task_does_not_end(monkeypatch):
    # a watch whose connection ignores the cancel must not hold up the hub's shutdown
    import asyncio

    from gpuspawner.queue import kube

    monkeypatch.setattr(kube, "STOP_TIMEOUT", 0.2)
    release = asyncio.Event()

    async def stubborn():
        while not release.is_set():
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass  # swallowed, as a stuck connection close would

    view = KueueView("ns", lambda: None)
    task = view._watch_task = asyncio.ensure_future(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(view.stop(), 5)  # without the bound, this waits for ever
    assert view._watch_task is None and not task.done()
    release.set()
    task.cancel()
    await task
