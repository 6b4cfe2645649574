"""The CUDA driver check on the test cluster.

Kubernetes' own control plane (API server over HTTPS on loopback, scheduler,
controllers) and the node agent's nodes, which run pods as processes;
GPUSpawner reaches it through the admin kubeconfig and ``k8s_api_host``, as it
reaches any cluster. Three paths:

* a pool mid driver upgrade: the pod is steered (by the failing driver's label)
  to the node whose driver fits;
* a pool whose every node is too old: the hub refuses the spawn (400) with
  the reason and the fix, and no pod is created;
* the opt-in probe: its init container really runs ``gpuspawner probe`` here,
  with NVML as a node without the NVIDIA container runtime shows it (a fake
  ``pynvml`` on the probe's ``PYTHONPATH``, whatever driver this machine has),
  and the user sees that through the hub's REST API instead of waiting out the
  start timeout.

Not marked ``hub``: no configurable-http-proxy is needed (a MockHub serves
the REST API; the spawns that reach the proxy are driven on the spawner).
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import textwrap

import pytest
import yaml
from jupyterhub.objects import Hub, Server
from jupyterhub.tests.mocking import MockHub
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.config import kube_config
from kubespawner import KubeSpawner
from kubespawner import clients as kube_clients
from tornado.httpclient import AsyncHTTPClient, HTTPClientError
from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from traitlets.config import Config

from gpuspawner.capacity.cache import CapacityCache
from gpuspawner.capacity.model import pool_id
from gpuspawner.hub.spawner import GPUSpawner
from testcluster.stack import TestCluster

from .harness import admin_session

pytestmark = [pytest.mark.integration]

NAMESPACE = "default"
PRODUCT = "NVIDIA-A100-SXM4-80GB"
MIXED = pool_id("mixed", PRODUCT, "nvidia.com/gpu")
LEGACY = pool_id("legacy", PRODUCT, "nvidia.com/gpu")
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
WAIT = 60  # generous: a loaded 2-core CI machine


def gpu_node(name: str, group: str, driver: str, cuda: str, *, deprecated_only: bool = False) -> dict:
    """A node with GPU Feature Discovery's labels (k8s-device-plugin ``internal/lm``); with
    ``deprecated_only`` only the pre-v0.15 ``cuda.driver.*``/``cuda.runtime.*``."""
    major, minor, rev = driver.split(".")
    cmaj, cmin = cuda.split(".")
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "gke-group": group,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": PRODUCT,
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime.major": cmaj,
        "nvidia.com/cuda.runtime.minor": cmin,
    }
    if not deprecated_only:
        labels["nvidia.com/cuda.driver-version.full"] = driver
        labels["nvidia.com/cuda.runtime-version.full"] = cuda
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "2"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status"}],
        },
    }


CLUSTER = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        # mid driver upgrade: only the new driver supports CUDA 12.4 (minor-version
        # compatibility needs 525.60.13+ for 12.x, so 470 fails under any policy)
        gpu_node("mixed-new", "mixed", "550.54.15", "12.4", deprecated_only=True),
        gpu_node("mixed-old", "mixed", "470.82.01", "11.4"),
        gpu_node("legacy-1", "legacy", "470.82.01", "11.4"),
    ],
}


def hub_config(url: str, **traits) -> Config:
    c = Config()
    c.GPUSpawner.k8s_api_host = url
    c.GPUSpawner.namespace = NAMESPACE
    c.GPUSpawner.gpu_node_group_labels = ["gke-group"]
    c.GPUSpawner.gpu_profiles = [{
        "slug": "gpu",
        "display_name": "PyTorch 24.05",
        "cuda": {"cuda": "12.4", "require": "cuda>=12.4"},
        "kubespawner_override": {"image": IMAGE},
    }]
    c.GPUSpawner.cmd = ["jupyterhub-singleuser"]
    c.GPUSpawner.start_timeout = 120
    c.GPUSpawner.delete_grace_period = 1
    for k, v in traits.items():
        c.GPUSpawner[k] = v
    return c


@pytest.fixture
async def cluster(tmp_path, monkeypatch):
    """The test cluster with ``CLUSTER``'s nodes, reached through its admin kubeconfig; every global
    the Kubernetes client and KubeSpawner keep is reset afterwards."""
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(CLUSTER))
    cluster = TestCluster(tmp_path / "testcluster", path)
    try:
        await cluster.start()
        await cluster.agent_ready()
    except BaseException:
        await cluster.stop()
        raise
    kubeconfig = str(cluster.kubeconfig)
    monkeypatch.setenv("KUBECONFIG", kubeconfig)
    # kubernetes_asyncio reads $KUBECONFIG once, at import
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", kubeconfig)
    saved = Configuration._default
    kube_clients.load_config.cache_clear()
    try:
        yield cluster
    finally:
        await KubeSpawner._stop_all_reflectors()
        await CapacityCache.reset_shared()
        for task in list(kube_clients._client_cache):
            kube_clients._client_cache.pop(task, None)
        kube_clients.load_config.cache_clear()
        Configuration.set_default(saved)
        await cluster.stop()


async def user_pods(cluster: TestCluster) -> list[dict]:
    """The pods of the hub's namespace, as the cluster's admin reads them."""
    def read() -> list[dict]:
        with admin_session(cluster.control_plane) as s:
            r = s.get(f"{cluster.server}/api/v1/namespaces/{NAMESPACE}/pods", timeout=30)
            r.raise_for_status()
            return r.json()["items"]

    return await asyncio.to_thread(read)


async def until_no_user_pods(cluster: TestCluster, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while pods := await user_pods(cluster):
        assert asyncio.get_running_loop().time() < deadline, f"pods still there after {timeout}s: {pods}"
        await asyncio.sleep(0.5)


class User:
    name, id, url, escaped_name = "ada", 1, "/user/ada/", "ada"


async def test_pool_mid_upgrade_steers_the_pod_to_the_fitting_node(cluster):
    c = hub_config(cluster.server)
    # no hub for jupyterhub-singleuser to talk to: the pod serves HTTP on its port, and that is all
    c.GPUSpawner.cmd = ["sh", "-c", "exec python -m http.server --bind 0.0.0.0 8888"]
    c.GPUSpawner.args = []
    spawner = GPUSpawner(config=c, user=User(), hub=Hub())
    spawner.server = Server(ip="0.0.0.0", port=8888, base_url="/user/ada/")
    spawner.user_options = {"profile": "gpu", "gpu_pool": MIXED, "gpus": 2}
    # both nodes have 2 free GPUs; only mixed-new's driver runs CUDA 12.4
    form = await spawner.get_options_form()
    assert "1 of 2 nodes of this pool do not fit (driver 470.82.01)" in form
    try:
        url = await asyncio.wait_for(spawner.start(), WAIT)
        assert url.startswith("http://127.")
        (pod,) = await user_pods(cluster)
        assert pod["spec"]["nodeName"] == "mixed-new"
        terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        # steered by the failing driver's GFD label, not by node names
        assert {"key": "nvidia.com/cuda.driver-version.full", "operator": "NotIn", "values": ["470.82.01"]} in (
            terms["nodeSelectorTerms"][0]["matchExpressions"])
    finally:
        await spawner.stop(now=True)


# a fake pynvml whose nvmlInit fails as on a node without the NVIDIA container runtime
NO_DRIVER_NVML = str(pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "nvml" / "no-driver-module")


def probe_sees_no_driver(spawner, pod):
    """``modify_pod_hook``: the probe init container imports the fake ``pynvml``, so the test does not
    depend on whether this machine has an NVIDIA driver (a real one would be found otherwise)."""
    from kubernetes_asyncio.client import V1EnvVar

    for c in pod.spec.init_containers or []:
        if c.command == ["gpuspawner"] and (c.args or [])[:1] == ["probe"]:  # the probe's init container
            c.env = [*(c.env or []), V1EnvVar(name="PYTHONPATH", value=NO_DRIVER_NVML)]
    return pod


@pytest.fixture
async def hub(cluster, configured_mockhub_instance):
    """A MockHub (pytest-jupyterhub's; not started: no proxy) with GPUSpawner on the test cluster;
    yields (the cluster, base URL of the hub API, a user's token)."""
    c = hub_config(cluster.server, cuda_probe=True, modify_pod_hook=probe_sees_no_driver)
    c.JupyterHub.spawner_class = GPUSpawner
    app = configured_mockhub_instance(c)
    await app.initialize([])
    token = app.users["user"].new_api_token()
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app.tornado_application)
    server.add_sockets(sockets)
    try:
        yield cluster, f"http://127.0.0.1:{sockets[0].getsockname()[1]}{app.hub_prefix}api/", token
    finally:
        server.stop()
        spawner = app.users["user"].spawners.get("")
        if spawner is not None and (spawner._spawn_pending or spawner.active):
            await asyncio.wait_for(spawner.stop(now=True), WAIT)
        app.db.close()
        MockHub.clear_instance()


async def api(method: str, url: str, token: str, body: dict | None = None) -> tuple[int, dict]:
    try:
        r = await AsyncHTTPClient().fetch(
            url, method=method, body=json.dumps(body) if body is not None else None,
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
            request_timeout=WAIT, allow_nonstandard_methods=True,
        )
    except HTTPClientError as e:
        return e.code, json.loads(e.response.body) if e.response and e.response.body else {}
    return r.code, json.loads(r.body) if r.body else {}


async def test_pool_with_no_fitting_node_is_refused_before_any_pod(hub):
    cluster, base, token = hub
    code, reply = await api("POST", f"{base}users/user/server", token,
                            {"profile": "gpu", "gpu_pool": LEGACY, "gpus": 1})
    assert code == 400
    message = reply["message"]
    for part in (f"The image {IMAGE} (CUDA 12.4) does not fit any node of GPU pool",
                 "driver 470.82.01, CUDA up to 11.4",
                 "ask the admin to install driver 550.54.14 or newer",
                 "GPU pools whose drivers fit this image: NVIDIA "):
        assert part in message, (part, message)
    assert MIXED not in message and "rule:" not in message  # display names, no pool id or rule name
    assert await user_pods(cluster) == []


async def probe_outcome(base: str, token: str) -> str:
    """What the user is told once the spawn has failed: the spawn's own
    error, or the progress stream's final 'Spawn failed' event."""
    code, reply = await api("POST", f"{base}users/user/server", token, {"profile": "gpu", "gpu_pool": MIXED})
    if code >= 400:
        return reply["message"]
    assert code == 202, (code, reply)
    deadline = asyncio.get_running_loop().time() + WAIT
    while True:
        code, model = await api("GET", f"{base}users/user", token)
        if model.get("pending") is None and not model.get("servers"):
            break
        assert asyncio.get_running_loop().time() < deadline, f"the spawn did not fail in {WAIT}s: {model}"
        await asyncio.sleep(0.5)
    r = await AsyncHTTPClient().fetch(f"{base}users/user/server/progress",
                                      headers={"Authorization": f"token {token}"}, request_timeout=WAIT)
    events = [json.loads(line[len("data:"):]) for line in r.body.decode().splitlines() if line.startswith("data:")]
    assert events[-1]["failed"] is True
    return events[-1]["message"]


async def test_probe_failure_reaches_the_user_through_the_hub(hub):
    cluster, base, token = hub
    message = await asyncio.wait_for(probe_outcome(base, token), WAIT * 2)
    # the probe's NVML finds no driver (NO_DRIVER_NVML): what a node without the
    # device plugin / container runtime set up looks like from inside the pod
    expected = textwrap.dedent("""\
        The GPU check on node mixed-new failed before your server started: no NVIDIA driver is visible in the
        container: is the NVIDIA device plugin / container runtime set up on node mixed-new?""").replace("\n", " ")
    assert expected in message, message
    # the failed server's pod is deleted by the hub's cleanup (KubeSpawner.stop)
    await until_no_user_pods(cluster, WAIT)
