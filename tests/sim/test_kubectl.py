"""The real kubectl against the simulated API server (skipped only without kubectl, which
scripts/setup.sh installs; in CI a skip fails the run: tests/ci_skips.py)."""

import asyncio
import json
import os
import re
import shutil
import subprocess

import pytest

from gpuspawner.sim.apiserver import ApiServer
from gpuspawner.sim.store import Store

KUBECTL = shutil.which("kubectl") or ("/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.kubectl,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine: run scripts/setup.sh"),
]



def client_minor() -> int | None:
    """The kubectl client's minor version (Debian's kubernetes-client is 1.20, upstream's 1.3x)."""
    if KUBECTL is None:
        return None
    out = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True, text=True,
                         timeout=60).stdout
    m = re.match(r"\d+", json.loads(out)["clientVersion"].get("minor", "")) if out.strip() else None
    return int(m.group()) if m else None


# kubectl 1.27+ learns from /openapi/v3 that the server validates fields itself (cli-runtime
# query_param_verifier_v3.go); older clients validate on their side against /openapi/v2, which the
# simulated API server does not serve (docs/simulated-apiserver.md), so they create with
# --validate=false: the request the server gets, and its answer, are the same
CREATE_FLAGS = ["--validate=false"] if (client_minor() or 99) < 27 else []

NODE = {
    "metadata": {"name": "gpu-node-1", "labels": {"node-role.kubernetes.io/worker": "",
                                                  "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}],
        "nodeInfo": {"kubeletVersion": "v1.32.0"},
        "addresses": [{"type": "InternalIP", "address": "10.0.0.5"}],
        "capacity": {"nvidia.com/gpu": "8"},
        "allocatable": {"nvidia.com/gpu": "8"},
    },
}
POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: jupyter-alice
  namespace: hub
  labels: {app: jupyterhub}
spec:
  containers:
  - name: notebook
    image: jupyter/base-notebook:2024-01-01
"""


@pytest.fixture
async def cluster(tmp_path):
    store = Store()
    store.create("nodes", NODE)
    store.create("namespaces", {"metadata": {"name": "hub"}})
    store.create("pods", {"metadata": {"name": "jupyter-bob", "namespace": "hub"},
                          "spec": {"containers": [{"name": "notebook", "image": "jupyter/base-notebook:1"}]}})
    srv = ApiServer(store)
    await srv.start()
    yield srv
    await srv.stop()


def _env(tmp_path):
    env = dict(os.environ)
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig-unused")
    env["KUBECACHEDIR"] = str(tmp_path / "kubecache")
    return env


async def kubectl(srv, tmp_path, *args, timeout=60):
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--server", srv.url, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env=_env(tmp_path), cwd=tmp_path)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


async def test_get_nodes(cluster, tmp_path):
    rc, out, err = await kubectl(cluster, tmp_path, "get", "nodes")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row.split()[:3] == ["gpu-node-1", "Ready", "worker"] and row.split()[-1] == "v1.32.0"


async def test_get_pods_all_namespaces(cluster, tmp_path):
    rc, out, err = await kubectl(cluster, tmp_path, "get", "pods", "-A")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:5] == ["hub", "jupyter-bob", "0/1", "Pending", "0"]


async def test_get_events_and_selectors(cluster, tmp_path):
    cluster.store.create("events", {
        "metadata": {"name": "jupyter-bob.1", "namespace": "hub"},
        "involvedObject": {"kind": "Pod", "name": "jupyter-bob", "namespace": "hub"},
        "reason": "FailedScheduling", "type": "Warning", "message": "0/1 nodes are available",
        "source": {"component": "default-scheduler"}})
    rc, out, err = await kubectl(cluster, tmp_path, "get", "events", "-n", "hub",
                                 "--field-selector", "reason=FailedScheduling")
    assert rc == 0, err
    assert out.splitlines()[0].split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"]
    assert "pod/jupyter-bob" in out and "0/1 nodes are available" in out
    rc, out, err = await kubectl(cluster, tmp_path, "get", "pods", "-A", "-l", "app in (")
    assert rc != 0 and "unable to parse requirement" in err


async def test_create_and_delete(cluster, tmp_path):
    (tmp_path / "pod.yaml").write_text(POD_YAML)
    rc, out, err = await kubectl(cluster, tmp_path, "create", *CREATE_FLAGS, "-f", str(tmp_path / "pod.yaml"))
    assert rc == 0, err
    assert out.strip() == "pod/jupyter-alice created"
    assert cluster.store.get("pods", "jupyter-alice", "hub")["spec"]["schedulerName"] == "default-scheduler"
    rc, out, err = await kubectl(cluster, tmp_path, "create", *CREATE_FLAGS, "-f", str(tmp_path / "pod.yaml"))
    assert rc != 0 and 'pods "jupyter-alice" already exists' in err
    rc, out, err = await kubectl(cluster, tmp_path, "delete", "pod", "jupyter-alice", "-n", "hub")
    assert rc == 0, err
    # kubectl 1.37 names the namespace ("deleted from hub namespace"); older clients do not
    assert re.fullmatch(r'pod "jupyter-alice" deleted( from hub namespace)?', out.strip()), out
    assert cluster.store.list("pods", "hub", field_selector="metadata.name=jupyter-alice")["items"] == []
    rc, out, err = await kubectl(cluster, tmp_path, "delete", "pod", "ghost", "-n", "hub")
    assert rc != 0 and 'pods "ghost" not found' in err


async def test_get_pods_watch(cluster, tmp_path):
    proc = await asyncio.create_subprocess_exec(
        KUBECTL, "--server", cluster.url, "get", "pods", "-A", "--watch",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_env(tmp_path), cwd=tmp_path)
    try:
        lines = []
        for _ in range(2):  # header + the existing pod
            lines.append((await asyncio.wait_for(proc.stdout.readline(), 60)).decode())
        assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
        assert lines[1].split()[:2] == ["hub", "jupyter-bob"]
        # wait until kubectl's watch is open, then change the pod
        for _ in range(600):
            if cluster.open_watches:
                break
            await asyncio.sleep(0.05)
        assert cluster.open_watches == 1
        cluster.store.bind("jupyter-bob", "gpu-node-1", "hub")
        cluster.store.patch("pods", "jupyter-bob", {"status": {"phase": "Running"}},
                            "application/merge-patch+json", "hub", "status")
        seen = []
        while not any("Running" in line for line in seen):
            seen.append((await asyncio.wait_for(proc.stdout.readline(), 60)).decode())
        assert seen[-1].split()[:4] == ["hub", "jupyter-bob", "0/1", "Running"]
    finally:
        proc.kill()
        await proc.wait()
