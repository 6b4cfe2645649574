"""``gpuspawner sim``: run the simulated Kubernetes GPU cluster in the foreground.

    gpuspawner sim                       # the packaged default cluster
    gpuspawner sim --cluster my.yaml --port 8001 --kubeconfig ./kubeconfig

Prints the API server's URL and a ``kubectl`` hint, then runs until Ctrl-C
(or SIGTERM), stopping every process the simulated kubelet started.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys

NAME = "sim"
HELP = "run the simulated Kubernetes GPU cluster alone"


def _loopback(value: str) -> str:
    try:
        ok = ipaddress.ip_address(value).is_loopback
    except ValueError:
        ok = value == "localhost"
    if not ok:
        raise argparse.ArgumentTypeError(f"{value!r} is not a loopback address: use 127.0.0.1 (or another 127.x.y.z)")
    return value


def _port(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"port {n} is out of range: use 1-65535, or 0 for any free port")
    return n


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", metavar="FILE",
                        help="manifests to load (multi-document YAML, kind: List, or JSON as "
                             "`kubectl get nodes,pods -A -o yaml|json` prints); default: the packaged demo cluster")
    parser.add_argument("--host", type=_loopback, default="127.0.0.1",
                        help="loopback address the API server listens on (default: 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=0, help="API server port (default: any free port)")
    parser.add_argument("--kubeconfig", metavar="PATH", help="also write a kubeconfig for the cluster here")
    parser.add_argument("--stand-in", action="store_true",
                        help="answer HTTP on each pod's IP and ports with a tiny stand-in instead of running "
                             "the containers' commands")
    parser.add_argument("--no-run-pods", action="store_true",
                        help="mark pods Running without starting any process")
    parser.add_argument("--hide-taints", action="store_true",
                        help="word FailedScheduling like Kubernetes >= 1.35: 'node(s) had untolerated taint(s)'")


async def _serve(args: argparse.Namespace) -> int:
    from gpuspawner.sim.cluster import SimCluster
    from gpuspawner.sim.errors import ApiError
    from gpuspawner.sim.loader import LoadError
    from gpuspawner.sim.plugins import MessageStyle

    cluster = SimCluster(cluster_file=args.cluster, host=args.host, port=args.port,
                         run_pods=not args.no_run_pods, stand_in=args.stand_in,
                         message_style=MessageStyle(taint_details=not args.hide_taints))
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
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 130
