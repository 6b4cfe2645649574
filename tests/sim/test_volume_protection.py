"""PVC protection: which pods keep a deleted claim alive."""

from __future__ import annotations

import pytest

from gpuspawner.sim.volume_protection import pod_uses_claim
from tests.builders.sim import pod


def _with(phase=None, node_name="n1"):
    p = pod("nb", node_name=node_name, claims=("home",))
    if phase:
        p["status"] = {"phase": phase}
    return p


@pytest.mark.parametrize("p, uses", [
    (_with(), True),
    (_with(node_name=None), False),  # the kubelet never saw it: not in use
    (_with("Succeeded"), False),
    (_with("Failed"), False),
    (pod("other", node_name="n1", claims=("data",)), False),
], ids=["running", "unscheduled", "succeeded", "failed", "other-claim"])
def test_pod_uses_claim(p, uses):
    assert pod_uses_claim(p, "home") is uses
