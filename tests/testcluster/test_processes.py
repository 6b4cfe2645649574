"""``testcluster.processes.start_session``: a cluster process started at a lower CPU priority gets it
for every thread it makes and for its scheduling group, and a higher one is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testcluster.processes import start_session, stop_process

# a child that starts a thread, then prints its own and its thread's niceness
REPORT = """
import os, threading
seen = []
t = threading.Thread(target=lambda: seen.append(os.getpriority(os.PRIO_PROCESS, 0)))
t.start(); t.join()
print(os.getpriority(os.PRIO_PROCESS, 0), seen[0], flush=True)
import time; time.sleep(30)
"""


def _autogroup(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().split()[-1]
    except FileNotFoundError:
        return None


@pytest.mark.parametrize("niceness", [0, 7], ids=["as-this-process", "lower-priority"])
def test_a_session_runs_at_the_niceness_given_threads_and_scheduling_group_included(niceness: int) -> None:
    own = os.getpriority(os.PRIO_PROCESS, 0)
    proc = start_session([sys.executable, "-c", REPORT], niceness, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        main, thread = map(int, proc.stdout.readline().split())
        # niceness adds to this process's, as nice(1) does
        assert (main, thread) == (min(own + niceness, 19),) * 2
        assert os.getsid(proc.pid) == proc.pid  # a session of its own
        group = _autogroup(proc.pid)
        if group is not None:  # the kernel has autogroups: a new session's group weighs as nice 0 unless told
            assert group == str(niceness)
    finally:
        stop_process(proc, 5, group=True)


def test_a_higher_priority_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match="only a lower priority"):
        start_session([sys.executable, "-c", "raise SystemExit(3)"], -5)
