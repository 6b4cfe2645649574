"""The HTTP API as unmodified kubernetes_asyncio sees it, plus the /_sim/ hooks."""

import asyncio
import json
import logging
import socket
import struct

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.rest import ApiException

from gpuspawner.sim import tables
from gpuspawner.sim.apiserver import ApiServer
from gpuspawner.sim.store import Store

pytestmark = pytest.mark.integration

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"labels": {"app": "jupyterhub"}},
       "spec": {"containers": [{"name": "notebook", "image": "jupyter/base-notebook:2024-01-01"}]}}


def pod(name):
    return dict(POD, metadata=dict(POD["metadata"], name=name))


@pytest.fixture
async def server():
    srv = ApiServer(Store(history=50), bookmark_interval=60.0)
    await srv.start()
    yield srv
    await srv.stop()


@pytest.fixture
async def api(server):
    async with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield client.CoreV1Api(api_client)


async def test_discovery_and_version(server):
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1") as r:
            body = await r.json()
        names = {res["name"]: res for res in body["resources"]}
        assert body["kind"] == "APIResourceList"
        assert names["pods"]["shortNames"] == ["po"] and names["pods"]["namespaced"] is True
        assert names["nodes"]["namespaced"] is False and "watch" in names["nodes"]["verbs"]
        assert names["pods/binding"]["verbs"] == ["create"]
        async with s.get(server.url + "/version") as r:
            assert (await r.json())["major"] == "1"
        async with s.get(server.url + "/apis") as r:
            assert (await r.json())["kind"] == "APIGroupList"


async def test_create_get_list_through_the_client(api):
    created = await api.create_namespaced_pod("default", {**POD, "metadata": {"generateName": "jupyter-", "labels": {"app": "jupyterhub"}}})
    assert created.metadata.name.startswith("jupyter-") and created.status.phase == "Pending"
    assert created.spec.scheduler_name == "default-scheduler"
    got = await api.read_namespaced_pod(created.metadata.name, "default")
    assert got.metadata.uid == created.metadata.uid
    pods = await api.list_pod_for_all_namespaces(label_selector="app=jupyterhub")
    assert [p.metadata.name for p in pods.items] == [created.metadata.name]
    nodes = await api.list_node()
    assert nodes.items == [] and int(nodes.metadata.resource_version) > 0


@pytest.mark.parametrize(
    "call, status, reason, message",
    [
        (lambda api: api.read_namespaced_pod("ghost", "default"), 404, "NotFound", 'pods "ghost" not found'),
        (lambda api: api.create_namespaced_pod("nope", pod("p")), 404, "NotFound", 'namespaces "nope" not found'),
        (lambda api: api.list_namespaced_pod("default", label_selector="a in"), 400, "BadRequest",
         "unable to parse requirement: found '' expected: '('"),
        (lambda api: api.list_namespaced_pod("default", field_selector="spec.foo=x"), 400, "BadRequest",
         "field label not supported: spec.foo"),
        (lambda api: api.create_namespaced_pod("default", {"metadata": {}, "spec": {"containers": [
            {"name": "c", "image": "i"}]}}), 422, "Invalid",
         'Pod "" is invalid: metadata.name: Required value: name or generateName is required'),
    ],
    ids=["get-missing", "missing-namespace", "label-parse", "field-unsupported", "invalid"],
)
async def test_errors_parse_as_api_exception(api, call, status, reason, message):
    with pytest.raises(ApiException) as e:
        await call(api)
    assert e.value.status == status
    body = json.loads(e.value.body)
    assert body["kind"] == "Status" and body["reason"] == reason and body["code"] == status
    assert body["message"] == message


async def test_conflict_and_already_exists(api):
    p = await api.create_namespaced_pod("default", pod("p"))
    with pytest.raises(ApiException) as e:
        await api.create_namespaced_pod("default", pod("p"))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    await api.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiException) as e:  # p still carries the resourceVersion from before the patch
        await api.replace_namespaced_pod("p", "default", api.api_client.sanitize_for_serialization(p))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "Conflict"


async def test_patch_kinds_through_the_client(api):
    await api.create_namespaced_pod("default", pod("p"))
    # a dict body goes as strategic merge patch: containers merge by name
    out = await api.patch_namespaced_pod("p", "default", {"spec": {"containers": [
        {"name": "notebook", "env": [{"name": "JUPYTER_ENABLE_LAB", "value": "yes"}]}]}})
    assert out.spec.containers[0].image == "jupyter/base-notebook:2024-01-01"
    assert out.spec.containers[0].env[0].name == "JUPYTER_ENABLE_LAB"
    # a list body goes as JSON patch
    out = await api.patch_namespaced_pod("p", "default", [
        {"op": "add", "path": "/metadata/annotations", "value": {"hub.jupyter.org/username": "alice"}}])
    assert out.metadata.annotations == {"hub.jupyter.org/username": "alice"}
    out = await api.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Running"}})
    assert out.status.phase == "Running"


async def test_binding_and_graceful_delete(api, server):
    await api.create_namespaced_pod("default", pod("p"))
    await api.create_namespaced_pod_binding(
        "p", "default", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"}},
        _preload_content=False)
    assert (await api.read_namespaced_pod("p", "default")).spec.node_name == "gpu-1"
    # (the client cannot deserialize the Status a binding answers with, as
    # against a real server, hence _preload_content=False)
    resp = await api.create_namespaced_pod_binding(
        "p", "default", {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "gpu-2"}},
        _preload_content=False)
    assert resp.status == 409
    assert json.loads(await resp.read())["message"] == (
        'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "gpu-1"')
    out = await api.delete_namespaced_pod("p", "default", grace_period_seconds=20)
    assert out.metadata.deletion_grace_period_seconds == 20
    assert (await api.read_namespaced_pod("p", "default")).metadata.deletion_timestamp is not None
    server.store.finalize_delete("pods", "p", "default")
    with pytest.raises(ApiException) as e:
        await api.read_namespaced_pod("p", "default")
    assert e.value.status == 404


async def test_delete_options_body_grace_zero(api):
    await api.create_namespaced_pod("default", {**pod("p"), "spec": {**POD["spec"], "nodeName": "gpu-1"}})
    await api.delete_namespaced_pod("p", "default", body=client.V1DeleteOptions(grace_period_seconds=0))
    with pytest.raises(ApiException):
        await api.read_namespaced_pod("p", "default")


async def test_list_pages_through_the_client(api, server):
    for i in range(25):
        server.store.create("pods", pod(f"p{i:02d}"))
    names, token, pages = [], None, 0
    while True:
        page = await api.list_namespaced_pod("default", limit=10, _continue=token)
        pages += 1
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
        if pages == 1:
            assert page.metadata.remaining_item_count == 15
        if not token:
            break
    assert pages == 3 and names == [f"p{i:02d}" for i in range(25)]


async def test_watch_resume_and_events(api, server):
    listed = await api.list_namespaced_pod("default")
    rv = listed.metadata.resource_version
    server.store.create("pods", pod("a"))
    server.store.patch("pods", "a", {"metadata": {"labels": {"x": "y"}}}, "application/merge-patch+json")
    server.store.delete("pods", "a")
    w = watch.Watch()
    seen = []
    async with w:
        async for ev in w.stream(api.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5):
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 4:
                w.stop()
    # the delete is two writes: deletionTimestamp set (grace 0), then removed
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_watch_too_old_is_an_error_event_that_the_client_raises_as_410(api, server):
    for i in range(60):
        server.store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/configmaps", params={"watch": "1", "resourceVersion": "2"}) as r:
            assert r.status == 200
            lines = (await r.read()).decode().splitlines()
    assert len(lines) == 1
    ev = json.loads(lines[0])
    assert ev["type"] == "ERROR"
    assert ev["object"]["code"] == 410 and ev["object"]["reason"] == "Expired"
    assert ev["object"]["message"].startswith("too old resource version: 2 (")
    w = watch.Watch()
    with pytest.raises(ApiException) as e:
        async for _ in w.stream(api.list_config_map_for_all_namespaces, resource_version="2", timeout_seconds=5):
            pass
    assert e.value.status == 410


async def test_timeout_seconds_ends_the_stream_cleanly(server):
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/namespaces/default/pods",
                         params={"watch": "true", "timeoutSeconds": "1", "resourceVersion": str(
                             server.store.resource_version)}) as r:
            body = await asyncio.wait_for(r.read(), 10)
    assert r.status == 200 and body == b""


async def test_http_bookmarks():
    srv = ApiServer(Store(), bookmark_interval=0.1)
    await srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(srv.url + "/api/v1/pods", params={
                    "watch": "1", "allowWatchBookmarks": "true",
                    "resourceVersion": str(srv.store.resource_version)}) as r:
                line = await asyncio.wait_for(r.content.readline(), 10)
        ev = json.loads(line)
        assert ev["type"] == "BOOKMARK"
        assert ev["object"]["metadata"] == {"resourceVersion": str(srv.store.resource_version)}
    finally:
        await srv.stop()


async def test_the_bookmark_interval_is_set_over_http(server):
    """``POST /_sim/bookmarks``: an open watch (60 s by default) bookmarks at the new pace at once."""
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/pods", params={
                "watch": "1", "allowWatchBookmarks": "true",
                "resourceVersion": str(server.store.resource_version)}) as watch:
            for _ in range(1000):
                if server.open_watches == 1:
                    break
                await asyncio.sleep(0.01)
            async with s.post(server.url + "/_sim/bookmarks", json={"interval": 0.1}) as r:
                assert r.status == 200 and (await r.json()) == {"interval": 0.1}
            line = await asyncio.wait_for(watch.content.readline(), 10)
        assert json.loads(line)["type"] == "BOOKMARK"
        async with s.post(server.url + "/_sim/bookmarks", json={"interval": 0}) as r:
            assert r.status == 400 and "interval must be a positive number of seconds" in (await r.json())["error"]


async def test_a_bookmark_comes_two_seconds_before_the_timeout(server):
    # cache_watcher.go nextBookmarkTime: (a) 2 s before the deadline, (b) about every minute
    rv = str(server.store.resource_version)
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/pods", params={
                "watch": "1", "allowWatchBookmarks": "1", "timeoutSeconds": "3", "resourceVersion": rv}) as r:
            body = await asyncio.wait_for(r.read(), 20)
    events = [json.loads(line) for line in body.splitlines()]
    assert [e["type"] for e in events] == ["BOOKMARK"]
    assert events[0]["object"]["metadata"]["resourceVersion"] == rv


async def test_stop_does_not_wait_for_a_stalled_request():
    srv = ApiServer(Store())
    await srv.start()
    srv.faults.stall(60, verb="list")
    async with aiohttp.ClientSession() as s:
        task = asyncio.ensure_future(s.get(srv.url + "/api/v1/pods"))
        for _ in range(500):
            if srv.counters.count(verb="list"):
                break
            await asyncio.sleep(0.01)
        await asyncio.wait_for(srv.stop(), 20)
        with pytest.raises(aiohttp.ClientError):
            await asyncio.wait_for(task, 20)


async def test_selector_watch_over_http(server):
    server.store.create("pods", pod("p"))
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/pods", params={
                "watch": "1", "fieldSelector": "spec.nodeName=gpu-1",
                "resourceVersion": str(server.store.resource_version)}) as r:
            server.store.bind("p", "gpu-1", "default")
            ev = json.loads(await asyncio.wait_for(r.content.readline(), 10))
    assert ev["type"] == "ADDED" and ev["object"]["spec"]["nodeName"] == "gpu-1"
    assert ev["object"]["kind"] == "Pod"


async def test_table_output_for_pods(server):
    server.store.create("pods", pod("p"))
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/pods",
                         headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}) as r:
            table = await r.json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert table["rows"][0]["cells"][:4] == ["p", "0/1", "Pending", "0"]
    assert table["rows"][0]["object"]["metadata"]["namespace"] == "default"


# -- faults and counters ------------------------------------------------------------------


@pytest.mark.parametrize("code, reason", [(429, "TooManyRequests"), (500, "InternalError"), (410, "Expired"),
                                          (403, "Forbidden")],
                         ids=["429", "500", "410", "403"])
async def test_injected_failures_hit_only_matching_requests(api, server, code, reason):
    server.faults.fail_next(2, code, verb="list", resource="pods")
    await api.list_node()  # not matching
    for _ in range(2):
        with pytest.raises(ApiException) as e:
            await api.list_namespaced_pod("default")
        assert e.value.status == code and json.loads(e.value.body)["reason"] == reason
        if code == 429:
            assert e.value.headers["Retry-After"] == "1"
    await api.list_namespaced_pod("default")  # the fault is used up
    assert server.counters[("list", "pods")] == 3
    assert server.counters[("list", "nodes")] == 1


async def test_injected_403_is_worded_as_rbac_words_it(api, server):
    server.faults.fail_next(1, 403, verb="list", resource="nodes")
    with pytest.raises(ApiException) as e:
        await api.list_node()
    body = json.loads(e.value.body)
    assert body["message"] == ('nodes is forbidden: User "system:anonymous" cannot list resource "nodes" '
                               'in API group "" at the cluster scope')
    assert body["details"] == {"kind": "nodes"}
    server.faults.fail_next(1, 403, verb="get", resource="pods")
    with pytest.raises(ApiException) as e:
        await api.read_namespaced_pod("x", "default")
    assert json.loads(e.value.body)["message"] == (
        'pods "x" is forbidden: User "system:anonymous" cannot get resource "pods" in API group "" '
        'in the namespace "default"')


async def test_stall_delays_matching_requests(api, server):
    server.faults.stall(0.3, verb="get", resource="namespaces", count=1)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await api.read_namespace("default")
    assert loop.time() - t0 >= 0.25
    assert server.faults.stall_rules == []


async def test_close_watches_ends_open_streams(server):
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/api/v1/pods", params={
                "watch": "1", "resourceVersion": str(server.store.resource_version)}) as r:
            for _ in range(200):
                if server.open_watches:
                    break
                await asyncio.sleep(0.01)
            assert server.faults.close_watches() == 1
            assert await asyncio.wait_for(r.read(), 10) == b""


async def test_refuse_connections_until_told_otherwise(server):
    server.faults.refuse_connections()
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientError):
            async with s.get(server.url + "/version") as r:
                await r.read()
    server.faults.refuse_connections(False)
    async with aiohttp.ClientSession() as s:
        async with s.get(server.url + "/version") as r:
            assert r.status == 200


async def test_sim_http_hooks(server):
    async with aiohttp.ClientSession() as s:
        async with s.post(server.url + "/_sim/faults/fail",
                          json={"count": 1, "code": 500, "verb": "get", "resource": "pods"}) as r:
            assert r.status == 200 and (await r.json())["fail"][0]["code"] == 500
        async with s.get(server.url + "/api/v1/namespaces/default/pods/x") as r:
            assert r.status == 500
        async with s.get(server.url + "/_sim/counters") as r:
            assert {"verb": "get", "resource": "pods", "count": 1} in (await r.json())["counts"]
        async with s.delete(server.url + "/_sim/counters") as r:
            assert r.status == 200
        assert server.counters.count() == 0
        async with s.post(server.url + "/_sim/faults/fail", json={"code": 418}) as r:
            assert r.status == 400 and "code must be one of" in (await r.json())["error"]
        # refusing connections cannot be switched off over HTTP: it is bounded
        async with s.post(server.url + "/_sim/faults/refuse", json={"connections": 2}) as r:
            assert r.status == 200 and (await r.json())["refusingConnections"] is True
        with pytest.raises(aiohttp.ClientError):
            async with aiohttp.ClientSession() as fresh:  # aiohttp retries once: both refused
                async with fresh.get(server.url + "/version") as r:
                    await r.read()
        assert not server.faults.refusing
        async with aiohttp.ClientSession() as fresh:
            async with fresh.get(server.url + "/version") as r:
                assert r.status == 200


async def test_method_not_allowed_and_unknown_paths(server):
    async with aiohttp.ClientSession() as s:
        async with s.post(server.url + "/api/v1/pods", json={}) as r:
            assert r.status == 405 and (await r.json())["reason"] == "MethodNotAllowed"
        async with s.get(server.url + "/api/v1/widgets") as r:
            assert r.status == 404 and (await r.json())["kind"] == "Status"
        async with s.patch(server.url + "/api/v1/namespaces/default", data=b"{}",
                           headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415


async def test_hundreds_of_concurrent_watches(server):
    n = 200
    rv = str(server.store.resource_version)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        async def one():
            async with s.get(server.url + "/api/v1/pods", params={
                    "watch": "1", "resourceVersion": rv, "timeoutSeconds": "30"}) as r:
                return json.loads(await r.content.readline())

        tasks = [asyncio.ensure_future(one()) for _ in range(n)]
        for _ in range(3000):  # up to 30 s on a loaded machine
            if server.open_watches == n:
                break
            await asyncio.sleep(0.01)
        assert server.open_watches == n
        server.store.create("pods", pod("p"))
        events = await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert all(e["type"] == "ADDED" and e["object"]["metadata"]["name"] == "p" for e in events)


def test_server_refuses_a_non_loopback_host():
    with pytest.raises(ValueError, match="loopback only"):
        ApiServer(Store(), host="0.0.0.0")


# -- server-side printing rules (tables.py) ---------------------------------------------------

@pytest.mark.parametrize(
    "seconds, text",
    [(-5, "<invalid>"), (-1, "0s"), (59, "59s"), (119, "119s"), (120, "2m"), (125, "2m5s"), (600, "10m"),
     (3 * 3600, "3h"), (3 * 3600 + 60, "3h1m"), (9 * 3600, "9h"), (50 * 3600, "2d2h"), (10 * 86400, "10d"),
     (800 * 86400, "2y70d")],
    ids=lambda v: str(v),
)
def test_human_duration(seconds, text):
    assert tables.human_duration(seconds) == text


@pytest.mark.parametrize(
    "pod_status, deleting, cells",
    [
        ({"phase": "Pending"}, False, ["0/1", "Pending", "0"]),
        ({"phase": "Pending", "containerStatuses": [
            {"name": "c", "ready": False, "restartCount": 0,
             "state": {"waiting": {"reason": "ContainerCreating"}}}]}, False, ["0/1", "ContainerCreating", "0"]),
        ({"phase": "Running", "containerStatuses": [
            {"name": "c", "ready": True, "restartCount": 2, "state": {"running": {}},
             "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2023-11-14T22:08:20Z"}}}]},
         False, ["1/1", "Running", "2 (5m ago)"]),
        ({"phase": "Running"}, True, ["0/1", "Terminating", "0"]),
    ],
    ids=["pending", "creating", "running-restarted", "terminating"],
)
def test_pod_table_cells(pod_status, deleting, cells):
    now = 1_700_000_000.0  # 2023-11-14T22:13:20Z
    obj = {"metadata": {"name": "p", "creationTimestamp": "2023-11-14T22:13:20Z"},
           "spec": {"containers": [{"name": "c"}]}, "status": pod_status}
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:50Z"
    row = tables.table_row("pods", "Pod", obj, now)
    assert row["cells"][1:4] == cells
    assert row["cells"][4] == "0s"



def _hang_up(url: str, path: str) -> None:
    """A client that sends its request and hangs up at once, with a reset (SO_LINGER 0)."""
    host, port = url.rsplit("/", 1)[-1].split(":")
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())


@pytest.mark.parametrize("cause", ["injected-410", "too-old-resource-version"])
async def test_a_client_that_hangs_up_on_an_error_event_stream_is_let_go_quietly(server, caplog, cause):
    """A watch answered with one ERROR event whose client has gone: the stream ends without a
    traceback in the server's log ("Error handling request"), as other watches do."""
    for i in range(60):
        server.store.create("configmaps", {"metadata": {"name": f"c{i}"}})
    path = "/api/v1/configmaps?watch=1" + ("&resourceVersion=2" if cause == "too-old-resource-version" else "")
    for _ in range(5):
        if cause == "injected-410":
            server.faults.fail_next(1, 410, verb="watch", resource="configmaps")
        _hang_up(server.url, path)
        await asyncio.sleep(0.1)
    assert server.counters[("watch", "configmaps")] == 5
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert logged == [], [r.getMessage() for r in logged]
    async with aiohttp.ClientSession() as s:  # the server still answers
        async with s.get(server.url + "/version") as r:
            assert r.status == 200
