"""A SimCluster for the storage tests: no HTTP, pods marked Running without processes."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from gpuspawner.sim.cluster import SimCluster
from gpuspawner.sim.errors import ApiError


@asynccontextmanager
async def storage_cluster(*manifests):
    c = SimCluster(manifests=list(manifests), serve_http=False, run_pods=False)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def get(store, plural, name, ns=None):
    try:
        return store.get(plural, name, ns)
    except ApiError as e:
        assert e.code == 404
        return None


def events(store, name, ns="default"):
    return [(e["reason"], e["message"]) for e in store.list("events", ns)["items"]
            if e["involvedObject"]["name"] == name]


async def until(check, timeout=10.0, what="condition"):
    for _ in range(int(timeout / 0.02)):
        value = check()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
