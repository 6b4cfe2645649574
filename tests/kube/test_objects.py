"""Reading Kubernetes objects as the API sends them (gpuspawner.kube.objects): a malformed
field reads as absent, never as an exception."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpuspawner.kube import objects

POD = {
    "metadata": {"name": "jupyter-ada", "namespace": "jhub", "creationTimestamp": "2026-11-22T01:00:00Z",
                 "labels": {"app": "jupyterhub"}},
    "spec": {"priority": 1000},
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-22T01:00:42Z"}],
        "initContainerStatuses": [{"name": "probe", "state": {"waiting": {"reason": "PodInitializing"}}}],
        "containerStatuses": [
            {"name": "notebook", "image": "pt:1", "state": {"waiting": {"reason": "ErrImagePull", "message": "m"}}},
            {"name": "sidecar", "state": {"running": {}}},
        ],
    },
}
MALFORMED = [None, 5, "pod", {"metadata": "x", "spec": [], "status": {"conditions": 5, "containerStatuses": "abc"}},
             {"status": {"conditions": [None, 3, {"type": "PodScheduled"}]}}]


def test_readers_of_a_pod():
    assert objects.name(POD) == "jupyter-ada"
    assert objects.labels(POD) == {"app": "jupyterhub"}
    assert objects.created(POD) == datetime(2026, 11, 22, 1, 0, tzinfo=timezone.utc)
    assert objects.pod_priority(POD) == 1000
    assert objects.scheduled_at(POD) == datetime(2026, 11, 22, 1, 0, 42, tzinfo=timezone.utc)
    assert objects.condition(POD, "PodScheduled")["status"] == "True"
    assert objects.condition(POD, "Ready") is None
    waiting = objects.waiting_containers(POD)
    assert [(cs["name"], reason, message) for cs, reason, message in waiting] == [
        ("probe", "PodInitializing", ""), ("notebook", "ErrImagePull", "m")]  # init containers first


@pytest.mark.parametrize(
    "pod, waits",
    [
        ({"status": {"phase": "Pending"}}, True),
        ({"status": {"phase": "Pending"}, "spec": {"nodeName": "n1"}}, False),  # bound: the kubelet's now
        ({"status": {"phase": "Pending"}, "metadata": {"deletionTimestamp": "2026-11-22T01:00:09Z"}}, False),
        ({"status": {"phase": "Running"}}, False),
    ],
    ids=["queued", "bound", "deleting", "running"],
)
def test_pod_waits_for_scheduler(pod, waits):
    assert objects.pod_waits_for_scheduler(pod) is waits


@pytest.mark.parametrize("obj", MALFORMED, ids=["none", "int", "str", "wrong-types", "odd-conditions"])
def test_malformed_objects_read_as_absent(obj):
    assert objects.name(obj) is None and objects.labels(obj) == {}
    assert objects.created(obj) is None and objects.scheduled_at(obj) is None
    assert objects.pod_priority(obj) == 0 and objects.waiting_containers(obj) == []
    assert objects.pod_waits_for_scheduler(obj) is False
    assert objects.condition(obj, "PodScheduled") in (None, {"type": "PodScheduled"})


def test_a_bool_is_no_priority():
    assert objects.pod_priority({"spec": {"priority": True}}) == 0
