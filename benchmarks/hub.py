"""Benchmark of the hub itself at 5,000 GPU nodes: a script, not a test.

    python benchmarks/hub.py            # 5,000 GPU nodes, 150,000 pods, 1,000 views of each kind
    python benchmarks/hub.py --quick    # 500 nodes, 15,000 pods, 300 views

Everything runs on loopback, each part in its own process, as in production:

* the cluster on Kubernetes' own control plane (``realcluster.py``: ``gpuspawner-cluster
  controlplane``; ``bigcluster.py``'s nodes and pods applied by the bulk node agent
  ``gpuspawner-cluster nodes``, which keeps the nodes Ready and reports their pods Running;
  the time to build it is printed); two of its A100 nodes, labelled ``SPAWN_LABEL``, are run by
  the Python node agent (``python -m testcluster.nodeagent``), which runs the pods bound to
  them as processes; a child process streams watch events (GPU pods come and go, nodes are
  cordoned); the fault proxy stands in front of the API server, with no fault set, and counts
  the hubs' requests (the agents', the stream's and this script's go straight to the API server);
* hub ``gpu``: JupyterHub, a real configurable-http-proxy and GPUSpawner, loaded through the
  product's config snippet (``jupyterhub_config.d/gpuspawner.py``) with a config like the
  demo's (CUDA image choices, allowed groups, per-group quotas): ``benchmarks/hub_config.py``;
* hub ``static``: the same with plain KubeSpawner and a static ``profile_list`` of the same size
  (the same profiles and image choices, one choice per GPU pool, counts 1-8).

Both hubs load ``benchmarks/hubprobe.py``: a loop-lag probe inside the hub process (a 5 ms
sleep and how late it wakes up; every garbage collection's pause; every loop step timed and
attributed: gpuspawner's own tasks, JupyterHub's request handling, the rest) read over HTTP.

Measured, in one run and in this order:

1. cold sync of the GPU hub's capacity cache (started by the first ``GET /hub/api/gpus``):
   its time, the worst stall of the hub's event loop meanwhile (wall clock, GC included), and
   the hub's resident memory before and after (each after a full collection);
2. with watch events streaming in (``--rate`` per second), ``--views`` times each, interleaved
   request by request: ``GET /hub/spawn`` for a signed-in user of group ``ml`` on both hubs,
   ``GET /hub/api/gpus`` on the GPU hub and ``GET /hub/api/users/bench`` (a JSON request of the
   same framework cost) on the static one: p50, p99, max as the client sees them (through the
   proxy); the hubs' Kubernetes API requests (the fault proxy's count) in windows of 10 rounds,
   the fewest in a window being the views' own; the worst loop stall of each hub meanwhile;
3. with the stream paused and its last pods settled: the time from a change in the cluster (a node cordoned and
   uncordoned, a GPU pod deleted and another created) to the change showing in
   ``GET /hub/api/gpus`` (polled every 10 ms): p50, p99;
4. REST spawns (``POST /hub/api/users/bench/servers/<name>``, one GPU in the A100 pool) from
   POST to ``ready``, alternating the hubs, then stopped: medians. Both hubs' pods go to the
   spawn nodes (``c.KubeSpawner.node_selector``), where jupyterhub-singleuser starts as a
   process and answers at the pod's IP.

Targets: page p99 <= 1.2x the static hub's, spawn <= 1.05x plain KubeSpawner's,
0 API requests per view, change visible p99 <= 2 s, memory growth <= 64 MiB, and the GPU hub's
whole event loop's worst stall <= 25 ms (wall clock, GC included: the probe's lateness, whatever
ran) during the cold sync and during the views. Beside it, for attribution: gpuspawner's longest
step on the loop (its tasks: the informers, the spawn form's task; its API handler) and
JupyterHub's longest request step, in each hub; the static hub gets the GPU hub's
garbage-collection policy (a full collection and ``gc.freeze()`` after the imports), so that
their stalls compare like with like.
The table prints each figure against its target, with any size (``--quick`` included); the exit
status is 1 when one is missed, 2 when the run itself failed.

On a shared machine wall-clock figures include time spent waiting for a core: the table
prints the machine's load average at the start and the end. On a virtual machine they also
include time its host did not run it: beside the GPU hub's worst stall in the views the table
prints its loop's CPU time in that tick, the host's ``steal`` per core meanwhile, and how far
apart that tick and the static hub's worst ended (both hubs stalled at the same instant, neither
on its CPU, is the machine pausing, not a hub's work). The target is judged on the wall clock
all the same.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import requests  # noqa: E402

from bigcluster import make_pod  # noqa: E402
from testcluster.processes import stop_process  # noqa: E402
from realcluster import RealCluster  # noqa: E402
from gpuspawner.capacity.taintrule import DEFAULT_TOLERATED_TAINT_KEYS, HARD_EFFECTS  # noqa: E402

NAMESPACE = "jupyterhub"
SPAWN_NODES = 2  # A100 nodes run by the Python node agent: the spawned servers run there
MIB = 2**20
TARGETS = {
    "page_p99_ratio": 1.2,
    "spawn_ratio": 1.05,
    "api_requests_per_view": 0,
    "change_visible_p99_s": 2.0,
    "stall_ms": 25.0,
    "memory_mib": 64.0,
}
VIEW_WINDOW = 10  # rounds of views (each: the four views) between two readings of the API request counts


class BenchError(Exception):
    """The run itself failed (a process did not start, a request was refused)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99, max in milliseconds of durations in seconds."""
    return {"p50_ms": round(pct(values, 0.5) * 1000, 2), "p99_ms": round(pct(values, 0.99) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2), "n": len(values)}


# ---------------------------------------------------------------------------
# the cluster's changes whose latency is measured (made straight on the API server, not counted)


def _contributes(cluster: RealCluster, node_name: str) -> bool:
    """Ready, schedulable and without a hard taint the hub's GPU servers do not tolerate (say the
    node lifecycle controller's `node.kubernetes.io/unreachable`, left by a late lease): a node
    the hub counts in its pool, so that cordoning it takes one node off the count."""
    node = cluster.call("GET", f"/api/v1/nodes/{node_name}")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in node.get("status", {}).get("conditions", []))
    tainted = any(t.get("effect") in HARD_EFFECTS and t.get("key") not in DEFAULT_TOLERATED_TAINT_KEYS
                  for t in node.get("spec", {}).get("taints") or [])
    return ready and not tainted and not node.get("spec", {}).get("unschedulable")


def _candidates(cluster: RealCluster, group: str) -> list[str]:
    """The node group's (pool's) nodes the bulk agent runs (not the spawns' nodes)."""
    spawn_nodes = set(cluster.built["spawn_nodes"])
    return [n for n in cluster.built["nodes"] if n.startswith(f"{group}-") and n not in spawn_nodes]


def pick_node(cluster: RealCluster, group: str) -> str:
    """A Ready, schedulable node of the node group ``group``."""
    for name in _candidates(cluster, group):
        if _contributes(cluster, name):
            return name
    raise BenchError(f"no Ready, schedulable {group} node")


def _within_capacity(cluster: RealCluster, node_name: str) -> bool:
    """Whether the node's pods hold no more ``nvidia.com/gpu`` than it has: the bulk agent admits
    every pod (the stream binds pods without looking), and on an over-committed node a pod deleted
    frees no GPU anyone could use."""
    node = cluster.call("GET", f"/api/v1/nodes/{node_name}")
    have = int(node["status"]["allocatable"].get("nvidia.com/gpu", "0"))
    selector = urllib.parse.quote(f"spec.nodeName={node_name}")
    pods = cluster.call("GET", f"/api/v1/pods?fieldSelector={selector}")["items"]
    held = sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", "0"))
               for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
               for c in p["spec"]["containers"])
    return held <= have


def pick_gpu_pod(cluster: RealCluster, group: str) -> dict:
    """A pod of the cluster file holding ``nvidia.com/gpu`` on a contributing node of ``group``
    whose GPUs are not over-committed."""
    nodes = set(_candidates(cluster, group))
    for ns, name in cluster.built["gpu_pod_names"]:
        try:
            pod = cluster.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
        except urllib.error.HTTPError as e:
            if e.code == 404:
                continue
            raise
        node = pod["spec"].get("nodeName", "")
        if node in nodes and _contributes(cluster, node) and _within_capacity(cluster, node):
            gpus = pod["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu")
            if gpus:
                return {"namespace": ns, "name": name, "node": node, "gpus": int(gpus)}
    raise BenchError(f"no GPU pod on a contributing {group} node")


def cordon(cluster: RealCluster, node: str, on: bool) -> float:
    """Cordon or uncordon ``node``; the wall time its answer came back."""
    cluster.call("PATCH", f"/api/v1/nodes/{node}", {"spec": {"unschedulable": on}},
                 content_type="application/merge-patch+json")
    return time.time()


def delete_pod(cluster: RealCluster, pod: dict) -> float:
    """Delete the pod at once (grace period 0: the bulk agent's nodes run no process to stop)."""
    cluster.call("DELETE", f"/api/v1/namespaces/{pod['namespace']}/pods/{pod['name']}", {"gracePeriodSeconds": 0})
    cluster.built["gpu_pod_names"].remove((pod["namespace"], pod["name"]))
    return time.time()


def create_pod(cluster: RealCluster, pod: dict) -> float:
    """A pod bound to ``pod['node']`` holding ``pod['gpus']`` GPUs, named ``pod['name']``."""
    obj = make_pod(0, pod["node"], "nvidia.com/gpu", pod["gpus"], random.Random(0))
    obj["metadata"].update(name=pod["name"], namespace=pod["namespace"])
    cluster.call("POST", f"/api/v1/namespaces/{pod['namespace']}/pods", {"apiVersion": "v1", "kind": "Pod", **obj})
    cluster.built["gpu_pod_names"].append((pod["namespace"], pod["name"]))
    return time.time()


# ---------------------------------------------------------------------------
# the hubs (JupyterHub processes)


class Hub:
    """One JupyterHub (with its proxy) started with benchmarks/hub_config.py."""

    def __init__(self, mode: str, workdir: Path, kubeconfig: Path, extra_env: dict[str, str]) -> None:
        self.mode = mode
        self.dir = workdir / mode
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = secrets.token_hex(16)
        self.proxy_retries = 0  # DELETEs sent again after the proxy's own 503 (see _spawn_once)
        self.env = dict(os.environ, HUBBENCH_MODE=mode, HUBBENCH_DIR=str(self.dir), KUBECONFIG=str(kubeconfig),
                        HUBBENCH_PORT=str(self.port), HUBBENCH_HUB_PORT=str(free_port()),
                        HUBBENCH_PROXY_API_PORT=str(free_port()), HUBBENCH_TOKEN=self.token,
                        CONFIGPROXY_AUTH_TOKEN=secrets.token_hex(32), **extra_env)
        self.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), self.env.get("PYTHONPATH")) if p)
        self.api = requests.Session()
        self.api.headers["Authorization"] = f"token {self.token}"
        self.browser = requests.Session()
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float) -> None:
        self.log_path = self.dir / "hub.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(HERE / "hub_config.py")],
                                     cwd=self.dir, env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"hub {self.mode} exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(requests.RequestException):
                if self.api.get(f"{self.url}/hub/api/", timeout=5).status_code == 200:
                    return
            time.sleep(0.3)
        raise BenchError(f"hub {self.mode} did not answer within {timeout:g} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-4000:]
        return ""

    def login(self, user: str) -> None:
        r = self.browser.get(f"{self.url}/hub/login", timeout=30)
        r.raise_for_status()
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', r.text)
        data = {"username": user, "password": "any", **({"_xsrf": xsrf.group(1)} if xsrf else {})}
        # no redirect: the hub would send a new user on to /hub/spawn, whose first view starts the
        # capacity cache before its cold sync is measured
        r = self.browser.post(f"{self.url}/hub/login", data=data, timeout=30, allow_redirects=False)
        if r.status_code not in (200, 302):
            raise BenchError(f"hub {self.mode}: logging in as {user}: {r.status_code} {r.text[:300]}")
        if not self.browser.cookies:
            raise BenchError(f"hub {self.mode}: logging in as {user} set no cookie ({r.status_code})")

    def get(self, path: str, **kw: Any) -> requests.Response:
        r = self.api.get(f"{self.url}{path}", timeout=60, **kw)
        if r.status_code != 200:
            raise BenchError(f"hub {self.mode}: GET {path}: {r.status_code} {r.text[:300]}")
        return r

    def probe(self, **params: str) -> dict:
        return self.get("/hub/bench/probe", params=params).json()

    def stop(self) -> None:
        stop_process(self.proc, 60)  # the hub stops its proxy; past 60 s both are killed
        if getattr(self, "_log", None):
            self._log.close()


def timed(call: Callable[[], requests.Response], check: Callable[[requests.Response], bool]) -> float:
    t = time.perf_counter()
    r = call()
    elapsed = time.perf_counter() - t
    if not check(r):
        raise BenchError(f"unexpected answer {r.status_code} to {r.request.method} {r.url}: {r.text[:300]}")
    return elapsed


# ---------------------------------------------------------------------------
# the measurements


def cold_sync(hub: Hub, timeout: float) -> dict[str, Any]:
    """Start the GPU hub's capacity cache with its first GET /hub/api/gpus and wait for its sync."""
    before = hub.probe(collect="1")
    hub.probe(reset="1")
    t0 = time.perf_counter()
    first = hub.get("/hub/api/gpus").json()
    while True:
        doc = hub.get("/hub/api/gpus").json()
        if doc.get("synced"):
            break
        if time.perf_counter() - t0 > timeout:
            raise BenchError(f"the capacity cache did not sync within {timeout:g} s: {doc}")
        time.sleep(0.5)
    sync_s = time.perf_counter() - t0
    during = hub.probe(reset="1")
    after = hub.probe(collect="1", objects="1")
    hub.probe(reset="1")
    return {
        "sync_s": round(sync_s, 2), "first_answer_synced": bool(first.get("synced")),
        "pools": len(doc["pools"]), "gpu_nodes": sum(p["nodes"] for p in doc["pools"]),
        "stall": during,
        "memory_growth_mib": round((after["rss_bytes_after_collect"] - before["rss_bytes_after_collect"]) / MIB, 1),
        "rss_before_mib": round(before["rss_bytes_after_collect"] / MIB, 1),
        "rss_after_mib": round(after["rss_bytes_after_collect"] / MIB, 1),
        "tracked_objects_after": after["gc_tracked_objects"], "frozen_objects": after["gc_frozen_objects"],
    }


def views(gpu: Hub, static: Hub, cluster: RealCluster, n: int) -> dict[str, Any]:
    """n of each view while events stream in, interleaved request by request.

    The hubs' API requests are counted by the fault proxy in windows of ``VIEW_WINDOW`` rounds:
    KubeSpawner's reflectors list and watch again every 10 s and the informers renew their watches,
    whatever the views do, so a long run of views has some requests. A view that made one would
    put one in every window: the requests per view are the fewest any whole window saw, over its
    views; the totals, by verb and resource, are printed beside."""
    page_bytes = {}
    for hub in (gpu, static):  # warm: templates compiled, connections open
        for _ in range(5):
            page_bytes[hub.mode] = len(hub.browser.get(f"{hub.url}/hub/spawn", timeout=60).content)
        hub.probe(reset="1")
    is_form = lambda r: r.status_code == 200 and "profile-item-gpu" in r.text  # noqa: E731
    is_json = lambda r: r.status_code == 200 and r.headers.get("Content-Type", "").startswith("application/json")  # noqa: E731
    times: dict[str, list[float]] = {"gpu_page": [], "static_page": [], "gpu_api": [], "static_api": []}
    window = min(VIEW_WINDOW, n)
    first = last = cluster.requests_by_kind()
    windows: list[int] = []
    for i in range(1, n + 1):
        times["gpu_page"].append(timed(lambda: gpu.browser.get(f"{gpu.url}/hub/spawn", timeout=60), is_form))
        times["static_page"].append(timed(lambda: static.browser.get(f"{static.url}/hub/spawn", timeout=60), is_form))
        times["gpu_api"].append(timed(lambda: gpu.api.get(f"{gpu.url}/hub/api/gpus", timeout=60), is_json))
        times["static_api"].append(timed(lambda: static.api.get(f"{static.url}/hub/api/users/bench", timeout=60),
                                         is_json))
        if i % window == 0:
            now = cluster.requests_by_kind()
            windows.append(sum((now - last).values()))
            last = now
    during = cluster.requests_by_kind() - first
    out: dict[str, Any] = {k: summary(v) for k, v in times.items()}
    out["page_bytes"] = page_bytes
    out["api_requests"] = sum(during.values())
    out["api_requests_by_kind"] = {f"{verb} {resource}": c for (verb, resource), c in sorted(during.items())}
    out["api_requests_windows"] = {"rounds": window, "n": len(windows), "fewest": min(windows),
                                   "without_any": windows.count(0)}
    out["api_requests_per_view"] = min(windows) / (2 * window)  # each round: the GPU hub's page and API view
    out["gpu_stall"] = gpu.probe(reset="1")
    out["static_stall"] = static.probe(reset="1")
    # after the stall figures: what each hub's full collections walk now (--json)
    for hub in (gpu, static):
        got = hub.probe(objects="1")
        out[f"{hub.mode}_objects"] = {k: got[k] for k in ("gc_tracked_objects", "gc_frozen_objects",
                                                          "gc_tracked_types")}
    return out


def _pool(hub: Hub, pool_id: str) -> dict:
    for p in hub.get("/hub/api/gpus").json()["pools"]:
        if p["id"] == pool_id:
            return p
    raise BenchError(f"pool {pool_id} is not in GET /hub/api/gpus")


def _quiet(hub: Hub, pool_id: str, settle: float = 3.0, timeout: float = 300.0) -> None:
    """Until the pool's node and free counts have stayed the same for ``settle`` seconds: a change
    measured while the stream's last events still reach the hub would be lost among theirs."""
    began = since = time.monotonic()
    seen = None
    while time.monotonic() - since < settle:
        pool = _pool(hub, pool_id)
        now = (pool["nodes"], pool["free"])
        if now != seen:
            seen, since = now, time.monotonic()
        if time.monotonic() - began > timeout:
            raise BenchError(f"pool {pool_id}: its counts still changed {timeout:g} s after the stream paused")
        time.sleep(0.2)


def _visible(hub: Hub, pool_id: str, field: str, want: int, since: float, timeout: float = 30.0) -> float:
    """Poll GET /hub/api/gpus every 10 ms until the pool's ``field`` is ``want``; seconds since ``since``."""
    while True:
        if _pool(hub, pool_id)[field] == want:
            return time.time() - since
        if time.time() - since > timeout:
            doc = hub.get("/hub/api/gpus").json()
            raise BenchError(f"pool {pool_id}: {field} never became {want} within {timeout:g} s (it is "
                             f"{_pool(hub, pool_id)[field]}; the hub's figures: healthy {doc.get('healthy')}, "
                             f"{doc.get('age_seconds')} s old, error {doc.get('error')!r})")
        time.sleep(0.01)


def change_latency(hub: Hub, cluster: RealCluster, rounds: int) -> dict[str, Any]:
    """Cordon/uncordon a node and delete/re-create a GPU pod, ``rounds`` times each (stream paused)."""
    from hubprofiles import A100_POOL

    cluster.pause()
    cluster.wait_settled(300)  # the stream's last pods admitted, or refused, by their nodes
    _quiet(hub, A100_POOL)  # and the hub has seen it
    cordoned: list[float] = []
    pods: list[float] = []
    for i in range(rounds):
        node = pick_node(cluster, "a100")
        nodes = _pool(hub, A100_POOL)["nodes"]
        cordoned.append(_visible(hub, A100_POOL, "nodes", nodes - 1, cordon(cluster, node, True)))
        cordoned.append(_visible(hub, A100_POOL, "nodes", nodes, cordon(cluster, node, False)))
        pod = pick_gpu_pod(cluster, "a100")
        free = _pool(hub, A100_POOL)["free"]
        pods.append(_visible(hub, A100_POOL, "free", free + pod["gpus"], delete_pod(cluster, pod)))
        again = dict(pod, name=f"bench-{i}-{pod['name']}")
        pods.append(_visible(hub, A100_POOL, "free", free, create_pod(cluster, again)))
    both = cordoned + pods
    return {"p50_s": round(pct(both, 0.5), 3), "p99_s": round(pct(both, 0.99), 3), "max_s": round(max(both), 3),
            "n": len(both), "node_cordoned_p50_s": round(pct(cordoned, 0.5), 3),
            "gpu_pod_p50_s": round(pct(pods, 0.5), 3)}


def _spawn_once(hub: Hub, name: str, body: dict, timeout: float) -> float:
    path = f"/hub/api/users/bench/servers/{name}"
    t0 = time.perf_counter()
    r = hub.api.post(f"{hub.url}{path}", json=body, timeout=60)
    if r.status_code not in (201, 202):
        raise BenchError(f"hub {hub.mode}: POST {path}: {r.status_code} {r.text[:300]}")
    while True:
        server = hub.get("/hub/api/users/bench").json().get("servers", {}).get(name) or {}
        if server.get("ready"):
            elapsed = time.perf_counter() - t0
            break
        if time.perf_counter() - t0 > timeout:
            raise BenchError(f"hub {hub.mode}: server {name} not ready within {timeout:g} s:\n{hub.log_tail()}")
        time.sleep(0.02)
    r = hub.api.delete(f"{hub.url}{path}", json={"remove": True}, timeout=60)
    if r.status_code == 503 and not r.headers.get("Content-Type", "").startswith("application/json"):
        # configurable-http-proxy's own 503 ("target not responding"): the keep-alive race where
        # the hub closes an idle connection as the proxy reuses it; a DELETE may be sent again
        hub.proxy_retries += 1
        r = hub.api.delete(f"{hub.url}{path}", json={"remove": True}, timeout=60)
    if r.status_code not in (202, 204):
        raise BenchError(f"hub {hub.mode}: DELETE {path}: {r.status_code} {r.text[:300]}")
    deadline = time.perf_counter() + timeout
    while name in (hub.get("/hub/api/users/bench").json().get("servers") or {}):
        if time.perf_counter() > deadline:
            raise BenchError(f"hub {hub.mode}: server {name} did not stop within {timeout:g} s")
        time.sleep(0.1)
    return elapsed


def spawns(gpu: Hub, static: Hub, n: int, timeout: float) -> dict[str, Any]:
    """n REST spawns of one A100 GPU on each hub, alternating; medians from POST to ready."""
    from hubprofiles import A100_POOL

    body = {"profile": "gpu", "gpu_pool": A100_POOL, "gpus": 1, "image": "cuda12"}
    times: dict[str, list[float]] = {"gpu": [], "static": []}
    for i in range(n):
        # distinct server names: both hubs put their pods in the same namespace of the same cluster
        for hub, key, b in ((gpu, "gpu", body), (static, "static", dict(body, gpus="1"))):
            times[key].append(_spawn_once(hub, f"{key[0]}{i}", b, timeout))
    out = {k: {"median_s": round(statistics.median(v), 3), "min_s": round(min(v), 3), "max_s": round(max(v), 3),
               "n": len(v)} for k, v in times.items()}
    out["ratio"] = round(out["gpu"]["median_s"] / out["static"]["median_s"], 3)
    return out


# ---------------------------------------------------------------------------
# the table


def verdicts(r: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(measure, figure, target, met) rows; met is None where the row has no target."""
    v, c, sp, ch = r["views"], r["cold_sync"], r["spawns"], r["changes"]
    ratio = v["gpu_page"]["p99_ms"] / v["static_page"]["p99_ms"]
    inside = {**r["gpu_hub_end"]["timings"], **v["gpu_stall"]["timings"]}  # the views' own, then the spawns'

    def share(label: str, timings: dict | None = None) -> str:
        t = (inside if timings is None else timings).get(label)
        return f"{t['p50_ms']} / {t['p99_ms']} / {t['max_ms']} ms (n={t['n']})" if t else "not measured"

    def static_share(label: str) -> str:
        return share(label, r["static_hub_end"]["timings"])

    rows = [
        ("GET /hub/spawn p50 / p99 / max, GPUSpawner",
         f"{v['gpu_page']['p50_ms']} / {v['gpu_page']['p99_ms']} / {v['gpu_page']['max_ms']} ms", "", None),
        ("GET /hub/spawn p50 / p99 / max, static KubeSpawner",
         f"{v['static_page']['p50_ms']} / {v['static_page']['p99_ms']} / {v['static_page']['max_ms']} ms", "", None),
        ("page p99, GPUSpawner / static", f"{ratio:.2f}x", f"<= {TARGETS['page_p99_ratio']}x",
         ratio <= TARGETS["page_p99_ratio"]),
        ("  of a page, GPUSpawner's form (offers, CUDA fit, access, render), in the hub", share("spawn_form"), "", None),
        ("  the page's size, GPUSpawner / static",
         f"{v['page_bytes']['gpu']} / {v['page_bytes']['static']} bytes", "", None),
        ("GET /hub/api/gpus p50 / p99 / max",
         f"{v['gpu_api']['p50_ms']} / {v['gpu_api']['p99_ms']} / {v['gpu_api']['max_ms']} ms", "", None),
        ("  of it, the handler in the hub", share("api_gpus"), "", None),
        ("  (static hub, GET /hub/api/users/bench)",
         f"{v['static_api']['p50_ms']} / {v['static_api']['p99_ms']} / {v['static_api']['max_ms']} ms", "", None),
        (f"API requests per view: the fewest in a window of {2 * v['api_requests_windows']['rounds']} views "
         f"(fault proxy's counter)",
         f"{v['api_requests_per_view']:g} per view ({v['api_requests_windows']['without_any']} of "
         f"{v['api_requests_windows']['n']} windows without any)", "0 per view",
         v["api_requests_per_view"] <= TARGETS["api_requests_per_view"]),
        (f"  API requests of both hubs during all {2 * v['gpu_page']['n']} views, by kind",
         f"{v['api_requests']}: " + (", ".join(f"{k} {c}" for k, c in v["api_requests_by_kind"].items()) or "none"),
         "", None),
        ("REST spawn POST -> ready, median, GPUSpawner / KubeSpawner",
         f"{sp['gpu']['median_s']} / {sp['static']['median_s']} s = {sp['ratio']:.3f}x",
         f"<= {TARGETS['spawn_ratio']}x", sp["ratio"] <= TARGETS["spawn_ratio"]),
        ("  of a spawn, GPUSpawner.load_user_options (validation, overrides), in the hub",
         share("load_user_options"), "", None),
        ("  of a spawn, KubeSpawner._start in the hub, GPUSpawner's / static",
         f"{share('kubespawner_start')} / {static_share('kubespawner_start')}", "", None),
        (f"change in the cluster -> GET /hub/api/gpus, p50 / p99 (n={ch['n']})",
         f"{ch['p50_s']} / {ch['p99_s']} s", f"p99 <= {TARGETS['change_visible_p99_s']:g} s",
         ch["p99_s"] <= TARGETS["change_visible_p99_s"]),
        (f"cold sync ({c['pools']} pools, {c['gpu_nodes']} node-pool memberships)", f"{c['sync_s']} s", "", None),
        ("worst loop stall, whole GPU hub, cold sync (wall, GC included; p99)",
         f"{c['stall']['worst_stall_ms']} ms ({c['stall']['p99_stall_ms']})", f"<= {TARGETS['stall_ms']:g} ms",
         c["stall"]["worst_stall_ms"] <= TARGETS["stall_ms"]),
        ("  of it: gpuspawner's longest step on the loop, cold sync (wall, GC included)",
         f"{_own(c['stall'])} ms", "", None),
        ("  on the loop's CPU / GC: full collections, worst pause",
         f"{c['stall']['worst_on_cpu_ms']} ms / {c['stall']['gc_full_collections']}, "
         f"{c['stall']['gc_worst_pause_ms']} ms", "", None),
        ("  JupyterHub's longest request step (GC excluded)", _jupyterhub(c["stall"]), "", None),
        ("worst loop stall, whole hub, views (wall, GC included; p99): GPU hub / static hub",
         f"{v['gpu_stall']['worst_stall_ms']} ms ({v['gpu_stall']['p99_stall_ms']}) / "
         f"{v['static_stall']['worst_stall_ms']} ms ({v['static_stall']['p99_stall_ms']})",
         f"GPU hub <= {TARGETS['stall_ms']:g} ms", v["gpu_stall"]["worst_stall_ms"] <= TARGETS["stall_ms"]),
        ("  of it: gpuspawner's longest step on the loop, views (wall, GC included)",
         f"{_own(v['gpu_stall'])} ms", "", None),
        ("  on the loop's CPU; GC worst pause: GPU hub / static hub",
         f"{v['gpu_stall']['worst_on_cpu_ms']}; {v['gpu_stall']['gc_worst_pause_ms']} ms / "
         f"{v['static_stall']['worst_on_cpu_ms']}; {v['static_stall']['gc_worst_pause_ms']} ms", "", None),
        ("  JupyterHub's longest request step (GC excluded): GPU hub / static hub",
         f"{_jupyterhub(v['gpu_stall'])} / {_jupyterhub(v['static_stall'])}", "", None),
        ("  the GPU hub's worst: on its CPU / host's steal per core / ended apart from the static hub's",
         _worst_tick(v["gpu_stall"], v["static_stall"]), "", None),
        ("hub memory growth from the cache (RSS after a full GC)",
         f"{c['memory_growth_mib']} MiB ({c['rss_before_mib']} -> {c['rss_after_mib']})",
         f"<= {TARGETS['memory_mib']:g} MiB", c["memory_growth_mib"] <= TARGETS["memory_mib"]),
    ]
    return rows


def _own(figures: dict[str, Any]) -> float:
    """gpuspawner's longest piece of work on the loop, wall clock with any collection in it: a
    step of its own tasks (the capacity cache's informers, the spawn form), or its API handler's
    time inside a request step (whose rest is JupyterHub's authentication and response)."""
    longest = figures.get("longest_step_ms") or {}
    handler = figures["timings"].get("api_gpus", {}).get("max_ms", 0.0)
    return round(max(longest.get("gpuspawner", 0.0), handler), 2)


def _worst_tick(gpu: dict[str, Any], static: dict[str, Any]) -> str:
    """What else the GPU hub's worst tick shows: its loop's CPU time in it, the time the host kept
    the machine's cores (``steal``, 10 ms resolution per core), and how far apart it ended from
    the static hub's worst (two hubs stalled at the same instant, neither on its CPU, is the
    machine, not a hub)."""
    parts = gpu["worst_stall_parts_ms"]
    apart = abs(gpu["worst_stall_at"] - static["worst_stall_at"]) * 1000
    return f"{parts['on_cpu']} / {parts.get('steal', 0.0)} / {apart:.2f} ms"


def _jupyterhub(figures: dict[str, Any]) -> str:
    ms = (figures.get("longest_step_without_gc_ms") or {}).get("request")
    return "not measured" if ms is None else f"{ms} ms"


def print_table(rows: list[tuple[str, str, str, bool | None]], header: str) -> None:
    width = max(len(r[0]) for r in rows)
    fig = max(len(r[1]) for r in rows)
    print(f"\n{header}")
    print(f"{'measure'.ljust(width)}  {'figure'.ljust(fig)}  {'target':14}  verdict")
    for name, figure, target, met in rows:
        verdict = "" if not target else ("met" if met else "MISSED")
        print(f"{name.ljust(width)}  {figure.ljust(fig)}  {target:14}  {verdict}")


# ---------------------------------------------------------------------------
# the run


def _find_proxy() -> str:
    found = shutil.which("configurable-http-proxy") or str(ROOT / "node_modules" / ".bin" / "configurable-http-proxy")
    if not Path(found).exists():
        raise BenchError("configurable-http-proxy was not found: run scripts/setup.sh")
    return found


class RunFailed(Exception):
    """The run failed after ``figures`` were measured (a full-size build alone takes half an hour:
    its figures are printed rather than lost)."""

    def __init__(self, cause: BaseException, figures: dict[str, Any]):
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.figures = figures


def run(args: argparse.Namespace) -> dict[str, Any]:
    from gpuspawner import config_snippet

    workdir = Path(tempfile.mkdtemp(prefix="gpuspawner-hubbench-"))
    cluster = RealCluster(args.nodes, args.pods, args.gpu_share, args.seed, unbound_share=0.0,
                          workdir=workdir / "cluster", spawn_nodes=SPAWN_NODES, namespaces=(NAMESPACE,))
    kubeconfig = workdir / "kubeconfig"
    env = {"HUBBENCH_SNIPPET": str(config_snippet()), "HUBBENCH_PROXY": _find_proxy(),
           "HUBBENCH_LOG_LEVEL": args.log_level, "HUBBENCH_STALL_STACKS": "1" if args.stall_stacks else "0"}
    hubs = {mode: Hub(mode, workdir, kubeconfig, env) for mode in ("gpu", "static")}
    result: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "load_before": os.getloadavg(),
                              "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpus": os.cpu_count()}
    try:
        print(f"building the cluster on the real control plane: {args.nodes} GPU nodes, {args.pods} pods ...",
              flush=True)
        built = cluster.start()
        result["cluster_build"] = built
        print(f"  built in {built['build_s']} s (control plane {built['control_plane_s']} s, objects applied "
              f"{built['applied_s']} s, every bound pod Running {built['settled_s']} s after the agents started; "
              f"{cluster.built['gpu_pods']} GPU pods; the spawns' nodes: {', '.join(cluster.built['spawn_nodes'])})",
              flush=True)
        cluster.hub_kubeconfig(kubeconfig)  # both hubs reach the API server through the counting proxy
        for hub in hubs.values():
            hub.start(timeout=120)
            hub.login("bench")
        print("hubs up; cold sync of the GPU hub's capacity cache ...", flush=True)
        result["cold_sync"] = cold_sync(hubs["gpu"], timeout=args.timeout)
        print(f"  synced in {result['cold_sync']['sync_s']} s", flush=True)
        cluster.stream(args.rate)
        print(f"views: {args.views} of each while {args.rate:g} watch events/s stream in ...", flush=True)
        result["views"] = views(hubs["gpu"], hubs["static"], cluster, args.views)
        print("changes in the cluster -> GET /hub/api/gpus ...", flush=True)
        result["changes"] = change_latency(hubs["gpu"], cluster, args.changes)
        print(f"REST spawns: {args.spawns} on each hub ...", flush=True)
        result["spawns"] = spawns(hubs["gpu"], hubs["static"], args.spawns, timeout=args.timeout)
        result["spawns"]["proxy_retries"] = {mode: hub.proxy_retries for mode, hub in hubs.items()}
        result["gpu_hub_end"] = hubs["gpu"].probe(objects="1", stacks="1")
        result["static_hub_end"] = hubs["static"].probe()
    except Exception as e:
        raise RunFailed(e, result) from e
    finally:
        for hub in hubs.values():
            hub.stop()
        cluster.stop(keep_logs=args.keep)
        result["load_after"] = os.getloadavg()
        if args.keep:
            print(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=None, help="GPU nodes (default 5,000)")
    p.add_argument("--pods", type=int, default=None, help="pods (default 150,000)")
    p.add_argument("--gpu-share", type=float, default=0.15, help="share of pods that request GPUs")
    p.add_argument("--views", type=int, default=None, help="requests of each view kind (default 1,000)")
    p.add_argument("--rate", type=float, default=None, help="watch events per second during the views (default 200)")
    p.add_argument("--changes", type=int, default=None, help="rounds of cluster changes, 4 changes each (default 10)")
    p.add_argument("--spawns", type=int, default=None, help="REST spawns on each hub (default 30)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for the cold sync, a spawn")
    p.add_argument("--log-level", default="WARN", help="the hubs' log level (logs: --keep)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (the hubs' and node agents' logs)")
    p.add_argument("--stall-stacks", action="store_true",
                   help="sample the GPU hub's loop during stalls over 12 ms and print the top stacks, "
                        "and the loop callbacks that ran over 12 ms")
    p.add_argument("--quick", action="store_true",
                   help="500 nodes, 15,000 pods, 300 views (a p99 over 100 is one view), 50 events a second, "
                        "2 change rounds, 10 spawns, unless given explicitly")
    p.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    args = p.parse_args(argv)
    # --quick sets the sizes not given explicitly
    for name, full, quick in (("nodes", 5000, 500), ("pods", 150_000, 15_000), ("views", 1000, 300),
                              ("changes", 10, 2), ("spawns", 30, 10), ("rate", 200.0, 50.0)):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.nodes < 10 or args.pods < 0 or args.views < 1 or args.changes < 1 or args.spawns < 1:
        p.error("--nodes must be >= 10, --pods >= 0, --views, --changes and --spawns >= 1")
    try:
        result = run(args)
    except RunFailed as e:  # the run itself failed: say why and what was measured before, exit 2
        print(f"benchmarks/hub.py: the run failed: {e}", file=sys.stderr)
        done = [k for k in ("cluster_build", "cold_sync", "views", "changes", "spawns") if k in e.figures]
        if done:
            print(f"figures measured before it failed ({', '.join(done)}), not judged:", file=sys.stderr)
            print(json.dumps(e.figures, indent=2, default=str), file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - the run could not begin: say why, exit 2
        print(f"benchmarks/hub.py: the run failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    rows = verdicts(result)
    load = "/".join(f"{x:.2f}" for x in result["load_before"]), "/".join(f"{x:.2f}" for x in result["load_after"])
    print_table(rows, f"hub benchmark, {args.nodes} GPU nodes, {args.pods} pods, {result['date']}, "
                      f"{result['cpus']} CPUs, load average {load[0]} at the start, {load[1]} at the end")
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    for count, stack in result["gpu_hub_end"].get("stall_stacks", []):
        print(f"{count:6d}  {stack}")
    for phase, figures in (("cold sync", result["cold_sync"]["stall"]), ("views", result["views"]["gpu_stall"]),
                           ("changes and spawns", result["gpu_hub_end"])):
        if not args.stall_stacks:
            break
        if figures.get("slow_steps"):
            print(f"the GPU hub's loop callbacks that ran over 12 ms, {phase}: count, longest ms, what")
        for count, worst, what in figures.get("slow_steps", []):
            print(f"{count:6d} {worst:7.1f}  {what}")
    missed = [r[0] for r in rows if r[3] is False]
    if missed:
        print(f"MISSED: {'; '.join(missed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
