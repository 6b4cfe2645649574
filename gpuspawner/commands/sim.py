"""``gpuspawner sim``: run the simulated Kubernetes GPU cluster in the foreground.
Design notes: docs/architecture.md.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from gpuspawner.commands.arguments import loopback, port
from gpuspawner.commands.extras import demo_extra_problem


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="FILE",
                        help="manifests to load (multi-document YAML, kind: List, or JSON as "
                             "`kubectl get nodes,pods -A -o yaml|json` prints); default: the packaged demo cluster")
    parser.add_argument("--host", type=loopback, default="127.0.0.1",
                        help="loopback address the API server listens on (default: 127.0.0.1)")
    parser.add_argument("--port", type=port, default=0, help="API server port (default: any free port)")
    parser.add_argument("--kubeconfig", metavar="PATH", help="also write a kubeconfig for the cluster here")
    parser.add_argument("--stand-in", action="store_true",
                        help="answer HTTP on each pod's IP and ports with a tiny stand-in instead of running "
                             "the containers' commands")
    parser.add_argument("--no-run-pods", action="store_true",
                        help="mark pods Running without starting any process")
    parser.add_argument("--dcgm-exporter", action="store_true",
                        help="run NVIDIA's DCGM exporter (simulated) as a pod on each NVIDIA GPU node "
                             "(namespace gpu-operator, port 9400): GPU activity follows the pods' CPU use "
                             "or their gpuspawner.sim/gpu-activity annotation")
    parser.add_argument("--keep-timestamps", action="store_true",
                        help="keep the cluster file's creationTimestamp and status times, so that a snapshot of a "
                             "real cluster replays with its ages (default: everything is created now)")
    parser.add_argument("--hide-taints", action="store_true",
                        help="word FailedScheduling like Kubernetes >= 1.35: 'node(s) had untolerated taint(s)'")


async def _serve(args: argparse.Namespace) -> int:
    from gpuspawner.sim.cluster import SimCluster
    from gpuspawner.sim.errors import ApiError
    from gpuspawner.sim.loader import LoadError
    from gpuspawner.sim.plugins import MessageStyle

    if args.dcgm_exporter and (args.stand_in or args.no_run_pods):
        print("gpuspawner sim: --dcgm-exporter runs the exporters as processes: drop --stand-in and "
              "--no-run-pods", file=sys.stderr)
        return 2
    cluster = SimCluster(cluster_file=args.cluster, host=args.host, port=args.port,
                         run_pods=not args.no_run_pods, stand_in=args.stand_in,
                         message_style=MessageStyle(taint_details=not args.hide_taints),
                         dcgm_exporter=args.dcgm_exporter, keep_timestamps=args.keep_timestamps)
    try:
        url = await cluster.start()
    except (LoadError, ValueError, ApiError) as e:
        # LoadError names the document, the item and the field; an object the API server's own
        # validation refused is an ApiError (422 Invalid) that names the object and the field
        print(f"gpuspawner sim: cannot load the cluster {args.cluster or '(built in)'}: {e}", file=sys.stderr)
        await cluster.stop()
        return 2
    except OSError as e:
        print(f"gpuspawner sim: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # POSIX, as the simulated kubelet's process groups are
        loop.add_signal_handler(sig, stop.set)
    try:
        nodes = cluster.store.count("nodes")
        pods = cluster.store.count("pods")
        print(f"simulated cluster: {nodes} nodes, {pods} pods, loaded in {cluster.load_seconds:.2f}s")
        print(f"API server: {url}")
        if args.kubeconfig:
            path = cluster.write_kubeconfig(args.kubeconfig)
            print(f"kubeconfig: {path}   (kubectl --kubeconfig {path} get nodes)")
        print(f"try: kubectl --server {url} get nodes -L nvidia.com/gpu.product")
        print("Ctrl-C stops the cluster and every process it started.", flush=True)
        await stop.wait()
    finally:
        await cluster.stop()
    return 0


def main(args: argparse.Namespace) -> int:
    problem = demo_extra_problem("sim")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 130
