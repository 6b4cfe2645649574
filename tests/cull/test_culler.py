"""One pass of the culler with a fixed clock: who is stopped, what is counted, what a failure does.

The hub and the metric source are small stand-ins with the real clients' methods; the real ones
are exercised against a real JupyterHub and Prometheus in tests/e2e/test_cull_e2e.py.
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client import generate_latest

from tests.builders.hubapi import NOW, dcgm_labels, hub_user, server_model, server_pod
from tests.builders.prometheus import CLEAN, HOSTILE, UNUSABLE, FakePrometheus
from gpuspawner.cull.activity import GR_ENGINE, SeriesWindow, SourceError
from gpuspawner.cull.culler import Culler
from gpuspawner.cull.hub import HubError
from gpuspawner.cull.culler_metrics import CullMetrics
from gpuspawner.cull.prometheus import PrometheusSource
from gpuspawner.cull.idle_timeouts import CullRules, Limits

POOL = "gpu-a100:nvidia-a100-sxm4-40gb:nvidia.com/gpu"


class Hub:
    def __init__(self, users, fail: str | None = None, usage: dict | None = None):
        self.users, self.fail, self.stopped = users, fail, []
        self.usage, self.usage_asked = usage or {}, []

    async def gpu_usage(self, user):
        """``GET /hub/api/users/{name}/gpu-usage``: the user's answer, None (404) for users it lacks."""
        self.usage_asked.append(user)
        if self.fail == "usage":
            raise HubError(f"GET /users/{user}/gpu-usage: HTTP 403 ... the token lacks a scope")
        return self.usage.get(user)

    async def ready_users(self):
        if self.fail == "list":
            raise HubError("GET /users: cannot reach the hub")
        if self.fail == "bug":
            raise KeyError("servers")
        return self.users

    async def stop(self, user, server):
        if self.fail == "stop":
            raise HubError("DELETE: HTTP 403")
        self.stopped.append((user, server))
        return 204


class Source:
    def __init__(self, peaks: dict[str, list[float]], fail: bool = False):
        self.peaks, self.fail, self.asked = peaks, fail, []

    async def windows(self, window, now):
        self.asked.append(window)
        if self.fail:
            raise SourceError("cannot query Prometheus at http://prom: connection refused")
        return [SeriesWindow(GR_ENGINE, dcgm_labels(pod, exported=True, uuid=f"GPU-{pod}-{i}"), peak, True)
                for pod, peaks in self.peaks.items() for i, peak in enumerate(peaks)]


def setup(alice_gpus=2, **kw):
    users = [hub_user("alice", {"": server_model()}), hub_user("bob", {"": server_model()}),
             hub_user("carol", {"": server_model(user_options={"profile": "cpu"})})]
    pods = [server_pod("alice", gpus=alice_gpus, pool=POOL), server_pod("bob", pool=POOL),
            server_pod("carol", gpus=None, pool=None)]

    async def list_pods():
        return pods
    hub = Hub(users, kw.pop("fail", None), kw.pop("usage", None))
    source = kw.pop("source", Source({"jupyter-alice": [0.0, 0.001], "jupyter-bob": [0.5]}))
    metrics = CullMetrics()
    culler = Culler(hub, source, kw.pop("rules", CullRules(idle_timeout=3600)), list_server_pods=list_pods,
                    metrics=metrics, clock=lambda: NOW, **kw)
    return culler, hub, source, metrics


def counted(metrics: CullMetrics) -> dict:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name.startswith("gpuspawner_culled") and s.name.endswith("_total")}


async def test_a_pass_stops_the_idle_gpu_server_only_and_counts_it(caplog):
    culler, hub, _, metrics = setup()
    with caplog.at_level(logging.INFO, "gpuspawner.cull"):
        assert await culler.run_pass() is True
    assert hub.stopped == [("alice", "")]
    assert counted(metrics) == {
        ("gpuspawner_culled_servers_total", (("pool", POOL), ("reason", "idle"))): 1.0,
        ("gpuspawner_culled_gpu_hours_total", (("pool", POOL),)): 2.0,  # 2 GPUs x the 1 h window
    }
    lines = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("cull alice/ (pod jupyterhub/jupyter-alice, 2 GPUs") for m in lines), lines
    assert any(m.startswith("keep bob/") and m.endswith("[gpu_busy]") for m in lines), lines
    assert not any("carol/" in m for m in lines)  # CPU servers: DEBUG only


async def test_dry_run_stops_nothing_and_counts_nothing(caplog):
    culler, hub, _, metrics = setup(dry_run=True)
    with caplog.at_level(logging.INFO, "gpuspawner.cull"):
        assert await culler.run_pass() is True
    assert hub.stopped == [] and counted(metrics) == {}
    assert any(r.getMessage().startswith("would cull alice/") for r in caplog.records)


async def test_each_distinct_timeout_is_one_window_query():
    rules = CullRules(idle_timeout=3600, pools={POOL: Limits(idle_timeout=600)})
    culler, hub, source, _ = setup(rules=rules)
    await culler.run_pass()
    assert source.asked == [600]  # both GPU servers are in the pool; the CPU server asks nothing


@pytest.mark.parametrize("fail, source_fails, stopped", [
    ("list", False, []),
    (None, True, []),  # no metrics: every GPU server is kept
    ("stop", False, []),
], ids=["hub-unreachable", "source-unreachable", "stop-refused"])
async def test_a_pass_that_cannot_read_or_stop_reports_failure(fail, source_fails, stopped, caplog):
    culler, hub, _, metrics = setup(fail=fail, source=Source({"jupyter-alice": [0.0, 0.0]}, fail=source_fails))
    with caplog.at_level(logging.INFO, "gpuspawner.cull"):
        assert await culler.run_pass() is False
    assert hub.stopped == stopped and counted(metrics) == {}
    if source_fails:
        assert any("keep alice/" in r.getMessage() and "GPU metrics unavailable: cannot query Prometheus"
                   in r.getMessage() for r in caplog.records)


def decisions(metrics: CullMetrics) -> dict:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name in ("gpuspawner_cull_decisions", "gpuspawner_cull_unusable_series")}


PODS = {"jupyter-alice": "idle", "jupyter-bob": "busy"}


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
async def test_a_hostile_prometheus_stops_nothing_and_the_pass_says_why(case, caplog):
    """Alice's server is idle, Bob's busy; Prometheus (a real HTTP server) answers garbage: nobody is
    stopped, the pass ends normally, each GPU server's line says why it is kept, the metrics count it."""
    hostile = HOSTILE[case]
    with FakePrometheus(PODS, hostile.respond) as prom:
        source = PrometheusSource(prom.url, step=60)
        culler, hub, _, metrics = setup(alice_gpus=1, source=source)
        try:
            with caplog.at_level(logging.INFO, "gpuspawner.cull"):
                worked = await culler.run_pass()
        finally:
            await source.close()
    assert hub.stopped == []
    lines = [r.getMessage() for r in caplog.records]
    alice = next(m for m in lines if m.startswith("keep alice/"))
    assert alice.endswith(f"[{hostile.verdict}]"), alice
    assert not any("Traceback" in m or "would cull" in m or m.startswith("cull ") for m in lines), lines
    seen = decisions(metrics)
    assert seen[("gpuspawner_cull_decisions", (("action", "keep"), ("reason", hostile.verdict)))] >= 1
    if hostile.verdict == UNUSABLE:
        assert worked is True  # the pass worked: it read bad data and kept the servers on it
        assert seen[("gpuspawner_cull_unusable_series", ())] >= 1
        assert any(r.levelname == "WARNING" and "series hold bad samples, their servers are kept "
                   "[metrics_unusable]" in r.getMessage() for r in caplog.records), lines
    else:
        assert worked is False  # the answer was not Prometheus': the pass could not read the metrics
        assert any("GPU activity unavailable" in m for m in lines), lines
    # the pass's summary says how many servers it kept only because it could not judge them
    blind = 1 + (hostile.busy != "gpu_busy")
    assert any(m.startswith(f"pass done: 3 servers, 0 stopped, 2 kept ({blind} of them for want of usable GPU "
                            "metrics)") for m in lines), lines
    bob = next(m for m in lines if m.startswith("keep bob/"))
    assert bob.endswith(f"[{hostile.busy}]"), bob


@pytest.mark.parametrize("case", list(CLEAN), ids=list(CLEAN))
async def test_a_clean_answer_through_the_same_server_stops_the_idle_server_only(case):
    """The control for the hostile table: the same fake Prometheus with good data (also a huge answer)
    does let the culler stop Alice's idle server, so "nothing stopped" above means something."""
    with FakePrometheus(PODS, CLEAN[case]) as prom:
        source = PrometheusSource(prom.url, step=60)
        culler, hub, _, metrics = setup(alice_gpus=1, source=source)
        try:
            assert await culler.run_pass() is True
        finally:
            await source.close()
    assert hub.stopped == [("alice", "")]
    assert decisions(metrics)[("gpuspawner_cull_unusable_series", ())] == 0


class Broken:
    """A metric source that fails in a way it does not announce (not a SourceError)."""

    async def windows(self, window, now):
        raise TypeError("float() argument must be a string or a real number, not 'NoneType'")


async def test_a_source_failing_unexpectedly_keeps_every_gpu_server_and_fails_the_pass(caplog):
    culler, hub, _, metrics = setup(source=Broken())
    with caplog.at_level(logging.INFO, "gpuspawner.cull"):
        assert await culler.run_pass() is False
    assert hub.stopped == []
    assert any(r.getMessage().startswith("keep alice/") and "[no_metrics]" in r.getMessage()
               for r in caplog.records)
    assert any("GPU activity unavailable: the source failed: TypeError" in r.getMessage() for r in caplog.records)


async def test_a_pass_that_hits_the_unexpected_fails_instead_of_raising(caplog):
    culler, hub, _, metrics = setup(fail="bug")
    with caplog.at_level(logging.INFO, "gpuspawner.cull"):
        assert await culler.run_pass() is False
    assert hub.stopped == []
    assert any("pass failed, the rest of it skipped" in r.getMessage() and "KeyError" in r.getMessage()
               for r in caplog.records)
def usage(stops_at, remaining=0.5):
    return {"gpu_hours": 20 - remaining, "window": "30d", "budget": 20.0, "remaining": remaining, "retry_at": None,
            "servers": [{"name": "", "pool": POOL, "gpus": 1, "stops_at": stops_at}]}


@pytest.mark.parametrize("answer, stopped", [
    (usage("2026-11-23T11:59:00Z"), [("alice", ""), ("bob", "")]),
    (usage("2026-11-23T12:30:00Z", remaining=0.0), [("alice", ""), ("bob", "")]),
    (usage("2026-11-23T12:30:00Z"), [("alice", "")]),
    (usage(None, remaining=0.0), [("alice", "")]),
], ids=["stops-at-passed", "nothing-remaining-by-the-hubs-clock", "not-yet", "stopping-off"])
async def test_a_spent_budget_stops_a_busy_gpu_server(answer, stopped):
    # bob's GPU is busy (kept for idleness); his budget decides
    culler, hub, _, metrics = setup(usage={"bob": answer})
    assert await culler.run_pass() is True
    assert hub.stopped == stopped
    assert hub.usage_asked == ["alice", "bob"]  # the users with ready GPU servers, not carol (CPU only)
    if ("bob", "") in stopped:
        assert counted(metrics)[("gpuspawner_culled_servers_total", (("pool", POOL), ("reason", "budget")))] == 1


async def test_without_the_scope_budgets_are_not_checked_again(caplog):
    culler, hub, _, _ = setup(fail="usage")
    with caplog.at_level(logging.WARNING, "gpuspawner.cull"):
        await culler.run_pass()
        await culler.run_pass()
    assert hub.usage_asked == ["alice"]  # asked once, then no more
    assert "GPU-hour budgets not checked" in caplog.text
