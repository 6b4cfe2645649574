"""The test cluster's fixtures: the real kubectl of the same version pointed at the session's control
plane (``control_plane``, in tests/conftest.py, shared by every test), and the API servers the node
agent's tests run against.

``GPUSPAWNER_TEST_KUBECONFIG=PATH`` points the ``kubectl`` fixture at another cluster (a real one)
instead; the tests of the test cluster itself (``local_kubectl``, ``control_plane``) still start
their own. ``api`` is the session's control plane with a client; each test gets a name prefix of its
own, and the nodes it registered are deleted afterwards. ``agent_and_cache`` runs the node agent on the
session's control plane with a capacity cache reading it (the pre-puller's and warm images' tests).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuspawner.capacity.cache import CapacityCache, _default_api
from gpuspawner.capacity.config import CapacityConfig
from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN, ApiError, Client
from tests.builders.nodeagent import write_cluster

KUBECONFIG_ENV = "GPUSPAWNER_TEST_KUBECONFIG"
_serial = itertools.count()


def _kubectl_for(kubeconfig, cache_dir):
    """``run(*args, input=None, check=True)``: the kubectl on PATH with this kubeconfig only."""
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(cache_dir))

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["kubectl", *args]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=60, env=env)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    return run


@pytest.fixture(scope="session")
def local_kubectl(control_plane, tmp_path_factory):
    """kubectl as the test cluster's admin."""
    return _kubectl_for(control_plane.kubeconfig, tmp_path_factory.mktemp("kubecache"))


@pytest.fixture(scope="session")
def kubectl(request, tmp_path_factory):
    """kubectl as an admin of the cluster under test: ``$GPUSPAWNER_TEST_KUBECONFIG``'s, else the
    test cluster's."""
    other = os.environ.get(KUBECONFIG_ENV)
    if other:
        return _kubectl_for(other, tmp_path_factory.mktemp("kubecache"))
    return request.getfixturevalue("local_kubectl")


@dataclass
class Api:
    """A started API server: its kubeconfig, a client, and a prefix for this test's names."""

    kubeconfig: Path
    client: Client
    prefix: str

    def name(self, base: str) -> str:
        return f"{self.prefix}{base}"


@pytest.fixture
async def api(real_cluster):
    n = next(_serial)
    kubeconfig = real_cluster
    client = await Client(kubeconfig).open()
    prefix = f"t{n}-"
    try:
        yield Api(kubeconfig, client, prefix)
    finally:
        # a shared cluster: this test's nodes go, so that no later pod is bound to them
        _, nodes = await client.list(KNOWN["Node"])
        for node in nodes:
            if node["metadata"]["name"].startswith(prefix):
                try:
                    await client.delete(KNOWN["Node"], node["metadata"]["name"])
                except ApiError:
                    pass
        await client.close()


@pytest.fixture
def agent_and_cache(real_cluster, tmp_path):
    """``async with agent_and_cache(objects, namespace, **agent_options) as (cache, core)``: the node
    agent running ``objects`` on the session's control plane, a started capacity cache synced with
    it, a kubernetes_asyncio CoreV1Api and ``namespace`` created; afterwards the cache stops and the
    namespace and the nodes of ``objects`` are deleted (their ResourceSlices go with them)."""
    @contextlib.asynccontextmanager
    async def run(objects: list[dict], namespace: str, **agent_options):
        cluster = write_cluster(tmp_path / "cluster.yaml", objects)
        async with NodeAgent(real_cluster, cluster, **agent_options):
            api_factory = functools.partial(_default_api, config_file=str(real_cluster))
            cache = CapacityCache(CapacityConfig(), api_factory=api_factory)
            cache.start()
            core = await api_factory()
            try:
                await core.create_namespace({"metadata": {"name": namespace}})
                await cache.wait_synced(60)
                yield cache, core
            finally:
                await cache.stop()
                await core.delete_namespace(namespace)
                for o in objects:
                    if o.get("kind") == "Node":
                        with contextlib.suppress(Exception):
                            await core.delete_node(o["metadata"]["name"])
                await core.api_client.close()
    return run
