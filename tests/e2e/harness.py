"""Runs ``gpuspawner demo --simulated`` (the project's simulated GPU cluster + a real JupyterHub with a
real configurable-http-proxy) as a user would, and talks to it over HTTP only.  ``DemoHub(simulated=False)``
runs it on the real control plane (tests/commands/test_demo_real.py)."""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time

import requests

READY_TIMEOUT = 120


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


class DemoHub:
    def __init__(
        self,
        cluster_file: str | None = None,
        extra_args: tuple[str, ...] = (),
        extra_config: str | None = None,
        simulated: bool = True,
        ready_timeout: float = READY_TIMEOUT,
    ):
        self.port = free_port()
        self.k8s_port = free_port()
        self.token = secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.k8s_url = f"http://127.0.0.1:{self.k8s_port}"
        #: HTTP to the Kubernetes API as its admin (``k8s_url``); one session, so that a connection
        #: it keeps open stays usable while the API server refuses new ones
        self.k8s = requests.Session()
        self.cluster_file = cluster_file
        self.extra_config = extra_config
        self.extra_args = extra_args
        self.simulated = simulated
        self.ready_timeout = ready_timeout
        self.proc: subprocess.Popen | None = None
        self.log_path = pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-e2e-")) / "demo.log"

    # lifecycle -----------------------------------------------------------------------------
    def start(self) -> "DemoHub":
        cmd = [
            sys.executable, "-m", "gpuspawner", "demo", *(["--simulated"] if self.simulated else []),
            "--port", str(self.port),
            "--k8s-port", str(self.k8s_port),
            "--admin-token", self.token,
            *self.extra_args,
        ]
        if self.cluster_file:
            cmd += ["--cluster", str(self.cluster_file)]
        if self.extra_config:
            cmd += ["--config", str(self.extra_config)]
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_for(self._ready, self.ready_timeout, "the demo hub to answer")
        except AssertionError:
            self.stop()
            raise AssertionError(f"demo did not start; its output:\n{self.log()}") from None
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"demo exited with {self.proc.returncode}:\n{self.log()}")
        r = self.api("GET", "/gpus")
        return r.status_code == 200 and r.json().get("synced")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            # as Ctrl-C would: the demo stops the hub, which deletes its pods, then the cluster
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()

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

    # simulated cluster -------------------------------------------------------------------
    @property
    def faults_url(self) -> str:
        """The fault injection's control endpoint: ``/faults``, ``/faults/fail``, ``/counters`` ..."""
        return f"{self.k8s_url}/_sim"

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


@contextlib.contextmanager
def running_demo(config_text: str | None = None, directory: pathlib.Path | None = None):
    """A started ``DemoHub``, with ``config_text`` as its extra jupyterhub_config.py; stopped afterwards."""
    extra = None
    if config_text is not None:
        extra = (directory or pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-e2e-config-"))) / "extra_config.py"
        extra.write_text(config_text)
    h = DemoHub(extra_config=str(extra) if extra else None).start()
    try:
        yield h
    finally:
        h.stop()
