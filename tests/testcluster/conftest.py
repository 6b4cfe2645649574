"""The test cluster's fixtures: the real kubectl of the same version pointed at the session's control
plane (``control_plane``, in tests/conftest.py, shared by every test), and the API servers the node
agent's tests run against.

``GPUSPAWNER_TEST_KUBECONFIG=PATH`` points the ``kubectl`` fixture at another cluster (a real one)
instead; the tests of the test cluster itself (``local_kubectl``, ``control_plane``) still start
their own. ``api`` is the session's control plane with a client; each test gets a name prefix of its
own, and the nodes it registered are deleted afterwards.
"""

from __future__ import annotations

import itertools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from testcluster.nodeagent.client import KNOWN, ApiError, Client

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
