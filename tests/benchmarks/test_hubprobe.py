"""The hub benchmark's probe says whose a step of the loop is: a task running gpuspawner's
coroutine is gpuspawner's, also when the probe's own timing wrapper is around it (the spawn form,
which JupyterHub runs as a task of its own)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import hubprobe  # noqa: E402

from gpuspawner.hub import spawn_page  # noqa: E402


async def _not_the_product(*args):
    return None


@pytest.mark.parametrize(("make", "kind"), [
    (lambda: spawn_page.render_page(None), "gpuspawner"),
    (lambda: hubprobe.PROBE.timed("spawn_form", spawn_page.render_page)(None), "gpuspawner"),
    (lambda: hubprobe.PROBE.timed("other", _not_the_product)(None), "other"),
    (lambda: _not_the_product(), "other"),
], ids=["product-coroutine", "timed-product-coroutine", "timed-other-coroutine", "other-coroutine"])
async def test_a_tasks_step_is_attributed_to_whose_coroutine_it_runs(make, kind):
    task = asyncio.ensure_future(make())
    try:
        assert hubprobe.SlowSteps.kind(task, task.get_coro().cr_frame) == kind
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
