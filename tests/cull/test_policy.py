"""One server's decision, at a fixed time: both signals idle -> cull; anything unknown -> keep."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.builders.hubapi import NOW, hub_user, server_model, server_pod
from gpuspawner.cull.activity import DeviceActivity, PodActivity
from gpuspawner.cull.policy import Action, decide, judge_gpus
from gpuspawner.cull.idle_timeouts import CullRules, rule_for
from gpuspawner.cull.servers import pod_index, servers_from_users

POD = ("jupyterhub", "jupyter-alice")
HOUR = 3600.0


def gpu_server(last_activity=2 * HOUR, started=3 * HOUR, gpus=1, groups=None, **kw):
    user = hub_user("alice", {"": server_model(last_activity=last_activity, started=started, **kw)}, groups)
    pods = pod_index([server_pod("alice", gpus=gpus)])
    return servers_from_users([user], pods)[0]


def devices(*peaks, covered=True, shared=()):
    return PodActivity(tuple(DeviceActivity(f"node-1/GPU-{i}", p, covered, shared,
                                            None if covered else "no samples from before the window began")
                             for i, p in enumerate(peaks)))


def unusable(*peaks, bad=0, why='DCGM_FI_PROF_GR_ENGINE_ACTIVE: "NaN" is not a finite number (at 1700000000)'):
    """``devices(*peaks)`` where device ``bad``'s series held bad samples."""
    return PodActivity(tuple(DeviceActivity(f"node-1/GPU-{i}", None if i == bad else p, i != bad, (),
                                            why if i == bad else None, why if i == bad else None)
                             for i, p in enumerate(peaks)))


IDLE = devices(0.002)
RULES = CullRules(idle_timeout=HOUR, noise_floor=0.01)


@pytest.mark.parametrize("server_kw, activity, rules, action, reason", [
    ({}, IDLE, RULES, Action.CULL, "idle"),
    ({"last_activity": 600}, IDLE, RULES, Action.KEEP, "jupyter_active"),  # GPU idle alone never culls
    ({}, devices(0.4), RULES, Action.KEEP, "gpu_busy"),  # Jupyter idle alone never culls
    ({}, None, RULES, Action.KEEP, "no_metrics"),
    ({"gpus": 2}, IDLE, RULES, Action.KEEP, "partial_metrics"),  # one of two GPUs reported
    ({}, devices(0.0, covered=False), RULES, Action.KEEP, "partial_metrics"),
    ({"gpus": 2}, devices(0.0, 0.5), RULES, Action.KEEP, "gpu_busy"),  # one busy GPU keeps the server
    ({}, devices(0.0, covered=False, shared=(("ns", "other"),)), RULES, Action.KEEP, "partial_metrics"),
    ({}, devices(0.009), RULES, Action.CULL, "idle"),  # below the noise floor
    ({}, devices(0.01), RULES, Action.KEEP, "gpu_busy"),  # at the floor: busy
    ({"gpus": 0}, None, RULES, Action.SKIP, "cpu_only"),
    ({"pending": "spawn"}, IDLE, RULES, Action.SKIP, "pending"),
    ({"ready": False}, IDLE, RULES, Action.SKIP, "not_ready"),
    ({"groups": ["staff"]}, IDLE, replace(RULES, exempt_groups=frozenset({"staff"})), Action.KEEP, "exempt"),
    ({"groups": ["other"]}, IDLE, replace(RULES, exempt_groups=frozenset({"staff"})), Action.CULL, "idle"),
    ({}, IDLE, replace(RULES, exempt_groups=frozenset({"staff"})), Action.KEEP, "groups_unknown"),
    ({"last_activity": 60, "started": 25 * HOUR}, devices(0.9), replace(RULES, max_age=24 * HOUR),
     Action.CULL, "max_age"),
    ({"last_activity": None, "started": 2 * HOUR}, IDLE, RULES, Action.CULL, "idle"),  # started stands in
    ({"last_activity": None, "started": None}, IDLE, RULES, Action.KEEP, "no_activity_time"),
    ({}, unusable(0.0), RULES, Action.KEEP, "metrics_unusable"),
    ({"gpus": 2}, unusable(0.0, 0.0, bad=1), RULES, Action.KEEP, "metrics_unusable"),  # one GPU's data is bad
    ({"gpus": 2}, unusable(0.0, 0.9, bad=0), RULES, Action.KEEP, "metrics_unusable"),  # bad beats busy
    ({"last_activity": 600}, unusable(0.0), RULES, Action.KEEP, "jupyter_active"),
    ({"last_activity": 60, "started": 25 * HOUR}, unusable(0.0), replace(RULES, max_age=24 * HOUR),
     Action.CULL, "max_age"),  # the age is the hub's, not a metric
], ids=["both-idle", "jupyter-active", "gpu-busy", "no-metrics", "one-of-two-gpus", "window-not-covered",
        "one-busy-gpu", "shared-but-unseen", "below-floor", "at-floor", "cpu-only", "pending", "not-ready",
        "exempt", "not-exempt", "groups-invisible", "max-age", "started-fallback", "no-times", "unusable", "one-of-two-unusable", "unusable-beside-busy",
        "unusable-jupyter-active", "unusable-max-age"])
def test_decide(server_kw, activity, rules, action, reason):
    d = decide(gpu_server(**server_kw), activity, rule_for(rules, None, None), rules, NOW)
    assert (d.action, d.reason) == (action, reason), d.message


def test_an_idle_cull_counts_the_proven_idle_gpu_hours():
    d = decide(gpu_server(gpus=4, last_activity=5 * HOUR), devices(0, 0, 0, 0), rule_for(RULES, None, None),
               RULES, NOW)
    assert d.action is Action.CULL
    # both signals are proven idle for the window (the timeout), not for Jupyter's 5 hours
    assert d.gpu_hours == pytest.approx(4.0)


def test_the_log_message_names_both_signals_and_the_rule():
    d = decide(gpu_server(), IDLE, rule_for(RULES, None, None), RULES, NOW)
    assert d.message == ("Jupyter activity 2h00m ago and GPUs idle: peak 0.002 < 0.01 over the last 60m; "
                         "timeout 60m (default)")


def test_a_shared_gpu_says_its_values_are_device_wide():
    verdict = judge_gpus(devices(0.3, shared=(("research", "train"),)), 1, 0.01, HOUR)
    assert verdict.idle is False
    assert "shared GPU, device-wide values, also reported for research/train" in verdict.text
    # idle device-wide means nobody used it: idle for every pod sharing it
    assert judge_gpus(devices(0.0, shared=(("research", "train"),)), 1, 0.01, HOUR).idle is True


def test_a_server_without_a_pod_is_kept():
    user = hub_user("bob", {"": server_model(user_options={"profile": "gpu", "gpu_pool": "p", "gpus": 1})})
    server = servers_from_users([user], {})[0]
    assert server.gpus == 1 and server.pod is None
    d = decide(server, IDLE, rule_for(RULES, None, None), RULES, NOW)
    assert (d.action, d.reason) == (Action.KEEP, "no_pod")


def test_an_unusable_verdict_says_which_sample_and_device():
    verdict = judge_gpus(unusable(0.0), 1, 0.01, HOUR)
    assert (verdict.idle, verdict.reason) == (None, "metrics_unusable")
    assert verdict.text == ('GPU metrics unusable: DCGM_FI_PROF_GR_ENGINE_ACTIVE: "NaN" is not a finite number '
                            '(at 1700000000) ("node-1/GPU-0")')
