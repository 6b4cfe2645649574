"""``gpuspawner sim``: the test cluster in the foreground (Kubernetes' own control plane with the
simulated GPU nodes of a cluster file).  Design notes: docs/test-cluster.md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile

from gpuspawner.commands import testbed
from gpuspawner.commands.arguments import loopback, port
from gpuspawner.commands.extras import demo_extra_problem


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="FILE",
                        help="manifests to load (multi-document YAML, kind: List, or JSON as "
                             "`kubectl get nodes,pods -A -o yaml|json` prints); default: the packaged demo cluster")
    parser.add_argument("--host", type=loopback, default="127.0.0.1",
                        help="loopback address the API server listens on (default: 127.0.0.1; the real control "
                             "plane listens on 127.0.0.1 only)")
    parser.add_argument("--port", type=port, default=0, help="the API server's HTTPS port (default: any free port)")
    parser.add_argument("--kubeconfig", metavar="PATH",
                        help="write the admin kubeconfig here as soon as the API server is ready")
    parser.add_argument("--node-groups", metavar="FILE",
                        help="scale-from-zero node groups whose nodes the test cluster's autoscaler starts for "
                             "unschedulable pods (default, without --cluster: testcluster/demo-node-groups.yaml)")
    parser.add_argument("--scale-up-seconds", type=float, metavar="S",
                        help="every node group's delay, whatever its file says (default: the file's)")
    parser.add_argument("--no-run-pods", action="store_true",
                        help="mark pods Running without starting any process")
    parser.add_argument("--dcgm-exporter", action="store_true",
                        help="run NVIDIA's DCGM exporter (simulated) as a pod on each NVIDIA GPU node "
                             "(namespace gpu-operator, port 9400): GPU activity follows the pods' CPU use "
                             "or their gpuspawner.sim/gpu-activity annotation")


def _stop_event() -> asyncio.Event:
    """Set by Ctrl-C or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _first(stop: asyncio.Event, work: "asyncio.Future") -> bool:
    """Wait for ``work`` or ``stop``; True when ``work`` finished first."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({stopping, work}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    return work.done()


async def _serve_real(args: argparse.Namespace) -> int:
    """Kubernetes' control plane and the node agent: the API server is served (and the kubeconfig
    written) at once; the nodes register meanwhile."""
    stack = testbed.load()
    if args.host != "127.0.0.1":
        print(f"gpuspawner sim: --host {args.host}: the control plane listens on 127.0.0.1 only",
              file=sys.stderr)
        return 2
    cluster_file = args.cluster or str(testbed.default_cluster_file())
    workdir = tempfile.mkdtemp(prefix="gpuspawner-sim-")
    cluster = stack.TestCluster(workdir, cluster_file, port=args.port, kubeconfig=args.kubeconfig,
                                run_pods=not args.no_run_pods, dcgm_exporter=args.dcgm_exporter,
                                node_groups=args.node_groups or (None if args.cluster else stack.DEMO_NODE_GROUPS),
                                scale_up_seconds=args.scale_up_seconds, scratch=workdir)
    stop = _stop_event()
    try:
        try:
            await cluster.start()
        except stack.ControlPlaneError as e:
            print(f"gpuspawner sim: {e}", file=sys.stderr)
            return 1
        url = cluster.server
        print(f"Kubernetes API server: {url}  (control plane ready in {cluster.control_plane.ready_seconds:.1f}s)")
        print(f"kubeconfig: {cluster.kubeconfig}   (kubectl --kubeconfig {cluster.kubeconfig} get nodes "
              "-L nvidia.com/gpu.product)")
        print(f"registering the nodes of {cluster_file} ...", flush=True)
        ready = asyncio.ensure_future(cluster.agent_ready())
        if not await _first(stop, ready):
            ready.cancel()
            return 0
        try:
            print(ready.result())
        except stack.ClusterFileError as e:
            print(f"gpuspawner sim: cannot load the cluster {cluster_file}: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:
            print(f"gpuspawner sim: {e}", file=sys.stderr)
            return 1
        print("Ctrl-C stops the cluster and every process it started.", flush=True)
        exited = asyncio.ensure_future(cluster.agent_exited())
        if await _first(stop, exited):
            print(f"gpuspawner sim: the node agent exited with status {exited.result()}; its log: "
                  f"{cluster.agent_log}", file=sys.stderr)
            return 1
        return 0
    finally:
        await cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(args: argparse.Namespace) -> int:
    problem = demo_extra_problem("sim") or testbed.problem("sim")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve_real(args))
    except KeyboardInterrupt:
        return 130
