"""A small simulated cluster whose kubelet runs real processes, for the kubelet's tests."""

import pytest

from gpuspawner.sim.cluster import SimCluster
from tests.builders.kubelet import node_manifest


@pytest.fixture
async def cluster():
    c = SimCluster(manifests=[node_manifest("node-a")], restart_backoff=(0.2, 1.0))
    await c.start()
    try:
        yield c
    finally:
        await c.stop()
