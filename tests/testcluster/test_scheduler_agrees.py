"""The capacity model agrees with the real kube-scheduler, case by case, on random clusters.

Each case asks gpuspawner's live capacity cache (its informers, ledgers and offers) whether a
server of a profile with N GPUs fits in a pool now, then creates the pod gpuspawner would create
and lets kube-scheduler bind it or report it Unschedulable (tests/testcluster/scheduler_agrees.py).
CI runs a small size and asks every case to agree; the 2,000-case run is in docs/test-cluster.md.
"""

from __future__ import annotations

import asyncio

from tests.testcluster import scheduler_agrees

CASES = 200
SEED = 20261127


def test_the_capacity_model_agrees_with_kube_scheduler(control_plane):
    outcomes, seconds = asyncio.run(scheduler_agrees.run(str(control_plane.kubeconfig), CASES, SEED))
    share, text = scheduler_agrees.report(outcomes, seconds)
    print(text)
    assert len(outcomes) == CASES, text
    # both answers occur, so a model that always says "fits" (or never) cannot pass
    assert any(o.scheduler is True for o in outcomes) and any(o.scheduler is False for o in outcomes), text
    assert share == 1.0, text
