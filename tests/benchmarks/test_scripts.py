"""The benchmark scripts run: ``benchmarks/hub.py --quick`` (a real JupyterHub with GPUSpawner
beside one with plain KubeSpawner, on a 500-node simulated cluster) and ``benchmarks/capacity.py``
on the real control plane at a smaller size than ``--quick`` (CI's time), as CI's smoke test of the
scripts. No timing is asserted here (a loaded CI machine would fail it); the figures that are not
timings are: no Kubernetes API request per view, memory within its target."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
pytestmark = [pytest.mark.integration]


def run(script: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.hub
@pytest.mark.skipif(not shutil.which("configurable-http-proxy"),
                    reason="configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)")
def test_hub_benchmark_quick_runs_and_prints_its_table():
    out = run("hub.py", "--quick", "--json")
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    table = out.stdout
    assert "hub benchmark, 500 GPU nodes, 15000 pods" in table
    for measure in ("GET /hub/spawn p50 / p99 / max, GPUSpawner", "GET /hub/spawn p50 / p99 / max, static KubeSpawner",
                    "page p99, GPUSpawner / static", "GET /hub/api/gpus p50 / p99 / max",
                    "REST spawn POST -> ready", "change in the cluster -> GET /hub/api/gpus",
                    "gpuspawner's longest step on the loop, cold sync", "worst loop stall, whole GPU hub",
                    "gpuspawner's longest step on the loop, views", "worst loop stall, whole hub",
                    "JupyterHub's longest request step (GC excluded): GPU hub / static hub",
                    "hub memory growth from the cache"):
        assert measure in table, measure
    assert re.search(r"API requests during 200 views .*\s0 \(0 per view\)\s+0 per view\s+met", table), table
    assert "not judged (--quick)" in table and "MISSED" not in table
    result = json.loads(table[table.index("\n{") + 1:table.rindex("}") + 1])
    assert result["views"]["gpu_page"]["n"] == 100 and result["spawns"]["gpu"]["n"] == 2
    assert result["changes"]["n"] == 8 and result["cold_sync"]["pools"] == 7


def test_capacity_benchmark_runs_on_the_real_control_plane_and_judges_its_targets():
    out = run("capacity.py", "--quick", "--nodes", "100", "--pods", "1000", "--views", "200", "--json")
    assert out.returncode in (0, 1), out.stdout[-4000:] + out.stderr[-4000:]  # 2: the run itself failed
    result = json.loads(out.stdout[out.stdout.index("\n{") + 1:out.stdout.rindex("}") + 1])
    # --quick leaves the sizes given explicitly as they are
    assert (result["nodes"], result["pods"], result["views"]) == (100, 1000, 200)
    # views as shipped (offers and form remembered) and rebuilt every time: no API request either way
    assert result["api_requests_during_views"] == 0 and result["rebuild_api_requests_during_views"] == 0
    assert result["targets_met"]["api_requests_per_view"]
    # the memory target docs/benchmarks.md names (tracemalloc, a second sync): judged, and met
    assert result["cache_memory_mib"] <= 64.0 and result["targets_met"]["memory_mib"]
    assert result["gpu_nodes"] == 100 and result["pools"] == 7
    assert result["cluster_build"]["build_s"] > 0
    # the stall is judged in both phases; the exit status says whether every target was met
    assert {"stall_cold_sync_ms", "stall_steady_ms"} <= set(result["targets_met"])
    assert out.returncode == (0 if all(result["targets_met"].values()) else 1), out.stderr[-4000:]
    assert "targets:" in out.stdout


def test_capacity_benchmark_exits_2_when_the_run_itself_fails(tmp_path):
    """No cluster can be built (the control plane's binary is not there): exit 2, and why."""
    env = dict(os.environ, GPUSPAWNER_CLUSTER_BIN=str(tmp_path / "no-such-binary"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "capacity.py"), "--quick"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "capacity benchmark: the run failed: " in out.stderr and "no-such-binary" in out.stderr
    assert "targets:" not in out.stdout
