"""End to end: ``gpuspawner cull`` against a real JupyterHub whose GPU servers are idle (alice) and
busy (bob), while Prometheus (a small HTTP server on loopback, ``tests.builders.prometheus``) answers
each hostile payload of ``HOSTILE``: NaN, infinities, negatives, nulls, words, lists, objects, points
that are not ``[time, value]``, labels that are not strings, non-JSON, HTTP errors, another result type.

Nothing may be stopped, no pass may end in a traceback, ``--once`` exits 0 when it read bad samples
(and kept their servers) and 1 when the answer was not the API's; in loop mode the culler lives through
all of them in a row, says what it kept and why, and still stops alice once the data is clean.
"""

from __future__ import annotations

import time

import pytest

from tests.builders.prometheus import CLEAN, HOSTILE, UNUSABLE, Cycle, FakePrometheus

from .cullenv import CullHub
from .harness import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.hub]

TIMEOUT = 5  # seconds: the culler's idle timeout
CULL = ("--idle-timeout", f"{TIMEOUT}s", "--metrics-step", "1s")


@pytest.fixture(scope="module")
def env():
    hub = CullHub().start()
    prom = None
    try:
        a100 = next(p for p in hub.gpus()["pools"] if p["resource"] == "nvidia.com/gpu" and p["free"] >= 2)
        for user in ("alice", "bob"):
            hub.spawn(user, {"profile": "gpu", "gpu_pool": a100["id"], "gpus": 1})
        hub.spawn("erin", {"profile": "cpu"})
        pods = {hub.pod_of("alice")["metadata"]["name"]: "idle", hub.pod_of("bob")["metadata"]["name"]: "busy"}
        prom = FakePrometheus(pods)
        hub.prometheus = prom
        time.sleep(TIMEOUT + 1)  # Jupyter idle for a whole window: only the GPU data decides
        yield hub
    finally:
        if prom is not None:
            prom.stop()
        hub.stop()


def running(hub: CullHub) -> set[str]:
    return {u["name"] for u in hub.api("GET", "/users", params={"state": "ready"}).json()}


def kept_line(log: str, user: str) -> str:
    return next((line for line in log.splitlines() if f"keep {user}/" in line), f"<no keep line for {user}>")


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_once_on_a_hostile_answer_stops_nothing_and_says_why(env, case):
    hostile = HOSTILE[case]
    env.prometheus.respond = hostile.respond
    done = env.culler("--once", "--prometheus-url", env.prometheus.url, *CULL)
    log = done.stderr
    assert "Traceback" not in log, log
    assert done.returncode == (0 if hostile.verdict == UNUSABLE else 1), log
    assert "cull alice/" not in log and "cull bob/" not in log, log
    assert kept_line(log, "alice").endswith(f"[{hostile.verdict}]"), log
    assert kept_line(log, "bob").endswith(f"[{hostile.busy}]"), log
    if hostile.verdict == UNUSABLE:
        assert "series hold bad samples, their servers are kept [metrics_unusable]" in log, log
    assert running(env) >= {"alice", "bob", "erin"}


def test_the_loop_lives_through_every_hostile_answer_then_stops_the_idle_server(env, tmp_path):
    """One pass per hostile answer, in a row, then clean data: the first stop comes after the last
    hostile pass, and it is alice's."""
    cycle = Cycle([HOSTILE[case].respond for case in HOSTILE] + [CLEAN["clean"]])
    env.prometheus.respond = cycle
    log_path = tmp_path / "culler.log"
    proc = env.culler_process("--prometheus-url", env.prometheus.url, "--cull-every", "1s", *CULL, log=log_path)
    try:
        wait_for(lambda: cycle.passes > len(HOSTILE) or proc.poll() is not None, 300,
                 f"the culler to make {len(HOSTILE)} passes over hostile answers")
        assert proc.poll() is None, log_path.read_text()
        env.wait_stopped("alice", timeout=60)
        assert proc.poll() is None, log_path.read_text()
    finally:
        proc.terminate()
        proc.wait(30)
    log = log_path.read_text()
    assert "Traceback" not in log, log
    lines = log.splitlines()
    first_cull = next(i for i, line in enumerate(lines) if "] cull " in line)
    assert "cull alice/" in lines[first_cull] and lines[first_cull].endswith("[idle]"), log
    hostile = lines[:first_cull]
    assert sum("pass done:" in line for line in hostile) >= len(HOSTILE), log
    for verdict in ("[metrics_unusable]", "[no_metrics]"):
        assert any("keep alice/" in line and line.endswith(verdict) for line in hostile), log
        assert any("keep bob/" in line and line.endswith(verdict) for line in hostile), log
    assert any("keep bob/" in line and line.endswith("[gpu_busy]") for line in hostile), log
    assert any("GPU activity unavailable" in line for line in hostile)
    assert any("series hold bad samples" in line for line in hostile)
    assert "cull bob/" not in log and running(env) >= {"bob", "erin"}, log
