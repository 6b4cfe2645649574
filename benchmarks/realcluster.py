"""The benchmarks' big cluster on the real control plane: ``gpuspawner-cluster controlplane``,
``bigcluster.py``'s objects applied by the bulk node agent (``gpuspawner-cluster nodes``), a few
nodes that run their pods as processes (``python -m testcluster.nodeagent``), the fault proxy in
front of the API server (its counts are the hub's requests), and watch events streamed by a child
process (``python benchmarks/realcluster.py stream``)."""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
import json
import os
import random
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bigcluster import SPAWN_LABEL, cluster_objects, make_pod  # noqa: E402
from testcluster.processes import start_session, stop_process  # noqa: E402
from testcluster import ControlPlane, find_binary  # noqa: E402
from testcluster.faultproxy import FaultProxy  # noqa: E402
from testcluster.stack import child_env  # noqa: E402

KINDS = {"namespaces": "Namespace", "nodes": "Node", "pods": "Pod"}
SETTLE_TIMEOUT = 3600.0
#: The control plane's Go heap may use this share of the machine's memory (GOMEMLIMIT). Etcd, the
#: API server's watch cache and the scheduler's and controllers' informers share its one process:
#: at 150,000 pods their live heap is about 8 GB, and Go's default collector (GOGC=100) lets the
#: heap grow to twice that before it collects, more than a 23 GB machine has beside the hubs.
CONTROL_PLANE_MEMORY_SHARE = 0.5
#: The CPU priority of the cluster's processes (the control plane, the node agents and the pods they
#: run, the event stream): a real cluster's control plane and nodes are not on the hub's machine.
#: On the benchmark's one machine they are, and at the same priority they take the hub's cores for
#: tens of milliseconds at a time (its event loop waits while on no CPU), which no hub can help.
#: Both hubs and the fault proxy run at this process's priority.
CLUSTER_NICENESS = 10


def machine_memory() -> int:
    """The machine's physical memory, bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class RealCluster:
    """``n_nodes`` GPU nodes and ``n_pods`` pods of ``bigcluster.py`` on a real control plane.

    ``spawn_nodes`` of the A100 nodes (Ready, schedulable, labelled ``SPAWN_LABEL``) are run by the
    Python node agent, which starts the pods bound to them as processes (a single-user server then
    answers at its pod IP); the bulk agent runs the others, whose pods are only reported Running.
    ``namespaces`` are created beside the file's."""

    def __init__(self, n_nodes: int, n_pods: int, gpu_share: float, seed: int, unbound_share: float = 0.02,
                 workdir: Path | None = None, *, spawn_nodes: int = 0, namespaces: tuple[str, ...] = ()) -> None:
        self.args = (n_nodes, n_pods, gpu_share, seed, unbound_share)
        self.seed = seed
        self.spawn_nodes = spawn_nodes
        self.namespaces = namespaces
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="gpuspawner-bench-cluster-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.control_plane = ControlPlane(
            self.dir / "cp", memory_limit=int(machine_memory() * CONTROL_PLANE_MEMORY_SHARE), niceness=CLUSTER_NICENESS)
        self.proxy: FaultProxy | None = None
        self.agent: subprocess.Popen | None = None
        self.runner: subprocess.Popen | None = None  # the Python node agent of the spawn nodes
        self.streamer: subprocess.Popen | None = None
        self.built: dict[str, Any] = {}
        self.timings: dict[str, float] = {}
        self._ssl: ssl.SSLContext | None = None

    def start(self, say=print) -> dict[str, Any]:
        """Start everything and wait until every bound pod runs; returns the build's timings."""
        try:
            return self._start(say)
        except BaseException:
            self.stop()
            raise

    def _write_files(self) -> tuple[Path, Path | None]:
        """The bulk agent's file (one JSON object a line: its reader takes a stream) and, with
        ``spawn_nodes``, the Python agent's (those nodes, as a ``kind: List``)."""
        cluster_file = self.dir / "cluster.jsonl"
        runner_nodes: list[dict] = []
        with cluster_file.open("w") as f:
            for ns in self.namespaces:
                f.write(json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}) + "\n")
            for plural, obj in cluster_objects(*self.args, built=self.built):
                doc = {"apiVersion": "v1", "kind": KINDS[plural], **obj}
                if plural == "nodes" and len(runner_nodes) < self.spawn_nodes and _spawnable(obj):
                    obj["metadata"]["labels"][SPAWN_LABEL] = "true"
                    runner_nodes.append(doc)
                    continue
                f.write(json.dumps(doc, separators=(",", ":")))
                f.write("\n")
        if len(runner_nodes) < self.spawn_nodes:
            raise RuntimeError(f"the cluster has {len(runner_nodes)} Ready, schedulable A100 nodes for the spawns, "
                               f"not {self.spawn_nodes}: give more --nodes")
        self.built["spawn_nodes"] = [n["metadata"]["name"] for n in runner_nodes]
        if not runner_nodes:
            return cluster_file, None
        runner_file = self.dir / "spawn-nodes.json"
        runner_file.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": runner_nodes}))
        return cluster_file, runner_file

    def _start(self, say) -> dict[str, Any]:
        began = time.monotonic()
        cp = self.control_plane.start()
        self.timings["control_plane_s"] = round(time.monotonic() - began, 1)
        t = time.monotonic()
        cluster_file, runner_file = self._write_files()
        self.timings["file_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        if runner_file is not None:
            self._start_runner(cp, runner_file)
        log = (self.dir / "nodes.log").open("wb")
        self.agent = start_session(
            [find_binary(), "nodes", f"--cluster={cluster_file}", f"--kubeconfig={cp.kubeconfig}", "--workers=32"],
            CLUSTER_NICENESS, stdout=subprocess.PIPE, stderr=log)
        assert self.agent.stdout is not None
        line = self.agent.stdout.readline().decode(errors="replace")
        if not line.startswith("READY "):
            raise RuntimeError(f"gpuspawner-cluster nodes did not start (exit {self.agent.wait()}): "
                               f"{(self.dir / 'nodes.log').read_text(errors='replace')[-3000:]}")
        self.timings["applied_s"] = round(time.monotonic() - t, 1)
        limit = self.control_plane.memory_limit or 0
        say(f"  control plane ready in {self.timings['control_plane_s']} s (Go heap limit {limit / 2**30:.1f} GiB; "
            f"the cluster's processes at niceness {CLUSTER_NICENESS}); {len(self.built['nodes'])} nodes and "
            f"{self.args[1]} pods applied in {self.timings['applied_s']} s", flush=True)
        self.wait_settled()
        self.timings["settled_s"] = round(time.monotonic() - t, 1)
        self.timings["build_s"] = round(time.monotonic() - began, 1)
        self.proxy = FaultProxy(cp.data_dir).start()
        return dict(self.timings)

    def _start_runner(self, cp: ControlPlane, runner_file: Path, timeout: float = 300.0) -> None:
        """The Python node agent of the spawn nodes, until it says it is ready."""
        log = self.dir / "spawn-nodes.log"
        self.runner = start_session(
            [sys.executable, "-m", "testcluster.nodeagent", f"--cluster={runner_file}", f"--kubeconfig={cp.kubeconfig}"],
            CLUSTER_NICENESS, stdout=subprocess.PIPE, stderr=log.open("wb"), env=child_env())
        assert self.runner.stdout is not None
        line = self.runner.stdout.readline().decode(errors="replace")
        if not line.startswith("nodeagent ready"):
            raise RuntimeError(f"the Python node agent did not start (exit {self.runner.wait(timeout)}): "
                               f"{log.read_text(errors='replace')[-3000:]}")

    def wait_settled(self, timeout: float = SETTLE_TIMEOUT) -> None:
        """Until no pod bound to a node is Pending (the agents admitted each one, or refused it), but
        for pods being deleted: the taint manager evicts the pods of the file's NotReady nodes after
        300 s, and a deletion may not be finished yet."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc, what in ((self.agent, "gpuspawner-cluster nodes"), (self.runner, "the Python node agent")):
                if proc is not None and proc.poll() is not None:
                    raise RuntimeError(f"{what} exited with {proc.returncode}")
            if not self._pending_pod():
                return
            time.sleep(2)
        raise RuntimeError(f"bound pods still Pending after {timeout:g} s")

    def _pending_pod(self) -> bool:
        """Whether a bound pod, not being deleted, is Pending (read a page at a time)."""
        selector = urllib.parse.quote("status.phase=Pending,spec.nodeName!=")
        cont = ""
        while True:
            page = self.call("GET", f"/api/v1/pods?limit=500&fieldSelector={selector}{cont}", timeout=120)
            if any(not p["metadata"].get("deletionTimestamp") for p in page["items"]):
                return True
            token = page["metadata"].get("continue")
            if not token:
                return False
            cont = "&continue=" + urllib.parse.quote(token)

    def call(self, method: str, path: str, body: dict | None = None, *, timeout: float = 30.0,
             content_type: str = "application/json") -> dict:
        """One request to the API server as its admin, straight (not through the proxy, so not
        counted); the answer's JSON."""
        if self._ssl is None:
            pki = self.control_plane.data_dir / "pki"
            self._ssl = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            self._ssl.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.control_plane.server}{path}", data=data, method=method,
                                     headers={"Content-Type": content_type})
        with urllib.request.urlopen(req, context=self._ssl, timeout=timeout) as r:
            return json.load(r)

    def hub_kubeconfig(self, dest: Path) -> Path:
        """The admin kubeconfig through the fault proxy, at ``dest``: what the measured hub uses."""
        assert self.proxy is not None
        return self.proxy.kubeconfig_through(self.control_plane.kubeconfig, dest)

    def requests(self) -> int:
        """Requests the measured hub made (they all pass the proxy)."""
        assert self.proxy is not None
        return self.proxy.counts()

    def requests_by_kind(self) -> Counter[tuple[str, str]]:
        """The same, by ``(verb, resource)``."""
        assert self.proxy is not None
        return Counter(self.proxy.counters())

    def stream(self, rate: float) -> None:
        """Start ~``rate`` watch events a second from a child process (its own requests go straight
        to the API server, so they are not counted); the spawn nodes get none of its pods."""
        self.pause()
        spawn_nodes = set(self.built["spawn_nodes"])
        nodes = [n for n in self.built["nodes"] if n not in spawn_nodes]
        self.streamer = start_session(
            [sys.executable, str(Path(__file__).resolve()), "stream", f"--kubeconfig={self.control_plane.kubeconfig}",
             f"--rate={rate}", f"--seed={self.seed + 1}", f"--nodes={','.join(nodes)}"],
            CLUSTER_NICENESS, stdout=subprocess.DEVNULL, stderr=(self.dir / "stream.log").open("ab"))

    def pause(self) -> None:
        stop_process(self.streamer, 30)
        self.streamer = None

    def stop(self, keep_logs: bool = False) -> None:
        """Stop everything; the work directory goes (with ``keep_logs``, only etcd's data)."""
        self.pause()
        stop_process(self.agent, 30)
        stop_process(self.runner, 60)  # it stops the pods' processes first
        if self.proxy is not None:
            self.proxy.stop()
        self.control_plane.stop()
        # etcd's data: hundreds of MB at full size
        shutil.rmtree(self.control_plane.data_dir if keep_logs else self.dir, ignore_errors=True)


def _spawnable(node: dict) -> bool:
    """An A100 node that is Ready and schedulable: the spawns' pool."""
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])
    return node["metadata"]["name"].startswith("a100-") and ready and not node["spec"].get("unschedulable")


async def _stream(kubeconfig: str, nodes: list[str], rate: float, seed: int) -> None:
    """GPU pods come and go, nodes get cordoned and uncordoned, at ``rate`` changes a second."""
    import aiohttp

    from testcluster.nodeagent.client import KNOWN, ApiError, Client

    client = await Client(kubeconfig, connections=32).open()
    rnd = random.Random(seed)
    mine: list[tuple[str, str]] = []
    i = 0
    period = 1.0 / rate
    next_at = time.monotonic()
    pending: set[asyncio.Task] = set()

    async def change(r: float, i: int) -> None:
        try:
            if r < 0.45 or not mine:
                obj = make_pod(900_000 + i, rnd.choice(nodes), "nvidia.com/gpu", 1, rnd)
                obj["metadata"]["name"] = f"stream-{seed}-{i:06d}"
                ns = obj["metadata"]["namespace"]
                await client.create(KNOWN["Pod"], {"apiVersion": "v1", "kind": "Pod", **obj}, ns)
                mine.append((ns, obj["metadata"]["name"]))  # created: now it may be deleted
            elif r < 0.9:
                ns, name = mine.pop(rnd.randrange(len(mine)))
                await client.delete(KNOWN["Pod"], name, ns, {"gracePeriodSeconds": 0})
            else:
                await client.patch(KNOWN["Node"], rnd.choice(nodes), {"spec": {"unschedulable": rnd.random() < 0.5}})
        except (ApiError, OSError, aiohttp.ClientError) as e:  # a conflict is not the benchmark's concern
            print(f"  (stream: {type(e).__name__}: {e})", file=sys.stderr)

    try:
        while True:
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            i += 1
            task = asyncio.create_task(change(rnd.random(), i))
            pending.add(task)
            task.add_done_callback(pending.discard)
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="stream watch events into a benchmark cluster until SIGTERM")
    p.add_argument("command", choices=["stream"])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seed", type=int, default=2)
    p.add_argument("--nodes", required=True, help="the node names, comma-separated")
    args = p.parse_args(argv)
    loop = asyncio.new_event_loop()
    task = loop.create_task(_stream(args.kubeconfig, args.nodes.split(","), args.rate, args.seed))
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
