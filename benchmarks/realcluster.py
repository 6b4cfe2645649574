"""The benchmarks' big cluster on the real control plane: ``gpuspawner-cluster controlplane``,
``bigcluster.py``'s objects applied by the bulk node agent (``gpuspawner-cluster nodes``), the
fault proxy in front of the API server (its counts are the hub's requests), and watch events
streamed by a child process (``python benchmarks/realcluster.py stream``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from bigcluster import cluster_objects, make_pod  # noqa: E402
from testcluster import ControlPlane, find_binary  # noqa: E402
from testcluster.faultproxy import FaultProxy  # noqa: E402

KINDS = {"namespaces": "Namespace", "nodes": "Node", "pods": "Pod"}
SETTLE_TIMEOUT = 3600.0


class RealCluster:
    """``n_nodes`` GPU nodes and ``n_pods`` pods of ``bigcluster.py`` on a real control plane."""

    def __init__(self, n_nodes: int, n_pods: int, gpu_share: float, seed: int, unbound_share: float = 0.02,
                 workdir: Path | None = None) -> None:
        self.args = (n_nodes, n_pods, gpu_share, seed, unbound_share)
        self.seed = seed
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="gpuspawner-bench-cluster-"))
        self.control_plane = ControlPlane(self.dir / "cp")
        self.proxy: FaultProxy | None = None
        self.agent: subprocess.Popen | None = None
        self.streamer: subprocess.Popen | None = None
        self.built: dict[str, Any] = {}
        self.timings: dict[str, float] = {}

    def start(self, say=print) -> dict[str, Any]:
        """Start everything and wait until every bound pod runs; returns the build's timings."""
        try:
            return self._start(say)
        except BaseException:
            self.stop()
            raise

    def _start(self, say) -> dict[str, Any]:
        began = time.monotonic()
        cp = self.control_plane.start()
        self.timings["control_plane_s"] = round(time.monotonic() - began, 1)
        t = time.monotonic()
        cluster_file = self.dir / "cluster.jsonl"
        with cluster_file.open("w") as f:  # one JSON object a line: the agent's reader takes a stream
            for plural, obj in cluster_objects(*self.args, built=self.built):
                f.write(json.dumps({"apiVersion": "v1", "kind": KINDS[plural], **obj}, separators=(",", ":")))
                f.write("\n")
        self.timings["file_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        log = (self.dir / "nodes.log").open("wb")
        self.agent = subprocess.Popen(
            [find_binary(), "nodes", f"--cluster={cluster_file}", f"--kubeconfig={cp.kubeconfig}", "--workers=32"],
            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        assert self.agent.stdout is not None
        line = self.agent.stdout.readline().decode(errors="replace")
        if not line.startswith("READY "):
            raise RuntimeError(f"gpuspawner-cluster nodes did not start (exit {self.agent.wait()}): "
                               f"{(self.dir / 'nodes.log').read_text(errors='replace')[-3000:]}")
        self.timings["applied_s"] = round(time.monotonic() - t, 1)
        say(f"  control plane ready in {self.timings['control_plane_s']} s; {len(self.built['nodes'])} nodes and "
            f"{self.args[1]} pods applied in {self.timings['applied_s']} s", flush=True)
        self._wait_settled(cp)
        self.timings["settled_s"] = round(time.monotonic() - t, 1)
        self.timings["build_s"] = round(time.monotonic() - began, 1)
        self.proxy = FaultProxy(cp.data_dir).start()
        return dict(self.timings)

    def _wait_settled(self, cp: ControlPlane) -> None:
        """Until no pod bound to a node is Pending (the agent reported each one Running)."""
        import ssl
        import urllib.request

        pki = cp.data_dir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        url = (f"{cp.server}/api/v1/pods?limit=1&fieldSelector="
               + urllib.request.quote("status.phase=Pending,spec.nodeName!="))
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while time.monotonic() < deadline:
            if self.agent is not None and self.agent.poll() is not None:
                raise RuntimeError(f"gpuspawner-cluster nodes exited with {self.agent.returncode}")
            with urllib.request.urlopen(url, context=ctx, timeout=120) as r:
                if not json.load(r)["items"]:
                    return
            time.sleep(2)
        raise RuntimeError(f"bound pods still Pending after {SETTLE_TIMEOUT:g} s")

    def hub_kubeconfig(self, dest: Path) -> Path:
        """The admin kubeconfig through the fault proxy, at ``dest``: what the measured hub uses."""
        assert self.proxy is not None
        return self.proxy.kubeconfig_through(self.control_plane.kubeconfig, dest)

    def requests(self) -> int:
        """Requests the measured hub made (they all pass the proxy)."""
        assert self.proxy is not None
        return self.proxy.counts()

    def stream(self, rate: float) -> None:
        """Start ~``rate`` watch events a second from a child process (its own requests go straight
        to the API server, so they are not counted)."""
        self.pause()
        self.streamer = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "stream", f"--kubeconfig={self.control_plane.kubeconfig}",
             f"--rate={rate}", f"--seed={self.seed + 1}", f"--nodes={','.join(self.built['nodes'])}"],
            stdout=subprocess.DEVNULL, stderr=(self.dir / "stream.log").open("ab"), start_new_session=True)

    def pause(self) -> None:
        if self.streamer is not None and self.streamer.poll() is None:
            self.streamer.send_signal(signal.SIGTERM)
            self.streamer.wait(30)
        self.streamer = None

    def stop(self) -> None:
        self.pause()
        if self.agent is not None and self.agent.poll() is None:
            os.killpg(self.agent.pid, signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.agent.pid, signal.SIGKILL)
                self.agent.wait()
        if self.proxy is not None:
            self.proxy.stop()
        self.control_plane.stop()
        shutil.rmtree(self.dir, ignore_errors=True)  # etcd's data: hundreds of MB at full size


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
