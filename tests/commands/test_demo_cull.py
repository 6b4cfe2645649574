"""The demo's culler (gpuspawner.commands.demo_cull): the hub service it adds, and a real
Prometheus finding the node agent's DCGM exporters, on Kubernetes' own control plane, through the
demo's http_sd endpoint."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys

import aiohttp
import pytest
import yaml
from traitlets.config.loader import PyFileConfigLoader

from gpuspawner import config_snippet
from gpuspawner.commands import testbed
from gpuspawner.commands.demo import DEMO_CONFIG
from gpuspawner.commands.demo_cull import CULLER_SCOPES, DemoCulling, culler_service, pod_targets, prometheus_config
from tests.builders.nodeagent import write_cluster

GPU_NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a"},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "1"}}}


def test_the_culler_service_scrapes_directly_without_prometheus_and_reads_it_with():
    direct = culler_service("/tmp/kc", None, None)
    assert direct["command"] == [sys.executable, "-m", "gpuspawner", "cull", "--idle-timeout", "30m"]
    assert direct["environment"] == {"KUBECONFIG": "/tmp/kc"} and direct["scopes"] == CULLER_SCOPES
    prom = culler_service("/tmp/kc", "http://127.0.0.1:9", "/src")
    assert prom["command"][-2:] == ["--prometheus-url", "http://127.0.0.1:9"]
    assert prom["environment"]["PYTHONPATH"] == "/src"
    # the hub is told the same rule and Prometheus (spawn page, home page)
    assert prom["rules"] == direct["rules"] == {"idle_timeout": "30m"}
    assert prom["prometheus_url"] == "http://127.0.0.1:9" and direct["prometheus_url"] is None


def test_the_demo_config_adds_the_culler_service_with_its_role(tmp_path, monkeypatch):
    for k, v in {"GPUSPAWNER_DEMO_SNIPPET": str(config_snippet()), "GPUSPAWNER_DEMO_DIR": str(tmp_path),
                 "GPUSPAWNER_DEMO_PORT": "1", "GPUSPAWNER_DEMO_HUB_PORT": "2", "GPUSPAWNER_DEMO_PROXY_API_PORT": "3",
                 "GPUSPAWNER_DEMO_PROXY": "chp", "GPUSPAWNER_DEMO_ADMIN_TOKEN": "t0ken-t0ken",
                 "GPUSPAWNER_DEMO_EXTRA_CONFIG": "",
                 "GPUSPAWNER_DEMO_CULLER": json.dumps(culler_service("/tmp/kc", None, None))}.items():
        monkeypatch.setenv(k, v)
    config = PyFileConfigLoader(DEMO_CONFIG.name, path=str(DEMO_CONFIG.parent)).load_config()
    services = {s["name"]: s for s in config.JupyterHub.services}
    assert services["gpu-culler"]["command"][3:] == ["cull", "--idle-timeout", "30m"]
    assert services["gpu-culler"]["environment"] == {"KUBECONFIG": "/tmp/kc"}
    assert "gpuspawner-demo-admin" in services  # the admin token's service stays
    given = config.JupyterHub.load_roles  # the snippet and the demo append: traitlets' lazy list
    roles = {r["name"]: r for r in (given.get_value([]) if hasattr(given, "get_value") else given)}
    assert roles["gpu-culler"] == {"name": "gpu-culler", "scopes": CULLER_SCOPES, "services": ["gpu-culler"]}
    assert config.GPUSpawner.gpu_cull_rules == {"idle_timeout": "30m"}
    assert config.GPUSpawner.gpu_prometheus_url is None  # no Prometheus: the home page says GPU use is not read


def test_pod_targets_are_kubernetes_sd_s_one_per_container_port_none_without_an_ip():
    pod = {"metadata": {"name": "dcgm-a", "namespace": "gpu-operator", "labels": {"app": "nvidia-dcgm-exporter"}},
           "spec": {"nodeName": "gpu-a", "containers": [{"name": "exporter", "ports": [{"containerPort": 9400}]}]},
           "status": {"podIP": "127.0.0.5", "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    (group,) = pod_targets(pod)
    assert group["targets"] == ["127.0.0.5:9400"]
    assert group["labels"]["__meta_kubernetes_pod_label_app"] == "nvidia-dcgm-exporter"
    assert group["labels"]["__meta_kubernetes_pod_ready"] == "true"
    assert group["labels"]["__meta_kubernetes_pod_container_port_number"] == "9400"
    assert pod_targets({**pod, "status": {}}) == []
    job = yaml.safe_load(prometheus_config("http://sd/"))["scrape_configs"][0]
    assert job["http_sd_configs"] == [{"url": "http://sd/", "refresh_interval": "15s"}]


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed (scripts/setup.sh --prometheus)")
async def test_prometheus_scrapes_the_exporters_and_nothing_outlives_the_demo(tmp_path):
    stack = testbed.load()
    cluster = stack.TestCluster(tmp_path / "cluster", write_cluster(tmp_path / "cluster.yaml", [GPU_NODE]),
                                dcgm_exporter=True)
    try:
        await cluster.start()
        await cluster.agent_ready()
        cull = DemoCulling()
        # as the demo does: Prometheus' discovery lists the exporter pods as the kubeconfig's user
        env = await cull.start(tmp_path, str(cluster.kubeconfig), None)
        try:
            spec = json.loads(env["GPUSPAWNER_DEMO_CULLER"])
            assert spec["command"][-2:] == ["--prometheus-url", cull.prometheus_url]
            async with aiohttp.ClientSession() as s:
                for _ in range(120):  # the first scrape comes one scrape interval (15s) after discovery
                    try:
                        async with s.get(f"{cull.prometheus_url}/api/v1/query",
                                         params={"query": "count by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"}) as r:
                            result = (await r.json())["data"]["result"] if r.status == 200 else []
                    except aiohttp.ClientError:
                        result = []
                    if result:
                        break
                    await asyncio.sleep(0.5)
            assert [r["metric"] for r in result] == [{"Hostname": "gpu-a"}]
        finally:
            await cull.stop()
        assert cull.prometheus.returncode is not None
    finally:
        await cluster.stop()
