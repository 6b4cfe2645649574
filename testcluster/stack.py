"""The whole test cluster of ``gpuspawner demo`` and ``gpuspawner sim``: the real control plane, then
the node agent (its nodes, pods and exporters) in a process of its own that registers the cluster
file while the caller goes on.  Every process runs under ``guard.py``: none outlives the caller."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import sys
from collections.abc import Sequence

from testcluster.launcher import ControlPlane, ControlPlaneError, free_port

GUARD = pathlib.Path(__file__).resolve().parent / "guard.py"
REPO = pathlib.Path(__file__).resolve().parent.parent
AGENT_LOG = "nodeagent.log"
#: the scale-from-zero node group of the packaged demo cluster (gpuspawner/data/clusters/default.yaml)
DEMO_NODE_GROUPS = pathlib.Path(__file__).resolve().parent / "demo-node-groups.yaml"
#: the Kueue objects of ``gpuspawner demo --kueue``: the demo cluster's A100 pool queues
DEMO_KUEUE = pathlib.Path(__file__).resolve().parent / "demo-kueue.yaml"
_TAIL = 20


class ClusterFileError(Exception):
    """The node agent refused the cluster file (or the API server one of its objects): says what to fix."""


def guarded(argv: Sequence[str], grace: float = 15.0, orphan_grace: float = 3.0,
            orphan_remove: str | os.PathLike[str] | None = None) -> list[str]:
    """``argv`` run under ``guard.py``: its whole process tree ends with it, or with its caller (and then
    ``orphan_remove``, the caller's scratch folder, goes too)."""
    extra = [f"--orphan-remove={orphan_remove}"] if orphan_remove else []
    return [sys.executable, str(GUARD), f"--grace={grace:g}", f"--orphan-grace={orphan_grace:g}", *extra, "--",
            *argv]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment, with the checkout on PYTHONPATH (``testcluster`` is not installed) and the
    interpreter's bin folder on PATH (the cluster's binaries and ``jupyterhub-singleuser``)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra or {})
    return env


async def stop_process(proc: asyncio.subprocess.Process, timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), timeout)
    except asyncio.TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


class TestCluster:
    """``await start()``: the control plane is ready and the admin kubeconfig written; the node
    agent registers the cluster file meanwhile (``agent_ready`` awaits it, ``agent_failure`` says
    why it stopped).  ``await stop()`` ends both."""

    __test__ = False  # not a pytest class

    def __init__(self, workdir: str | os.PathLike[str], cluster_file: str | os.PathLike[str], *,
                 port: int = 0, kubeconfig: str | os.PathLike[str] | None = None, run_pods: bool = True,
                 dcgm_exporter: bool = False, node_groups: str | os.PathLike[str] | None = None,
                 scale_up_seconds: float | None = None, agent_args: Sequence[str] = (),
                 scratch: str | os.PathLike[str] | None = None):
        self.workdir = pathlib.Path(workdir)
        self.cluster_file = str(cluster_file)
        self.control_plane = ControlPlane(self.workdir / "controlplane", port or None, kubeconfig=kubeconfig)
        self.run_pods = run_pods
        self.dcgm_exporter = dcgm_exporter
        self.node_groups = node_groups
        self.scale_up_seconds = scale_up_seconds
        self.agent_args = list(agent_args)
        self.scratch = scratch  # the caller's folder: removed by the agent's guard if the caller dies
        self.agent: asyncio.subprocess.Process | None = None
        self.agent_line = ""
        self._ready: asyncio.Future[str] | None = None
        self._reader: asyncio.Task | None = None

    @property
    def server(self) -> str:
        return self.control_plane.server

    @property
    def kubeconfig(self) -> pathlib.Path:
        return self.control_plane.kubeconfig

    @property
    def agent_log(self) -> pathlib.Path:
        return self.workdir / AGENT_LOG

    def agent_command(self) -> list[str]:
        cmd = [sys.executable, "-m", "testcluster.nodeagent", "--cluster", self.cluster_file,
               "--kubeconfig", str(self.kubeconfig), "--kubelet-port", str(free_port()),
               "--cluster-info", str(self.control_plane.data_dir / "cluster.json"), *self.agent_args]
        if not self.run_pods:
            cmd.append("--no-processes")
        if self.dcgm_exporter:
            cmd.append("--dcgm-exporter")
        if self.node_groups:
            cmd += ["--node-groups", str(self.node_groups)]
            if self.scale_up_seconds is not None:
                cmd += ["--scale-up-seconds", f"{self.scale_up_seconds:g}"]
        return cmd

    async def start(self) -> None:
        """Start the control plane (raises ``ControlPlaneError``), then the node agent."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        # spawned from this thread: its parent-death signal follows this thread's life
        self.control_plane.spawn()
        try:
            await asyncio.get_running_loop().run_in_executor(None, self.control_plane.wait_ready)
        except BaseException:
            self.control_plane.stop()
            raise
        log = open(self.agent_log, "wb")  # noqa: SIM115 - the child holds its own descriptor
        try:
            # a nodes' agent stopping with the API server gone may wait out its requests' timeouts
            self.agent = await asyncio.create_subprocess_exec(
                *guarded(self.agent_command(), grace=10.0, orphan_grace=3.0, orphan_remove=self.scratch),
                stdout=asyncio.subprocess.PIPE,
                stderr=log, env=child_env(), start_new_session=True)
        finally:
            log.close()
        self._ready = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_agent())

    async def _read_agent(self) -> None:
        assert self.agent is not None and self.agent.stdout is not None and self._ready is not None
        while True:
            line = (await self.agent.stdout.readline()).decode(errors="replace")
            if not line:
                break
            if line.startswith("nodeagent ready:") and not self._ready.done():
                self.agent_line = line.strip()
                self._ready.set_result(self.agent_line)
        await self.agent.wait()
        if not self._ready.done():
            self._ready.set_exception(self._agent_error())

    def _agent_error(self) -> Exception:
        code = self.agent.returncode if self.agent else None
        try:
            lines = self.agent_log.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        said = [ln.split("nodeagent: ", 1)[1] for ln in lines if ln.startswith("nodeagent: ")]
        if code == 2 and said:
            return ClusterFileError(said[-1])
        tail = "\n".join(lines[-_TAIL:])
        return RuntimeError(f"the node agent exited with status {code}; its log ({self.agent_log}):\n{tail}")

    async def agent_ready(self) -> str:
        """The agent's ``nodeagent ready: ...`` line once every node is registered; raises
        ``ClusterFileError`` for a file it refused, ``RuntimeError`` for any other end."""
        assert self._ready is not None, "start() first"
        return await asyncio.shield(self._ready)

    async def agent_exited(self) -> int:
        """Wait until the agent's process ends (after it was ready or not); its exit status."""
        assert self.agent is not None
        return await self.agent.wait()

    async def stop(self) -> None:
        """The agent first (it kills its pods' processes), then the control plane."""
        if self.agent is not None:
            await stop_process(self.agent, 20.0)
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._ready is not None:
            if self._ready.done() and not self._ready.cancelled():
                self._ready.exception()  # read: an end after the caller stopped waiting is no news
            self._ready.cancel()
        await asyncio.get_running_loop().run_in_executor(None, self.control_plane.stop)


__all__ = ["DEMO_KUEUE", "DEMO_NODE_GROUPS", "ClusterFileError", "ControlPlaneError", "TestCluster", "child_env", "guarded", "stop_process"]
