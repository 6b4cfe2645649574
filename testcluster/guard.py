"""``python testcluster/guard.py [--grace S] [--orphan-grace S] -- COMMAND ...``: runs COMMAND so that
nothing it starts outlives it, the guard being told to stop, or the guard's parent dying (docs/test-cluster.md).
Standard library only; its exit status is the command's."""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
POLL = 0.1


def _prctl(option: int, value: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the getppid watch still works
        pass


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from the parent links in ``/proc/<pid>/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: the fields follow the last ")"
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def reap(keep: int | None = None) -> None:
    """Collect every exited child (orphans re-parented to this subreaper included), but not
    ``keep``, whose status its ``Popen`` reads."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == keep:
            return
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            return


def kill_all(me: int, first: int = signal.SIGKILL, settle: float = 0.0) -> None:
    """Signal every descendant; with SIGTERM first, SIGKILL whatever is left after ``settle`` s."""
    for pid in descendants(me):
        try:
            os.kill(pid, first)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + settle
    while settle and descendants(me) and time.monotonic() < deadline:
        reap()
        time.sleep(POLL)
    for _ in range(50):  # a process may fork while it is being killed: until none is left
        left = descendants(me)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reap()
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="guard.py", description=(
        "Run COMMAND as a child subreaper (prctl PR_SET_CHILD_SUBREAPER) that asks for SIGTERM when its parent "
        "dies (PR_SET_PDEATHSIG); told to stop, give it --grace seconds (--orphan-grace when the parent died), "
        "then SIGKILL every process left below."))
    p.add_argument("--grace", type=float, default=15.0, help="seconds the command has to stop when told to")
    p.add_argument("--orphan-grace", type=float, default=3.0,
                   help="seconds the command has to stop when the guard's parent died")
    p.add_argument("--orphan-remove", metavar="DIR",
                   help="when the guard's parent died: remove DIR once everything below the guard ended "
                        "(the dead parent's scratch folder)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("give the command after --")
    parent = os.getppid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    told: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: told.append(s))
    if os.getppid() != parent or parent == 1:
        return 1  # the parent died before the death signal was asked for
    child = subprocess.Popen(cmd)
    me = os.getpid()
    while True:
        code = child.poll()
        if code is not None:
            kill_all(me, signal.SIGTERM, settle=2.0)  # what it left behind
            return code if code >= 0 else 128 - code
        orphaned = os.getppid() != parent
        if told or orphaned:
            break
        reap(keep=child.pid)
        time.sleep(POLL)
    try:
        child.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        child.wait(args.orphan_grace if orphaned or os.getppid() != parent else args.grace)
    except subprocess.TimeoutExpired:
        pass
    kill_all(me)
    child.poll()
    if args.orphan_remove and (orphaned or os.getppid() != parent):
        remove_later(args.orphan_remove)
    return 0 if child.returncode in (0, -signal.SIGTERM) else 1


def remove_later(path: str, tries: int = 5, every: float = 2.0) -> None:
    """Remove ``path``; the dead parent's other children may still write there while they stop."""
    for _ in range(tries):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(every)


if __name__ == "__main__":
    sys.exit(main())
