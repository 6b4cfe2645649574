"""A container's state and the pod status the kubelet reports from it.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

from ..controller import TERMINAL
from .logs import ContainerLog

__all__ = ["Container", "container_status", "pod_conditions", "Transitions"]


@dataclass
class Container:
    """One container of a pod, across its restarts."""
    spec: dict
    kind: str  # "init" | "sidecar" | "app"
    log: ContainerLog = field(default_factory=ContainerLog)
    previous_log: ContainerLog | None = None
    process: Any = None          # runtime.Process
    stand_in: Any = None         # aiohttp runner
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: dict = field(default_factory=dict)
    restarts: int = 0
    ready: bool = False
    started: bool = False
    container_id: str | None = None
    term_file: Any = None
    stopping: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)
    probes: list = field(default_factory=list)   # probes.ProbeWorker
    execs: set = field(default_factory=set)      # runtime.Process of running execs
    env: dict = field(default_factory=dict)      # what the instance runs with (exec reuses it)
    cwd: str = "/"
    started_mono: float = 0.0
    last_run: float = 0.0          # seconds the last instance ran (back-off resets after 10 min)
    probe_kill: str | None = None  # "liveness"/"startup" when a probe killed the running instance
    attached_stdin: bool = False   # stdinOnce: its one attach with stdin happened

    @property
    def name(self) -> str:
        return self.spec.get("name", "")

    @property
    def running(self) -> bool:
        return "running" in self.state


def container_status(c: Container) -> dict:
    st = {
        "name": c.name,
        "image": c.spec.get("image", ""),
        "imageID": "",
        "ready": c.ready,
        "restartCount": c.restarts,
        "started": c.started,
        "state": c.state,
        "lastState": c.last_state,
    }
    if c.container_id:
        st["containerID"] = c.container_id
        st["imageID"] = f"sim://{c.spec.get('image', '')}"
    return st


class Transitions:
    """Each condition's ``lastTransitionTime``: kept until its status changes."""

    def __init__(self, clock: Callable[[], str]):
        self._clock = clock
        self._seen: dict[str, tuple[bool, str]] = {}

    def __call__(self, type_: str, ok: bool) -> str:
        prev = self._seen.get(type_)
        if prev is None or prev[0] != ok:
            self._seen[type_] = (ok, self._clock())
        return self._seen[type_][1]


def pod_conditions(containers: list[Container], *, phase: str, initialized: bool, sandbox: bool,
                   transition: Transitions) -> list[dict]:
    """The five conditions of a pod bound to this node."""
    terminal = phase in TERMINAL
    counted = [c for c in containers if c.kind in ("app", "sidecar")]
    unready = [c.name for c in counted if not c.ready]
    ready = bool(counted) and not unready and phase == "Running"

    def cond(type_: str, ok: bool, reason: str | None = None, message: str | None = None) -> dict:
        d = {"type": type_, "status": "True" if ok else "False", "lastProbeTime": None,
             "lastTransitionTime": transition(type_, ok)}
        if not ok and reason:
            d["reason"] = reason
        if not ok and message:
            d["message"] = message
        return d

    not_ready = "PodCompleted" if terminal else "ContainersNotReady"
    unready_msg = None if terminal else f"containers with unready status: [{' '.join(unready)}]"
    pending = [c.name for c in containers if c.kind == "init" and "terminated" not in c.state]
    return [
        cond("PodReadyToStartContainers", sandbox and not terminal),
        cond("Initialized", initialized, "ContainersNotInitialized",
             f"containers with incomplete status: [{' '.join(pending)}]"),
        cond("Ready", ready, not_ready, unready_msg),
        cond("ContainersReady", ready, not_ready, unready_msg),
        cond("PodScheduled", True),
    ]
