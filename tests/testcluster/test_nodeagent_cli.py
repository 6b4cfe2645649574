"""``python -m testcluster.nodeagent``: ready line, SIGTERM and the parent's death end it and every
process it started; bad input exits 2 with a message that says what to fix."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from tests.builders.kubelet import marker, node_manifest, pids_with_marker
from tests.builders.nodeagent import env_server_pod, pod_where, running_with_ip, wait_for, write_cluster
from testcluster.nodeagent.client import KNOWN

ROOT = Path(__file__).resolve().parents[2]
AGENT = [sys.executable, "-m", "testcluster.nodeagent"]


def agent_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(ROOT))


async def ready_line(out: Path, timeout: float = 60) -> str:
    async def read():
        text = out.read_text() if out.exists() else ""
        return next((ln for ln in text.splitlines() if ln.startswith("nodeagent ready:")), None)
    return await wait_for(read, "the agent's ready line", timeout)


async def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("how", ["sigterm", "parent-killed"])
async def test_the_agent_ends_with_every_process_it_started(api, tmp_path, how):
    kubeconfig, client = api.kubeconfig, api.client
    cluster = write_cluster(tmp_path / "cluster.yaml", [node_manifest(api.name("n1"))])
    out = tmp_path / "agent.out"
    args = [*AGENT, "--cluster", str(cluster), "--kubeconfig", str(kubeconfig)]
    with out.open("w") as f:
        if how == "sigterm":
            proc = await asyncio.create_subprocess_exec(*args, stdout=f, stderr=f, cwd=ROOT, env=agent_env())
        else:  # a parent that is killed outright: the agent must notice on its own
            line = " ".join(f"'{a}'" for a in args)
            proc = await asyncio.create_subprocess_exec("sh", "-c", f"{line} & echo $! >{tmp_path}/pid; wait",
                                                        stdout=f, stderr=f, cwd=ROOT, env=agent_env())
    try:
        assert "1 nodes" in await ready_line(out)
        mark = marker()
        await client.create(KNOWN["Pod"], env_server_pod(api.name("web"), marker=mark), namespace="default")
        await pod_where(client, api.name("web"), running_with_ip, "Running")
        assert pids_with_marker(mark)
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0
        else:
            agent_pid = int((tmp_path / "pid").read_text())
            proc.kill()
            await proc.wait()
            await wait_for(lambda: gone(agent_pid), "the agent to end after its parent", timeout=30)

        async def ended() -> bool:
            return not pids_with_marker(mark)
        await wait_for(ended, "the pod's processes to end", 10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


BAD_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8"}}}


@pytest.mark.parametrize("case, says", [
    pytest.param("node-without-pods", "status.allocatable.pods", id="node-without-pods"),
    pytest.param("kubeconfig-missing", "cannot read the kubeconfig", id="kubeconfig-missing"),
    pytest.param("cluster-info-missing", "not a control plane's cluster.json", id="cluster-info-missing"),
])
async def test_bad_input_exits_2_saying_what_to_fix(tmp_path, case, says):
    cluster = write_cluster(tmp_path / "cluster.yaml",
                            [BAD_NODE if case == "node-without-pods" else node_manifest("n")])
    kubeconfig = tmp_path / "kubeconfig"
    if case != "kubeconfig-missing":
        kubeconfig.write_text("apiVersion: v1\nkind: Config\n"
                              "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
                              "users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                              "current-context: x\n")
    extra = ["--cluster-info", str(tmp_path / "none.json")] if case == "cluster-info-missing" else []
    proc = await asyncio.create_subprocess_exec(*AGENT, "--cluster", str(cluster), "--kubeconfig", str(kubeconfig),
                                                *extra, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                cwd=ROOT, env=agent_env())
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err.decode()
    assert says in err.decode()
    assert "Traceback" not in err.decode()
