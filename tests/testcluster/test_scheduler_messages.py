"""The FailedScheduling messages in tests/fixtures/scheduler_messages.json are what kube-scheduler says
today: each scenario is run again on the session's control plane (``python -m
tests.testcluster.scheduler_messages`` records them anew)."""

from __future__ import annotations

import json

from tests.testcluster.scheduler_messages import FIXTURE, record


async def test_the_recorded_messages_are_kube_schedulers_own(real_cluster):
    assert await record(real_cluster) == json.loads(FIXTURE.read_text())
