"""The FailedScheduling messages in tests/fixtures/scheduler_messages.json are what kube-scheduler says
today: each scenario is run again on a control plane of its own, since a message counts every node
of the cluster (``python -m tests.testcluster.scheduler_messages`` records them anew)."""

from __future__ import annotations

import json

from testcluster import ControlPlane
from tests.testcluster.scheduler_messages import FIXTURE, record


async def test_the_recorded_messages_are_kube_schedulers_own(tmp_path):
    cp = ControlPlane(tmp_path / "controlplane")
    cp.start()
    try:
        assert await record(cp.kubeconfig) == json.loads(FIXTURE.read_text())
    finally:
        cp.stop()
