"""``kubectl logs``, ``logs -f``, ``exec``, ``attach`` and ``port-forward`` through Kubernetes' own
API server to the node agent's kubelet API (``gpuspawner-kubelet-api``: Kubernetes' streaming
server over HTTPS, client certificates checked), with the real kubectl of the same version."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import ssl

import aiohttp
import pytest

from testcluster.faultproxy import FaultProxy
from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN, ApiError, Client
from testcluster.nodeagent.kubeletapi import Tls
from tests.builders import node
from tests.builders.kubelet import kubectl_env
from tests.builders.nodeagent import TOLERATE_ALL, pod_where, running_with_ip, wait_for, write_cluster

ROOT = Path(__file__).resolve().parents[2]
# prints a numbered line a second, and what it reads on stdin
CHATTY = ("import sys, threading, time\n"
          "def echo():\n"
          "    for line in sys.stdin:\n"
          "        print('got ' + line.strip(), flush=True)\n"
          "threading.Thread(target=echo, daemon=True).start()\n"
          "i = 0\n"
          "while True:\n"
          "    print(f'line {i}', flush=True); i += 1; time.sleep(0.5)\n")
# answers GET / with "hello from <pod IP>" on port 8080 of its pod IP
HELLO = ("import http.server, sys\n"
         "class H(http.server.BaseHTTPRequestHandler):\n"
         "    def do_GET(self):\n"
         "        body = ('hello from ' + sys.argv[1]).encode()\n"
         "        self.send_response(200); self.send_header('Content-Length', str(len(body))); self.end_headers()\n"
         "        self.wfile.write(body)\n"
         "    def log_message(self, *a): pass\n"
         "http.server.HTTPServer((sys.argv[1], 8080), H).serve_forever()\n")


def kubectl_binary() -> str:
    found = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl is not on PATH: run scripts/setup.sh, or set KUBECTL")
    out = subprocess.run([found, "version", "--client", "-o", "json"], capture_output=True, text=True, timeout=30)
    minor = json.loads(out.stdout or "{}").get("clientVersion", {}).get("minor", "")
    if not minor.startswith("37"):
        pytest.fail(f"{found} is kubectl 1.{minor}: these tests need the v1.37 kubectl built by scripts/setup.sh")
    return found


def chatty_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "python:3.12", "stdin": True,
                                     "command": [sys.executable, "-u", "-c", CHATTY]}],
                     "tolerations": TOLERATE_ALL, "terminationGracePeriodSeconds": 1}}


def hello_pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "web", "image": "python:3.12",
                                     "command": [sys.executable, "-c", HELLO, "$(POD_IP)"],
                                     "env": [{"name": "POD_IP",
                                              "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}],
                     "tolerations": TOLERATE_ALL, "terminationGracePeriodSeconds": 1}}


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Kubectl:
    def __init__(self, binary: str, kubeconfig: Path, tmp_path: Path):
        self.binary, self.kubeconfig = binary, kubeconfig
        self.env = kubectl_env(tmp_path)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--kubeconfig", str(self.kubeconfig), *args]

    async def run(self, *args: str, stdin: bytes | None = None, timeout: float = 30) -> tuple[int, str, str]:
        p = await asyncio.create_subprocess_exec(*self.argv(*args), env=self.env, stdin=subprocess.PIPE,
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await asyncio.wait_for(p.communicate(stdin), timeout)
        return p.returncode, out.decode(), err.decode()

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(*self.argv(*args), env=self.env, stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def read_until(stream: asyncio.StreamReader, needle: str, timeout: float = 20) -> str:
    seen = b""
    async def more() -> str:
        nonlocal seen
        while needle.encode() not in seen:
            chunk = await stream.read(4096)
            if not chunk:
                raise AssertionError(f"the stream ended before {needle!r}; it said {seen.decode()!r}")
            seen += chunk
        return seen.decode()
    return await asyncio.wait_for(more(), timeout)


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


@pytest.fixture
async def cluster(real_cluster, tmp_path):
    """One node with the kubelet API on a free port, a chatty pod and a web pod running on it;
    the CAs are the control plane's (its cluster.json, beside the admin kubeconfig)."""
    info = Path(real_cluster).parent / "cluster.json"
    if not info.exists():
        pytest.fail(f"no cluster.json beside {real_cluster}: the control plane writes one in its data directory")
    prefix = f"kl{os.getpid() % 10000}-{tmp_path.name[-6:]}-".lower().replace("_", "")
    nodes = [node(f"{prefix}node", {"pods": "110"})]
    idle = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}idle", "namespace": "default"},
            "spec": {"containers": [{"name": "main", "image": "python:3.12"}], "tolerations": TOLERATE_ALL}}
    pods = [chatty_pod(f"{prefix}chatty"), hello_pod(f"{prefix}hello"), idle]
    kubectl = Kubectl(kubectl_binary(), Path(real_cluster), tmp_path)
    kubectl.port, kubectl.info = free_port(), json.loads(info.read_text())
    async with NodeAgent(real_cluster, write_cluster(tmp_path / "cluster.yaml", nodes),
                         kubelet_port=kubectl.port, kubelet_tls=Tls.from_cluster_info(info)) as agent:
        for p in pods:
            await agent.client.create(KNOWN["Pod"], p, namespace="default")
        for p in pods:
            await pod_where(agent.client, p["metadata"]["name"], running_with_ip, "running")
        try:
            yield kubectl, prefix
        finally:
            for p in pods:
                await kubectl.run("delete", "pod", p["metadata"]["name"], "--wait=false")
            await kubectl.run("delete", "node", f"{prefix}node", "--wait=false")


async def two_lines_logged(kubectl: Kubectl, pod: str) -> str:
    async def logged():
        code, out, err = await kubectl.run("logs", pod)
        return out if code == 0 and "line 1\n" in out else None
    return await wait_for(logged, "kubectl logs showing line 1")


async def test_logs_show_the_containers_output(cluster):
    kubectl, prefix = cluster
    out = await two_lines_logged(kubectl, f"{prefix}chatty")
    assert out.startswith("line 0\nline 1\n")


async def test_logs_options_reach_the_kubelet(cluster):
    kubectl, prefix = cluster
    await two_lines_logged(kubectl, f"{prefix}chatty")
    code, out, err = await kubectl.run("logs", f"{prefix}chatty", "--tail=1", "--timestamps")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].split(" ", 1)[1].startswith("line "), out
    assert lines[0][:4].isdigit() and lines[0].split(" ")[0].endswith("Z"), out  # RFC 3339 time first
    code, out, err = await kubectl.run("logs", f"{prefix}chatty", "--limit-bytes=3")
    assert (code, out) == (0, "lin"), err


async def test_logs_follow_sees_a_new_line(cluster):
    kubectl, prefix = cluster
    proc = await kubectl.start("logs", "-f", "--tail=1", f"{prefix}chatty")
    try:
        first = await read_until(proc.stdout, "\n")
        n = int(first.split()[1])
        # a line the container prints after kubectl started following
        await read_until(proc.stdout, f"line {n + 2}\n")
    finally:
        await stop(proc)


async def test_exec_runs_the_command_in_the_container(cluster):
    kubectl, prefix = cluster
    code, out, err = await kubectl.run("exec", f"{prefix}chatty", "--", "echo", "hi")
    assert (code, out) == (0, "hi\n"), err


async def test_exec_reports_the_exit_code(cluster):
    kubectl, prefix = cluster
    code, out, err = await kubectl.run("exec", f"{prefix}chatty", "--", "sh", "-c", "echo oops >&2; exit 3")
    assert code == 3, (out, err)
    assert "oops" in err and "command terminated with exit code 3" in err


async def test_exec_with_stdin(cluster):
    kubectl, prefix = cluster
    code, out, err = await kubectl.run("exec", "-i", f"{prefix}chatty", "--", "tr", "a-z", "A-Z",
                                       stdin=b"through stdin\n")
    assert (code, out) == (0, "THROUGH STDIN\n"), err


async def test_exec_with_a_terminal(cluster):
    kubectl, prefix = cluster
    if not shutil.which("script"):
        pytest.fail("`script` (util-linux) is needed to give kubectl a terminal")
    line = " ".join(kubectl.argv("exec", "-it", f"{prefix}chatty", "--", "sh", "-c", "tty; stty size"))
    proc = await asyncio.create_subprocess_exec(
        "script", "-qec", f"stty cols 91 rows 17; {line}", "/dev/null", env=kubectl.env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    text = out.decode().replace("\r", "")
    assert proc.returncode == 0, (text, err)
    # a terminal of its own in the container, sized as kubectl's (the resize stream)
    assert "/dev/pts/" in text and "17 91" in text, text


@pytest.mark.parametrize("pod,container,says", [
    ("chatty", "nope", 'container nope is not valid for pod'),
    ("idle", "main", "there is nothing to exec into"),
], ids=["missing-container", "no-process"])
async def test_exec_that_cannot_run_is_refused_saying_why(cluster, pod, container, says):
    kubectl, prefix = cluster
    code, out, err = await kubectl.run("exec", f"{prefix}{pod}", "-c", container, "--", "true")
    assert code != 0 and says in err, (out, err)


async def test_attach_sees_the_output_and_sends_stdin(cluster):
    kubectl, prefix = cluster
    proc = await kubectl.start("attach", "-i", f"{prefix}chatty")
    try:
        await read_until(proc.stdout, "line ")
        proc.stdin.write(b"hello attach\n")
        await proc.stdin.drain()
        await read_until(proc.stdout, "got hello attach\n")
    finally:
        await stop(proc)


async def test_one_attach_ending_its_input_leaves_the_containers_stdin_open(cluster):
    kubectl, prefix = cluster  # the container has stdin: true, not stdinOnce
    first = await kubectl.start("attach", "-i", f"{prefix}chatty")
    try:
        first.stdin.write(b"one\n")
        await first.stdin.drain()
        await read_until(first.stdout, "got one\n")
        first.stdin.close()
        await asyncio.sleep(1)
    finally:
        await stop(first)
    second = await kubectl.start("attach", "-i", f"{prefix}chatty")
    try:
        await read_until(second.stdout, "line ")
        second.stdin.write(b"two\n")
        await second.stdin.drain()
        await read_until(second.stdout, "got two\n")
    finally:
        await stop(second)


async def test_port_forward_reaches_the_pods_server(cluster):
    kubectl, prefix = cluster
    local = free_port()
    proc = await kubectl.start("port-forward", f"pod/{prefix}hello", f"{local}:8080")
    try:
        await read_until(proc.stdout, "Forwarding from")
        for _ in range(2):  # one forward, several connections
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{local}/", timeout=aiohttp.ClientTimeout(total=10)) as r:
                    body = await r.text()
            assert body.startswith("hello from 127."), body
    finally:
        await stop(proc)


async def test_port_forward_to_a_closed_port_says_so(cluster):
    kubectl, prefix = cluster
    local = free_port()
    proc = await kubectl.start("port-forward", f"pod/{prefix}hello", f"{local}:9")
    try:
        await read_until(proc.stdout, "Forwarding from")
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{local}/", timeout=aiohttp.ClientTimeout(total=10)) as r:
                    pytest.fail(f"a closed port answered {r.status}")
        await read_until(proc.stderr, "failed to connect to port 9 in pod")
    finally:
        await stop(proc)


async def test_logs_previous_reads_the_last_instance(cluster):
    kubectl, prefix = cluster
    name = f"{prefix}restarts"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [{"name": "main", "image": "python:3.12", "command": [
               sys.executable, "-c", "import os, time; print('instance', os.getpid(), flush=True); time.sleep(1)"]}],
               "tolerations": TOLERATE_ALL, "terminationGracePeriodSeconds": 1}}
    code, _, err = await kubectl.run("create", "-f", "-", stdin=json.dumps(pod).encode())
    assert code == 0, err
    try:
        async def restarted():
            code, out, _ = await kubectl.run("get", "pod", name, "-o", "json")
            st = (json.loads(out).get("status") or {}).get("containerStatuses") or [{}] if code == 0 else [{}]
            return st[0].get("restartCount", 0) >= 1
        await wait_for(restarted, "a restart", 30)
        code, previous, err = await kubectl.run("logs", "--previous", name)
        assert code == 0 and previous.startswith("instance "), err
        # a container that never restarted has no previous instance: the kubelet's refusal
        code, out, err = await kubectl.run("logs", "--previous", f"{prefix}chatty")
        assert code != 0 and f'previous terminated container "main" in pod "{prefix}chatty" not found' in err, err
    finally:
        await kubectl.run("delete", "pod", name, "--wait=false")


async def kubelet_get(kubectl: Kubectl, path: str, client_cert: bool) -> tuple[int, str]:
    """GET ``path`` of the kubelet API, its serving certificate checked against the kubelet CA,
    with or without the API server's kubelet client certificate."""
    ctx = ssl.create_default_context(cafile=kubectl.info["kubelet_ca_file"])
    ctx.check_hostname = False
    if client_cert:
        ctx.load_cert_chain(kubectl.info["kubelet_client_cert_file"], kubectl.info["kubelet_client_key_file"])
    async with aiohttp.ClientSession() as s:
        async with s.get(f"https://127.0.0.1:{kubectl.port}{path}", ssl=ctx,
                         timeout=aiohttp.ClientTimeout(total=10)) as r:
            return r.status, await r.text()


@pytest.mark.parametrize("client_cert,status", [(False, 401), (True, 200)], ids=["anonymous", "apiserver-client"])
async def test_the_kubelet_api_answers_only_the_api_servers_client_certificate(cluster, client_cert, status):
    kubectl, prefix = cluster
    path = f"/containerLogs/default/{prefix}chatty/main?limitBytes=4"

    async def answered():  # the container's first line may not be printed yet
        got, body = await kubelet_get(kubectl, path, client_cert)
        return (got, body) if got != 200 or body else None
    got, body = await wait_for(answered, "an answer with a body")
    assert (got, body if status == 200 else "") == (status, "line" if status == 200 else ""), body


@pytest.mark.parametrize("path,status,words", [
    ("/containerLogs/default/{p}chatty/main?tailLines=-1", 400, "tailLines=-1: must be at least 0"),
    ("/containerLogs/default/{p}chatty/main?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", 400,
     "at most one of sinceTime or sinceSeconds"),
    ("/containerLogs/default/{p}nosuch/main", 404, "does not exist"),
    ("/containerLogs/default/{p}chatty/nope", 400, 'container "nope" in pod'),
], ids=["negative-tail", "two-since", "no-pod", "no-container"])
async def test_bad_log_requests_are_refused_with_what_is_wrong(cluster, path, status, words):
    kubectl, prefix = cluster
    got, body = await kubelet_get(kubectl, path.format(p=prefix), True)
    assert got == status and words in body, (got, body)


async def listening(port: int) -> bool:
    try:
        _, w = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    w.close()
    return True


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_the_kubelet_api_ends_with_the_agent(real_cluster, tmp_path, how):
    info = Path(real_cluster).parent / "cluster.json"
    port = free_port()
    name = f"kl-end-{how.name.lower()}-{os.getpid()}"
    cluster = write_cluster(tmp_path / "cluster.yaml", [node(name, {"pods": "110"})])
    out = tmp_path / "agent.out"
    with out.open("w") as f:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "testcluster.nodeagent", "--cluster", str(cluster), "--kubeconfig",
            str(real_cluster), "--cluster-info", str(info), "--kubelet-port", str(port),
            stdout=f, stderr=f, cwd=ROOT, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        await wait_for(lambda: asyncio.sleep(0, "nodeagent ready" in out.read_text()), "the agent's ready line", 60)
        assert await listening(port)
        proc.send_signal(how)
        await asyncio.wait_for(proc.wait(), 30)

        async def closed() -> bool:
            return not await listening(port)
        await wait_for(closed, "the kubelet API to end with the agent", 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        client = await Client(real_cluster).open()
        with contextlib.suppress(ApiError):  # a shared cluster: no later pod is bound to it
            await client.delete(KNOWN["Node"], name)
        await client.close()


# -- the agent's side, without a cluster ---------------------------------------------------

@pytest.mark.parametrize("req,want", [
    ({}, None),
    ({"sinceSeconds": 5}, 1_000_000_000_000 - 5_000_000_000),
    ({"sinceTime": "2001-09-09T01:46:40Z"}, 1_000_000_000 * 1_000_000_000),
    ({"sinceTime": "2001-09-09T01:46:40.5Z"}, 1_000_000_000 * 1_000_000_000 + 500_000_000),
], ids=["none", "seconds", "time", "fraction"])
def test_since_is_the_earliest_log_time_asked_for(req, want):
    from testcluster.nodeagent.kubeletsocket import since_ns
    assert since_ns(req, now_ns=1_000_000_000_000) == want


@pytest.mark.parametrize("payload,want", [
    (b'{"Width":80,"Height":24}', (80, 24)),
    (b"not json", None),
    (b"[1,2]", None),
], ids=["size", "garbage", "not-an-object"])
def test_resize_frames(payload, want):
    from testcluster.nodeagent.kubeletsocket import resize_sizes
    assert resize_sizes(payload) == want


def test_a_cluster_info_without_the_kubelet_ca_says_what_it_needs(tmp_path):
    from testcluster.nodeagent.kubeletapi import KubeletApiError
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"ca_file": "/x/ca.crt"}))
    with pytest.raises(KubeletApiError, match="kubelet_ca_file and kubelet_ca_key_file"):
        Tls.from_cluster_info(path)


async def test_exec_logs_and_port_forward_pass_through_the_fault_proxy(cluster, control_plane, tmp_path):
    """The fault proxy passes the upgrades of exec and port-forward, and streamed logs, on to the
    API server as the admin (request-header authentication), with no fault set."""
    kubectl, prefix = cluster
    async with FaultProxy(control_plane.data_dir) as fp:
        via = Kubectl(kubectl.binary, fp.kubeconfig, tmp_path)
        code, out, err = await via.run("exec", f"{prefix}chatty", "--", "echo", "hi")
        assert (code, out) == (0, "hi\n"), err
        await two_lines_logged(via, f"{prefix}chatty")
        local = free_port()
        proc = await via.start("port-forward", f"pod/{prefix}hello", f"{local}:8080")
        try:
            await read_until(proc.stdout, "Forwarding from")
            async with aiohttp.ClientSession() as s:
                async with s.get(f"http://127.0.0.1:{local}/", timeout=aiohttp.ClientTimeout(total=10)) as r:
                    assert (await r.text()).startswith("hello from 127.")
        finally:
            await stop(proc)
        assert fp.counts(resource="pods/exec") >= 1 and fp.counts(resource="pods/portforward") >= 1
