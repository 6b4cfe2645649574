"""The demo's JupyterHub on the real control plane: ``gpuspawner-cluster controlplane``, the node
agent running the cluster file's nodes and pods, and the fault proxy, which the hub's kubeconfig
points at.  The same interface as ``DemoHub``; ``k8s_url`` is the API server itself (as its admin)."""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import requests

from gpuspawner import config_snippet
from gpuspawner.commands import demo
from gpuspawner.sim.cluster import default_cluster_file
from testcluster import ControlPlane
from testcluster.faultproxy import FaultProxy

from .harness import READY_TIMEOUT, DemoHub, free_port, wait_for

AGENT_READY_TIMEOUT = 120
NAMESPACE = "jupyterhub"  # the demo config's c.GPUSpawner.namespace


def admin_session(cp: ControlPlane) -> requests.Session:
    """HTTP as the cluster's admin (its client certificate), trusting the cluster CA."""
    pki = cp.data_dir / "pki"
    s = requests.Session()
    s.trust_env = False  # else $REQUESTS_CA_BUNDLE would replace the cluster CA
    s.cert = (str(pki / "admin.crt"), str(pki / "admin.key"))
    s.verify = str(pki / "ca.crt")
    return s


class RealHub(DemoHub):
    """``DemoHub`` on the real control plane; ``fault_proxy`` is between the hub and the API server."""

    def __init__(self, cluster_file: str | None = None, extra_config: str | None = None):
        super().__init__(cluster_file=cluster_file, extra_config=extra_config)
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gpuspawner-realhub-"))
        self.log_path = self.dir / "hub.log"
        self.control_plane = ControlPlane(self.dir / "cp")
        self.fault_proxy: FaultProxy | None = None
        self.agent: subprocess.Popen | None = None
        self.agent_log = self.dir / "nodeagent.log"
        self.timings: dict[str, float] = {}

    @property
    def faults_url(self) -> str:
        assert self.fault_proxy is not None, "start() first"
        return self.fault_proxy.control_url

    def start(self) -> RealHub:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        began = time.monotonic()
        cp = self.control_plane.start()
        self.timings["control_plane_s"] = time.monotonic() - began
        self.k8s_url = cp.server
        self.k8s = admin_session(cp)
        self.k8s.post(f"{cp.server}/api/v1/namespaces", json={"metadata": {"name": NAMESPACE}},
                      timeout=30).raise_for_status()
        env = dict(os.environ, PATH=os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]]))
        began = time.monotonic()
        with self.agent_log.open("wb") as log:
            self.agent = subprocess.Popen(
                [sys.executable, "-m", "testcluster.nodeagent", "--cluster",
                 str(self.cluster_file or default_cluster_file()), "--kubeconfig", str(cp.kubeconfig),
                 # the kubelet API (pods/log, exec, port-forward through the API server)
                 "--cluster-info", str(cp.data_dir / "cluster.json"), "--kubelet-port", str(free_port())],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        wait_for(self._agent_ready, AGENT_READY_TIMEOUT, "the node agent's nodes to be ready")
        self.timings["nodes_s"] = time.monotonic() - began
        self.fault_proxy = FaultProxy(cp.data_dir).start()
        workdir = self.dir / "hub"
        workdir.mkdir()
        args = argparse.Namespace(port=self.port, admin_token=self.token, config=self.extra_config)
        hub_env = demo._hub_env(args, workdir, self.fault_proxy.kubeconfig, demo._find_proxy() or "", config_snippet())
        self._log = open(self.log_path, "wb")
        began = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(demo.DEMO_CONFIG)], cwd=workdir,
                                     env=hub_env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for(self._ready, READY_TIMEOUT, "the hub to answer with synced GPU figures")
        except AssertionError:
            raise AssertionError(f"the hub did not start; its output:\n{self.log()}") from None
        self.timings["hub_s"] = time.monotonic() - began

    def _agent_ready(self) -> bool:
        assert self.agent is not None
        text = self.agent_log.read_text(errors="replace")
        if self.agent.poll() is not None:
            raise AssertionError(f"the node agent exited with {self.agent.returncode}:\n{text[-4000:]}")
        return "nodeagent ready:" in text

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            # as the demo stops it: SIGTERM, the hub deletes its users' pods while the cluster runs
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()
        if self.agent and self.agent.poll() is None:
            os.killpg(self.agent.pid, signal.SIGTERM)
            try:
                self.agent.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.agent.pid, signal.SIGKILL)
                self.agent.wait(10)
        if self.fault_proxy:
            self.fault_proxy.stop()
        self.control_plane.stop()
        # etcd's data goes; the hub's and the agent's logs stay for a failure's message
        shutil.rmtree(self.control_plane.data_dir, ignore_errors=True)
