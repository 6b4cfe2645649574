"""The real kubectl against the simulated kubelet: exec, attach, logs -f, describe pod."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import shutil
import struct
import sys
import termios

import pytest

from tests.builders.kubelet import container, kubectl_env, pod_manifest


@pytest.fixture
async def cluster():
    """A small simulated cluster whose kubelet runs real processes."""
    from gpuspawner.sim.cluster import SimCluster
    from tests.builders.kubelet import node_manifest

    c = SimCluster(manifests=[node_manifest("node-a")], restart_backoff=(0.2, 1.0))
    await c.start()
    try:
        yield c
    finally:
        await c.stop()

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine"),
]

TICKER = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.3; done"


async def kubectl(cluster, tmp_path, *args, stdin: bytes | None = None, timeout=60):
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--server", cluster.url, *args, stdin=asyncio.subprocess.PIPE if stdin is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=kubectl_env(tmp_path), cwd=tmp_path)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    return proc.returncode, out.decode(), err.decode()


async def _running(cluster, name, timeout=20):
    return await cluster.wait_for(
        lambda: (p := cluster.pod("default", name)) and all(
            "running" in s["state"] for s in p["status"].get("containerStatuses") or [{"state": {}}]) and p,
        timeout, what=f"{name} running")


@pytest.fixture
async def ticker(cluster):
    c = container("main", ["sh", "-c", TICKER], workingDir="/home/jovyan/work", env=[{"name": "GREETING", "value": "hello"}])
    cluster.store.create("pods", pod_manifest("ticker", c), namespace="default")
    await _running(cluster, "ticker")
    return cluster


async def test_exec_runs_in_the_containers_environment_and_reports_the_exit_code(ticker, tmp_path):
    rc, out, err = await kubectl(ticker, tmp_path, "exec", "ticker", "--", "sh", "-c",
                                 "echo $GREETING from $(hostname) in $(pwd); ps -o pid= -o args= | head -2")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "hello from ticker in /home/jovyan/work"
    assert lines[1].split()[0] == "1" and lines[2].split()[:2] == ["2", "sh"]  # the container's own PID namespace
    rc, out, err = await kubectl(ticker, tmp_path, "exec", "ticker", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (rc, out, err) == (3, "out\n", "err\ncommand terminated with exit code 3\n")


async def test_exec_with_stdin(ticker, tmp_path):
    rc, out, err = await kubectl(ticker, tmp_path, "exec", "-i", "ticker", "--", "sh", "-c", "tr a-z A-Z; echo done",
                                 stdin=b"piped in\n")
    assert (rc, out) == (0, "PIPED IN\ndone\n"), err


async def test_exec_with_a_terminal(ticker, tmp_path):
    """``kubectl exec -it`` from a terminal: the command gets a tty of that terminal's size."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--server", ticker.url, "exec", "-it", "ticker", "--", "sh", "-c", "tty; stty size; exit 4",
        stdin=slave, stdout=slave, stderr=slave, env=kubectl_env(tmp_path), start_new_session=True)
    os.close(slave)
    out = b""
    loop = asyncio.get_running_loop()
    while proc.returncode is None or b"33 111" not in out:
        try:
            out += await asyncio.wait_for(loop.run_in_executor(None, os.read, master, 4096), 30)
        except OSError:
            break
        if b"33 111" in out:
            break
    rc = await asyncio.wait_for(proc.wait(), 30)
    os.close(master)
    assert b"/dev/pts/" in out and b"33 111" in out, out
    assert rc == 4


async def test_exec_errors_are_worded_as_the_real_ones(ticker, tmp_path):
    rc, _, err = await kubectl(ticker, tmp_path, "exec", "ticker", "--", "no-such-tool")
    assert rc == 1
    assert err.strip() == ('error: Internal error occurred: Internal error occurred: error executing command in '
                           'container: failed to exec in container: failed to start exec "' + err.split('"')[1] +
                           '": OCI runtime exec failed: exec failed: unable to start container process: exec: '
                           '"no-such-tool": executable file not found in $PATH: unknown')
    rc, _, err = await kubectl(ticker, tmp_path, "exec", "ticker", "-c", "nope", "--", "true")
    assert rc == 1 and "container nope is not valid for pod ticker" in err


async def test_attach_sends_stdin_to_the_container_and_shows_its_output(cluster, tmp_path):
    c = container("main", ["sh", "-c", 'echo ready; while read l; do echo "got $l"; done; echo bye'],
                  stdin=True, stdinOnce=True)
    cluster.store.create("pods", pod_manifest("talk", c, restartPolicy="Never"), namespace="default")
    await _running(cluster, "talk")
    await cluster.wait_for(lambda: cluster.logs("default", "talk") == "ready\n", 10, what="ready")
    rc, out, err = await kubectl(cluster, tmp_path, "attach", "-i", "talk", stdin=b"one\ntwo\n")
    assert (rc, out) == (0, "got one\ngot two\nbye\n"), err
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "talk")) and x["status"]["phase"] == "Succeeded"
                               and x, 10, what="Succeeded after stdinOnce closed stdin")
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


async def test_logs_follow_shows_lines_as_they_come(ticker, tmp_path):
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--server", ticker.url, "logs", "-f", "--tail=1", "ticker", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=kubectl_env(tmp_path))
    try:
        first = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().split()
        later = [(await asyncio.wait_for(proc.stdout.readline(), 5)).decode().split() for _ in range(3)]
        assert first[0] == "tick"
        assert [int(x[1]) for x in later] == [int(first[1]) + 1, int(first[1]) + 2, int(first[1]) + 3]
        assert proc.returncode is None  # still following
    finally:
        proc.kill()
        await proc.wait()


async def test_logs_follow_ends_when_the_container_does(cluster, tmp_path):
    script = "echo one; sleep 1; echo two; sleep 0.5; exit 0"
    cluster.store.create("pods", pod_manifest("short", container(command=["sh", "-c", script]), restartPolicy="Never"),
                         namespace="default")
    await _running(cluster, "short")
    rc, out, err = await kubectl(cluster, tmp_path, "logs", "-f", "short", "--timestamps", timeout=30)
    assert rc == 0, err
    stamps = [line.split(" ", 1) for line in out.splitlines()]
    assert [text for _, text in stamps] == ["one", "two"]
    assert all(s.endswith("Z") and "T" in s for s, _ in stamps)


async def test_logs_of_the_previous_instance_and_the_errors(cluster, tmp_path):
    c = container("main", ["sh", "-c", "echo run; sleep 0.3; exit 1"])
    cluster.store.create("pods", pod_manifest("again", c), namespace="default")
    await cluster.wait_for(lambda: (p := cluster.pod("default", "again")) and
                           (p["status"].get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 1, 20,
                           what="a restart")
    rc, out, err = await kubectl(cluster, tmp_path, "logs", "-p", "again")
    assert (rc, out) == (0, "run\n"), err
    rc, out, err = await kubectl(cluster, tmp_path, "logs", "again", "-c", "other")
    assert rc == 1 and err.strip() == "error: container other is not valid for pod again out of: main"  # kubectl 1.37


async def test_describe_pod_shows_probe_events(cluster, tmp_path):
    probe = {"exec": {"command": ["sh", "-c", "echo not ready; exit 1"]}, "periodSeconds": 1}
    cluster.store.create("pods", pod_manifest("probed", container(command=["sleep", "60"], readinessProbe=probe)),
                         namespace="default")
    await cluster.wait_for(lambda: any(e["reason"] == "Unhealthy" for e in
                                       cluster.store.list("events", namespace="default")["items"]), 15, what="event")
    rc, out, err = await kubectl(cluster, tmp_path, "describe", "pod", "probed")
    assert rc == 0, err
    assert ("Readiness:      exec [sh -c echo not ready; exit 1] delay=0s timeout=1s period=1s successThreshold=1 "
            "failureThreshold=3") in out  # kubectl 1.37's words
    row = next(line for line in out.splitlines() if "Unhealthy" in line)
    assert row.split()[0] == "Warning" and row.split()[1] == "Unhealthy" and "kubelet" in row
    assert row.endswith("Readiness probe failed: not ready")
    assert any(line.split()[:2] == ["Ready", "False"] for line in out.splitlines())


async def test_kubernetes_asyncio_stream(ticker):
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.stream import WsApiClient

    conf = Configuration(host=ticker.url)
    async with WsApiClient(configuration=conf) as api_client:
        v1 = client.CoreV1Api(api_client=api_client)
        out = await v1.connect_get_namespaced_pod_exec("ticker", "default", command=["sh", "-c", "echo $GREETING"],
                                                        stderr=True, stdin=False, stdout=True, tty=False)
        assert out == "hello\n"
        resp = await v1.connect_get_namespaced_pod_exec("ticker", "default", command=["sh", "-c", "exit 7"],
                                                         stderr=True, stdin=False, stdout=True, tty=False,
                                                         _preload_content=False)
        errors = []
        async with resp as ws:
            async for msg in ws:
                if msg.data[:1] == b"\x03":
                    errors.append(msg.data[1:])
        assert WsApiClient.parse_error_data(errors[0]) == 7
        assert errors[0] == (b'{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit '
                             b'code: error executing command [sh -c exit 7], exit code 7","reason":"NonZeroExitCode",'
                             b'"details":{"causes":[{"reason":"ExitCode","message":"7"}]}}')
