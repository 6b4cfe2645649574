"""The simulated container runtime: starts containers and execs through ``shim.py``.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import os
import pty
import struct
import subprocess
import sys
import termios
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .run_as import RunAs

__all__ = ["SHIM", "ISOLATIONS", "isolation", "Mount", "ProcessSpec", "Process", "StartError", "start", "resize"]

log = logging.getLogger(__name__)

SHIM = Path(__file__).with_name("shim.py")
ISOLATIONS = ("namespaces", "userns", "processes")
ENV_OVERRIDE = "GPUSPAWNER_SIM_ISOLATION"


def _shim_argv(*args: str) -> list[str]:
    return [sys.executable, "-I", "-S", str(SHIM), *args]


def isolation() -> str:
    """The isolation to use: ``GPUSPAWNER_SIM_ISOLATION`` when set, else the strongest this
    machine allows (see the module's docstring)."""
    forced = os.environ.get(ENV_OVERRIDE)
    if forced:
        if forced not in ISOLATIONS:
            raise ValueError(f"{ENV_OVERRIDE}={forced!r}: use one of {', '.join(ISOLATIONS)}")
        return forced
    return _allowed()


@functools.lru_cache(maxsize=None)
def _allowed() -> str:
    for mode in (["namespaces"] if os.geteuid() == 0 else []) + ["userns"]:
        try:
            r = subprocess.run(_shim_argv("check", mode), capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            log.info("container isolation %s: %s", mode, e)
            continue
        if r.returncode == 0:
            return mode
        log.info("container isolation %s not allowed here: %s", mode, r.stderr.decode(errors="replace").strip())
    log.warning("this machine allows no PID/mount namespaces: containers run as plain processes and "
                "pods with volumes fail with FailedMount")
    return "processes"



@functools.lru_cache(maxsize=1)
def image_paths() -> tuple[str, ...]:
    """Host paths under ``/tmp`` that stand in for the container image and must stay visible under
    a container's private ``/tmp``: the Python environment running the simulation (``sys.prefix``
    and its base), what it imports from (``sys.path``, ``PYTHONPATH``) and ``PATH``.  A checkout
    and its virtualenv in ``/tmp`` (a CI clone) would otherwise vanish from every pod."""
    candidates = [sys.prefix, sys.exec_prefix, sys.base_prefix, *sys.path,
                  *os.environ.get("PYTHONPATH", "").split(os.pathsep), *os.environ.get("PATH", "").split(os.pathsep)]
    found: list[str] = []
    for c in candidates:
        if not c or not os.path.isdir(c):
            continue
        real = os.path.realpath(c)
        if real.startswith("/tmp/") and real not in found:
            found.append(real)
    # a path inside another one is shared with it
    return tuple(sorted(p for p in found if not any(p != q and p.startswith(q + "/") for q in found)))


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass
class ProcessSpec:
    """What the runtime needs to start one container (or one exec)."""
    argv: list[str]
    env: dict[str, str]
    cwd: str
    mounts: list[Mount] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)   # host paths the container must share (writes seen)
    scratch: str = ""                                 # a directory for the shim's private tmpfs
    stdin: bool = False
    tty: bool = False
    hostname: str = ""
    private_tmp: bool = False                         # an empty /tmp of its own (namespaced modes)
    user: RunAs | None = None                         # the user and groups to run as (None: the agent's)


class StartError(Exception):
    """The runtime could not start it (``stage``: mount or exec), worded as containerd words it."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


class _Output(asyncio.Protocol):
    def __init__(self, on_data: Callable[[bytes], None], done: asyncio.Future):
        self.on_data, self.done = on_data, done

    def data_received(self, data: bytes) -> None:
        self.on_data(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:  # EIO from a pty whose slave closed, too
        if not self.done.done():
            self.done.set_result(None)


@dataclass(eq=False)
class Process:
    """A running shim: the container (or exec) behind it."""
    proc: asyncio.subprocess.Process
    init_pid: int | None
    control: int
    stdin: asyncio.WriteTransport | None = None   # to stdin, or to the pty master
    tty_fd: int | None = None                     # the pty master (for resizes)
    outputs: list[asyncio.Future] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        """Deliver ``sig`` to the container's main process (the shim forwards it)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """Kill the whole container at once (every process in it)."""
        with contextlib.suppress(OSError):
            os.write(self.control, b"kill\n")

    async def wait(self) -> int:
        code = await self.proc.wait()
        for fut in self.outputs:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(fut), 5)  # the pumps take the last bytes
        self.close()
        return 128 - code if code < 0 else code

    def write_stdin(self, data: bytes) -> None:
        if self.stdin is not None and not self.stdin.is_closing():
            self.stdin.write(data)

    def close_stdin(self) -> None:
        """End of input (a pipe is closed once written out; a terminal gets its EOF character)."""
        if self.stdin is None or self.stdin.is_closing():
            return
        if self.tty_fd is not None:
            self.stdin.write(b"\x04")
        else:
            self.stdin.close()

    def close(self) -> None:
        if self.stdin is not None:
            self.stdin.close()
        for fd in (self.control, self.tty_fd):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.tty_fd = None
        self.control = -1


def resize(fd: int | None, width: int, height: int) -> None:
    """``TIOCSWINSZ`` on a pty master (the resize channel of exec and attach)."""
    if fd is not None and width > 0 and height > 0:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


async def _pump(fd: int, on_data: Callable[[bytes], None]) -> asyncio.Future:
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()
    await loop.connect_read_pipe(lambda: _Output(on_data, done), os.fdopen(fd, "rb", buffering=0))
    return done


async def _read_status(fd: int) -> list[dict]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                os.fdopen(fd, "rb", buffering=0))
    try:
        data = await reader.read()
    finally:
        transport.close()
    return [json.loads(line) for line in data.decode(errors="replace").splitlines() if line.strip()]


def _config(spec: ProcessSpec, mode: str, isolation_mode: str, target: int | None) -> dict:
    cfg = {"isolation": isolation_mode, "argv": spec.argv, "env": spec.env, "cwd": spec.cwd,
           "tty": spec.tty, "shared": spec.shared, "scratch": spec.scratch, "hostname": spec.hostname,
           "privateTmp": spec.private_tmp,
           "mounts": [{"source": m.source, "target": m.target, "readOnly": m.read_only} for m in spec.mounts]}
    if mode == "exec":
        cfg["target"] = target
    if spec.user is not None:  # the shim switches to it before execve (run_as.py)
        cfg["user"] = spec.user.config()
    return cfg


async def start(spec: ProcessSpec, *, mode: str, isolation_mode: str, config_dir: str,
                on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None],
                target: int | None = None) -> Process:
    """Start a container (``mode="run"``) or an exec into one (``"exec"``, ``target``: its init's pid).

    Output goes to ``on_stdout``/``on_stderr`` (with a tty, everything is stdout).  Raises
    ``StartError`` when the shim reports that the container could not start."""
    loop = asyncio.get_running_loop()
    fd, path = _config_file(config_dir, _config(spec, mode, isolation_mode, target))
    status_r, status_w = os.pipe()
    control_r, control_w = os.pipe()
    ours: list[tuple[int, Callable[[bytes], None]]] = []
    if spec.tty:
        master, slave = pty.openpty()
        theirs = [slave, slave, slave]
        ours.append((os.dup(master), on_stdout))
        stdin_fd: int | None = master
    else:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, stdin_fd = os.pipe() if spec.stdin else (subprocess.DEVNULL, None)
        theirs = [in_r, out_w, err_w]
        ours += [(out_r, on_stdout), (err_r, on_stderr)]
    try:
        proc = await asyncio.create_subprocess_exec(
            *_shim_argv(mode, path, str(status_w), str(control_r), str(os.getpid())),
            pass_fds=(status_w, control_r), start_new_session=True,
            stdin=theirs[0], stdout=theirs[1], stderr=theirs[2])
    except BaseException:
        for f in {status_r, control_w, *(f for f, _ in ours), *([stdin_fd] if stdin_fd is not None else [])}:
            os.close(f)
        os.unlink(path)
        raise
    finally:
        for f in {status_w, control_r, fd, *[t for t in theirs if t >= 0]}:
            os.close(f)
    stdin = None
    if stdin_fd is not None:
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(os.dup(stdin_fd), "wb", buffering=0))
        if not spec.tty:
            os.close(stdin_fd)
    process = Process(proc, None, control_w, stdin, stdin_fd if spec.tty else None,
                      [await _pump(f, cb) for f, cb in ours])
    events = await _read_status(status_r)
    process.init_pid = next((e["init"] for e in events if "init" in e), None)
    error = next((e for e in events if "error" in e), None)
    if error is not None:
        await process.wait()
        raise StartError(error.get("stage", "exec"), error["error"])
    return process


def _config_file(config_dir: str, cfg: dict) -> tuple[int, str]:
    os.makedirs(config_dir, exist_ok=True)
    path = os.path.join(config_dir, f"shim-{os.urandom(6).hex()}.json")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, json.dumps(cfg).encode())
    return fd, path
