"""The Store: revisions, conflicts, defaulting, delete/grace, watch and paging
semantics of the real kube-apiserver, checked without a network."""

import asyncio
import re

import pytest

from gpuspawner.sim.errors import CONTINUE_EXPIRED, ApiError
from gpuspawner.sim.resources import GENERATE_NAME_ALPHABET
from gpuspawner.sim.store import Store


def pod(name=None, labels=None, node=None, **meta):
    m = dict(meta)
    if name:
        m["name"] = name
    if labels:
        m["labels"] = labels
    spec = {"containers": [{"name": "notebook", "image": "jupyter/base-notebook:2024-01-01"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": spec}


class Clock:
    def __init__(self, t=1_700_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def store(clock):
    return Store(clock=clock)


async def drain(watcher, n, timeout=5.0):
    out = []
    for _ in range(n):
        out.append(await asyncio.wait_for(watcher.__anext__(), timeout))
    return out


# -- create ---------------------------------------------------------------------


def test_default_namespaces_and_default_service_accounts(store):
    names = [n["metadata"]["name"] for n in store.list("namespaces")["items"]]
    assert names == ["default", "kube-node-lease", "kube-public", "kube-system"]
    assert store.get("serviceaccounts", "default", "kube-system")["metadata"]["name"] == "default"


def test_every_write_bumps_the_global_revision(store):
    rv0 = store.resource_version
    a = store.create("configmaps", {"metadata": {"name": "a"}})
    b = store.create("pods", pod("b"))
    assert a["metadata"]["resourceVersion"] == str(rv0 + 1)
    assert b["metadata"]["resourceVersion"] == str(rv0 + 2)
    assert store.resource_version == rv0 + 2


def test_create_sets_server_metadata_and_pod_defaults(store):
    p = store.create("pods", pod("jupyter-alice"), "default")
    meta, spec = p["metadata"], p["spec"]
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", meta["uid"])
    assert meta["creationTimestamp"] == "2023-11-14T22:13:20Z"
    assert meta["namespace"] == "default"
    assert "generation" not in meta  # pods have it only from 1.33; the server reports 1.32
    assert p["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["enableServiceLinks"] is True
    assert spec["priority"] == 0
    assert spec["serviceAccountName"] == "default"
    assert {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300} in spec["tolerations"]
    assert {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 300} in spec["tolerations"]
    c = spec["containers"][0]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["terminationMessagePath"] == "/dev/termination-log"


@pytest.mark.parametrize(
    "resources, qos",
    [
        ({}, "BestEffort"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),  # requests default to limits
        ({"requests": {"cpu": "1"}}, "Burstable"),
        ({"limits": {"nvidia.com/gpu": "1"}}, "Burstable"),
    ],
    ids=["best-effort", "guaranteed", "burstable", "gpu-only"],
)
def test_qos_class(store, resources, qos):
    p = pod("q")
    p["spec"]["containers"][0]["resources"] = resources
    assert store.create("pods", p)["status"]["qosClass"] == qos


def test_client_status_is_discarded_on_pod_create(store):
    p = pod("p")
    p["status"] = {"phase": "Running"}
    assert store.create("pods", p)["status"]["phase"] == "Pending"


def test_node_status_is_kept_on_create(store):
    node = {"metadata": {"name": "gpu-1"}, "status": {"capacity": {"nvidia.com/gpu": "8"}}}
    assert store.create("nodes", node)["status"]["capacity"] == {"nvidia.com/gpu": "8"}


def test_generate_name_uses_the_real_alphabet(store):
    names = {store.create("pods", pod(generateName="jupyter-"))["metadata"]["name"] for _ in range(30)}
    assert len(names) == 30
    for n in names:
        assert n.startswith("jupyter-") and len(n) == len("jupyter-") + 5
        assert set(n[len("jupyter-"):]) <= set(GENERATE_NAME_ALPHABET)


def test_create_in_missing_namespace_is_404(store):
    with pytest.raises(ApiError) as e:
        store.create("pods", pod("p"), "nope")
    assert (e.value.code, e.value.reason, e.value.message) == (404, "NotFound", 'namespaces "nope" not found')
    assert e.value.status()["details"] == {"name": "nope", "kind": "namespaces"}


def test_create_twice_is_409_already_exists(store):
    store.create("configmaps", {"metadata": {"name": "c"}})
    with pytest.raises(ApiError) as e:
        store.create("configmaps", {"metadata": {"name": "c"}})
    assert (e.value.code, e.value.reason, e.value.message) == (409, "AlreadyExists", 'configmaps "c" already exists')


@pytest.mark.parametrize(
    "obj, field, reason, message",
    [
        ({"metadata": {}}, "metadata.name", "FieldValueRequired",
         'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'),
        ({"metadata": {"name": "c", "labels": {"a": "bad value!"}}}, "metadata.labels", "FieldValueInvalid",
         'ConfigMap "c" is invalid: metadata.labels: Invalid value: "bad value!": a valid label must be'),
        ({"metadata": {"name": "Bad_Name"}}, "metadata.name", "FieldValueInvalid",
         'ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123'),
    ],
    ids=["missing-name", "bad-label-value", "bad-name"],
)
def test_invalid_objects_get_422_with_causes(store, obj, field, reason, message):
    with pytest.raises(ApiError) as e:
        store.create("configmaps", obj)
    status = e.value.status()
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith(message)
    assert status["details"]["causes"][0]["field"] == field
    assert status["details"]["causes"][0]["reason"] == reason


def test_returned_objects_are_copies(store):
    p = store.create("pods", pod("p"))
    p["metadata"]["labels"] = {"mutated": "yes"}
    assert "labels" not in store.get("pods", "p")["metadata"]


# -- replace / status / patch ---------------------------------------------------------


def test_replace_with_stale_resource_version_is_409_conflict(store):
    cm = store.create("configmaps", {"metadata": {"name": "c"}, "data": {"k": "1"}})
    fresh = dict(cm, data={"k": "2"})
    store.replace("configmaps", "c", fresh)
    stale = dict(cm, data={"k": "3"})
    with pytest.raises(ApiError) as e:
        store.replace("configmaps", "c", stale)
    assert e.value.code == 409 and e.value.reason == "Conflict"
    assert e.value.message == ('Operation cannot be fulfilled on configmaps "c": the object has been modified; '
                               "please apply your changes to the latest version and try again")


def test_noop_update_writes_no_new_revision(store):
    cm = store.create("configmaps", {"metadata": {"name": "c"}, "data": {"k": "1"}})
    rv = store.resource_version
    again = store.replace("configmaps", "c", cm)
    assert store.resource_version == rv
    assert again["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"]


def test_status_subresource_touches_only_status(store):
    p = store.create("pods", pod("p"))
    changed = dict(p, status={"phase": "Running"}, metadata=dict(p["metadata"], labels={"x": "y"}))
    out = store.replace("pods", "p", changed, subresource="status")
    assert out["status"] == {"phase": "Running"}
    assert "labels" not in out["metadata"]
    # and the main resource ignores status
    out2 = store.replace("pods", "p", dict(out, status={"phase": "Failed"}))
    assert out2["status"]["phase"] == "Running"


def test_strategic_merge_patch_merges_by_key(store):
    p = pod("p")
    p["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]
    p["spec"]["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    store.create("pods", p)
    patch = {
        "spec": {
            "containers": [{"name": "notebook", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
                           {"name": "sidecar", "image": "busybox:1"}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        },
        "metadata": {"finalizers": ["example.com/keep"]},
    }
    out = store.patch("pods", "p", patch, "application/strategic-merge-patch+json")
    names = [c["name"] for c in out["spec"]["containers"]]
    assert names == ["notebook", "sidecar"]
    assert out["spec"]["containers"][0]["image"] == "jupyter/base-notebook:2024-01-01"
    assert out["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    # tolerations carry no patchStrategy in core/v1: replaced, not merged
    assert out["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert out["metadata"]["finalizers"] == ["example.com/keep"]


def test_strategic_merge_patch_directives(store):
    store.create("pods", pod("p"))
    store.replace("pods", "p", {"metadata": {"name": "p"}, "status": {"conditions": [
        {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]}},
        subresource="status")
    patch = {"status": {"$setElementOrder/conditions": [{"type": "Ready"}, {"type": "PodScheduled"}],
                        "conditions": [{"type": "Ready", "status": "True"}]}}
    out = store.patch("pods", "p", patch, "application/strategic-merge-patch+json", subresource="status")
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                           {"type": "PodScheduled", "status": "True"}]
    out = store.patch("pods", "p", {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}},
                      "application/strategic-merge-patch+json", subresource="status")
    assert [c["type"] for c in out["status"]["conditions"]] == ["PodScheduled"]


def test_json_patch_and_merge_patch(store):
    store.create("configmaps", {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}})
    out = store.patch("configmaps", "c", b'{"data": {"a": null, "c": "3"}}', "application/merge-patch+json")
    assert out["data"] == {"b": "2", "c": "3"}
    out = store.patch("configmaps", "c", [{"op": "replace", "path": "/data/b", "value": "9"}],
                      "application/json-patch+json")
    assert out["data"]["b"] == "9"
    with pytest.raises(ApiError) as e:
        store.patch("configmaps", "c", [{"op": "test", "path": "/data/b", "value": "0"}],
                    "application/json-patch+json")
    assert e.value.code == 422


def test_patch_with_unknown_content_type_is_415(store):
    store.create("configmaps", {"metadata": {"name": "c"}})
    with pytest.raises(ApiError) as e:
        store.patch("configmaps", "c", b"{}", "application/apply-patch+yaml")
    assert e.value.code == 415 and e.value.reason == "UnsupportedMediaType"


def test_patch_carrying_a_stale_resource_version_conflicts(store):
    cm = store.create("configmaps", {"metadata": {"name": "c"}})
    store.patch("configmaps", "c", {"data": {"a": "1"}}, "application/merge-patch+json")
    with pytest.raises(ApiError) as e:
        store.patch("configmaps", "c", {"metadata": {"resourceVersion": cm["metadata"]["resourceVersion"]},
                                        "data": {"a": "2"}}, "application/merge-patch+json")
    assert e.value.code == 409


# -- binding and delete --------------------------------------------------------------------


def test_binding_sets_node_and_condition_then_conflicts(store):
    store.create("pods", pod("p"))
    store.bind("p", "gpu-1", "default")
    p = store.get("pods", "p")
    assert p["spec"]["nodeName"] == "gpu-1"
    assert {"type": "PodScheduled", "status": "True"}.items() <= p["status"]["conditions"][0].items()
    with pytest.raises(ApiError) as e:
        store.bind("p", "gpu-2", "default")
    assert e.value.code == 409
    assert e.value.message == ('Operation cannot be fulfilled on pods/binding "p": '
                               'pod p is already assigned to node "gpu-1"')


def test_unbound_pod_is_deleted_at_once(store):
    store.create("pods", pod("p"))
    out = store.delete("pods", "p")
    assert out["metadata"]["name"] == "p"
    with pytest.raises(ApiError) as e:
        store.get("pods", "p")
    assert e.value.message == 'pods "p" not found'


def test_bound_pod_is_deleted_gracefully_until_the_kubelet_finalizes(store, clock):
    store.create("pods", pod("p", node="gpu-1"))
    out = store.delete("pods", "p")
    assert out["metadata"]["deletionGracePeriodSeconds"] == 30
    assert out["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:50Z"  # now + 30 s
    assert store.get("pods", "p")["metadata"]["deletionTimestamp"]
    # a second delete with a shorter grace period shortens it
    clock.t += 5
    out = store.delete("pods", "p", grace_period_seconds=10)
    assert out["metadata"]["deletionGracePeriodSeconds"] == 10
    assert out["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:30Z"
    store.finalize_delete("pods", "p")
    with pytest.raises(ApiError):
        store.get("pods", "p")


@pytest.mark.parametrize("grace, phase", [(0, None), (None, "Succeeded"), (None, "Failed")],
                         ids=["grace-0", "succeeded", "failed"])
def test_bound_pod_goes_at_once_with_grace_zero_or_when_terminated(store, grace, phase):
    store.create("pods", pod("p", node="gpu-1"))
    if phase:
        store.patch("pods", "p", {"status": {"phase": phase}}, "application/merge-patch+json", subresource="status")
    store.delete("pods", "p", grace_period_seconds=grace)
    with pytest.raises(ApiError):
        store.get("pods", "p")


def test_finalizers_keep_an_object_until_removed(store):
    store.create("configmaps", {"metadata": {"name": "c", "finalizers": ["example.com/x"]}})
    store.delete("configmaps", "c")
    c = store.get("configmaps", "c")
    assert c["metadata"]["deletionTimestamp"]
    store.patch("configmaps", "c", {"metadata": {"finalizers": None}}, "application/merge-patch+json")
    with pytest.raises(ApiError):
        store.get("configmaps", "c")


def test_delete_preconditions(store):
    cm = store.create("configmaps", {"metadata": {"name": "c"}})
    with pytest.raises(ApiError) as e:
        store.delete("configmaps", "c", preconditions={"uid": "other"})
    assert e.value.code == 409
    out = store.delete("configmaps", "c", preconditions={"uid": cm["metadata"]["uid"]})
    assert out["kind"] == "Status" and out["status"] == "Success"


def test_system_namespaces_cannot_be_deleted(store):
    with pytest.raises(ApiError) as e:
        store.delete("namespaces", "kube-system")
    assert (e.value.code, e.value.message) == (403, 'namespaces "kube-system" is forbidden: this namespace may not be deleted')


def test_deleting_a_namespace_marks_it_terminating_and_refuses_new_content(store, clock):
    store.create("namespaces", {"metadata": {"name": "hub"}})
    store.create("pods", pod("p"), "hub")
    out = store.delete("namespaces", "hub")
    assert out["status"] == {"phase": "Terminating"}
    assert out["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:20Z"
    assert out["spec"] == {"finalizers": ["kubernetes"]}
    # the content stays for the namespace controller to delete
    assert [p["metadata"]["name"] for p in store.list("pods", "hub")["items"]] == ["p"]
    with pytest.raises(ApiError) as e:
        store.create("configmaps", {"metadata": {"name": "late"}}, "hub")
    assert (e.value.code, e.value.reason, e.value.message) == (
        403, "Forbidden",
        'configmaps "late" is forbidden: unable to create new content in namespace hub because it is being terminated')
    assert e.value.details["causes"] == [{"reason": "NamespaceTerminating",
                                          "message": "namespace hub is being terminated",
                                          "field": "metadata.namespace"}]
    # deleting again changes nothing while spec.finalizers is not empty
    assert store.delete("namespaces", "hub")["metadata"]["resourceVersion"] == out["metadata"]["resourceVersion"]
    # a kind of another API group is named with its group (GroupResource.String())
    with pytest.raises(ApiError) as e:
        store.create("leases", {"metadata": {"name": "late"}}, "hub")
    assert e.value.message.startswith('leases.coordination.k8s.io "late" is forbidden: unable to create new content')


def test_finalize_removes_a_namespace_whose_content_is_gone(store):
    store.create("namespaces", {"metadata": {"name": "hub"}})
    store.delete("namespaces", "hub")
    ns = store.finalize_namespace("hub", {"metadata": {"name": "hub"}, "spec": {"finalizers": []}})
    assert "finalizers" not in ns["spec"]
    store.delete("namespaces", "hub", preconditions={"uid": ns["metadata"]["uid"]})
    with pytest.raises(ApiError):
        store.get("namespaces", "hub")


def test_namespace_spec_finalizers_change_only_through_finalize(store):
    store.create("namespaces", {"metadata": {"name": "hub"}})
    out = store.patch("namespaces", "hub", {"spec": {"finalizers": None}}, "application/merge-patch+json")
    assert out["spec"]["finalizers"] == ["kubernetes"]


# -- watch ------------------------------------------------------------------------------


async def test_watch_without_rv_starts_with_synthetic_added_events(store):
    store.create("pods", pod("a"))
    store.create("pods", pod("b"))
    w = store.watch("pods", "default")
    evs = await drain(w, 2)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("ADDED", "a"), ("ADDED", "b")]
    store.patch("pods", "a", {"metadata": {"labels": {"x": "y"}}}, "application/merge-patch+json")
    (ev,) = await drain(w, 1)
    assert ev["type"] == "MODIFIED" and ev["object"]["metadata"]["labels"] == {"x": "y"}
    w.close()


async def test_watch_resumes_after_a_resource_version_in_order(store):
    a = store.create("pods", pod("a"))
    store.create("pods", pod("b"))
    store.create("configmaps", {"metadata": {"name": "not-a-pod"}})
    store.delete("pods", "b")
    w = store.watch("pods", resource_version=a["metadata"]["resourceVersion"])
    evs = await drain(w, 3)
    # a pod is deleted in two writes, even at grace 0: deletionTimestamp set, then removed
    # (registry updateForGracefulDeletionAndFinalizers, then Storage.Delete)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [
        ("ADDED", "b"), ("MODIFIED", "b"), ("DELETED", "b")]
    assert evs[1]["object"]["metadata"]["deletionGracePeriodSeconds"] == 0
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    assert rvs == sorted(rvs) and rvs[-1] == store.resource_version
    w.close()


def test_watch_older_than_history_is_410_expired(clock):
    store = Store(history=5, clock=clock)
    first = store.create("configmaps", {"metadata": {"name": "c0"}})
    for i in range(1, 10):
        store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    rv = int(first["metadata"]["resourceVersion"])
    with pytest.raises(ApiError) as e:
        store.watch("configmaps", resource_version=str(rv))
    oldest = store.resource_version - 5
    assert (e.value.code, e.value.reason) == (410, "Expired")
    assert e.value.message == f"too old resource version: {rv} ({oldest})"
    store.watch("configmaps", resource_version=str(oldest)).close()  # the oldest kept still works


async def test_selector_transitions_are_added_and_deleted(store):
    store.create("pods", pod("p", labels={"gpu": "no"}))
    w = store.watch("pods", label_selector="gpu=yes", resource_version=str(store.resource_version))
    store.patch("pods", "p", {"metadata": {"labels": {"gpu": "yes"}}}, "application/merge-patch+json")
    store.patch("pods", "p", {"metadata": {"annotations": {"a": "b"}}}, "application/merge-patch+json")
    store.patch("pods", "p", {"metadata": {"labels": {"gpu": "no"}}}, "application/merge-patch+json")
    evs = await drain(w, 3)
    assert [e["type"] for e in evs] == ["ADDED", "MODIFIED", "DELETED"]
    # the DELETED carries the last matching state, stamped with the change's revision
    assert evs[2]["object"]["metadata"]["labels"] == {"gpu": "yes"}
    assert evs[2]["object"]["metadata"]["resourceVersion"] == str(store.resource_version)
    w.close()


async def test_field_selector_watch_like_a_kubelet(store):
    w = store.watch("pods", field_selector="spec.nodeName=gpu-1")
    store.create("pods", pod("p"))
    store.bind("p", "gpu-1", "default")
    (ev,) = await drain(w, 1)
    assert ev["type"] == "ADDED" and ev["object"]["spec"]["nodeName"] == "gpu-1"
    w.close()


async def test_bookmarks_carry_only_the_resource_version(clock):
    store = Store(clock=clock, bookmark_interval=0.05)
    w = store.watch("pods", allow_bookmarks=True)
    store.create("configmaps", {"metadata": {"name": "c"}})
    (ev,) = await drain(w, 1)
    assert ev == {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                 "metadata": {"resourceVersion": str(store.resource_version)}}}
    w.close()


async def test_close_ends_the_iteration(store):
    w = store.watch("pods")
    task = asyncio.ensure_future(w.__anext__())
    await asyncio.sleep(0.01)
    w.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(task, 5)


# -- list and paging ----------------------------------------------------------------------


def test_list_pages_with_continue_and_remaining_count(store):
    for i in range(7):
        store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    page = store.list("configmaps", "default", limit=3)
    assert [i["metadata"]["name"] for i in page["items"]] == ["c0", "c1", "c2"]
    assert page["metadata"]["remainingItemCount"] == 4
    assert "kind" not in page["items"][0]
    seen = [i["metadata"]["name"] for i in page["items"]]
    token = page["metadata"]["continue"]
    while token:
        page = store.list("configmaps", "default", limit=3, continue_token=token)
        seen += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert seen == [f"c{i}" for i in range(7)]
    assert "remainingItemCount" not in page["metadata"]


def test_continue_serves_a_consistent_snapshot(store):
    for i in range(4):
        store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    page = store.list("configmaps", "default", limit=2)
    store.delete("configmaps", "c3")
    store.create("configmaps", {"metadata": {"name": "c9"}})
    rest = store.list("configmaps", "default", limit=10, continue_token=page["metadata"]["continue"])
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c2", "c3"]
    assert rest["metadata"]["resourceVersion"] == page["metadata"]["resourceVersion"]


def test_selectors_drop_remaining_item_count(store):
    for i in range(4):
        store.create("configmaps", {"metadata": {"name": f"c{i}", "labels": {"n": str(i % 2)}}})
    page = store.list("configmaps", "default", label_selector="n=0", limit=1)
    assert [i["metadata"]["name"] for i in page["items"]] == ["c0"]
    assert "continue" in page["metadata"] and "remainingItemCount" not in page["metadata"]


def test_expired_continue_token_is_410_with_a_fresh_token(clock):
    store = Store(history=3, clock=clock)
    for i in range(4):
        store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    page = store.list("configmaps", "default", limit=2)
    for i in range(5):
        store.create("configmaps", {"metadata": {"name": f"d{i}"}})
    with pytest.raises(ApiError) as e:
        store.list("configmaps", "default", limit=2, continue_token=page["metadata"]["continue"])
    assert (e.value.code, e.value.reason, e.value.message) == (410, "Expired", CONTINUE_EXPIRED)
    fresh = e.value.status()["metadata"]["continue"]
    rest = store.list("configmaps", "default", continue_token=fresh)
    assert [i["metadata"]["name"] for i in rest["items"]][:2] == ["c2", "c3"]


@pytest.mark.parametrize(
    "kwargs, code, message",
    [
        ({"label_selector": "a in"}, 400, "unable to parse requirement: found '' expected: '('"),
        ({"field_selector": "spec.foo=x"}, 400, "field label not supported: spec.foo"),
        ({"continue_token": "garbage!"}, 400, None),
        ({"resource_version": "999999"}, 504, "Too large resource version: 999999, current: "),
    ],
    ids=["label-parse", "field-unsupported", "bad-token", "rv-too-large"],
)
def test_list_errors(store, kwargs, code, message):
    with pytest.raises(ApiError) as e:
        store.list("pods", **kwargs)
    assert e.value.code == code
    if message:
        assert e.value.message.startswith(message)


def test_list_across_namespaces_and_by_field(store):
    store.create("namespaces", {"metadata": {"name": "hub"}})
    store.create("pods", pod("a"), "hub")
    store.create("pods", pod("b", node="gpu-1"), "default")
    assert [p["metadata"]["name"] for p in store.list("pods")["items"]] == ["b", "a"]  # key order: default/ < hub/
    assert [p["metadata"]["name"] for p in store.list("pods", field_selector="spec.nodeName=gpu-1")["items"]] == ["b"]
    assert [p["metadata"]["name"] for p in store.list("pods", "hub")["items"]] == ["a"]


async def test_async_scan_stays_a_snapshot_while_writes_interleave(store):
    for i in range(6):
        store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    rv = store.resource_version

    async def writer():
        await asyncio.sleep(0)
        store.delete("configmaps", "c4")
        store.create("configmaps", {"metadata": {"name": "c3a"}})
        store.patch("configmaps", "c5", {"data": {"late": "1"}}, "application/merge-patch+json")

    task = asyncio.ensure_future(writer())
    meta, items = await store.list_page_async("configmaps", "default", checkpoint=1)
    await task
    assert meta["resourceVersion"] == str(rv)
    assert [i["metadata"]["name"] for i in items] == [f"c{i}" for i in range(6)]
    assert "data" not in items[5]


def test_list_exact_resource_version_serves_that_revision(store):
    store.create("configmaps", {"metadata": {"name": "a"}})
    rv = str(store.resource_version)
    store.create("configmaps", {"metadata": {"name": "b"}})
    store.delete("configmaps", "a")
    exact = store.list("configmaps", "default", resource_version=rv, resource_version_match="Exact")
    assert [i["metadata"]["name"] for i in exact["items"]] == ["a"]
    assert exact["metadata"]["resourceVersion"] == rv
    newest = store.list("configmaps", "default", resource_version=rv, resource_version_match="NotOlderThan")
    assert [i["metadata"]["name"] for i in newest["items"]] == ["b"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"resource_version_match": "Exact"},
         "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"),
        ({"resource_version_match": "Exact", "resource_version": "0"},
         'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'),
        ({"resource_version_match": "Newest", "resource_version": "1"},
         'resourceVersionMatch: Unsupported value: "Newest": supported values: "Exact", "NotOlderThan"'),
    ],
    ids=["no-rv", "exact-zero", "unknown"],
)
def test_resource_version_match_validation(store, kwargs, message):
    with pytest.raises(ApiError) as e:
        store.list("pods", **kwargs)
    assert e.value.code == 422
    assert e.value.message == f'ListOptions.meta.k8s.io "" is invalid: {message}'


async def test_a_patch_leaves_earlier_revisions_untouched(store):
    created = store.create("configmaps", {"metadata": {"name": "c", "labels": {"a": "1"}}, "data": {"k": "1"}})
    rv = created["metadata"]["resourceVersion"]
    w = store.watch("configmaps", resource_version=str(int(rv) - 1))
    store.patch("configmaps", "c", {"data": {"k": "2"}}, "application/merge-patch+json")
    store.patch("configmaps", "c", {"data": {"k": "3"}}, "application/strategic-merge-patch+json")
    added, first, second = await drain(w, 3)
    assert added["object"]["metadata"]["resourceVersion"] == rv and added["object"]["data"] == {"k": "1"}
    assert first["object"]["data"] == {"k": "2"}
    assert int(first["object"]["metadata"]["resourceVersion"]) < int(second["object"]["metadata"]["resourceVersion"])
    w.close()
