"""The demo's culler: ``gpuspawner cull`` as a hub-managed service and, when Debian's (or any)
``prometheus`` is on PATH, a Prometheus scraping the node agent's simulated DCGM exporters for it.
Design notes: docs/culling.md.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Callable

__all__ = ["CULLER_SCOPES", "IDLE_TIMEOUT", "DemoCulling", "PodDiscovery", "culler_service", "pod_targets", "prometheus_config",
           "start_prometheus", "stop_prometheus"]

IDLE_TIMEOUT = "30m"
#: docs/culling.md's role, without read:users:groups (the demo exempts no group), with the GPU-hour
#: ledger's scope (the demo's hub defines it: jupyterhub_config.d/gpuspawner.py)
CULLER_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers", "custom:gpu-usage:read"]
EXPORTER_NAMESPACE, EXPORTER_SELECTOR = "gpu-operator", "app=nvidia-dcgm-exporter"


def culler_service(kubeconfig: str, prometheus_url: str | None, pythonpath: str | None) -> dict[str, Any]:
    """What ``GPUSPAWNER_DEMO_CULLER`` carries: the service's command, environment and scopes, and the
    rules and Prometheus the hub is told of (``gpu_cull_rules``, ``gpu_prometheus_url``)."""
    command = [sys.executable, "-m", "gpuspawner", "cull", "--idle-timeout", IDLE_TIMEOUT]
    if prometheus_url:
        command += ["--prometheus-url", prometheus_url]
    environment = {"KUBECONFIG": kubeconfig}
    if pythonpath:  # a source checkout: the culler imports the same gpuspawner as the demo
        environment["PYTHONPATH"] = pythonpath
    # the hub reads the same: the spawn page and the home page show the culler's rule, the home page
    # each server's GPU use from the culler's Prometheus
    return {"command": command, "environment": environment, "scopes": CULLER_SCOPES,
            "rules": {"idle_timeout": IDLE_TIMEOUT}, "prometheus_url": prometheus_url}


def _label_name(name: str) -> str:
    # Prometheus' strutil.SanitizeLabelName: anything outside [a-zA-Z0-9_] becomes "_"
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_targets(pod: dict) -> list[dict]:
    """A pod's ``http_sd`` target groups, as ``kubernetes_sd_configs`` (role: pod) builds them.  Pure."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ip = status.get("podIP")
    if not ip:
        return []
    ready = next((str(c.get("status", "")).lower() for c in status.get("conditions") or []
                  if c.get("type") == "Ready"), "unknown")
    labels = {"__meta_kubernetes_namespace": meta.get("namespace", ""),
              "__meta_kubernetes_pod_name": meta.get("name", ""), "__meta_kubernetes_pod_ip": ip,
              "__meta_kubernetes_pod_ready": ready, "__meta_kubernetes_pod_phase": status.get("phase", ""),
              "__meta_kubernetes_pod_node_name": spec.get("nodeName", ""),
              "__meta_kubernetes_pod_host_ip": status.get("hostIP", ""),
              "__meta_kubernetes_pod_uid": meta.get("uid", "")}
    for k, v in (meta.get("labels") or {}).items():
        labels[f"__meta_kubernetes_pod_label_{_label_name(k)}"] = v
        labels[f"__meta_kubernetes_pod_labelpresent_{_label_name(k)}"] = "true"
    groups = []
    for c in spec.get("containers") or []:
        for port in c.get("ports") or []:
            groups.append({"targets": [f"{ip}:{port['containerPort']}"], "labels": dict(
                labels, __meta_kubernetes_pod_container_name=c.get("name", ""),
                __meta_kubernetes_pod_container_port_number=str(port["containerPort"]),
                __meta_kubernetes_pod_container_port_name=port.get("name", ""),
                __meta_kubernetes_pod_container_port_protocol=port.get("protocol", "TCP"))})
    return groups


def prometheus_config(sd_url: str, scrape_interval: str = "15s") -> str:
    """The demo's Prometheus config: docs/culling.md's scrape job, with http_sd for kubernetes_sd."""
    return f"""\
global:
  scrape_interval: {scrape_interval}
scrape_configs:
- job_name: dcgm-exporter
  http_sd_configs:          # stands for kubernetes_sd_configs: [{{role: pod, namespaces: {{names: [gpu-operator]}}}}]
  - url: {sd_url}
    refresh_interval: 15s
  relabel_configs:
  - {{source_labels: [__meta_kubernetes_pod_label_app], regex: nvidia-dcgm-exporter, action: keep}}
  - {{source_labels: [__meta_kubernetes_pod_container_port_number], regex: "9400", action: keep}}
  - {{source_labels: [__meta_kubernetes_namespace], target_label: namespace}}
  - {{source_labels: [__meta_kubernetes_pod_name], target_label: pod}}
"""


class PodDiscovery:
    """An ``http_sd`` endpoint on loopback listing the exporter pods through the API server, as the
    user of ``kubeconfig``."""

    def __init__(self, kubeconfig: str):
        self.kubeconfig = kubeconfig
        self.url = ""
        self._runner: Any = None

    async def _list(self) -> list[dict]:
        from kubernetes_asyncio import client, config

        configuration = client.Configuration()
        await config.load_kube_config(config_file=self.kubeconfig, client_configuration=configuration)
        async with client.ApiClient(configuration) as api:
            pods = await client.CoreV1Api(api).list_namespaced_pod(
                EXPORTER_NAMESPACE, label_selector=EXPORTER_SELECTOR, _request_timeout=10)
            return api.sanitize_for_serialization(pods).get("items") or []

    async def _targets(self, request: Any) -> Any:
        import aiohttp
        from aiohttp import web
        from kubernetes_asyncio.client.exceptions import ApiException

        try:
            pods = await self._list()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, OSError, ApiException):
            return web.json_response([], status=503)  # Prometheus keeps the targets it had
        return web.json_response([g for pod in pods for g in pod_targets(pod)])

    async def start(self) -> str:
        from aiohttp import web

        app = web.Application()
        app.router.add_get("/", self._targets)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_is(argv: list[str]) -> list[str]:
    return argv


async def start_prometheus(binary: str, workdir: Path, sd_url: str,
                           wrap: Callable[[list[str]], list[str]] = _as_is) -> tuple[asyncio.subprocess.Process, str]:
    """Prometheus on a free loopback port, its config, data and log in ``workdir``; (process, URL).
    ``wrap`` turns its command line into the one run (the demo's guard, which ends it with the demo)."""
    directory = workdir / "prometheus"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "prometheus.yml").write_text(prometheus_config(sd_url), encoding="utf-8")
    port = _free_port()
    log = open(directory / "prometheus.log", "wb")  # noqa: SIM115 - closed when the process is reaped
    try:
        proc = await asyncio.create_subprocess_exec(
            *wrap([binary, f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
                   f"--web.listen-address=127.0.0.1:{port}"]), stdout=log, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
    finally:
        log.close()  # the child has its own descriptor
    return proc, f"http://127.0.0.1:{port}"


async def stop_prometheus(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.returncode is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()


class DemoCulling:
    """The demo's culling: Prometheus (when installed) and its discovery; the culler's service spec."""

    def __init__(self) -> None:
        self.discovery: PodDiscovery | None = None
        self.prometheus: asyncio.subprocess.Process | None = None
        self.prometheus_url: str | None = None

    async def start(self, workdir: Path, kubeconfig: str, pythonpath: str | None,
                    wrap: Callable[[list[str]], list[str]] = _as_is) -> dict[str, str]:
        """Start Prometheus if ``prometheus`` is on PATH, its discovery listing the exporter pods as the
        kubeconfig's user; the hub environment that adds the culler."""
        binary = shutil.which("prometheus")
        if binary:
            self.discovery = PodDiscovery(kubeconfig)
            sd_url = await self.discovery.start()
            self.prometheus, self.prometheus_url = await start_prometheus(binary, workdir, sd_url, wrap)
        spec = culler_service(kubeconfig, self.prometheus_url, pythonpath)
        return {"GPUSPAWNER_DEMO_CULLER": json.dumps(spec)}

    def describe(self) -> str:
        how = (f"GPU activity from Prometheus at {self.prometheus_url}" if self.prometheus_url
               else "scraping the DCGM exporters directly (no prometheus on PATH)")
        return f"GPU culler: idle GPU servers stop after {IDLE_TIMEOUT}, {how} (--no-cull: off)"

    async def stop(self) -> None:
        if self.prometheus is not None:
            await stop_prometheus(self.prometheus)
        if self.discovery is not None:
            await self.discovery.stop()
