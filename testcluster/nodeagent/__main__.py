"""``python -m testcluster.nodeagent --cluster FILE --kubeconfig PATH``: the nodes until SIGTERM.

Prints one line ``nodeagent ready: N nodes in S s`` when every node is registered and its pods
are handed over.  Ends on SIGTERM or SIGINT, or when its parent process dies, killing every
process it started.  Exit status: 0 when stopped, 2 for a cluster file, kubeconfig or object
the API server refuses (the message says what to fix), 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import signal
import sys

from testcluster.node.loader import LoadError

from .agent import NodeAgent
from .autoscale import NodeGroupError, load_groups
from .client import ApiError, KubeconfigError
from .kubeletapi import KubeletApiError, Tls
from .register import RegisterError

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent dies (Linux); the watchdog covers the rest."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


async def watch_parent(parent: int, stop: asyncio.Event, interval: float = 1.0) -> None:
    """Set ``stop`` once the parent is gone (we were re-parented)."""
    while not stop.is_set():
        if os.getppid() != parent:
            stop.set()
            return
        await asyncio.sleep(interval)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testcluster.nodeagent",
                                description="Simulated GPU nodes of a cluster file on a Kubernetes API server.")
    p.add_argument("--cluster", required=True, metavar="FILE", help="the cluster file (Nodes, Pods, DRA objects)")
    p.add_argument("--kubeconfig", required=True, metavar="PATH", help="the API server and credentials to use")
    p.add_argument("--kubelet-port", type=int, default=10250, metavar="N",
                   help="the port each node reports in status.daemonEndpoints (default 10250)")
    p.add_argument("--kubelet-api", action="store_true",
                   help="serve the kubelet API (logs, exec, attach, port-forward) on 127.0.0.1:--kubelet-port "
                        "with gpuspawner-kubelet-api")
    p.add_argument("--cluster-info", metavar="FILE",
                   help="a control plane's cluster.json: the CAs the kubelet API trusts and is signed by "
                        "(implies --kubelet-api)")
    p.add_argument("--no-processes", action="store_true",
                   help="run no pod as a process: every container is Running with nothing behind it")
    p.add_argument("--dcgm-exporter", action="store_true",
                   help="run a DCGM exporter pod (namespace gpu-operator, port 9400) on every NVIDIA GPU node, "
                        "DRA nodes included")
    p.add_argument("--node-groups", metavar="FILE",
                   help="scale-from-zero node groups (YAML list of name, max_nodes, delay_seconds, template): a "
                        "group's node registers after its delay when a pod is unschedulable and would fit it")
    p.add_argument("--scale-up-seconds", type=float, metavar="S",
                   help="every node group's delay, whatever its file says (a demo's shortened scale-up)")
    p.add_argument("--lease-interval", type=float, default=10.0, metavar="S",
                   help="seconds between two renewals of a node's lease (default 10)")
    p.add_argument("--max-rate", type=float, default=200.0, metavar="N",
                   help="lease renewals a second over all nodes, at most (default 200)")
    p.add_argument("--concurrency", type=int, default=16, metavar="N", help="requests at a time (default 16)")
    p.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default) or ERROR")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watchdog = asyncio.create_task(watch_parent(os.getppid(), stop))
    agent = NodeAgent(args.kubeconfig, args.cluster, run_pods=not args.no_processes, kubelet_port=args.kubelet_port,
                      lease_interval=args.lease_interval, max_rate=args.max_rate, concurrency=args.concurrency,
                      dcgm_exporter=args.dcgm_exporter, kubelet_api=args.kubelet_api,
                      kubelet_tls=Tls.from_cluster_info(args.cluster_info) if args.cluster_info else None,
                      node_groups=load_groups(args.node_groups, args.scale_up_seconds) if args.node_groups else None)
    starting = asyncio.create_task(agent.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    try:
        if not starting.done():
            starting.cancel()  # start() stops what it started when it is cancelled
            await asyncio.gather(starting, return_exceptions=True)
            return 0
        starting.result()
        print(f"nodeagent ready: {len(agent.node_names)} nodes in {agent.load_seconds:.1f} s", flush=True)
        await stopping
        return 0
    finally:
        watchdog.cancel()
        stopping.cancel()
        if starting.done() and not starting.cancelled() and starting.exception() is None:
            await agent.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s nodeagent %(levelname)s %(message)s")
    die_with_parent()
    try:
        return asyncio.run(run(args))
    except (LoadError, KubeconfigError, RegisterError, KubeletApiError, NodeGroupError) as e:
        print(f"nodeagent: {e}", file=sys.stderr)
        return 2
    except (ApiError, OSError) as e:
        print(f"nodeagent: the API server cannot be used: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
