"""``gpuspawner sim`` (the control plane and the node agent) stopped with SIGTERM, or killed outright:
no container process is left."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys

import pytest

from tests.builders.kubelet import container, kubectl_env, pod_manifest

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.integration


@pytest.mark.parametrize("isolation", ["namespaces", "processes"])
async def test_nothing_outlives_gpuspawner_sim(tmp_path, isolation):
    """``gpuspawner sim`` (the control plane and the node agent) stopped with SIGTERM, or killed
    outright: no container process is left."""
    import json
    import signal
    from pathlib import Path

    from tests.builders.kubelet import marker, node_manifest, pids_with_marker

    repo = str(Path(__file__).resolve().parents[4])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
               GPUSPAWNER_SIM_ISOLATION=isolation)
    (tmp_path / "cluster.json").write_text(json.dumps({"kind": "List", "items": [node_manifest("n")]}))
    kubeconfig = tmp_path / "kubeconfig"
    for sig in (signal.SIGTERM, signal.SIGKILL):
        mark = marker()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gpuspawner", "sim", "--cluster", str(tmp_path / "cluster.json"),
            "--kubeconfig", str(kubeconfig), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env=env, start_new_session=True)
        try:
            seen = []
            while not seen or not seen[-1].startswith("Ctrl-C stops"):
                line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
                assert line, "gpuspawner sim exited early:\n" + "".join(seen)
                seen.append(line)
            manifest = pod_manifest("d", container(command=["sh", "-c", "setsid sleep 600 & sleep 600"],
                                                   env=[{"name": "SIM_TEST_MARKER", "value": mark}]))
            (tmp_path / "pod.json").write_text(json.dumps(manifest))
            rc = await (await asyncio.create_subprocess_exec(KUBECTL, "--kubeconfig", str(kubeconfig), "create", "-f",
                                                             str(tmp_path / "pod.json"), env=kubectl_env(tmp_path))).wait()
            assert rc == 0
            for _ in range(600):
                if len(pids_with_marker(mark)) >= 2:
                    break
                await asyncio.sleep(0.1)
            assert len(pids_with_marker(mark)) >= 2, (sig, "".join(seen))
            proc.send_signal(sig)
            await asyncio.wait_for(proc.wait(), 60)
        finally:
            if proc.returncode is None:  # a failed step: stop it all the same
                proc.send_signal(signal.SIGTERM)
                await asyncio.wait_for(proc.wait(), 60)
        for _ in range(100):  # SIGKILL: the node agent's guard kills the shims, then their namespaces
            if not pids_with_marker(mark):
                break
            await asyncio.sleep(0.1)
        assert pids_with_marker(mark) == [], sig
