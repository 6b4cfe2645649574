"""What the culler's end-to-end tests run: Kubernetes' own control plane with the node agent's
simulated GPU nodes and their DCGM exporters (``gpuspawner sim --dcgm-exporter``), a real JupyterHub
with the demo's configuration (``gpuspawner/data/demo/jupyterhub_config.py``, as ``gpuspawner demo``
runs it, plus a culler service with the narrow role of docs/culling.md), and a real Prometheus
scraping the exporters every second.

Debian's ``prometheus`` package is built without Kubernetes service discovery (its
NEWS.Debian: "Kubernetes support has been completely removed"), so ``kubernetes_sd_configs``
cannot be used here.  :class:`PodDiscovery` stands in for it (as the demo's does,
``gpuspawner.commands.demo_cull``, whose ``pod_targets`` it uses): an ``http_sd_configs`` endpoint
that lists the exporter pods through the API server as its admin and hands Prometheus the same
targets and ``__meta_kubernetes_*`` labels as ``kubernetes_sd_configs`` with ``role: pod``
(``discovery/kubernetes/pod.go``: one target per container port, ``podIP:port``, none for a pod
without an IP).  The scrape config's relabelling is the one a cluster would use.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from gpuspawner.commands.demo import DEMO_CONFIG
from gpuspawner.commands.demo_cull import pod_targets
from gpuspawner import config_snippet

from .harness import DemoHub, free_port, stop_process, wait_for
from .kubeconfig import kubeconfig_session

CULLER_ROLE_SCOPES = ["list:users", "read:users:activity", "read:servers", "delete:servers", "read:users:groups"]


class PodDiscovery:
    """An ``http_sd`` endpoint listing the pods of ``namespace`` matching ``selector``, as the user of
    ``kubeconfig`` (the cluster's admin)."""

    def __init__(self, kubeconfig: pathlib.Path, namespace: str, selector: str):
        k8s_url, session = kubeconfig_session(kubeconfig)
        self.session = session
        lock = threading.Lock()  # one request at a time on the session: Prometheus refreshes every second

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                with lock:
                    r = session.get(f"{k8s_url}/api/v1/namespaces/{namespace}/pods",
                                    params={"labelSelector": selector}, timeout=10)
                groups = []
                for pod in r.json().get("items", []) if r.ok else []:
                    groups += pod_targets(pod)
                body = json.dumps(groups).encode()
                self.send_response(200 if r.ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.session.close()


PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
- job_name: dcgm-exporter
  http_sd_configs:          # stands for kubernetes_sd_configs: [{{role: pod, namespaces: {{names: [gpu-operator]}}}}]
  - url: {sd_url}
    refresh_interval: 1s
  relabel_configs:
  - {{source_labels: [__meta_kubernetes_pod_label_app], regex: nvidia-dcgm-exporter, action: keep}}
  - {{source_labels: [__meta_kubernetes_pod_container_port_number], regex: "9400", action: keep}}
  # what kube-prometheus' ServiceMonitors add: the exporter's own pod and namespace, so that the
  # exporter's pod/namespace labels become exported_pod/exported_namespace (honor_labels: false)
  - {{source_labels: [__meta_kubernetes_namespace], target_label: namespace}}
  - {{source_labels: [__meta_kubernetes_pod_name], target_label: pod}}
  - {{source_labels: [__meta_kubernetes_pod_node_name], target_label: node}}
"""


class Prometheus:
    """Debian's prometheus, on loopback, scraping the DCGM exporter pods every second."""

    def __init__(self, sd_url: str):
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-prometheus-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (self.dir / "prometheus.yml").write_text(PROMETHEUS_CONFIG.format(sd_url=sd_url))
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Prometheus":
        if shutil.which("prometheus") is None:
            raise AssertionError("prometheus is not installed: run scripts/setup.sh --prometheus "
                                 "(Debian's package)")
        self._log = open(self.dir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: requests.get(f"{self.url}/-/ready", timeout=2).ok, 60, "Prometheus to be ready")
        return self

    def query(self, promql: str) -> list[dict]:
        r = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


EXTRA_CONFIG = """\
c.JupyterHub.services.append({{"name": "gpu-culler", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "gpu-culler", "scopes": {scopes!r}, "services": ["gpu-culler"]}})
"""


def demo_config_env(workdir: pathlib.Path, port: int, token: str, extra_config: pathlib.Path,
                    kubeconfig: pathlib.Path) -> dict[str, str]:
    """The environment in which ``jupyterhub -f <the demo's config>`` runs a hub on loopback: its
    work directory, ports, admin token, the site's own config file (loaded after the gpuspawner
    snippet), and the cluster's credentials."""
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), GPUSPAWNER_DEMO_DIR=str(workdir),
               GPUSPAWNER_DEMO_SNIPPET=str(config_snippet()), GPUSPAWNER_DEMO_PORT=str(port),
               GPUSPAWNER_DEMO_HUB_PORT=str(free_port()), GPUSPAWNER_DEMO_PROXY_API_PORT=str(free_port()),
               GPUSPAWNER_DEMO_PROXY=shutil.which("configurable-http-proxy") or "configurable-http-proxy",
               GPUSPAWNER_DEMO_ADMIN_TOKEN=token, GPUSPAWNER_DEMO_EXTRA_CONFIG=str(extra_config),
               CONFIGPROXY_AUTH_TOKEN=secrets.token_hex(16))
    env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), env.get("PATH", "")])
    return env


class CullHub(DemoHub):
    """``DemoHub``'s API helpers over the demo's hub configuration on a cluster with DCGM exporters;
    ``k8s_url``/``k8s`` reach the API server as its admin (the ``kubeconfig`` that ``gpuspawner sim``
    wrote)."""

    def __init__(self):
        super().__init__()
        self.culler_token = secrets.token_hex(16)
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-cull-e2e-"))
        self.log_path = self.dir / "hub.log"
        self.kubeconfig = self.dir / "kubeconfig"
        self.sim: subprocess.Popen | None = None

    def start(self) -> "CullHub":
        try:
            self.start_cluster()
            return self.start_hub()
        except BaseException:
            self.stop()
            raise

    def start_cluster(self) -> None:
        """The cluster, in its own process (it outlives hub restarts): the control plane and the node
        agent with a DCGM exporter on every NVIDIA GPU node."""
        self._sim_log = open(self.dir / "sim.log", "wb")
        self.sim = subprocess.Popen(
            [sys.executable, "-m", "gpuspawner", "sim", "--dcgm-exporter", "--port", str(self.k8s_port),
             "--kubeconfig", str(self.kubeconfig)],
            stdout=self._sim_log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(self._nodes_registered, 120, "gpuspawner sim to register its nodes")
        self.k8s_url, self.k8s = kubeconfig_session(self.kubeconfig)
        wait_for(self._exporters_running, 90, "a running DCGM exporter on every NVIDIA device-plugin node")
        self.k8s.post(f"{self.k8s_url}/api/v1/namespaces", timeout=10,
                      json={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "jupyterhub"}}
                      ).raise_for_status()

    def _nodes_registered(self) -> bool:
        text = (self.dir / "sim.log").read_text(errors="replace")
        if self.sim.poll() is not None:
            raise AssertionError(f"gpuspawner sim exited with {self.sim.returncode}:\n{text[-4000:]}")
        return "Ctrl-C stops the cluster" in text  # printed once the node agent is ready

    def _exporters_running(self) -> bool:
        """The nodes the servers here land on: those whose device plugin advertises ``nvidia.com/*``
        (the agent also runs exporters for DRA nodes)."""
        gpu_nodes = {name for name, n in self.nodes().items()
                     if any(r.startswith("nvidia.com/") for r in (n["status"].get("allocatable") or {}))}
        running = {p["spec"].get("nodeName") for p in self.pods("gpu-operator", labelSelector="app=nvidia-dcgm-exporter")
                   if p["status"].get("phase") == "Running" and p["status"].get("podIP")}
        return bool(gpu_nodes) and gpu_nodes <= running

    #: more of the hub's config, after the culler's (a subclass's site settings), and the culler's scopes
    site_config = ""
    culler_scopes = CULLER_ROLE_SCOPES

    def start_hub(self) -> "CullHub":
        """The hub (the demo's config, the culler's service and :attr:`site_config`), over the cluster; its
        database and cookie secret stay in :attr:`dir`, so a hub started again finds them."""
        extra = self.dir / "extra_config.py"
        extra.write_text(EXTRA_CONFIG.format(token=self.culler_token, scopes=self.culler_scopes) + self.site_config)
        env = demo_config_env(self.dir, self.port, self.token, extra, self.kubeconfig)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(DEMO_CONFIG)], cwd=self.dir,
                                     env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(self._ready, 120, "the hub to answer")
        except AssertionError:
            self.stop()
            raise AssertionError(f"the hub did not start:\n{self.log()}") from None
        return self

    def stop_hub(self, crash: bool = False) -> None:
        """Stop the hub alone: as an admin would (SIGTERM: it stops its servers first), or as a crash
        would (``crash``: SIGKILL to the hub's process group; the servers' pods run on)."""
        stop_process(self.proc, 60, signal.SIGKILL if crash else signal.SIGTERM, group=crash)
        if getattr(self, "_log", None):
            self._log.close()

    def stop(self) -> None:
        self.stop_hub()  # the hub stops its servers while the cluster still runs
        # as Ctrl-C would: gpuspawner sim stops the node agent (and its pods' processes), then the
        # control plane
        stop_process(self.sim, 60, signal.SIGINT)
        for f in (getattr(self, "_log", None), getattr(self, "_sim_log", None)):
            if f:
                f.close()
        if getattr(self, "k8s", None) is not None:
            self.k8s.close()

    def culler(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """``gpuspawner cull ARGS`` as the hub's culler service (its token, the hub's API URL)."""
        env = dict(os.environ, JUPYTERHUB_API_URL=f"{self.url}/hub/api", JUPYTERHUB_API_TOKEN=self.culler_token)
        return subprocess.run([sys.executable, "-m", "gpuspawner", "cull", "--kubeconfig", str(self.kubeconfig),
                               *args], env=env, capture_output=True, text=True, timeout=timeout)

    def culler_process(self, *args: str, log: pathlib.Path) -> subprocess.Popen:
        env = dict(os.environ, JUPYTERHUB_API_URL=f"{self.url}/hub/api", JUPYTERHUB_API_TOKEN=self.culler_token)
        return subprocess.Popen([sys.executable, "-m", "gpuspawner", "cull", "--kubeconfig", str(self.kubeconfig),
                                 *args], env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)

    def spawn(self, user: str, options: dict) -> dict:
        self.create_user(user)
        r = self.api("POST", f"/users/{user}/server", json=options)
        assert r.status_code in (201, 202), r.text
        return self.wait_ready(user)

    def pod_of(self, user: str) -> dict:
        pods = [p for p in self.pods("jupyterhub")
                if (p["metadata"].get("annotations") or {}).get("hub.jupyter.org/username") == user]
        assert len(pods) == 1, pods
        return pods[0]
