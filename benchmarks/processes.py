"""Stopping a process the benchmarks started in a session of its own, with everything it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 60.0) -> None:
    """Send ``sig`` to ``proc`` (started with ``start_new_session=True``) and wait for it; after
    ``timeout`` seconds its whole process group is killed (SIGKILL)."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(sig)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
