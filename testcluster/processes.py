"""Starting a process in a session of its own (``start_new_session=True``) at a given CPU priority, and
stopping it with all it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from typing import Any, Sequence


def start_session(argv: Sequence[str], niceness: int = 0, **popen: Any) -> subprocess.Popen:
    """``argv`` in a session of its own, with all its threads and children at ``niceness`` (0: as this
    process). A new session is also a scheduling group of its own (Linux's autogroup), which the
    kernel weighs as its own niceness whatever its processes' (sched(7)): that gets ``niceness`` too.
    Only a lower priority than this process's may be asked for (raising one needs root)."""
    if niceness < 0:
        raise ValueError(f"niceness {niceness}: only a lower priority (a positive niceness) may be given")
    prefix = ["nice", "-n", str(niceness)] if niceness else []  # every thread the program makes inherits it
    proc = subprocess.Popen([*prefix, *argv], start_new_session=True, **popen)
    if niceness:
        # the group's weight; nothing to do where the kernel has no autogroups
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            with open(f"/proc/{proc.pid}/autogroup", "w") as f:
                f.write(str(niceness))
    return proc


def stop_process(proc: subprocess.Popen | None, grace: float, sig: int = signal.SIGTERM, *,
                 group: bool = False, kill_wait: float | None = 10.0) -> None:
    """Send ``sig`` to ``proc`` (to its whole process group with ``group``), give it ``grace`` seconds,
    then SIGKILL its process group and wait ``kill_wait`` seconds (``None``: as long as it takes)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        # checked before the process is reaped, so its group id cannot belong to anyone else yet
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(kill_wait)
