"""End to end: ``gpuspawner cull`` against a real JupyterHub on Kubernetes' own control plane, the
node agent's DCGM exporters and a real Prometheus scraping them every second, with a 20 s idle timeout.

Servers (the demo's profiles):

* alice: GPU server, untouched          -> stopped; its GPU comes back to the pool
* bob:   GPU server, its kernel computes -> kept (GPU busy)
* carol: GPU server annotated ``gpuspawner.sim/gpu-activity=0.8`` (GPU work, no Jupyter activity) -> kept
* dave:  GPU server on the MIG node, whose exporter is switched off -> kept (no metrics)
* erin:  CPU server, untouched          -> left alone
* frank: started later, for the direct-scrape culler (no Prometheus) -> stopped

The hub's ``last_activity`` of a server is its start (nothing reaches these servers through the
proxy, and the singleuser server reports activity every 5 minutes), so Jupyter is idle for all.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import uuid

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from .cullenv import CullHub, PodDiscovery, Prometheus
from .harness import free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

TIMEOUT = 20  # seconds: the culler's idle timeout
CULL = ("--idle-timeout", f"{TIMEOUT}s", "--metrics-step", "2s")
MIG_NODE = "dgx-a100-01"
# about a third of a CPU, all the time: a kernel computing
BUSY = "import time\nwhile True:\n    t = time.time()\n    while time.time() - t < 0.03:\n        pass\n    time.sleep(0.06)\n"


def pool_of(hub: CullHub, resource: str) -> dict:
    return next(p for p in hub.gpus()["pools"] if p["resource"] == resource and p["nodes"])


def kubectl(hub: CullHub, *args: str) -> None:
    """The real kubectl as the cluster's admin (no kubeconfig of the machine, a private cache)."""
    env = dict(os.environ, KUBECACHEDIR=str(hub.dir / "kubecache"))
    done = subprocess.run(["kubectl", f"--kubeconfig={hub.kubeconfig}", *args], capture_output=True, text=True,
                          timeout=30, env=env)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"


async def _execute(hub: CullHub, user: str, code: str) -> None:
    """Start a kernel in the user's server and run ``code`` in it (it keeps running)."""
    import aiohttp

    headers = {"Authorization": f"token {hub.token}"}
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.post(f"{hub.url}/user/{user}/api/kernels", json={"name": "python3"}) as r:
            assert r.status == 201, await r.text()
            kernel = (await r.json())["id"]
        session = uuid.uuid4().hex
        msg = {"header": {"msg_id": uuid.uuid4().hex, "username": user, "session": session,
                          "msg_type": "execute_request", "version": "5.3", "date": ""},
               "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
               "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                           "allow_stdin": False, "stop_on_error": True}}
        async with s.ws_connect(f"{hub.url}/user/{user}/api/kernels/{kernel}/channels?session_id={session}") as ws:
            await ws.send_str(json.dumps(msg))
            async for frame in ws:  # until the kernel says it is busy with our request
                doc = json.loads(frame.data)
                if doc.get("msg_type") == "status" and doc["content"].get("execution_state") == "busy" \
                        and doc["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                    break


@pytest.fixture(scope="module")
def env():
    hub = CullHub().start()
    sd = prom = None
    try:
        sd = PodDiscovery(hub.kubeconfig, "gpu-operator", "app=nvidia-dcgm-exporter")
        prom = Prometheus(sd.url)
        prom.start()
        a100 = pool_of(hub, "nvidia.com/gpu")
        mig = pool_of(hub, "nvidia.com/mig-2g.20gb")
        hub.a100_free = a100["free"]
        for user, pool in (("alice", a100), ("bob", a100), ("carol", a100), ("dave", mig)):
            hub.spawn(user, {"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
        hub.spawn("erin", {"profile": "cpu"})
        asyncio.run(_execute(hub, "bob", BUSY))
        kubectl(hub, "annotate", "pod", "-n", "jupyterhub", hub.pod_of("carol")["metadata"]["name"],
                "gpuspawner.sim/gpu-activity=0.8")
        assert hub.pod_of("dave")["spec"]["nodeName"] == MIG_NODE
        kubectl(hub, "label", "node", MIG_NODE, "nvidia.com/gpu.deploy.dcgm-exporter=false", "--overwrite")
        hub.prometheus, hub.a100 = prom, a100
        hub.ready_at = time.monotonic()
        yield hub
    finally:
        if prom is not None:
            prom.stop()
        if sd is not None:
            sd.stop()
        hub.stop()


def running(hub: CullHub) -> set[str]:
    return {u["name"] for u in hub.api("GET", "/users", params={"state": "ready"}).json()}


def wait_window(hub: CullHub) -> None:
    """Until a whole idle window has passed since the servers started and were set up."""
    time.sleep(max(0.0, hub.ready_at + TIMEOUT + 4 - time.monotonic()))


def test_prometheus_has_the_exporters_series_with_exported_pod_labels(env):
    alice_pod = env.pod_of("alice")["metadata"]["name"]

    def series():
        return env.prometheus.query(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_pod="{alice_pod}"}}')
    found = wait_for(series, 30, "alice's GPU series in Prometheus")
    labels = found[0]["metric"]
    assert labels["exported_namespace"] == "jupyterhub" and labels["namespace"] == "gpu-operator"
    assert labels["pod"].startswith("nvidia-dcgm-exporter-") and labels["UUID"].startswith("GPU-")
    bob_pod = env.pod_of("bob")["metadata"]["name"]
    wait_for(lambda: env.prometheus.query(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{exported_pod="{bob_pod}"}} > 0.1'),
             30, "bob's busy kernel to show as GPU activity")


def test_dry_run_says_what_it_would_stop_and_stops_nothing(env):
    wait_window(env)
    before = running(env)
    done = env.culler("--once", "--dry-run", "--prometheus-url", env.prometheus.url, *CULL)
    assert done.returncode == 0, done.stderr
    assert "would cull alice/" in done.stderr, done.stderr
    assert running(env) == before >= {"alice", "bob", "carol", "dave", "erin"}


def test_once_stops_only_the_idle_gpu_server_and_its_gpu_comes_back(env):
    wait_window(env)
    free = env.pool(env.a100["id"])["free"]
    done = env.culler("--once", "--prometheus-url", env.prometheus.url, *CULL)
    assert done.returncode == 0, done.stderr
    log = done.stderr
    assert "cull alice/" in log and "[idle]" in log, log
    assert "keep bob/" in log and "[gpu_busy]" in log.split("keep bob/")[1].splitlines()[0], log
    assert "[gpu_busy]" in log.split("keep carol/")[1].splitlines()[0], log
    assert "[no_metrics]" in log.split("keep dave/")[1].splitlines()[0], log
    assert "erin/" not in log.replace("skip erin/", "")  # CPU servers are the hub's idle culler's
    env.wait_stopped("alice")
    assert running(env) >= {"bob", "carol", "dave", "erin"}
    wait_for(lambda: env.pool(env.a100["id"])["free"] == free + 1, 60, "alice's GPU to come back to the pool")


def test_unreachable_prometheus_keeps_every_server_and_the_pass_fails(env):
    before = running(env)
    done = env.culler("--once", "--prometheus-url", f"http://127.0.0.1:{free_port()}", *CULL)
    assert done.returncode == 1, done.stderr
    assert "GPU metrics unavailable" in done.stderr and "cull " not in done.stderr.replace("would cull", "")
    assert running(env) == before


def test_direct_scrape_mode_stops_an_idle_server_and_counts_it(env, tmp_path):
    env.spawn("frank", {"profile": "gpu", "gpu_pool": env.a100["id"], "gpus": 1})
    port = free_port()
    proc = env.culler_process("--idle-timeout", "15s", "--scrape-every", "1s", "--metrics-step", "3s",
                              "--cull-every", "2s", "--metrics-port", str(port), "--metrics-address", "127.0.0.1",
                              log=tmp_path / "culler.log")
    try:
        env.wait_stopped("frank", timeout=120)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        proc.terminate()
        proc.wait(30)
    log = (tmp_path / "culler.log").read_text()
    assert "cull frank/" in log, log
    assert {"bob", "carol", "dave", "erin"} <= running(env), log
    culled = {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
              for s in f.samples if s.name == "gpuspawner_culled_servers_total"}
    assert culled == {(("pool", env.a100["id"]), ("reason", "idle")): 1.0}, text
