"""Loading without keep_timestamps: a snapshot's times become the load time, consistently."""

from __future__ import annotations

from testcluster.node import timestamps

OLD, NOW = "2025-01-01T00:00:00Z", "2026-06-01T12:00:00Z"


def test_a_pods_status_times_are_reset():
    pod = {"status": {"startTime": OLD,
                      "conditions": [{"type": "Ready", "lastTransitionTime": OLD, "lastProbeTime": None}],
                      "containerStatuses": [{"state": {"running": {"startedAt": OLD}},
                                             "lastState": {"terminated": {"startedAt": OLD, "finishedAt": OLD}}}]}}
    timestamps.restamp("pods", pod, NOW)
    st = pod["status"]
    assert st["startTime"] == NOW and st["conditions"][0]["lastTransitionTime"] == NOW
    assert st["conditions"][0]["lastProbeTime"] is None  # absent stays absent
    assert st["containerStatuses"][0]["state"]["running"]["startedAt"] == NOW
    assert st["containerStatuses"][0]["lastState"]["terminated"] == {"startedAt": NOW, "finishedAt": NOW}


def test_node_event_and_namespace_times():
    node = {"spec": {"taints": [{"key": "k", "effect": "NoExecute", "timeAdded": OLD}]},
            "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": OLD, "lastTransitionTime": OLD}]}}
    timestamps.restamp("nodes", node, NOW)
    assert node["spec"]["taints"][0]["timeAdded"] == NOW
    assert node["status"]["conditions"][0]["lastHeartbeatTime"] == NOW
    event = {"firstTimestamp": OLD, "lastTimestamp": OLD, "eventTime": "2025-01-01T00:00:00.123456Z",
             "series": {"count": 2, "lastObservedTime": "2025-01-01T00:00:00.5Z"}}
    timestamps.restamp("events", event, NOW)
    assert event == {"firstTimestamp": NOW, "lastTimestamp": NOW, "eventTime": "2026-06-01T12:00:00.000000Z",
                     "series": {"count": 2, "lastObservedTime": "2026-06-01T12:00:00.000000Z"}}


def test_node_conditions_without_times_get_the_load_time():
    node = {"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": OLD}]}}
    timestamps.fill_node_conditions(node, NOW)
    assert node["status"]["conditions"][0] == {"type": "Ready", "status": "True", "lastTransitionTime": OLD,
                                               "lastHeartbeatTime": NOW}
