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


def test_stolen_time_is_the_steal_column_per_core_in_seconds(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    # Linux's /proc/stat: user nice system idle iowait irq softirq steal guest guest_nice, in ticks
    stat.write_text("cpu  4750045 1386231 859292 4944451 270498 0 56453 21440 0 0\n"
                    "cpu0 2194909 683241 403332 2727901 95488 0 23950 11097 0 0\n")
    monkeypatch.setattr(hubprobe.os, "cpu_count", lambda: 2)
    stolen = hubprobe.StolenTime(str(stat))
    assert stolen.seconds() == pytest.approx(21440 / hubprobe.os.sysconf("SC_CLK_TCK") / 2)
    # read again from the start: a later figure, not the rest of the file
    stat.write_text("cpu  4750045 1386231 859292 4944451 270498 0 56453 21446 0 0\n")
    assert stolen.seconds() == pytest.approx(21446 / hubprobe.os.sysconf("SC_CLK_TCK") / 2)


def test_stolen_time_is_zero_where_it_cannot_be_read(tmp_path):
    assert hubprobe.StolenTime(str(tmp_path / "absent")).seconds() == 0.0
    odd = tmp_path / "odd"
    odd.write_text("cpu 1 2\n")
    assert hubprobe.StolenTime(str(odd)).seconds() == 0.0
