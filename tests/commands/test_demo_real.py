"""``gpuspawner sim`` and ``gpuspawner demo`` on Kubernetes' own control plane (the test cluster):
the cluster file is applied to the real API server, ``--kubeconfig PATH`` gets the admin kubeconfig as
soon as the API server is ready, the hub spawns through it, a big cluster (5,000 nodes, one node
claiming 400,000 GPUs) loads while the hub answers, and nothing outlives the command: not after
Ctrl-C, not after ``kill -9`` of its own process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from testcluster.guard import descendants
from tests.builders.kubelet import kubectl_env, node_manifest
from tests.builders.nodeagent import write_cluster
from tests.e2e.harness import DemoCommand, DemoHub, free_port, wait_for

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CLUSTER = REPO / "gpuspawner" / "data" / "clusters" / "default.yaml"
BIG = 5000
HUGE_GPUS = 400_000


def kubectl(kubeconfig: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["kubectl", f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True,
                          timeout=60, env=kubectl_env(tmp_path))


def alive(pids: list[int]) -> list[str]:
    """The command lines of ``pids`` still running (zombies excluded)."""
    out = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{pid}: {cmdline[:200]}")
        except OSError:
            continue
    return out


def wait_all_gone(pids: list[int], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := alive(pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def control_plane_data_dir(pids: list[int]) -> Path:
    """The ``--data-dir`` of the control plane among ``pids``."""
    for line in alive(pids):
        for arg in line.split():
            if arg.startswith("--data-dir="):
                return Path(arg.split("=", 1)[1])
    raise AssertionError("no control plane among the command's processes")


def wait_removed(path: Path, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not path.exists()


def read_until(proc: subprocess.Popen, prefix: str, timeout: float, seen: list[str]) -> str:
    """The first line of the command's output starting with ``prefix`` (every line kept in ``seen``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the command exited ({proc.wait()}) before {prefix!r}:\n{''.join(seen)}")
        seen.append(line)
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no {prefix!r} line within {timeout:.0f}s:\n{''.join(seen)}")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_sim_applies_the_cluster_file_to_the_real_api_server_and_nothing_outlives_it(tmp_path, stop):
    port, kubeconfig = free_port(), tmp_path / "admin.kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "gpuspawner", "sim", "--cluster", str(DEFAULT_CLUSTER),
                             "--port", str(port), "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen: list[str] = []
    try:
        line = read_until(proc, "Kubernetes API server: ", 120, seen)
        assert line.split()[3] == f"https://127.0.0.1:{port}"
        assert kubeconfig.is_file(), "the kubeconfig is written once the API server is ready, before the nodes"
        read_until(proc, "nodeagent ready: 10 nodes", 120, seen)
        r = kubectl(kubeconfig, tmp_path, "get", "nodes", "-o", "json")
        assert r.returncode == 0, r.stderr
        nodes = {n["metadata"]["name"]: n for n in json.loads(r.stdout)["items"]}
        # the file's device-plugin capacity, as the real API server stores it (quantities are strings)
        assert nodes["gke-gpu-a100-pool-7f3c-0"]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        r = kubectl(kubeconfig, tmp_path, "get", "resourceslices", "-o", "name")
        assert r.returncode == 0 and r.stdout.strip(), r.stderr  # the DRA nodes' slices
        tree = descendants(proc.pid)
        assert tree, "the cluster runs in child processes"
        scratch = control_plane_data_dir(tree).parent  # the command's temporary folder
        proc.send_signal(stop)
        assert proc.wait(60) == (0 if stop == signal.SIGINT else -signal.SIGKILL)
        left = wait_all_gone(tree, 10)
        assert left == [], "still running:\n" + "\n".join(left)
        assert wait_removed(scratch, 20), f"{scratch} (etcd's data and the certificates) is left behind"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def big_cluster(path: Path) -> Path:
    """The default cluster, 5,000 idle GPU nodes more, and one node claiming 400,000 GPUs."""
    import yaml

    default = yaml.safe_load(DEFAULT_CLUSTER.read_text())["items"]
    idle = [node_manifest(f"idle-{i:04d}", **{"nvidia.com/gpu": "8"}) for i in range(BIG)]
    huge = node_manifest("huge-0", **{"nvidia.com/gpu": str(HUGE_GPUS)})
    huge["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    return write_cluster(path, [*default, *idle, huge])


def test_demo_on_the_real_control_plane_loads_a_big_cluster_spawns_and_leaves_nothing_after_kill_9(tmp_path):
    """The hub answers while 5,000 nodes register, talks to the API server with the written kubeconfig,
    starts a server that the node agent runs; ``kill -9`` of the demo ends every process it started."""
    kubeconfig = tmp_path / "demo.kubeconfig"
    hub = DemoCommand(cluster_file=str(big_cluster(tmp_path / "big.yaml")),
                      extra_args=("--kubeconfig", str(kubeconfig), "--no-cull"))
    t0 = time.monotonic()
    hub.start()
    try:
        ready_after = time.monotonic() - t0
        assert kubeconfig.is_file()
        log = hub.log()
        assert f"Kubernetes API server https://127.0.0.1:{hub.k8s_port} ready" in log, log
        # the hub keeps answering while the node agent registers the nodes
        slowest = 0.0
        while "nodeagent ready:" not in hub.log():
            t = time.monotonic()
            assert hub.api("GET", "/gpus").status_code == 200
            slowest = max(slowest, time.monotonic() - t)
            assert time.monotonic() - t0 < 480, f"the nodes did not register in time:\n{hub.log()}"
            time.sleep(0.5)
        registered = time.monotonic() - t0
        print(f"\nhub ready {ready_after:.1f}s after start; {BIG + 11} nodes registered after {registered:.1f}s; "
              f"slowest /hub/api/gpus meanwhile {slowest:.2f}s")
        assert slowest < 5.0
        huge = wait_for(lambda: [p for p in hub.api("GET", "/gpus").json()["pools"] if p["total"] >= HUGE_GPUS],
                        60, "the 400,000-GPU node's pool")
        assert huge
        # a server, started through the hub's kubeconfig, run by the node agent
        hub.create_user("ada")
        r = hub.api("POST", "/users/ada/server", json={"profile": "cpu"})
        assert r.status_code in (201, 202), r.text
        wait_for(lambda: (hub.server("ada") or {}).get("ready"), 180, "ada's server to be ready")
        r = kubectl(kubeconfig, tmp_path, "get", "pods", "-n", "jupyterhub", "-o", "json")
        pods = json.loads(r.stdout)["items"]
        assert [p["status"]["phase"] for p in pods] == ["Running"], r.stdout[:2000]
        tree = descendants(hub.proc.pid)
        scratch = control_plane_data_dir(tree).parents[1]  # the demo's temporary folder
        os.kill(hub.proc.pid, signal.SIGKILL)
        hub.proc.wait()
        left = wait_all_gone(tree, 10)
        assert left == [], "still running after kill -9 of the demo:\n" + "\n".join(left)
        assert wait_removed(scratch, 20), f"{scratch} is left behind"
    finally:
        hub.stop()


H100_SPOT = "gpu-h100-spot:nvidia-h100-80gb-hbm3:nvidia.com/gpu"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """One demo on the real control plane for the tests below (the scale-up pool's delay shortened; its
    DCGM exporters run, and its own culler, whose 30 minutes no test waits for)."""
    kubeconfig = tmp_path_factory.mktemp("demo") / "demo.kubeconfig"
    hub = DemoCommand(extra_args=("--kubeconfig", str(kubeconfig), "--scale-up-seconds", "8")).start()
    hub.kubeconfig = kubeconfig
    try:
        yield hub
    finally:
        hub.stop()


def test_demo_server_opens_jupyterlab_through_the_proxy(demo):
    """A server started through the hub, run by the node agent: the user's URL leads, through the proxy
    and the hub's OAuth, to JupyterLab at /user/<name>/lab, whose own API answers."""
    demo.create_user("lab")
    r = demo.api("POST", "/users/lab/server", json={"profile": "cpu"})
    assert r.status_code in (201, 202), r.text
    demo.wait_ready("lab", timeout=180)
    browser = demo.login("lab")
    r = browser.get(f"{demo.url}/user/lab/", timeout=60)
    assert r.status_code == 200, r.text[:2000]
    assert r.url == f"{demo.url}/user/lab/lab", "the server's default URL is JupyterLab's"
    assert "<title>JupyterLab</title>" in r.text and '"appName": "JupyterLab"' in r.text, r.text[:2000]
    r = browser.get(f"{demo.url}/user/lab/lab/api/settings", timeout=60)
    assert r.status_code == 200 and "@jupyterlab/application-extension:shell" in {
        s["id"] for s in r.json()["settings"]}, r.text[:2000]
    r = demo.api("DELETE", "/users/lab/server")
    assert r.status_code in (202, 204), r.text
    demo.wait_stopped("lab")


def test_the_culler_stops_an_idle_server_on_a_dra_pool_and_keeps_a_busy_one(demo, tmp_path):
    """Servers whose GPU is a DRA ResourceClaim's device: the DRA node's DCGM exporter names the pod
    holding it, so ``gpuspawner cull`` (scraping the exporters) stops the idle one and keeps the one
    whose GPU works."""
    pool = next(p for p in demo.gpus()["pools"]
                if p["allocation"] == "dra" and p["sharing"] == "none" and p["fits_profiles"].get("gpu") is True)
    for user in ("dra-idle", "dra-busy"):
        demo.create_user(user)
        r = demo.api("POST", f"/users/{user}/server", json={"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})
        assert r.status_code in (201, 202), r.text
    for user in ("dra-idle", "dra-busy"):
        demo.wait_ready(user, timeout=180)
    r = kubectl(demo.kubeconfig, tmp_path, "get", "pods", "-n", "jupyterhub", "-o", "json")
    pods = {p["metadata"]["annotations"]["hub.jupyter.org/username"]: p for p in json.loads(r.stdout)["items"]}
    assert all(pods[u]["spec"].get("resourceClaims") for u in ("dra-idle", "dra-busy")), "GPUs through DRA"
    busy = pods["dra-busy"]["metadata"]["name"]
    r = kubectl(demo.kubeconfig, tmp_path, "annotate", "pod", "-n", "jupyterhub", busy,
                "gpuspawner.sim/gpu-activity=0.8")
    assert r.returncode == 0, r.stderr
    env = dict(os.environ, JUPYTERHUB_API_URL=f"{demo.url}/hub/api", JUPYTERHUB_API_TOKEN=demo.token)
    log = tmp_path / "culler.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "gpuspawner", "cull", "--kubeconfig", str(demo.kubeconfig),
                                 "--idle-timeout", "15s", "--scrape-every", "1s", "--metrics-step", "3s",
                                 "--cull-every", "2s"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        demo.wait_stopped("dra-idle", timeout=120)
    finally:
        proc.terminate()
        proc.wait(30)
    text = log.read_text()
    assert "cull dra-idle/" in text and "[idle]" in text.split("cull dra-idle/")[1].splitlines()[0], text
    assert "[gpu_busy]" in text.split("keep dra-busy/")[-1].splitlines()[0], text
    assert (demo.server("dra-busy") or {}).get("ready"), text
    r = demo.api("DELETE", "/users/dra-busy/server")
    assert r.status_code in (202, 204), r.text
    demo.wait_stopped("dra-busy")


def test_demo_scale_up_pool_gets_a_node_after_its_delay_and_the_spawn_there_runs(demo, tmp_path):
    """The demo cluster's scale-from-zero pool: no node until a server waits for one, then the test
    cluster's autoscaler registers one after the (shortened) delay and the server starts on it."""
    hub, kubeconfig = demo, demo.kubeconfig
    assert hub.pool(H100_SPOT)["nodes"] == 0
    hub.create_user("sid")
    asked = time.monotonic()
    r = hub.api("POST", "/users/sid/server", json={"profile": "gpu", "gpu_pool": H100_SPOT, "gpus": 1})
    assert r.status_code in (201, 202), r.text
    wait_for(lambda: hub.pool(H100_SPOT)["nodes"] == 1, 120, "a node of the scale-up pool")
    assert time.monotonic() - asked >= 8, "the node came before the pool's delay"
    wait_for(lambda: (hub.server("sid") or {}).get("ready"), 240, "sid's server on the new node")
    r = kubectl(kubeconfig, tmp_path, "get", "pods", "-n", "jupyterhub", "-o", "json")
    (pod,) = [p for p in json.loads(r.stdout)["items"] if p["metadata"]["name"] == "jupyter-sid"]
    assert pod["spec"]["nodeName"] == "gke-gpu-h100-spot-5d1e-0"
    assert pod["status"]["phase"] == "Running"


A100 = "gpu-a100-pool:nvidia-a100-sxm4-40gb:nvidia.com/gpu"


def progress_until(hub: DemoHub, user: str, words: str, timeout: float) -> list[str]:
    """The server's progress messages, read until one contains ``words`` (or the stream ends)."""
    r = requests.get(f"{hub.url}/hub/api/users/{user}/server/progress",
                     headers={"Authorization": f"token {hub.token}"}, stream=True, timeout=timeout)
    seen: list[str] = []
    for line in r.iter_lines(decode_unicode=True):
        if line and line.startswith("data:"):
            event = json.loads(line[5:])
            seen.append(event.get("message", ""))
            if words in seen[-1] or event.get("failed") or event.get("ready"):
                break
    r.close()
    return seen


def test_demo_kueue_a_full_pool_queues_with_a_position_and_the_next_server_runs_when_one_stops(tmp_path):
    """``gpuspawner demo --kueue``: Kueue itself (built from its module) on the demo's control plane; the
    A100 pool's quota of 4 GPUs holds two 2-GPU servers, a third (1 GPU) waits at position 1 and runs
    once the first stops."""
    hub = DemoCommand(extra_args=("--kueue", "--no-cull", "--kubeconfig", str(tmp_path / "kc")),
                      ready_timeout=300).start()
    try:
        assert "Kueue is running" in hub.log()
        for user in ("ann", "bob", "cy"):
            hub.create_user(user)
        for user in ("ann", "bob"):
            r = hub.api("POST", f"/users/{user}/server", json={"profile": "gpu", "gpu_pool": A100, "gpus": 2})
            assert r.status_code in (201, 202), r.text
        for user in ("ann", "bob"):
            wait_for(lambda u=user: (hub.server(u) or {}).get("ready"), 240, f"{user}'s server")
        # one GPU of the pool is still free on its nodes, but none of the quota: cy waits for Kueue
        r = hub.api("POST", "/users/cy/server", json={"profile": "gpu", "gpu_pool": A100, "gpus": 1})
        assert r.status_code in (201, 202), r.text
        seen = progress_until(hub, "cy", "Queued in gpu-a100: position 1", 120)
        assert any("Queued in gpu-a100: position 1" in m for m in seen), seen
        assert hub.pool(A100)["queue"] == {"name": "gpu-a100", "pending": 1, "admitted": 2}
        assert not (hub.server("cy") or {}).get("ready")
        freed = time.monotonic()
        r = hub.api("DELETE", "/users/ann/server")
        assert r.status_code in (202, 204), r.text
        wait_for(lambda: (hub.server("cy") or {}).get("ready"), 180, "cy's server once ann's stopped")
        print(f"\nfrom a freed GPU to the queued server ready: {time.monotonic() - freed:.1f}s")
    finally:
        hub.stop()
