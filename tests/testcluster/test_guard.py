"""``testcluster/guard.py``: nothing its command starts outlives it, even processes in new sessions
and after ``kill -9`` of the guard's own parent; the command's exit status is the guard's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testcluster.guard import descendants
from testcluster.stack import GUARD, guarded

# a command that starts a grandchild in a session of its own (as JupyterHub starts its proxy), prints
# both process ids, and then sleeps or exits with the given status
FAMILY = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    print(child.pid, flush=True)
    if sys.argv[1] != "sleep":
        sys.exit(int(sys.argv[1]))
    time.sleep(600)
""")


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(running(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize("status", [0, 3], ids=["success", "failure"])
def test_the_command_s_status_is_the_guard_s_and_what_it_left_behind_is_killed(status):
    guard = subprocess.Popen(guarded([sys.executable, "-c", FAMILY, str(status)]), stdout=subprocess.PIPE, text=True)
    grandchild = int(guard.stdout.readline())
    assert guard.wait(30) == status
    assert gone_within([grandchild], 5)


def test_sigterm_stops_the_command_and_everything_it_started():
    guard = subprocess.Popen(guarded([sys.executable, "-c", FAMILY, "sleep"], grace=5), stdout=subprocess.PIPE,
                             text=True)
    grandchild = int(guard.stdout.readline())
    tree = descendants(guard.pid)
    assert grandchild in tree and len(tree) == 2
    guard.send_signal(signal.SIGTERM)
    guard.wait(30)
    assert gone_within(tree, 5)


def test_kill_9_of_the_guard_s_parent_ends_the_whole_tree_and_removes_its_scratch_folder(tmp_path):
    """The launcher (a demo) dies without a word: the guard's parent-death signal ends everything,
    and the launcher's scratch folder goes."""
    scratch = tmp_path / "scratch"
    (scratch / "etcd").mkdir(parents=True)
    launcher_code = textwrap.dedent(f"""
        import subprocess, sys, time
        g = subprocess.Popen({guarded([sys.executable, "-c", FAMILY, "sleep"], orphan_grace=1,
                                      orphan_remove=scratch)!r})
        print(g.pid, flush=True)
        time.sleep(600)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", launcher_code], stdout=subprocess.PIPE, text=True)
    guard = int(launcher.stdout.readline())
    deadline = time.monotonic() + 30
    while len(descendants(guard)) < 2:
        assert time.monotonic() < deadline, "the guarded command did not start"
        time.sleep(0.1)
    tree = [guard, *descendants(guard)]
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    assert gone_within(tree, 5), [p for p in tree if running(p)]
    deadline = time.monotonic() + 10
    while scratch.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not scratch.exists()


def test_a_guard_told_to_stop_by_its_parent_leaves_the_scratch_folder_to_it(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    guard = subprocess.Popen(guarded([sys.executable, "-c", FAMILY, "sleep"], orphan_remove=scratch),
                             stdout=subprocess.PIPE, text=True)
    guard.stdout.readline()
    guard.send_signal(signal.SIGTERM)
    guard.wait(30)
    assert scratch.is_dir()


def test_a_guard_without_a_command_says_so():
    r = subprocess.run([sys.executable, str(GUARD), "--"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "give the command after --" in r.stderr
