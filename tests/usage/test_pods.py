"""When a server's pod stopped holding its GPUs, from what the cluster says of it."""

import pytest

from gpuspawner.usage.pods import ENDED, GONE, REPLACED, holding_end, parse_time
from tests.builders.usage import NOW, at


def pod(uid="u1", phase="Running", *states):
    statuses = [{"name": f"c{i}", "state": s} for i, s in enumerate(states)]
    return {"metadata": {"uid": uid}, "status": {"phase": phase, **({"containerStatuses": statuses} if states else {})}}


DONE = {"terminated": {"exitCode": 0, "finishedAt": "2026-11-27T11:30:00Z"}}
LATER = {"terminated": {"exitCode": 1, "finishedAt": "2026-11-27T11:40:00Z"}}
RUNNING = {"running": {"startedAt": "2026-11-27T10:00:00Z"}}


@pytest.mark.parametrize("the_pod, end", [
    (None, (NOW, GONE)),
    (pod("u2"), (NOW, REPLACED)),
    (pod("u1", "Running", RUNNING), None),
    (pod("u1", "Pending"), None),
    (pod("u1", "Running", DONE, RUNNING), None),
    (pod("u1", "Failed", DONE, LATER), (at("2026-11-27 11:40"), ENDED)),
    (pod("u1", "Succeeded"), (NOW, ENDED)),
    (pod("u1", "Failed", {"terminated": {"exitCode": 1}}), (NOW, ENDED)),
    (pod("u1", "Running", {"terminated": {"finishedAt": "2026-11-28T00:00:00Z"}}), (NOW, ENDED)),
], ids=["gone", "replaced", "running", "pending", "one-container-still-runs", "last-finished", "ended-no-statuses",
        "no-finished-at", "finished-in-the-future-is-now"])
def test_holding_end(the_pod, end):
    assert holding_end(the_pod, "u1", NOW) == end


@pytest.mark.parametrize("value, parsed", [
    ("2026-11-27T11:40:00Z", at("2026-11-27 11:40")), ("", None), ("yesterday", None), (None, None), (3, None),
], ids=["rfc3339", "empty", "words", "none", "number"])
def test_parse_time(value, parsed):
    assert parse_time(value) == parsed
