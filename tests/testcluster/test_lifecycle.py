"""Nothing the control plane starts outlives it: not after SIGTERM, not after kill -9 of the
process, not after kill -9 of the process that launched it; a start that fails says why."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testcluster import ControlPlane, ControlPlaneError

ROOT = pathlib.Path(__file__).resolve().parents[2]


def processes_mentioning(text: str) -> list[str]:
    """Lines of ``ps`` whose command line contains ``text`` (the test's own ps excluded)."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if text in line and "ps -ww -eo" not in line]


def wait_gone(text: str, timeout: float = 20.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def wait_started(data_dir: pathlib.Path, timeout: float = 30.0) -> None:
    """Until the control plane has made its certificates and etcd its data: mid-start."""
    deadline = time.monotonic() + timeout
    while not (data_dir / "etcd" / "member").is_dir():
        assert time.monotonic() < deadline, "etcd never started"
        time.sleep(0.1)


def test_sigterm_stops_it(tmp_path):
    cp = ControlPlane(tmp_path / "cp")
    cp.spawn()
    wait_started(cp.data_dir)
    cp.stop(timeout=15)
    assert wait_gone(str(cp.data_dir), timeout=1) == []


def test_kill_9_of_the_process_leaves_nothing(tmp_path):
    cp = ControlPlane(tmp_path / "cp")
    cp.spawn()
    wait_started(cp.data_dir)
    os.kill(cp.pid, signal.SIGKILL)
    assert wait_gone(str(cp.data_dir)) == []
    cp.stop()


def test_kill_9_of_its_launcher_stops_it(tmp_path):
    data_dir = tmp_path / "cp"
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from testcluster import ControlPlane
        cp = ControlPlane({str(data_dir)!r})
        cp.spawn()
        print(cp.pid, flush=True)
        time.sleep(600)
        """
    )
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(launcher.stdout.readline())
        wait_started(data_dir)
        lines = processes_mentioning(str(data_dir))
        running = [line for line in lines if line.split()[0] == str(child)]
        assert running and " controlplane " in running[0], f"the control plane ({child}) is not running: {lines}"
        launcher.kill()
        launcher.wait()
        assert wait_gone(str(data_dir)) == [], f"pid {child} outlived its launcher"
    finally:
        launcher.kill()
        launcher.wait()


async def test_a_start_that_fails_says_why_and_leaves_nothing(tmp_path):
    cp = ControlPlane(tmp_path / "cp", ready_timeout=0.5)
    with pytest.raises(ControlPlaneError) as e:
        async with cp:
            pass
    message = str(e.value)
    assert "before it was ready" in message or "was not ready" in message, message
    assert "not ready within 500ms" in message, message  # the binary's own last words
    assert wait_gone(str(cp.data_dir), timeout=1) == []
