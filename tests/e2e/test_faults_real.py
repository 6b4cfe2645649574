"""The fault scenarios on the real control plane (``scripts/faults/*.py --real`` with CI sizes):
the demo's hub reaches Kubernetes' own API server through the fault proxy, which refuses its
connections and answers 503, or stalls every watch while lists answer."""

from __future__ import annotations

import shutil

import pytest

from scripts.faults import api_outage, stalled_watch

from .realhub import RealHub

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )


def _started(tmp_path, config: str | None = None) -> RealHub:
    extra = None
    if config is not None:
        extra = tmp_path / "extra_config.py"
        extra.write_text(config)
    return RealHub(extra_config=str(extra) if extra else None).start()


def test_api_server_away_then_back_on_the_real_control_plane(tmp_path):
    hub = _started(tmp_path)
    try:
        report = api_outage.run(hub, outage=20, poll=4)
    finally:
        hub.stop()
    assert report.problems == [], report.problems
    assert report.refusals >= 2 and report.slowest_page_s <= api_outage.PAGE_LIMIT_S
    assert report.recovery_s <= 30  # the informers come back within a backoff of the proxy's return


def test_stalled_watches_on_the_real_control_plane(tmp_path):
    window = stalled_watch.REAL_WINDOW
    hub = _started(tmp_path, stalled_watch.config(window))
    try:
        report = stalled_watch.run(hub, spawns=3, window=window)
        assert not stalled_watch.unowned_pods(hub)
    finally:
        hub.stop()
    assert report.problems == [], report.problems
    assert report.admitted == report.cancelled == 3
    assert report.unhealthy_after_s <= window + 10
    assert report.refused >= 3 and report.relists >= 2  # refused all along, re-lists notwithstanding
    assert report.reaped >= 1
