"""``gpuspawner demo``: a real JupyterHub with GPUSpawner on the test cluster (``demo_stack``): the
arguments, the checks before anything starts, and the hub's side."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import signal
import socket
import sys
from pathlib import Path

from gpuspawner import config_snippet
from gpuspawner.commands import testbed
from gpuspawner.commands.arguments import port
from gpuspawner.commands.extras import demo_extra_problem

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "data" / "demo" / "jupyterhub_config.py"
HUB_READY_TIMEOUT = 90.0
DEMO_NAMESPACE = "jupyterhub"  # c.GPUSpawner.namespace in the demo config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help="Kubernetes manifests (Nodes, Pods) to load; default: the built-in GPU cluster",
    )
    parser.add_argument("--port", type=port, default=8000, help="JupyterHub's public port (default 8000)")
    parser.add_argument(
        "--k8s-port",
        type=port,
        default=0,
        metavar="N",
        help="the Kubernetes API server's HTTPS port (default: a free port)",
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="write the cluster's admin kubeconfig here as soon as the API server is ready "
             "(default: in the demo's temporary directory)",
    )
    parser.add_argument(
        "--node-groups",
        metavar="FILE",
        help="scale-from-zero node groups the test cluster's autoscaler starts nodes of (default, without "
             "--cluster: the demo cluster's H100 spot pool, testcluster/demo-node-groups.yaml)",
    )
    parser.add_argument(
        "--scale-up-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="seconds until a scale-from-zero node appears for a pending pod (default 30: the demo's "
             "shortened stand-in for the pool's declared minutes)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="queue the A100 pool's servers through Kueue (built from its module by scripts/setup.sh): a full "
             "pool takes a place in line (docs/kueue.md)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="an extra jupyterhub_config.py loaded after the demo's own (to try settings)",
    )
    parser.add_argument(
        "--no-cull",
        action="store_true",
        help="run no GPU culler (default: gpuspawner cull as a hub service, with Prometheus when installed)",
    )
    parser.add_argument(
        "--admin-token",
        metavar="TOKEN",
        help="register this API token for an admin service (for scripts and the REST API)",
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _find_proxy() -> str | None:
    """configurable-http-proxy: on PATH, or in the source checkout's node_modules."""
    found = shutil.which("configurable-http-proxy")
    if found:
        return found
    local = Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "configurable-http-proxy"
    return str(local) if local.exists() else None


def main(args: argparse.Namespace) -> int:
    problem = demo_extra_problem("demo")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    problems = []
    if args.cluster and not Path(args.cluster).is_file():
        problems.append(f"--cluster {args.cluster}: no such file")
    if args.node_groups and not Path(args.node_groups).is_file():
        problems.append(f"--node-groups {args.node_groups}: no such file")
    if args.scale_up_seconds < 0:
        problems.append("--scale-up-seconds must be 0 or more")
    if args.config and not Path(args.config).is_file():
        problems.append(f"--config {args.config}: no such file")
    if args.port and not _port_is_free(args.port):
        problems.append(f"--port {args.port} is in use; choose another with --port")
    if args.k8s_port and not _port_is_free(args.k8s_port):
        problems.append(f"--k8s-port {args.k8s_port} is in use; choose another with --k8s-port")
    if args.admin_token is not None and len(args.admin_token) < 8:
        problems.append("--admin-token must be at least 8 characters")
    if args.kueue and args.cluster:
        problems.append("--kueue sets up queues for the demo cluster's A100 pool: drop --cluster")
    missing = testbed.problem("demo")
    if missing:
        problems.append(missing.removeprefix("gpuspawner demo: "))
    proxy = _find_proxy()
    if not proxy:
        problems.append(
            "configurable-http-proxy (JupyterHub's proxy) was not found: run scripts/setup.sh, "
            "or `npm install -g configurable-http-proxy`"
        )
    snippet = config_snippet()
    if not snippet.is_file():
        problems.append(f"{snippet} was not found; reinstall gpuspawner")
    if problems:
        for p in problems:
            print(f"gpuspawner demo: {p}", file=sys.stderr)
        return 2
    try:
        from gpuspawner.commands.demo_stack import run_real

        return asyncio.run(run_real(args, proxy, snippet))
    except KeyboardInterrupt:
        return 0


def _hub_env(args: argparse.Namespace, workdir: Path, kubeconfig: Path, proxy: str, snippet: Path) -> dict[str, str]:
    """The hub's environment: the demo config reads its settings from these variables."""
    env = dict(os.environ)
    env.update(
        KUBECONFIG=str(kubeconfig),
        GPUSPAWNER_DEMO_DIR=str(workdir),
        GPUSPAWNER_DEMO_SNIPPET=str(snippet),
        GPUSPAWNER_DEMO_PORT=str(args.port),
        GPUSPAWNER_DEMO_HUB_PORT=str(_free_port()),
        GPUSPAWNER_DEMO_PROXY_API_PORT=str(_free_port()),
        GPUSPAWNER_DEMO_PROXY=proxy,
        GPUSPAWNER_DEMO_ADMIN_TOKEN=args.admin_token or "",
        GPUSPAWNER_DEMO_EXTRA_CONFIG=str(Path(args.config).resolve()) if args.config else "",
        CONFIGPROXY_AUTH_TOKEN=secrets.token_hex(32),
    )
    # the single-user servers the node agent's kubelet starts must find jupyterhub-singleuser
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


async def _serve_hub(hub: asyncio.subprocess.Process, hub_url: str, k8s_url: str, stop: asyncio.Event,
                     kubeconfig: Path | None = None, kubectl_hint: str | None = None,
                     started: float | None = None) -> int:
    """Wait for the hub to answer, say where everything is, then run until Ctrl-C or the hub exits."""
    if not await _wait_hub(hub, hub_url, stop):
        if hub.returncode is not None:
            print(f"gpuspawner demo: JupyterHub exited with code {hub.returncode}", file=sys.stderr)
            return 1
        if stop.is_set():
            return 0
        print("gpuspawner demo: JupyterHub did not answer in time", file=sys.stderr)
        return 1
    took = f" in {asyncio.get_running_loop().time() - started:.1f}s" if started is not None else ""
    print(
        "\n"
        f"gpuspawner demo is ready{took}.\n"
        f"  JupyterHub:     {hub_url}/  (log in with any user name and any password)\n"
        f"  Kubernetes API: {k8s_url}  ({kubectl_hint or f'kubectl --server {k8s_url} get nodes'})\n"
        f"  GPU capacity:   {hub_url}/hub/api/gpus\n"
        + (f"  Check it:       KUBECONFIG={kubeconfig} gpuspawner doctor --config {DEMO_CONFIG}\n" if kubeconfig else "")
        + "Press Ctrl-C to stop.\n",
        flush=True,
    )
    hub_exit = asyncio.ensure_future(hub.wait())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({hub_exit, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if hub_exit.done():
        print(f"gpuspawner demo: JupyterHub exited with code {hub.returncode}", file=sys.stderr)
        return 1
    return 0


async def _stop_hub(hub: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after 30 s: the hub deletes its users' pods while the cluster still runs."""
    hub.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(hub.wait(), 30)
    except asyncio.TimeoutError:
        hub.kill()
        await hub.wait()


async def _wait_hub(hub: asyncio.subprocess.Process, url: str, stop: asyncio.Event) -> bool:
    import aiohttp

    deadline = asyncio.get_running_loop().time() + HUB_READY_TIMEOUT
    async with aiohttp.ClientSession() as session:
        while asyncio.get_running_loop().time() < deadline:
            if hub.returncode is not None or stop.is_set():
                return False
            try:
                async with session.get(f"{url}/hub/api/", timeout=aiohttp.ClientTimeout(total=5)) as r:
                    if r.status == 200:
                        return True
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.3)
    return False
