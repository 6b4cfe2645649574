"""What the simulated controllers share (gpuspawner/sim/controller.py): ``get_or_none``, ``worker``."""

from __future__ import annotations

import asyncio
import logging

import pytest

from testcluster.node.controller import get_or_none, worker
from gpuspawner.sim.errors import ApiError
from gpuspawner.sim.store import Store
from testcluster.node.work_queue import WorkQueue


def test_get_or_none_reads_an_object_and_none_when_it_is_gone():
    store = Store()
    store.create("namespaces", {"metadata": {"name": "here"}})
    assert get_or_none(store, "namespaces", "here")["metadata"]["name"] == "here"
    assert get_or_none(store, "namespaces", "gone") is None


def test_get_or_none_raises_what_is_not_a_404():
    class Broken:
        def get(self, plural, name, namespace=None):
            raise ApiError(500, "InternalError", "etcd is down")

    with pytest.raises(ApiError):
        get_or_none(Broken(), "pods", "p", "default")


@pytest.mark.parametrize(
    "failure, logged",
    [
        (ApiError(409, "Conflict", "the object has been modified"), False),
        (ApiError(404, "NotFound", "gone"), False),
        (RuntimeError("a bug"), True),
    ],
    ids=["conflict-retried-quietly", "not-found-retried-quietly", "other-error-logged-and-retried"],
)
async def test_worker_retries_a_failed_key_and_forgets_it_once_synced(caplog, failure, logged):
    queue: WorkQueue[str] = WorkQueue(base_delay=0.001)
    stopping = asyncio.Event()
    calls: list[str] = []
    done = asyncio.Event()

    def sync(key: str) -> None:
        calls.append(key)
        if len(calls) == 1:
            raise failure
        done.set()

    queue.add("k")
    task = asyncio.create_task(worker(queue, sync, stopping, "test controller", logging.getLogger("t")))
    await asyncio.wait_for(done.wait(), 5)
    stopping.set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    queue.close()
    assert calls == ["k", "k"]
    assert queue._failures == {}  # forgotten once synced
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == (["test controller: syncing k failed"] if logged else [])
