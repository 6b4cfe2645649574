"""Pods, containers and nodes for the simulated kubelet's tests (wire-format dicts), the real
kubectl's environment, and finding a pod's processes on the machine whatever PID namespace they
live in."""

from __future__ import annotations

import os
import uuid


def marker() -> str:
    """A value to put in a pod's env (``SIM_TEST_MARKER``) so that its processes can be found."""
    return uuid.uuid4().hex


def pids_with_marker(value: str) -> list[int]:
    """Host pids of the processes whose environment holds ``SIM_TEST_MARKER=value`` (whatever
    PID namespace they live in)."""
    needle = f"SIM_TEST_MARKER={value}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def container(name: str = "main", command: list[str] | None = None, **fields) -> dict:
    """A container spec (``image: busybox``), ``command`` and any other field given."""
    c = {"name": name, "image": "busybox:1.36", **fields}
    if command is not None:
        c["command"] = command
    return c


def pod_manifest(name: str, *containers: dict, **spec) -> dict:
    """A Pod with these containers and spec fields (``restartPolicy``, ``volumes``, ...)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": list(containers) or [container()], "terminationGracePeriodSeconds": 5,
                     **spec}}


def node_manifest(name: str, **allocatable) -> dict:
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110", **allocatable}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": alloc}}


def kubectl_env(tmp_path) -> dict:
    """The environment for the real kubectl: no kubeconfig of the machine, a private cache."""
    env = dict(os.environ)
    env["KUBECONFIG"] = str(tmp_path / "kubeconfig-unused")
    env["KUBECACHEDIR"] = str(tmp_path / "kubecache")
    return env
