"""Long work as steps (``gpuspawner.capacity.steps``): a re-list's clean-up of 150,000 pods runs a
slice at a time, so the hub's other tasks run in between, and ends as the work done at once does."""

from __future__ import annotations

import asyncio

import pytest

from gpuspawner.capacity import steps
from gpuspawner.capacity.device_plugin_source import DevicePluginSource
from gpuspawner.capacity.config import CapacityConfig
from tests.builders import gpu_node, pod


def count_to(n: int):
    total = 0
    for x in steps.paced(range(1, n + 1), 10):
        if x is None:
            yield
        else:
            total += x
    return total


def test_paced_puts_a_step_after_every_so_many_items():
    assert list(steps.paced("abcde", 2)) == ["a", "b", None, "c", "d", None, "e"]
    assert sum(1 for _ in count_to(95)) == 9  # steps of 10 items: 9 full ones


def test_run_and_of_give_the_result_of_the_work():
    assert steps.run(count_to(100)) == 5050
    assert steps.run(steps.of("done")) == "done"


async def test_drive_lets_the_loops_other_tasks_run_between_slices():
    ticks = 0

    async def other_task():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(other_task())
    await asyncio.sleep(0)
    before = ticks
    # a slice of 0 s: the loop gets a turn after every step
    assert await steps.drive(count_to(1000), 0) == 500500
    other.cancel()
    assert ticks - before >= 99  # one turn at least per step of 10 items


def held_pods_source(n: int) -> tuple[DevicePluginSource, set[str]]:
    src = DevicePluginSource(CapacityConfig())
    src.apply("nodes", gpu_node("gpu-0", 8))
    keys = set()
    for i in range(n):
        obj = pod(f"p{i}", 0, "gpu-0")
        src.apply("pods", obj)
        keys.add(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
    return src, keys


@pytest.mark.parametrize("kept", [10_000, 6_000], ids=["none-vanished", "4000-vanished"])
def test_a_relists_clean_up_of_many_pods_comes_in_steps_and_drops_what_vanished(kept):
    src, keys = held_pods_source(10_000)
    keep = set(sorted(keys)[:kept])
    work = src.retain_steps("pods", keep)
    slices = 0
    while True:
        try:
            next(work)
            slices += 1
        except StopIteration as done:
            dropped = done.value
            break
    assert dropped == 10_000 - kept
    assert slices >= 10  # 10,000 keys hashed and 10,000 records read, 2,000 at a time
    # what is left is what was kept: a second clean-up with the same keys drops nothing
    assert src.retain("pods", keep) == 0
