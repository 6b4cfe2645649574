"""The runner of KubeSpawner's own suite: the CPU priority it runs the cluster and the suite at."""

from __future__ import annotations

import os

from tests.testcluster.kubespawner_upstream import autogroup_nice, niceness


def test_the_suite_runs_at_a_raised_priority_and_gives_it_back_after():
    before, group = os.getpriority(os.PRIO_PROCESS, 0), autogroup_nice()
    with niceness(-3) as got:
        if os.geteuid() == 0:  # raised: this thread, and its session's scheduling group where there is one
            assert got == os.getpriority(os.PRIO_PROCESS, 0) == min(before, -3)
            assert autogroup_nice() == (None if group is None else min(group, -3))
        else:  # refused: it runs as it was
            assert got == os.getpriority(os.PRIO_PROCESS, 0) == before
    assert (os.getpriority(os.PRIO_PROCESS, 0), autogroup_nice()) == (before, group)


def test_it_never_lowers_a_priority():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with niceness(before + 5) as got:
        assert got == os.getpriority(os.PRIO_PROCESS, 0) == before
