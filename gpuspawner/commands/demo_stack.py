"""``gpuspawner demo`` on the test cluster: the control plane, the node agent registering the cluster file
meanwhile, Kueue with ``--kueue``, then the hub.  Every child runs under the test cluster's guard:
nothing outlives the demo, even ``kill -9`` of it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from gpuspawner.commands import testbed
from gpuspawner.commands.demo import DEMO_CONFIG, DEMO_NAMESPACE, _hub_env, _serve_hub, _stop_hub

#: c.GPUSpawner.gpu_kueue_queues of ``--kueue``: the queue testcluster/demo-kueue.yaml makes
KUEUE_QUEUES = [{"match": "gpu-a100-pool:*", "queue": "gpu-a100"}]


async def run_real(args: argparse.Namespace, proxy: str, snippet: Path) -> int:
    """The real control plane, the node agent registering the cluster file meanwhile, then the hub."""
    from gpuspawner.commands.demo_cull import DemoCulling

    stack = testbed.load()
    started = asyncio.get_running_loop().time()
    workdir = Path(tempfile.mkdtemp(prefix="gpuspawner-demo-"))
    kubeconfig = Path(args.kubeconfig).resolve() if args.kubeconfig else workdir / "kubeconfig"
    cluster_file = args.cluster or str(testbed.default_cluster_file())
    cull = None if args.no_cull else DemoCulling()
    cluster = stack.TestCluster(workdir / "cluster", cluster_file, port=args.k8s_port, kubeconfig=kubeconfig,
                                dcgm_exporter=cull is not None, node_groups=_node_groups(args, stack),
                                scale_up_seconds=args.scale_up_seconds, scratch=workdir)
    hub: asyncio.subprocess.Process | None = None
    kueue = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    failed: list[int] = []
    watcher: asyncio.Task | None = None
    try:
        try:
            await cluster.start()
        except stack.ControlPlaneError as e:
            print(f"gpuspawner demo: {e}", file=sys.stderr)
            return 1
        print(f"Kubernetes API server {cluster.server} ready in {cluster.control_plane.ready_seconds:.1f}s; "
              f"kubeconfig: {kubeconfig}", flush=True)
        watcher = asyncio.create_task(_watch_agent(stack, cluster, cluster_file, stop, failed))
        try:
            await _ensure_namespace_real(kubeconfig, DEMO_NAMESPACE)
        except (RuntimeError, OSError) as e:
            print(f"gpuspawner demo: cannot create the hub's namespace: {e}", file=sys.stderr)
            return 1
        env = _hub_env(args, workdir, kubeconfig, proxy, snippet)
        if args.kueue:
            kueue = await _start_kueue(stack, kubeconfig, workdir)
            if kueue is None:
                return 1
            env["GPUSPAWNER_DEMO_KUEUE_QUEUES"] = json.dumps(KUEUE_QUEUES)
        if cull is not None:  # the hub runs the culler as a service (demo_cull)
            env.update(await cull.start(workdir, str(kubeconfig), os.environ.get("PYTHONPATH"),
                                        wrap=lambda argv: stack.guarded(argv, grace=10.0)))
            print(cull.describe(), flush=True)
        # under the guard: the hub's proxy and services (new sessions of their own) end with it; the
        # hub first deletes its users' pods while the cluster still runs
        hub = await asyncio.create_subprocess_exec(
            *stack.guarded([sys.executable, "-m", "jupyterhub", "-f", str(DEMO_CONFIG)], grace=25.0,
                           orphan_remove=workdir),
            cwd=str(workdir), env=env, start_new_session=True,
        )
        code = await _serve_hub(hub, f"http://127.0.0.1:{args.port}", cluster.server, stop, kubeconfig,
                                kubectl_hint=f"kubectl --kubeconfig {kubeconfig} get nodes", started=started)
        return failed[0] if failed else code
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
        if hub is not None and hub.returncode is None:
            await _stop_hub(hub)
        if cull is not None:
            await cull.stop()
        if kueue is not None:
            await asyncio.to_thread(kueue.stop)
        await cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


async def _start_kueue(stack, kubeconfig: Path, workdir: Path):
    """Kueue against the demo's control plane, with the demo cluster's queues; None (said why) if it fails."""
    kueue_mod = testbed.load_kueue()
    kueue = kueue_mod.Kueue(kubeconfig, workdir / "kueue", wait_for_pods_ready="10m",
                            wrap=lambda argv: stack.guarded(argv, grace=10.0))
    print("starting Kueue (its controller manager, webhooks and visibility API) ...", flush=True)
    try:
        await asyncio.to_thread(kueue.start)
        await asyncio.to_thread(kueue.apply_file, stack.DEMO_KUEUE)
    except kueue_mod.KueueError as e:
        print(f"gpuspawner demo: Kueue did not start: {e}", file=sys.stderr)
        await asyncio.to_thread(kueue.stop)
        return None
    print(f"Kueue is running: the A100 pool's servers queue in LocalQueue gpu-a100 ({stack.DEMO_KUEUE}); "
          f"log: {kueue.log_path}", flush=True)
    return kueue


def _node_groups(args: argparse.Namespace, stack) -> str | None:
    """``--node-groups``, else the demo cluster's own group when the demo cluster runs."""
    if args.node_groups:
        return args.node_groups
    return None if args.cluster else str(stack.DEMO_NODE_GROUPS)


async def _watch_agent(stack, cluster, cluster_file: str, stop: asyncio.Event, failed: list[int]) -> None:
    """Say when the nodes are registered; a cluster file refused (2) or an agent that ended (1) stops the demo."""
    try:
        print(f"{await cluster.agent_ready()} (cluster file {cluster_file})", flush=True)
    except stack.ClusterFileError as e:
        print(f"gpuspawner demo: cannot load the cluster {cluster_file}: {e}", file=sys.stderr)
        failed.append(2)
        stop.set()
        return
    except RuntimeError as e:
        print(f"gpuspawner demo: {e}", file=sys.stderr)
        failed.append(1)
        stop.set()
        return
    code = await cluster.agent_exited()
    if not stop.is_set():
        print(f"gpuspawner demo: the node agent exited with status {code}; its log: {cluster.agent_log}",
              file=sys.stderr)
        failed.append(1)
        stop.set()


async def _ensure_namespace_real(kubeconfig: Path, name: str) -> None:
    """The hub's namespace, as an admin (or the Helm chart) creates it before installing."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={kubeconfig}", "create", "namespace", name,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0 and b"AlreadyExists" not in err:
        raise RuntimeError(f"kubectl create namespace {name}: {err.decode(errors='replace').strip()}")
