"""A hub config that builds a ``kubernetes_asyncio`` model object while it loads, as Zero to
JupyterHub's does (a ``V1Container``), leaves a blank default client configuration (no host)
behind: the capacity cache reads the cluster with its own configuration all the same, and GPU and
CPU servers start (the demo's hub on Kubernetes' own control plane, real JupyterHub)."""

from __future__ import annotations

import shutil

import pytest

from scripts.faults import concurrent_spawns

from .harness import running_demo

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

# what the chart's hub config does while it loads; the assert shows the blank default it leaves
Z2JH_LIKE = concurrent_spawns.SERVER_CONFIG + """
from kubernetes_asyncio.client import Configuration, V1Container

V1Container(name="block-cloud-metadata", image="busybox")
assert Configuration._default is not None and Configuration._default.host == ""
"""


def test_capacity_and_servers_with_a_blank_default_client_configuration(tmp_path):
    # the demo's start waits for GET /hub/api/gpus to say synced: the first thing asked, before any
    # spawner (and KubeSpawner's own configuration loading) exists
    with running_demo(Z2JH_LIKE, tmp_path) as hub:
        gpus = hub.gpus()
        assert (gpus["synced"], gpus["healthy"], gpus["error"]) == (True, True, None)
        assert "InvalidUrl" not in hub.log()
        pool = concurrent_spawns.pick_pool(hub, 10**6)
        for user, options in (("cpu-user", {"profile": "cpu"}),
                              ("gpu-user", {"profile": "gpu", "gpu_pool": pool["id"], "gpus": 1})):
            hub.create_user(user)
            r = hub.api("POST", f"/users/{user}/server", json=options)
            assert r.status_code in (201, 202), r.text
            hub.wait_ready(user, timeout=120)
            hub.api("DELETE", f"/users/{user}/server")
            hub.wait_stopped(user, timeout=90)
