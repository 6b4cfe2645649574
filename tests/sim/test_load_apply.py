"""Applying a loaded cluster file to the simulated store (``SimCluster``)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpuspawner.sim.cluster import apply
from gpuspawner.sim.store import Store
from testcluster.node import loader
from tests.testcluster.node.test_loader import NODE, POD, _list_yaml


def test_apply_keeps_bound_pods_running_and_drops_read_only_fields():
    store = Store()
    apply(store, loader.load_text(_list_yaml()))
    pod = store.get("pods", "train", namespace="research")
    assert pod["spec"]["nodeName"] == "gpu-1"
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"] == "10.0.0.5"
    assert all(c["ready"] for c in pod["status"]["containerStatuses"])
    # the uid is kept (owner references and events point at it); the revision is the store's
    assert pod["metadata"]["uid"] == "x" and pod["metadata"]["resourceVersion"] != "9"
    node = store.get("nodes", "gpu-1")
    assert node["spec"]["taints"][0]["key"] == "sku"
    assert "managedFields" not in node["metadata"]
    assert node["metadata"]["creationTimestamp"] != "2025-01-01T00:00:00Z"  # the load time


# -- snapshots: uids, timestamps, the API server's own validation ---------------------------

SNAPSHOT = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: gpu-1, uid: node-uid, creationTimestamp: "2025-01-01T00:00:00Z"}
  status:
    capacity: {cpu: "8", memory: 32Gi, pods: "110"}
    conditions: [{type: Ready, status: "True", lastHeartbeatTime: "2025-01-02T00:00:00Z",
                  lastTransitionTime: "2025-01-01T00:01:00Z"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: train, namespace: research, uid: pod-uid, creationTimestamp: "2025-01-03T00:00:00Z"}
  spec: {nodeName: gpu-1, containers: [{name: t, image: pytorch}]}
  status:
    phase: Running
    startTime: "2025-01-03T00:00:05Z"
    conditions: [{type: Ready, status: "True", lastTransitionTime: "2025-01-03T00:00:30Z"}]
    containerStatuses:
    - {name: t, ready: true, restartCount: 0, image: pytorch, imageID: "",
       state: {running: {startedAt: "2025-01-03T00:00:20Z"}}}
- apiVersion: v1
  kind: Service
  metadata:
    name: train
    namespace: research
    ownerReferences: [{apiVersion: v1, kind: Pod, name: train, uid: pod-uid}]
  spec: {ports: [{port: 80}]}
- apiVersion: v1
  kind: Event
  metadata: {name: train.1, namespace: research}
  involvedObject: {kind: Pod, name: train, namespace: research, uid: pod-uid}
  reason: Started
  message: Started container t
  firstTimestamp: "2025-01-03T00:00:20Z"
  lastTimestamp: "2025-01-03T00:00:20Z"
"""


def test_keep_timestamps_replays_a_snapshot_with_its_ages():
    store = Store()
    apply(store, loader.load_text(SNAPSHOT), keep_timestamps=True)
    pod = store.get("pods", "train", "research")
    assert pod["metadata"]["creationTimestamp"] == "2025-01-03T00:00:00Z"
    assert pod["status"]["startTime"] == "2025-01-03T00:00:05Z"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == "2025-01-03T00:00:20Z"
    assert pod["status"]["conditions"][0]["lastTransitionTime"] == "2025-01-03T00:00:30Z"
    node = store.get("nodes", "gpu-1")
    assert node["metadata"]["creationTimestamp"] == "2025-01-01T00:00:00Z"
    assert node["status"]["conditions"][0]["lastHeartbeatTime"] == "2025-01-02T00:00:00Z"
    assert store.get("events", "train.1", "research")["lastTimestamp"] == "2025-01-03T00:00:20Z"
    # uids are kept: the service's owner and the event's object are still the pod
    assert pod["metadata"]["uid"] == "pod-uid"
    assert store.get("services", "train", "research")["metadata"]["ownerReferences"][0]["uid"] == "pod-uid"


def test_without_keep_timestamps_everything_starts_now():
    store = Store(clock=lambda: 1_800_000_000.0)
    apply(store, loader.load_text(SNAPSHOT))
    now = "2027-01-15T08:00:00Z"
    pod = store.get("pods", "train", "research")
    assert pod["metadata"]["creationTimestamp"] == now
    assert pod["status"]["startTime"] == now
    assert pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"] == now
    assert store.get("nodes", "gpu-1")["status"]["conditions"][0]["lastTransitionTime"] == now
    assert store.get("events", "train.1", "research")["firstTimestamp"] == now


LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                   "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                   "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def test_an_object_the_api_server_refuses_is_a_load_error_with_its_message():
    bad = json.loads(json.dumps(NODE))
    bad["spec"]["taints"] = [{"key": "sku", "value": "<svg onload=alert(1)>", "effect": "NoSchedule"}]
    text = yaml.safe_dump({"kind": "List", "items": [POD, bad]})
    with pytest.raises(loader.LoadError) as err:
        apply(Store(), loader.load_text(text, "c.yaml"))
    e = err.value
    assert e.where == "c.yaml: document 1, item 1 (Node gpu-1)"
    assert e.field == "spec.taints[0].value"
    assert e.message_text == f'Invalid value: "<svg onload=alert(1)>": {LABEL_VALUE_MSG}'


def test_storage_kinds_load_before_the_claims_that_need_them():
    text = yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "home", "namespace": "hub"},
         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "sim.gpuspawner.dev/hostpath",
         "metadata": {"name": "standard", "namespace": "ignored",
                      "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}},
    ])
    store = Store()
    apply(store, loader.load_text(text))
    assert store.get("persistentvolumeclaims", "home", "hub")["spec"]["storageClassName"] == "standard"
    assert "namespace" not in store.get("storageclasses", "standard")["metadata"]
