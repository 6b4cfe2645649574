"""The API servers the node agent's tests run against.

``api`` is parametrized: ``sim`` is the project's simulated API server (scheduler and
controllers, no nodes of its own); ``real`` is Kubernetes' own control plane (``real_cluster``:
one ``testcluster.ControlPlane`` for the session).  Each test gets a name prefix of its own, and
on a shared real cluster the nodes it registered are deleted afterwards.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuspawner.sim.cluster import SimCluster
from testcluster.nodeagent.client import KNOWN, ApiError, Client

_serial = itertools.count()


@dataclass
class Api:
    """A started API server: its kubeconfig, a client, and a prefix for this test's names."""

    kind: str
    kubeconfig: Path
    client: Client
    prefix: str

    def name(self, base: str) -> str:
        return f"{self.prefix}{base}"


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory):
    """The kubeconfig of a started real control plane (kube-apiserver, kube-scheduler,
    kube-controller-manager), through the launcher ``testcluster.ControlPlane``."""
    try:
        from testcluster import ControlPlane
    except ImportError:
        pytest.fail("the control plane launcher testcluster.ControlPlane is not in this tree")
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    cp.start()
    yield Path(cp.kubeconfig)
    cp.stop()


@pytest.fixture(params=["sim", "real"])
async def api(request, tmp_path):
    n = next(_serial)
    if request.param == "sim":
        async with SimCluster(manifests=[], simulate_nodes=False) as sim:
            kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
            client = await Client(kubeconfig).open()
            try:
                yield Api("sim", kubeconfig, client, f"t{n}-")
            finally:
                await client.close()
        return
    kubeconfig = request.getfixturevalue("real_cluster")
    client = await Client(kubeconfig).open()
    prefix = f"t{n}-"
    try:
        yield Api("real", kubeconfig, client, prefix)
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
