"""``DemoHub``: the demo's JupyterHub (real configurable-http-proxy, the demo's config and culler service) on
the test cluster (Kubernetes' own control plane, the node agent, the fault proxy between hub and API server),
driven over HTTP only; ``DemoCommand`` runs the ``gpuspawner demo`` command itself."""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests

from testcluster.processes import stop_process

READY_TIMEOUT = 120
AGENT_READY_TIMEOUT = 120
NAMESPACE = "jupyterhub"  # the demo config's c.GPUSpawner.namespace


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.25):
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception as e:  # noqa: BLE001 - report the last failure below
            last_exc = e
        else:
            if value:
                return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_exc!r})")


def admin_session(cp) -> requests.Session:
    """HTTP as the cluster's admin (its client certificate), trusting the cluster CA (``cp``: a ControlPlane)."""
    pki = cp.data_dir / "pki"
    s = requests.Session()
    s.trust_env = False  # else $REQUESTS_CA_BUNDLE would replace the cluster CA
    s.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
    s.verify = str(pki / "ca.crt")
    return s


class DemoHub:
    """The demo's hub on a test cluster of its own: ``start()`` starts the control plane, the node agent
    (the cluster file's nodes and pods, DCGM exporters, the demo cluster's scale-from-zero group), the fault
    proxy (``fault_proxy``, ``faults_url``) and the hub, which reaches the API server through the proxy; the
    culler runs as a hub service unless ``cull=False`` (as ``gpuspawner demo --no-cull``), reading the DCGM
    exporters directly.  ``k8s_url`` is the API server itself and ``k8s`` an HTTP session as its admin."""

    def __init__(
        self,
        cluster_file: str | None = None,
        extra_config: str | None = None,
        *,
        cull: bool = True,
        scale_up_seconds: float = 30.0,
        ready_timeout: float = READY_TIMEOUT,
    ):
        self.port = free_port()
        self.k8s_port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.k8s_url = f"https://127.0.0.1:{self.k8s_port}"
        #: HTTP to the Kubernetes API as its admin (``k8s_url``); set up with the cluster's CA on start
        self.k8s = requests.Session()
        self.cluster_file = cluster_file
        self.extra_config = extra_config
        self.cull = cull
        self.scale_up_seconds = scale_up_seconds
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-e2e-"))
        self.log_path = self.dir / "hub.log"
        self.agent: subprocess.Popen | None = None
        self.agent_log = self.dir / "nodeagent.log"
        self.cluster = None  # testcluster.stack.TestCluster: the control plane and the agent's command
        self.fault_proxy = None  # testcluster.faultproxy.FaultProxy
        self.timings: dict[str, float] = {}

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> "DemoHub":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        from gpuspawner import config_snippet
        from gpuspawner.commands import demo, demo_cull, testbed

        stack = testbed.load()
        from testcluster.faultproxy import FaultProxy

        cluster_file = self.cluster_file or str(testbed.default_cluster_file())
        self.cluster = stack.TestCluster(
            self.dir / "cluster", cluster_file, port=self.k8s_port, dcgm_exporter=self.cull,
            # the demo cluster's own scale-from-zero group, as gpuspawner demo runs it
            node_groups=None if self.cluster_file else stack.DEMO_NODE_GROUPS, scale_up_seconds=self.scale_up_seconds,
            scratch=self.dir)
        cp = self.cluster.control_plane
        began = time.monotonic()
        cp.start()
        self.timings["control_plane_s"] = time.monotonic() - began
        self.k8s = admin_session(cp)
        self.k8s.post(f"{self.k8s_url}/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}},
                      timeout=30).raise_for_status()
        began = time.monotonic()
        with self.agent_log.open("wb") as log:
            self.agent = subprocess.Popen(
                stack.guarded(self.cluster.agent_command(), grace=10.0), stdout=log, stderr=subprocess.STDOUT,
                env=stack.child_env(), start_new_session=True)
        wait_for(self._agent_ready, AGENT_READY_TIMEOUT, "the node agent's nodes to be ready")
        self.timings["nodes_s"] = time.monotonic() - began
        self.fault_proxy = FaultProxy(cp.data_dir).start()
        workdir = self.dir / "hub"
        workdir.mkdir()
        args = argparse.Namespace(port=self.port, admin_token=self.token, config=self.extra_config)
        kubeconfig = self.fault_proxy.kubeconfig
        env = demo._hub_env(args, workdir, kubeconfig, demo._find_proxy() or "", config_snippet())
        if self.cull:  # as the demo runs it without Prometheus: the culler reads the DCGM exporters
            spec = demo_cull.culler_service(str(kubeconfig), None, stack.child_env()["PYTHONPATH"])
            env["GPUSPAWNER_DEMO_CULLER"] = json.dumps(spec)
        self._log = open(self.log_path, "wb")
        began = time.monotonic()
        # under the guard: the proxy and the services end with the hub, and all of them with this process
        self.proc = subprocess.Popen(stack.guarded([sys.executable, "-m", "jupyterhub", "-f", str(demo.DEMO_CONFIG)],
                                                   grace=25.0),
                                     cwd=workdir, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_for(self._ready, self.ready_timeout, "the hub to answer with synced GPU figures")
        except AssertionError:
            raise AssertionError(f"the hub did not start; its output:\n{self.log()}") from None
        self.timings["hub_s"] = time.monotonic() - began

    def _agent_ready(self) -> bool:
        assert self.agent is not None
        text = self.agent_log.read_text(errors="replace")
        if self.agent.poll() is not None:
            raise AssertionError(f"the node agent exited with {self.agent.returncode}:\n{text[-4000:]}")
        return "nodeagent ready:" in text

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the hub exited with {self.proc.returncode}:\n{self.log()}")
        r = self.api("GET", "/gpus")
        return r.status_code == 200 and r.json().get("synced")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def stop_hub(self) -> None:
        """As the demo stops it: SIGTERM, and the hub deletes its users' pods while the cluster runs."""
        stop_process(self.proc, 60)
        if getattr(self, "_log", None):
            self._log.close()

    def stop(self) -> None:
        self.stop_hub()
        stop_process(self.agent, 30)  # it ends its pods' processes
        if self.fault_proxy is not None:
            self.fault_proxy.stop()
        if self.cluster is not None:
            self.cluster.control_plane.stop()
            # etcd's data goes; the hub's and the agent's logs stay for a failure's message, and so
            # do the control plane's and the fault proxy's (what the API server or the proxy said)
            data = pathlib.Path(self.cluster.control_plane.data_dir)
            for log in data.glob("*.log"):
                shutil.copy(log, self.dir / log.name)
            shutil.rmtree(data, ignore_errors=True)

    # hub ---------------------------------------------------------------------------------
    def api(self, method: str, path: str, **kw) -> requests.Response:
        headers = kw.pop("headers", {})
        headers.setdefault("Authorization", f"token {self.token}")
        return requests.request(method, f"{self.url}/hub/api{path}", headers=headers, timeout=30, **kw)

    def create_user(self, name: str) -> None:
        r = self.api("POST", f"/users/{name}")
        assert r.status_code in (201, 409), r.text

    def login(self, name: str) -> requests.Session:
        s = requests.Session()
        r = s.get(f"{self.url}/hub/login", timeout=30)
        r.raise_for_status()
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', r.text)
        data = {"username": name, "password": "any-password"}
        if xsrf:
            data["_xsrf"] = xsrf.group(1)
        r = s.post(f"{self.url}/hub/login", data=data, timeout=30)
        r.raise_for_status()
        assert s.cookies, f"login as {name} set no cookie: {r.status_code} {r.text[:500]}"
        return s

    def xsrf(self, session: requests.Session) -> str:
        return session.cookies.get("_xsrf", "")

    def server(self, user: str, name: str = "") -> dict | None:
        r = self.api("GET", f"/users/{user}")
        r.raise_for_status()
        return r.json().get("servers", {}).get(name)

    def wait_ready(self, user: str, name: str = "", timeout: float = 90) -> dict:
        def ready():
            server = self.server(user, name)
            if server and server.get("ready"):
                return server
            return None

        try:
            return wait_for(ready, timeout, f"{user}/{name} to be ready")
        except AssertionError as e:
            raise AssertionError(f"{e}\n--- demo log ---\n{self.log()}") from None

    def wait_stopped(self, user: str, name: str = "", timeout: float = 60) -> None:
        wait_for(lambda: not self.server(user, name), timeout, f"{user}/{name} to stop")

    def gpus(self) -> dict:
        r = self.api("GET", "/gpus")
        r.raise_for_status()
        return r.json()

    def pool(self, pool_id: str) -> dict:
        for p in self.gpus()["pools"]:
            if p["id"] == pool_id:
                return p
        raise AssertionError(f"pool {pool_id} not in /hub/api/gpus")

    def pool_of(self, product_part: str, resource: str = "nvidia.com/gpu") -> dict:
        """The first pool of ``/hub/api/gpus`` whose product contains ``product_part``."""
        for p in self.gpus()["pools"]:
            if product_part in (p["product"] or "") and p["resource"] == resource:
                return p
        raise AssertionError(f"the demo cluster has no {product_part} pool of {resource}: {self.gpus()}")

    # the cluster -------------------------------------------------------------------------
    @property
    def faults_url(self) -> str:
        """The fault proxy's control endpoint: ``/faults``, ``/faults/fail``, ``/counters`` ..."""
        assert self.fault_proxy is not None, "start() first"
        return self.fault_proxy.control_url

    def kube(self, path: str, **params) -> dict:
        r = self.k8s.get(f"{self.k8s_url}{path}", params=params, timeout=30)
        r.raise_for_status()
        return r.json()

    def kube_text(self, path: str, **params) -> str:
        """A plain-text answer of the Kubernetes API (``pods/{name}/log``)."""
        r = self.k8s.get(f"{self.k8s_url}{path}", params=params, timeout=30)
        r.raise_for_status()
        return r.text

    def pods(self, namespace: str | None = None, **params) -> list[dict]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        return self.kube(path, **params)["items"]

    def nodes(self) -> dict[str, dict]:
        return {n["metadata"]["name"]: n for n in self.kube("/api/v1/nodes")["items"]}


class DemoCommand(DemoHub):
    """The ``gpuspawner demo`` command itself (with ``extra_args``), as a user runs it: its own test cluster
    without the fault proxy; stopped as Ctrl-C stops it."""

    def __init__(self, cluster_file: str | None = None, extra_args: tuple[str, ...] = (),
                 extra_config: str | None = None, ready_timeout: float = READY_TIMEOUT):
        super().__init__(cluster_file, extra_config, ready_timeout=ready_timeout)
        self.extra_args = extra_args

    def _start(self) -> None:
        cmd = [sys.executable, "-m", "gpuspawner", "demo", "--port", str(self.port), "--k8s-port", str(self.k8s_port),
               "--admin-token", self.token, *self.extra_args]
        if self.cluster_file:
            cmd += ["--cluster", str(self.cluster_file)]
        if self.extra_config:
            cmd += ["--config", str(self.extra_config)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(self._ready, self.ready_timeout, "the demo hub to answer")
        except AssertionError:
            raise AssertionError(f"demo did not start; its output:\n{self.log()}") from None

    def stop(self) -> None:
        # as Ctrl-C would: the demo stops the hub, which deletes its pods, then the cluster
        stop_process(self.proc, 60, signal.SIGINT)
        if getattr(self, "_log", None):
            self._log.close()


@contextlib.contextmanager
def running_demo(config_text: str | None = None, directory: pathlib.Path | None = None, **options):
    """A started ``DemoHub``, with ``config_text`` as its extra jupyterhub_config.py; stopped afterwards."""
    extra = None
    if config_text is not None:
        extra = (directory or pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-e2e-config-"))) / "extra_config.py"
        extra.write_text(config_text)
    h = DemoHub(extra_config=str(extra) if extra else None, **options).start()
    try:
        yield h
    finally:
        h.stop()
