"""The fault proxy (``gpuspawner-cluster faultproxy``) in front of the real API server: clients
keep their identity through it, and it answers 5xx and 429 with Retry-After, refuses connections,
stalls and cuts watches, cuts replies mid-body, by verb and resource, switched at runtime through
its control endpoint."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import ssl
import subprocess
import threading
import time

import pytest

from testcluster.faultproxy import FaultProxy, FaultProxyError


@pytest.fixture
def proxy(control_plane):
    fp = FaultProxy(control_plane.data_dir).start()
    yield fp
    fp.stop()


def _admin_tls(proxy: FaultProxy) -> ssl.SSLContext:
    """TLS as the cluster's admin (its client certificate), trusting the cluster CA only."""
    pki = proxy.data_dir / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def _conn(proxy: FaultProxy, timeout: float = 10) -> http.client.HTTPSConnection:
    return http.client.HTTPSConnection("127.0.0.1", proxy.port, context=_admin_tls(proxy), timeout=timeout)


def _get(proxy: FaultProxy, path: str) -> tuple[int, dict[str, str], dict]:
    c = _conn(proxy)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), json.loads(r.read() or b"{}")
    finally:
        c.close()


def _kubectl(kubeconfig, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    r = subprocess.run(["kubectl", *args], capture_output=True, text=True, timeout=60, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def test_the_admin_stays_the_admin_through_the_proxy(proxy):
    who = json.loads(_kubectl(proxy.kubeconfig, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == "gpuspawner-admin"
    assert "system:masters" in who["groups"]
    assert proxy.counts() == 1  # a selfsubjectreviews create went through the proxy


def test_a_service_account_token_stays_that_account_with_its_rights(proxy, control_plane, tmp_path):
    admin = control_plane.kubeconfig
    _kubectl(admin, "create", "serviceaccount", "fp-reader", "-n", "default")
    token = _kubectl(admin, "create", "token", "fp-reader", "-n", "default").stdout.strip()
    kc = proxy.kubeconfig_through(admin, tmp_path / "sa.kubeconfig")
    _kubectl(kc, "config", "set-credentials", "fp-reader", f"--token={token}")
    _kubectl(kc, "config", "set-context", "--current", "--user=fp-reader")
    who = json.loads(_kubectl(kc, "auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert who["username"] == "system:serviceaccount:default:fp-reader"
    # RBAC applies to the account, not to the proxy's own identity
    assert _kubectl(kc, "auth", "can-i", "list", "secrets", check=False).stdout.strip() == "no"


@pytest.mark.parametrize(("code", "reason", "retry_after"), [
    (503, "ServiceUnavailable", "4"),
    (429, "TooManyRequests", "4"),
    (500, "InternalError", None),
], ids=["503", "429", "500"])
def test_injected_answers_by_verb_and_resource(proxy, code, reason, retry_after):
    proxy.fail(code, count=2, verb="list", resource="pods", retry_after=4)
    status, headers, body = _get(proxy, "/api/v1/namespaces/default/pods")
    assert (status, body["kind"], body["reason"]) == (code, "Status", reason)
    assert headers.get("Retry-After") == retry_after
    # another resource and another verb on the same resource pass
    assert _get(proxy, "/api/v1/nodes")[0] == 200
    assert _get(proxy, "/api/v1/namespaces/default/pods/none")[0] == 404
    assert _get(proxy, "/api/v1/namespaces/default/pods")[0] == code
    assert _get(proxy, "/api/v1/namespaces/default/pods")[0] == 200  # the two are used up
    assert proxy.state()["fail"] == []


def test_kubectl_honours_retry_after_and_gets_through(proxy):
    """client-go retries a 429 or 5xx that carries Retry-After: the answer of a real client."""
    proxy.fail(429, count=2, verb="list", resource="namespaces", retry_after=1)
    began = time.monotonic()
    out = _kubectl(proxy.kubeconfig, "get", "namespaces", "-o", "name").stdout
    assert "namespace/default" in out
    assert time.monotonic() - began >= 2.0, "kubectl waited Retry-After (1 s) twice"
    assert proxy.counts("list", "namespaces") == 3


def test_refused_connections_then_served_again(proxy):
    proxy.refuse(connections=1)
    with pytest.raises((ConnectionError, ssl.SSLError, http.client.RemoteDisconnected, OSError)):
        _get(proxy, "/api/v1/nodes")
    assert _get(proxy, "/api/v1/nodes")[0] == 200
    proxy.refuse()  # until told otherwise
    for _ in range(2):
        with pytest.raises((ConnectionError, ssl.SSLError, http.client.RemoteDisconnected, OSError)):
            _get(proxy, "/api/v1/nodes")
    assert proxy.state()["refusingConnections"] is True
    proxy.refuse(False)
    assert _get(proxy, "/api/v1/nodes")[0] == 200


class _Watch:
    """A watch read on a thread: its status and the lines it delivers."""

    def __init__(self, proxy: FaultProxy, path: str):
        self.conn = _conn(proxy, timeout=60)
        self.lines: list[bytes] = []
        self.status: int | None = None
        self.ended = threading.Event()
        self.conn.request("GET", path)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            r = self.conn.getresponse()
            self.status = r.status
            while line := r.readline():
                self.lines.append(line)
        except OSError:
            pass
        finally:
            self.ended.set()


def test_a_stalled_watch_delivers_nothing_while_lists_answer_until_cut(proxy, control_plane):
    proxy.stall(3600, verb="watch", resource="configmaps")
    watch = _Watch(proxy, "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true")
    _kubectl(control_plane.kubeconfig, "create", "configmap", "fp-stalled", "-n", "default")
    assert _get(proxy, "/api/v1/namespaces/default/configmaps")[0] == 200
    time.sleep(2)
    assert watch.status is None and watch.lines == [], "a stalled watch answered"
    assert proxy.close_watches() == 1
    assert watch.ended.wait(10) and watch.status == 200 and watch.lines == []
    proxy.clear()
    live = _Watch(proxy, "/api/v1/namespaces/default/configmaps?watch=1")
    deadline = time.monotonic() + 10
    while not any(b"fp-stalled" in line for line in live.lines) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(b'"ADDED"' in line and b"fp-stalled" in line for line in live.lines), live.lines
    # a watch passed on is cut cleanly (the stream ends as at its timeout)
    assert proxy.close_watches() == 1
    assert live.ended.wait(10) and live.status == 200


def test_a_stall_released_by_clear_is_answered(proxy):
    proxy.stall(3600, verb="get", resource="nodes", count=1)
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(_get(proxy, "/api/v1/nodes/none")[0]))
    t.start()
    time.sleep(1)
    assert not result
    proxy.clear()
    t.join(10)
    assert result == [404]


async def test_a_create_cut_mid_reply_is_carried_out_all_the_same(proxy):
    """The reply to a pod's creation lost mid-body (seen in CI): kubernetes_asyncio raises aiohttp's
    payload error, and the pod exists."""
    import aiohttp
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.client.exceptions import ApiException

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(proxy.kubeconfig), client_configuration=cfg)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fp-cut"},
           "spec": {"containers": [{"name": "c", "image": "registry.invalid/none"}]}}
    async with client.ApiClient(configuration=cfg) as api:
        v1 = client.CoreV1Api(api)
        state = proxy.cut(verb="create", resource="pods")
        assert state["cut"] == [{"verb": "create", "resource": "pods", "remaining": 1}]
        try:
            with pytest.raises((aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)) as e:
                await v1.create_namespaced_pod("default", pod)
            print(f"\nthe client saw {type(e.value).__name__}: {e.value}")
            assert proxy.state()["cut"] == []
            assert proxy.counts("create", "pods") == 1
            # the API server carried it out
            created = await v1.read_namespaced_pod("fp-cut", "default")
            assert created.spec.containers[0].image == "registry.invalid/none"
        finally:
            with contextlib.suppress(ApiException):
                await v1.delete_namespaced_pod("fp-cut", "default", grace_period_seconds=0)


def test_kubectl_over_http2_sees_its_create_cut_and_the_configmap_exists(proxy, control_plane):
    """client-go speaks HTTP/2 to the proxy: the cut resets the create's stream."""
    proxy.cut(verb="create", resource="configmaps")
    r = _kubectl(proxy.kubeconfig, "create", "configmap", "fp-cut", "-n", "default", check=False)
    print(f"\nkubectl exited {r.returncode}: {r.stderr.strip()}")
    assert r.returncode != 0 and "INTERNAL_ERROR" in r.stderr, r.stderr
    got = _kubectl(control_plane.kubeconfig, "get", "configmap", "fp-cut", "-n", "default",
                   "-o", "name")
    assert got.stdout.strip() == "configmap/fp-cut"
    _kubectl(control_plane.kubeconfig, "delete", "configmap", "fp-cut", "-n", "default")


@pytest.mark.parametrize(("call", "message"), [
    (lambda p: p.fail(503, verb="fetch"), 'unknown verb "fetch"'),
    (lambda p: p.fail(200), "code 200 cannot be injected"),
    (lambda p: p.fail(503, count=0), "count must be at least 1"),
    (lambda p: p.stall(-1), "seconds must be a positive"),
    (lambda p: p.fail(503, resource="pods*"), "not a resource name"),
    (lambda p: p._call("POST", "/faults/stall", {"verb": "watch"}), '"seconds" is required'),
    (lambda p: p._call("POST", "/faults/fail", {"cod": 503}), 'unknown field "cod"'),
    (lambda p: p.cut(0), "count must be at least 1"),
    (lambda p: p.cut(verb="watch"), 'verb "watch" cannot be cut'),
], ids=["verb", "code", "count", "seconds", "pattern", "no-seconds", "unknown-field",
        "cut-count", "cut-watch"])
def test_the_control_endpoint_says_what_to_fix(proxy, call, message):
    with pytest.raises(FaultProxyError, match="answered 400") as e:
        call(proxy)
    assert message in str(e.value)
    assert proxy.state() == {"fail": [], "stall": [], "cut": [], "refusingConnections": False}


def test_stopping_the_proxy_frees_its_port(control_plane):
    fp = FaultProxy(control_plane.data_dir).start()
    port = fp.port
    fp.stop()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
