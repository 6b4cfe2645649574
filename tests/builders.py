"""Builders shared by the tests: small, real objects (no fakes of the code under test)."""

from __future__ import annotations

import os
import uuid


def marker() -> str:
    """A value to put in a pod's env (``SIM_TEST_MARKER``) so that its processes can be found."""
    return uuid.uuid4().hex


def pids_with_marker(value: str) -> list[int]:
    """Host pids of the processes whose environment holds ``SIM_TEST_MARKER=value`` (whatever
    PID namespace they live in)."""
    needle = f"SIM_TEST_MARKER={value}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found
