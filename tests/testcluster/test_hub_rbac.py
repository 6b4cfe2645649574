"""A real hub (JupyterHub, GPUSpawner, its culler) on the real control plane as the service account
that deploy/rbac.yaml binds, with no other right: the capacity cache loads, a GPU server on a node
agent's node starts and stops, the pre-pull DaemonSet is made, the culler reads its pods, and the
GPU-hours are recorded (docs/test-cluster.md, "The hub under deploy/rbac.yaml")."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from gpuspawner import config_snippet
from testcluster.launcher import free_port
from tests.builders import GFD_A100_40GB, node
from tests.builders.nodeagent import write_cluster
from tests.e2e.harness import wait_for

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "deploy" / "rbac.yaml"
NS, SA = "jhub", "hub"  # the namespace and service account deploy/rbac.yaml names
NODE = "rbac-a100-0"
PRODUCT = GFD_A100_40GB["nvidia.com/gpu.product"]
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def hub_kubeconfig(control_plane, local_kubectl, tmp_path_factory) -> Path:
    """A kubeconfig holding a token of ``jhub/hub`` (TokenRequest), after ``kubectl apply -f deploy/rbac.yaml``."""
    for args in (("create", "namespace", NS), ("create", "serviceaccount", SA, "-n", NS)):
        r = local_kubectl(*args, check=False)
        assert r.returncode == 0 or "already exists" in r.stderr.lower(), r.stderr
    local_kubectl("apply", "-f", str(RBAC))
    token = local_kubectl("create", "token", SA, "-n", NS, "--duration", "2h").stdout.strip()
    admin = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    path = tmp_path_factory.mktemp("hub-sa") / "hub.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster}],
        "users": [{"name": f"{NS}:{SA}", "user": {"token": token}}],
        "contexts": [{"name": "hub", "context": {"cluster": "test", "user": f"{NS}:{SA}", "namespace": NS}}],
        "current-context": "hub",
    }))
    return path


@pytest.fixture(scope="module")
def node_agent(control_plane, local_kubectl, tmp_path_factory):
    """One A100 node with 4 GPUs (device plugin, GFD labels, the GPU taint) and its DCGM exporter."""
    d = tmp_path_factory.mktemp("rbac-nodes")
    a100 = node(NODE, {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "4"}, dict(GFD_A100_40GB),
                taints=[GPU_TAINT], capacity={"nvidia.com/gpu": "4"})
    cluster = write_cluster(d / "cluster.yaml", [a100])
    log = open(d / "nodeagent.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "testcluster.nodeagent", "--cluster", str(cluster),
                             "--kubeconfig", str(control_plane.kubeconfig), "--kubelet-port", str(free_port()),
                             "--dcgm-exporter"],
                            stdout=subprocess.PIPE, stderr=log, cwd=REPO, text=True,
                            env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    try:
        line = proc.stdout.readline()
        assert line.startswith("nodeagent ready"), (line, (d / "nodeagent.log").read_text()[-3000:])
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        # the session's control plane is shared: its node goes with it (else it turns NotReady there)
        local_kubectl("delete", "node", NODE, "--wait=false", check=False)


HUB_CONFIG = """
c = get_config()  # noqa: F821
load_subconfig({snippet!r})  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{proxy_api_port}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.db_url = "sqlite:///{workdir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{workdir}/jupyterhub_cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allow_all = True
c.JupyterHub.services = [{{"name": "admin", "api_token": {token!r}}}]
c.JupyterHub.load_roles.append({{"name": "admin", "services": ["admin"]}})
c.JupyterHub.load_roles.append({{"name": "gpu-capacity-reader", "scopes": ["custom:gpus:read"],
                                 "services": ["admin"]}})
c.GPUSpawner.namespace = {ns!r}
c.GPUSpawner.image = "quay.io/jupyter/base-notebook:2025-01-06"
c.GPUSpawner.cmd = ["jupyterhub-singleuser"]
c.GPUSpawner.args = ["--allow-root"]  # the node agent runs servers as this user, which may be root
c.GPUSpawner.start_timeout = 120
c.GPUSpawner.http_timeout = 90
c.GPUSpawner.delete_grace_period = 1
c.GPUSpawner.gpu_profiles = [{{"slug": "gpu", "display_name": "GPU server", "max_gpus": 2,
                                "kubespawner_override": {{"image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"}}}}]
c.GPUSpawner.gpu_prepull = True
c.GPUSpawner.gpu_prepull_interval = 5
"""


class Hub:
    def __init__(self, url: str, token: str, log: Path):
        self.url, self.token, self.log = url, token, log

    def api(self, method: str, path: str, **kw) -> requests.Response:
        return requests.request(method, f"{self.url}/hub/api{path}",
                                headers={"Authorization": f"token {self.token}"}, timeout=60, **kw)

    def server(self, user: str) -> dict | None:
        r = self.api("GET", f"/users/{user}")
        return r.json().get("servers", {}).get("") if r.status_code == 200 else None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def assert_never_forbidden(self) -> None:
        """No API call of the hub was refused for want of a right (HTTP 403, ``forbidden``)."""
        refused = [line for line in self.log.read_text(errors="replace").splitlines()
                   if "forbidden" in line.lower() or " 403" in line]
        assert not refused, "\n".join(refused[:20])


@pytest.fixture(scope="module")
def hub(hub_kubeconfig, node_agent, local_kubectl, tmp_path_factory):
    proxy = REPO / "node_modules" / ".bin" / "configurable-http-proxy"
    assert proxy.exists(), "configurable-http-proxy: run scripts/setup.sh"
    d = tmp_path_factory.mktemp("rbac-hub")
    port, token = free_port(), secrets.token_hex(16)
    (d / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
        snippet=str(config_snippet()), port=port, hub_port=free_port(), proxy_api_port=free_port(),
        proxy=str(proxy), workdir=d, token=token, ns=NS))
    log = d / "hub.log"
    env = {**os.environ, "KUBECONFIG": str(hub_kubeconfig), "CONFIGPROXY_AUTH_TOKEN": secrets.token_hex(16),
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(d / "jupyterhub_config.py")],
                                cwd=d, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    h = Hub(f"http://127.0.0.1:{port}", token, log)

    def ready() -> bool:
        try:
            r = h.api("GET", "/gpus")
        except requests.ConnectionError:
            return False
        return r.status_code == 200 and r.json().get("synced")

    try:
        deadline = time.monotonic() + 120
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"the hub exited with {proc.returncode}:\n{h.tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"the hub did not answer with synced GPU capacity in 120 s:\n{h.tail()}")
            time.sleep(0.25)
        yield h
    finally:
        proc.terminate()
        try:
            proc.wait(40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
        local_kubectl("delete", "pods", "--all", "-n", NS, "--grace-period=0", "--wait=false", check=False)
        local_kubectl("delete", "daemonsets", "--all", "-n", NS, "--wait=false", check=False)


def can_i(kubeconfig: Path, *args: str) -> bool:
    r = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "auth", "can-i", *args],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip() == "yes"


def test_the_hub_service_account_has_only_what_rbac_yaml_grants(hub_kubeconfig):
    # what gpuspawner needs
    assert can_i(hub_kubeconfig, "watch", "nodes")
    assert can_i(hub_kubeconfig, "list", "pods", "--all-namespaces")
    assert can_i(hub_kubeconfig, "create", "pods", "-n", NS)
    assert can_i(hub_kubeconfig, "create", "daemonsets.apps", "-n", NS)
    # and not an admin: nothing outside its namespace is written, nodes are not changed
    assert not can_i(hub_kubeconfig, "create", "pods", "-n", "default")
    assert not can_i(hub_kubeconfig, "patch", "nodes")
    assert not can_i(hub_kubeconfig, "*", "*")


def a100_pool(hub: Hub) -> dict:
    pools = [p for p in hub.api("GET", "/gpus").json()["pools"] if p["product"] == PRODUCT]
    assert len(pools) == 1, (pools, hub.tail())
    return pools[0]


def test_capacity_loads_and_a_gpu_server_starts_and_stops(hub, hub_kubeconfig, local_kubectl):
    pool = a100_pool(hub)
    assert (pool["total"], pool["free"]) == (4, 4), pool

    assert hub.api("POST", "/users/ana").status_code in (201, 409)
    r = hub.api("POST", "/users/ana/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 2})
    assert r.status_code in (201, 202), (r.text, hub.tail())
    wait_for(lambda: (hub.server("ana") or {}).get("ready"), 150, "ana's GPU server to be ready")
    pod = json.loads(local_kubectl("get", "pods", "-n", NS, "-l", "hub.jupyter.org/username=ana",
                                   "-o", "json").stdout)["items"][0]
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    wait_for(lambda: a100_pool(hub)["free"] == 2, 30, "the pool to count 2 in use")

    # the culler's pass: it lists the server pods and the DCGM exporters as this service account
    env = {**os.environ, "JUPYTERHUB_API_URL": f"{hub.url}/hub/api", "JUPYTERHUB_API_TOKEN": hub.token}
    cull = subprocess.run([sys.executable, "-m", "gpuspawner", "cull", "--once", "--namespace", NS,
                           "--kubeconfig", str(hub_kubeconfig),
                           "--idle-timeout", "1h"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert cull.returncode == 0, (cull.stdout, cull.stderr)
    assert "ana" in cull.stdout + cull.stderr

    r = hub.api("DELETE", "/users/ana/server")
    assert r.status_code in (202, 204), r.text
    wait_for(lambda: not hub.server("ana"), 90, "ana's server to stop")
    wait_for(lambda: not json.loads(local_kubectl("get", "pods", "-n", NS, "-l", "hub.jupyter.org/username=ana",
                                                  "-o", "json").stdout)["items"], 60, "ana's pod to go")
    # GPU-hours: the stopped server's GPUs are on ana's account
    usage = hub.api("GET", "/users/ana/gpu-usage")
    assert usage.status_code == 200, usage.text
    assert usage.json()["gpu_hours"] > 0, usage.json()
    hub.assert_never_forbidden()


def test_the_prepull_daemonset_is_made_for_the_pool(hub, local_kubectl):
    def made() -> dict | None:
        items = json.loads(local_kubectl("get", "daemonsets", "-n", NS, "-l",
                                         "app.kubernetes.io/component=gpu-image-puller", "-o", "json").stdout)["items"]
        return items[0] if items and (items[0].get("status") or {}).get("desiredNumberScheduled") == 1 else None

    try:
        ds = wait_for(made, 60, "the pre-pull DaemonSet, scheduled on the GPU node")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{local_kubectl('get', 'daemonsets', '-n', NS, '-o', 'yaml').stdout}\n"
                             f"{hub.tail()}") from None
    assert ds["metadata"]["annotations"], ds["metadata"]
    hub.assert_never_forbidden()
