"""Every watch stalled while lists answer, with spawns and cancels (``scripts/faults/stalled_watch.py``
with CI sizes), on Kubernetes' own API server behind the fault proxy: the capacity turns unhealthy
within its window and stays so through re-lists, GPU spawns get the outage's 503, cancelled spawns
leave no pod, a pod no server owns is swept away, and once watches deliver again the counts equal a
recount."""

from __future__ import annotations

import re
import shutil

import pytest

from scripts.faults import stalled_watch

from .harness import running_demo

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

# kube-apiserver sends a quiet watch a bookmark about once a minute, so the window is past that minute:
# a shorter one would see the healthy watches of a quiet cluster as stalled
WINDOW = stalled_watch.WINDOW


def test_stalled_watches_with_spawns_and_cancels_leave_nothing_behind(tmp_path):
    with running_demo(stalled_watch.config(WINDOW), tmp_path) as hub:
        # unhealthy for 30 s of GPU spawns and re-lists (the script holds two windows)
        report = stalled_watch.run(hub, spawns=3, window=WINDOW, hold=30)
        assert report.problems == [], report.problems
        assert report.admitted == report.cancelled == 3
        # silent since the stall at the latest: unhealthy once the window is up (polled from the stall on)
        assert report.unhealthy_after_s <= WINDOW + 10
        assert report.refused >= 3 and report.relists >= 2  # refused all along, re-lists notwithstanding
        assert report.reaped >= 1
        assert not stalled_watch.unowned_pods(hub)
        log = hub.log_path.read_text(errors="replace")
    # the cache's lines come through the hub's logger: time and level, INFO kept
    stamp = r"\d{4}-\d\d-\d\d [\d:.]+ gpuspawner\.capacity\.cache cache:\d+\]"
    assert re.search(rf"^\[W {stamp} capacity nodes: .* watch of nodes .* for more than {WINDOW:g} s; re-listing "
                     "and restarting the watch$", log, re.M)
    assert re.search(rf"^\[I {stamp} capacity nodes: listed afresh and its watch delivers again", log, re.M)
    assert not re.search(r"^capacity ", log, re.M)  # no line without time and level
