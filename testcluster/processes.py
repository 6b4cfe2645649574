"""Stopping a process started in a session of its own (``start_new_session=True``), with all it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


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
