"""The simulated kubelet: runs the pods bound to the simulated nodes as local processes.

One ``Kubelet`` serves every simulated node.  For each pod bound to a node
after the kubelet started it:

1. admits the pod: takes device ids for its extended resources from the
   ``DeviceLedger`` (the device manager's ``Allocate``); when they are short
   the pod fails with ``UnexpectedAdmissionError`` as on a real node;
2. gives the pod its own loopback address ``127.x.y.z`` from the kubelet's
   ``pod_subnet`` (a random /16 inside 127/8 by default; never one a live pod
   holds) as ``podIP``/``podIPs``; a real pod has its own network namespace,
   where ``0.0.0.0`` means "every address of this pod".  Here all pods share
   the host's, so ``0.0.0.0`` in ``command``/``args`` and in env values is
   rewritten to the pod IP (KubeSpawner puts ``0.0.0.0`` in
   ``JUPYTERHUB_SERVICE_URL``);
3. runs each init container to completion, then the containers, each as a
   process (its own session, so its children die with it), with the pod's
   environment: ``env`` (values, ``valueFrom`` fieldRef / resourceFieldRef /
   configMapKeyRef / secretKeyRef), ``envFrom``, ``$(VAR)`` expansion, the
   device env (``NVIDIA_VISIBLE_DEVICES``), ``HOSTNAME``, the service env of
   the API server, and ``PATH`` with this Python environment's ``bin`` first;
4. reports status as the kubelet does: Pending -> Running -> Succeeded/Failed,
   conditions PodReadyToStartContainers/Initialized/ContainersReady/Ready,
   container states, restart counts, events Pulling/Pulled/Created/Started/
   Killing/BackOff.

The command line: Kubernetes runs ``command`` (replacing the image's
ENTRYPOINT) followed by ``args`` (replacing its CMD).  There are no images
here, so the image's entrypoint is taken to exec its arguments (what the
Jupyter docker-stacks' ``tini -g --`` does): with no ``command``, ``args`` is
run as the command.  KubeSpawner 7.1 sets only ``args`` (``make_pod`` puts
``cmd + get_args()`` in ``args``), e.g. ``["jupyterhub-singleuser"]``, which
this finds on ``PATH``.  A container with neither fails with
``CreateContainerError: no command specified``.

``terminationMessagePath`` cannot be ``/dev/termination-log`` here: each
container gets a real file whose path is in ``GPUSPAWNER_SIM_TERMINATION_LOG``
(and whose content becomes the termination message); with
``terminationMessagePolicy: FallbackToLogsOnError`` an empty file and a
non-zero exit use the log's last 80 lines / 2 KiB (``kuberuntime``'s
``MaxContainerTerminationMessageLogLines/Length``).

Stand-in: a pod annotated ``gpuspawner.dev/sim-stand-in: "true"`` (or every
pod, with ``stand_in=True``) runs no process; the kubelet answers HTTP on the
pod IP at each ``containerPort`` with a tiny aiohttp app, enough for
JupyterHub's reachability check (any HTTP answer counts).

Logs are kept in memory (the last 10,000 lines per container); ``logs()``
returns them for an API server's ``pods/log``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import logging
import math
import os
import random
import re
import secrets
import shutil
import signal
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import devices as dev
from . import podresources as rules
from .dra import kubeletenv as dra_env
from .controller import MERGE, TERMINAL, EventRecorder, Tasks, informer, now_rfc3339, pod_key

log = logging.getLogger(__name__)

STAND_IN_ANNOTATION = "gpuspawner.dev/sim-stand-in"
TERMINATION_LOG_ENV = "GPUSPAWNER_SIM_TERMINATION_LOG"
LOG_LINES = 10_000
FALLBACK_LINES, FALLBACK_BYTES, FILE_MESSAGE_BYTES = 80, 2048, 4096


class IPAllocator:
    """Hands out 127.0.0.2, 127.0.0.3, ... and never an address a live pod holds."""

    def __init__(self, first: str = "127.0.0.2", last: str = "127.255.255.254"):
        self._first = int(ipaddress.IPv4Address(first))
        self._last = int(ipaddress.IPv4Address(last))
        self._next = self._first
        self._live: set[int] = set()

    def take(self) -> str:
        span = self._last - self._first + 1
        for _ in range(span):
            n = self._next
            self._next = self._first if n >= self._last else n + 1
            if n not in self._live and (n & 0xFF) not in (0, 255):
                self._live.add(n)
                return str(ipaddress.IPv4Address(n))
        raise RuntimeError("no free loopback address left for a pod")

    def release(self, ip: str | None) -> None:
        if ip:
            self._live.discard(int(ipaddress.IPv4Address(ip)))

    @property
    def live(self) -> int:
        return len(self._live)


_VAR_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion (``third_party/forked/golang/expansion``):
    ``$$`` is a literal ``$``; an unknown ``$(VAR)`` stays as written."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return _VAR_REF.sub(sub, text)


class ConfigError(Exception):
    """CreateContainerConfigError: an env source that does not exist."""


@dataclass
class Container:
    spec: dict
    kind: str  # "init" | "sidecar" | "app"
    log: deque = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    previous_log: deque | None = None
    proc: asyncio.subprocess.Process | None = None
    stand_in: Any = None  # aiohttp runner
    state: dict = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: dict = field(default_factory=dict)
    restarts: int = 0
    ready: bool = False
    started: bool = False
    container_id: str | None = None
    term_file: Path | None = None
    stopping: bool = False
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        return self.spec.get("name", "")


def _ip_of_node(node: dict | None) -> str:
    for a in ((node or {}).get("status") or {}).get("addresses") or []:
        if a.get("type") == "InternalIP" and a.get("address", "").startswith("127."):
            return a["address"]
    return "127.0.0.1"


class PodWorker:
    """Runs one pod; its ``task`` lives until the pod is gone."""

    def __init__(self, kubelet: "Kubelet", pod: dict):
        self.k = kubelet
        self.pod = pod
        self.key = pod_key(pod)
        meta = pod["metadata"]
        self.name, self.ns = meta["name"], meta.get("namespace") or "default"
        self.node = pod["spec"]["nodeName"]
        self.ip: str | None = None
        self.start_time: str | None = None
        self.devices: dict[str, list[str]] = {}
        self.per_container: dict[str, dict[str, list[str]]] = {}
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.ns}.{self.name}.", dir=kubelet.workdir))
        spec = pod.get("spec") or {}
        self.containers: list[Container] = [
            Container(c, "sidecar" if c.get("restartPolicy") == "Always" else "init")
            for c in spec.get("initContainers") or []
        ] + [Container(c, "app") for c in spec.get("containers") or []]
        self.initialized = not any(c.kind == "init" for c in self.containers)
        self.phase = "Pending"
        self.reason: str | None = None
        self.message: str | None = None
        self.deleting = asyncio.Event()
        self.changed = asyncio.Event()
        self.stand_in = kubelet.stand_in or (meta.get("annotations") or {}).get(STAND_IN_ANNOTATION) == "true"
        self.task: asyncio.Task | None = None
        self._probes: list[asyncio.Task] = []  # probes and sidecar supervisors
        self._transitions: dict[str, tuple[bool, str]] = {}

    # -- status -----------------------------------------------------------

    def _container_status(self, c: Container) -> dict:
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

    def status(self) -> dict:
        apps = [c for c in self.containers if c.kind == "app"]
        ready = bool(apps) and all(c.ready for c in apps) and self.phase == "Running"
        now = now_rfc3339()

        def cond(type_: str, ok: bool, reason: str | None = None) -> dict:
            d = {"type": type_, "status": "True" if ok else "False", "lastProbeTime": None,
                 "lastTransitionTime": self._transition(type_, ok, now)}
            if not ok and reason:
                d["reason"] = reason
            return d
        terminal = self.phase in TERMINAL
        conds = [
            cond("PodReadyToStartContainers", self.ip is not None and not terminal),
            cond("Initialized", self.initialized, "ContainersNotInitialized"),
            cond("Ready", ready, "PodCompleted" if terminal else "ContainersNotReady"),
            cond("ContainersReady", ready, "PodCompleted" if terminal else "ContainersNotReady"),
            {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
             "lastTransitionTime": self._transition("PodScheduled", True, now)},
        ]
        if not ready and not terminal:
            waiting = [c.name for c in apps if not c.ready]
            for c in conds:
                if c["type"] in ("Ready", "ContainersReady"):
                    c["message"] = f"containers with unready status: [{' '.join(waiting)}]"
        if not self.initialized:
            pending = [c.name for c in self.containers if c.kind == "init" and "terminated" not in c.state]
            conds[1]["message"] = f"containers with incomplete status: [{' '.join(pending)}]"
        st: dict[str, Any] = {
            "phase": self.phase,
            "conditions": conds,
            "hostIP": _ip_of_node(self.k.node_objs.get(self.node)),
            "hostIPs": [{"ip": _ip_of_node(self.k.node_objs.get(self.node))}],
            # the API server sets qosClass at creation; keep it
            "qosClass": (self.pod.get("status") or {}).get("qosClass") or self.k.qos_class(self.pod),
            "initContainerStatuses": [self._container_status(c) for c in self.containers if c.kind != "app"],
            "containerStatuses": [self._container_status(c) for c in apps],
        }
        if self.ip:
            st["podIP"] = self.ip
            st["podIPs"] = [{"ip": self.ip}]
        if self.start_time:
            st["startTime"] = self.start_time
        if self.reason:
            st["reason"] = self.reason
        if self.message:
            st["message"] = self.message
        return st

    def _transition(self, type_: str, ok: bool, now: str) -> str:
        prev = self._transitions.get(type_)
        if prev is None or prev[0] != ok:
            self._transitions[type_] = (ok, now)
            return now
        return prev[1]

    def push_status(self) -> None:
        try:
            self.k.store.patch("pods", self.name, {"status": self.status()}, MERGE, namespace=self.ns,
                               subresource="status")
        except Exception as e:
            if getattr(e, "code", None) != 404:
                log.warning("status of %s: %s", self.key, e)

    def event(self, type_: str, reason: str, message: str, c: Container | None = None) -> None:
        fp = None
        if c is not None:
            section = "initContainers" if c.kind != "app" else "containers"
            fp = f"spec.{section}{{{c.name}}}"
        try:
            self.k.recorder.emit(self.pod, type_, reason, message, field_path=fp, host=self.node)
        except Exception as e:  # events are best effort, as in the kubelet
            log.debug("event for %s: %s", self.key, e)

    # -- the pod's life ---------------------------------------------------

    async def run(self) -> None:
        try:
            await self._run()
        except asyncio.CancelledError:
            await self._kill_all(0)
            raise
        except Exception as e:
            log.exception("pod %s", self.key)
            self.phase, self.reason, self.message = "Failed", "SimulationError", str(e)
            self.push_status()
        finally:
            self._cleanup()

    async def _run(self) -> None:
        spec = self.pod.get("spec") or {}
        # admission: the device manager
        try:
            want = {r: n for r, n in rules.pod_requests(self.pod).items() if dev.is_device_resource(r)}
            self.devices = self.k.ledger.allocate(self.key, self.node, dra_env.device_plugin_requests(self.pod, want))
        except dev.AllocationError as e:
            self.phase, self.reason, self.message = "Failed", "UnexpectedAdmissionError", str(e)
            self.event("Warning", "UnexpectedAdmissionError", str(e))
            self.push_status()
            await self.deleting.wait()
            await self._finalize()
            return
        self.per_container = dev.split_for_containers(self.pod, self.devices, rules.container_requests)
        self.ip = self.k.ips.take()
        self.start_time = now_rfc3339()
        for c in self.containers:
            c.state = {"waiting": {"reason": "PodInitializing" if not self.initialized or c.kind != "app"
                                   else "ContainerCreating"}}
        self.push_status()
        policy = spec.get("restartPolicy") or "Always"

        # init containers, one at a time; sidecars start and keep running
        for c in self.containers:
            if c.kind == "app" or self.deleting.is_set():
                continue
            if c.kind == "sidecar":
                # the next init container waits until the sidecar has started (KEP-753)
                if await self._start_retrying(c):
                    self._probes.append(asyncio.create_task(self._supervise(c, "Always", start=False)))
                continue
            while not self.deleting.is_set():
                code = await self._run_to_end(c)
                if code == 0:
                    break
                if code is None:
                    break  # deleted while starting
                if policy == "Never":
                    self.phase = "Failed"
                    self._release()
                    self.push_status()
                    await self.deleting.wait()
                    await self._terminate()
                    return
                if not await self._backoff(c):
                    break
        if self.deleting.is_set():
            await self._terminate()
            return
        self.initialized = True
        apps = [c for c in self.containers if c.kind == "app"]
        for c in apps:
            c.state = {"waiting": {"reason": "ContainerCreating"}}
        self.push_status()
        # phase turns Running when the first container runs (see _start)
        watchers = [asyncio.create_task(self._supervise(c, policy)) for c in apps]
        done_all = asyncio.ensure_future(asyncio.gather(*watchers))
        deleting = asyncio.ensure_future(self.deleting.wait())
        await asyncio.wait({done_all, deleting}, return_when=asyncio.FIRST_COMPLETED)
        if not self.deleting.is_set():
            # every app container ended for good: the pod is terminal
            codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in apps]
            self.phase = "Succeeded" if all(x == 0 for x in codes) else "Failed"
            for c in self.containers:
                if c.kind == "sidecar":
                    await self._stop(c, 2)
            self._release()
            self.push_status()
            await self.deleting.wait()
        deleting.cancel()
        await self._terminate()
        done_all.cancel()
        with contextlib.suppress(BaseException):
            await done_all

    async def _supervise(self, c: Container, policy: str, start: bool = True) -> None:
        """Start the container, wait for it to exit, restart it as the pod's policy says."""
        if start and not await self._start_retrying(c):
            return
        while True:
            code = await self._wait(c)
            if c.stopping or self.deleting.is_set():
                return
            if policy == "Always" or (policy == "OnFailure" and code != 0):
                if not await self._backoff(c):
                    return
                if not await self._start_retrying(c):
                    return
                self.push_status()
                continue
            return

    async def _start_retrying(self, c: Container) -> bool:
        """Start the container; when creating it fails (a missing Secret, no
        command), retry with the kubelet's backoff until it works or the pod
        goes.  False when the pod is being deleted."""
        attempt = 0
        while not self.deleting.is_set():
            if await self._start(c):
                return True
            delay = min(self.k.restart_backoff[0] * 2 ** attempt, self.k.restart_backoff[1])
            attempt += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.deleting.wait(), delay)
        return False

    async def _backoff(self, c: Container) -> bool:
        delay = min(self.k.restart_backoff[0] * 2 ** c.restarts, self.k.restart_backoff[1])
        msg = f"back-off {int(delay)}s restarting failed container={c.name} pod={self.name}_{self.ns}" \
              f"({self.pod['metadata'].get('uid', '')})"
        if c.state.get("terminated"):
            # while it waits to restart, the run that ended shows as lastState (kubelet's
            # kuberuntime_container.go: the previous container's status)
            c.last_state = {"terminated": dict(c.state["terminated"])}
        c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}
        self.event("Warning", "BackOff", f"Back-off restarting failed container {c.name} in pod "
                                         f"{self.name}_{self.ns}({self.pod['metadata'].get('uid', '')})", c)
        self.push_status()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.deleting.wait(), delay)
        if self.deleting.is_set():
            return False
        c.restarts += 1
        return True

    async def _run_to_end(self, c: Container) -> int | None:
        if not await self._start_retrying(c):
            return None
        self.push_status()
        return await self._wait(c)

    # -- one container ----------------------------------------------------

    async def _start(self, c: Container) -> bool:
        image = c.spec.get("image", "")
        first_pull = (self.node, image) not in self.k.pulled
        pull_policy = c.spec.get("imagePullPolicy") or ("Always" if image.endswith(":latest") or ":" not in image
                                                        else "IfNotPresent")
        if first_pull or pull_policy == "Always":
            self.event("Normal", "Pulling", f'Pulling image "{image}"', c)
            self.k.pulled.add((self.node, image))
            self.event("Normal", "Pulled", f'Successfully pulled image "{image}" in 0s (0s including waiting). '
                                           f"Image size: 0 bytes.", c)
        else:
            self.event("Normal", "Pulled", f'Container image "{image}" already present on machine', c)
        try:
            env = self._env(c)
            argv = self._argv(c, env)
        except ConfigError as e:
            c.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(e)}}
            self.event("Warning", "Failed", f"Error: {e}", c)
            self.push_status()
            return False
        if c.restarts:
            c.previous_log = deque(c.log, maxlen=LOG_LINES)
            c.log.clear()
        c.container_id = f"containerd://{secrets.token_hex(32)}"
        c.term_file = self.dir / f"{c.name}.termination-log"
        c.term_file.write_text("")
        c.stopping = False
        c.stopped.clear()
        self.event("Normal", "Created", f"Created container: {c.name}", c)
        if self.stand_in or not self.k.run_pods:
            if self.stand_in:
                try:
                    c.stand_in = await self.k.start_stand_in(self, c)
                except OSError as e:
                    c.state = {"waiting": {"reason": "RunContainerError", "message": str(e)}}
                    self.event("Warning", "Failed", f"Error: {e}", c)
                    self.push_status()
                    return False
                if self.deleting.is_set():
                    await c.stand_in.cleanup()
                    c.stand_in = None
                    return False
        elif argv is None:
            msg = "failed to create containerd container: no command specified"
            c.state = {"waiting": {"reason": "CreateContainerError", "message": msg}}
            self.event("Warning", "Failed", f"Error: {msg}", c)
            self.push_status()
            return False
        else:
            env[TERMINATION_LOG_ENV] = str(c.term_file)
            # the container's terminationMessagePath is a file the kubelet mounts into it; here
            # the container shares the host's files, so that path in its command line and env
            # means this container's own file (as 0.0.0.0 means the pod's own address)
            tm_path = c.spec.get("terminationMessagePath") or "/dev/termination-log"
            argv = [a.replace(tm_path, str(c.term_file)) for a in argv]
            env = {k: (v.replace(tm_path, str(c.term_file)) if k != TERMINATION_LOG_ENV else v)
                   for k, v in env.items()}
            cwd = c.spec.get("workingDir")
            if not cwd or not os.path.isdir(cwd):
                cwd = str(self.dir)
            try:
                c.proc = await asyncio.create_subprocess_exec(
                    *argv, env=env, cwd=cwd, stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
            except OSError as e:
                # runc: exec: "x": executable file not found in $PATH
                msg = f'failed to create containerd task: exec: "{argv[0]}": {e.strerror or e}'
                c.state = {"waiting": {"reason": "StartError" if c.restarts else "RunContainerError",
                                       "message": msg}}
                c.last_state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": msg,
                                               "startedAt": None, "finishedAt": now_rfc3339(),
                                               "containerID": c.container_id}}
                self.event("Warning", "Failed", f"Error: {msg}", c)
                self.push_status()
                return False
            self.k.procs.add(c.proc)
            if self.deleting.is_set():
                # the pod was deleted while the process was being created:
                # the termination already passed this container by
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.proc.pid, signal.SIGKILL)
                await c.proc.wait()
                self.k.procs.discard(c.proc)
                c.proc = None
                return False
            asyncio.create_task(self._pump(c, c.proc))
        c.state = {"running": {"startedAt": now_rfc3339()}}
        c.started = True
        if c.kind == "app" and self.phase == "Pending":
            self.phase = "Running"
        self.event("Normal", "Started", f"Started container {c.name}", c)
        probe = c.spec.get("readinessProbe")
        if c.kind == "init":
            c.ready = False
        elif probe and probe.get("httpGet"):
            c.ready = False
            self._probes.append(asyncio.create_task(self._probe(c, probe)))
        elif probe:
            c.ready = True  # exec/tcp/grpc probes are not modelled: ready once running
        else:
            c.ready = True
        self.push_status()
        return True

    async def _pump(self, c: Container, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while True:
            line = await proc.stdout.readline()
            if not line:
                return
            c.log.append(line.decode("utf-8", "replace").rstrip("\n"))

    async def _wait(self, c: Container) -> int:
        """Wait for the container to end; record its terminated state; return the exit code."""
        started = (c.state.get("running") or {}).get("startedAt")
        if c.proc is not None:
            code = await c.proc.wait()
            self.k.procs.discard(c.proc)
            c.proc = None
            if code < 0:
                code = 128 - code  # killed by signal N -> 128+N, as a shell/runtime reports it
        else:
            # no process (stand-in or run_pods=False): runs until stopped
            await c.stopped.wait()
            code = 0 if c.stand_in is None else 143
        await asyncio.sleep(0)  # let the log pump drain
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": now_rfc3339(), "containerID": c.container_id}
        msg = self._termination_message(c, code)
        if msg:
            term["message"] = msg
        c.ready = False
        c.state = {"terminated": term}
        self.push_status()
        return code

    def _termination_message(self, c: Container, code: int) -> str | None:
        text = ""
        if c.term_file and c.term_file.exists():
            text = c.term_file.read_bytes()[:FILE_MESSAGE_BYTES].decode("utf-8", "replace")
        if not text and code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            tail = "\n".join(list(c.log)[-FALLBACK_LINES:])
            text = tail.encode()[-FALLBACK_BYTES:].decode("utf-8", "ignore")
        return text or None

    async def _probe(self, c: Container, probe: dict) -> None:
        import aiohttp

        http = probe["httpGet"]
        port = http.get("port")
        if isinstance(port, str) and not port.isdigit():
            port = next((p.get("containerPort") for p in c.spec.get("ports") or [] if p.get("name") == port), None)
        host = http.get("host") or self.ip
        url = f"{(http.get('scheme') or 'HTTP').lower()}://{host}:{port}{http.get('path') or '/'}"
        headers = {h["name"]: h.get("value", "") for h in http.get("httpHeaders") or []}
        period = float(probe.get("periodSeconds") or 10)
        timeout = float(probe.get("timeoutSeconds") or 1)
        success_needed = int(probe.get("successThreshold") or 1)
        failure_needed = int(probe.get("failureThreshold") or 3)
        await asyncio.sleep(float(probe.get("initialDelaySeconds") or 0))
        ok_run = fail_run = 0
        async with aiohttp.ClientSession() as session:
            while "running" in c.state and not c.stopping:
                try:
                    async with session.get(url, headers=headers, allow_redirects=False,
                                           timeout=aiohttp.ClientTimeout(total=timeout)) as r:
                        ok = 200 <= r.status < 400  # prober/http: success is 2xx/3xx
                        why = f"HTTP probe failed with statuscode: {r.status}"
                except asyncio.TimeoutError:
                    ok, why = False, (f"Get \"{url}\": context deadline exceeded "
                                      "(Client.Timeout exceeded while awaiting headers)")
                except Exception as e:  # the Go client's wording for a refused connection
                    ok, why = False, f"Get \"{url}\": dial tcp {host}:{port}: connect: connection refused"
                    if not isinstance(e, aiohttp.ClientConnectorError):
                        why = f"Get \"{url}\": {e}"
                if ok:
                    ok_run, fail_run = ok_run + 1, 0
                    if not c.ready and ok_run >= success_needed:
                        c.ready = True
                        self.push_status()
                else:
                    fail_run, ok_run = fail_run + 1, 0
                    if c.ready and fail_run >= failure_needed:
                        c.ready = False
                        self.push_status()
                    if fail_run == 1 or not c.ready:
                        self.event("Warning", "Unhealthy", f"Readiness probe failed: {why}", c)
                await asyncio.sleep(period)

    # -- environment ------------------------------------------------------

    def _field(self, path: str) -> str:
        meta = self.pod.get("metadata") or {}
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return (meta.get(m.group(1)) or {}).get(m.group(2), "")
        simple = {
            "metadata.name": self.name,
            "metadata.namespace": self.ns,
            "metadata.uid": meta.get("uid", ""),
            "spec.nodeName": self.node,
            "spec.serviceAccountName": (self.pod.get("spec") or {}).get("serviceAccountName", "default"),
            "status.hostIP": _ip_of_node(self.k.node_objs.get(self.node)),
            "status.hostIPs": _ip_of_node(self.k.node_objs.get(self.node)),
            "status.podIP": self.ip or "",
            "status.podIPs": self.ip or "",
        }
        if path not in simple:
            raise ConfigError(f"unsupported fieldRef {path!r}")
        return simple[path]

    def _lookup(self, plural: str, kind: str, name: str, key: str | None, optional: bool) -> Any:
        try:
            obj = self.k.store.get(plural, name, namespace=self.ns)
        except Exception as e:
            if getattr(e, "code", None) == 404:
                if optional:
                    return None
                raise ConfigError(f'{kind.lower()} "{name}" not found') from e
            raise
        data = dict(obj.get("data") or {})
        if plural == "secrets":
            data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
            data.update(obj.get("stringData") or {})
        if key is None:
            return data
        if key not in data:
            if optional:
                return None
            raise ConfigError(f"couldn't find key {key} in {kind} {self.ns}/{name}")
        return data[key]

    def _env(self, c: Container) -> dict[str, str]:
        env: dict[str, str] = {
            "PATH": f"{self.k.bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.dir),
            "HOSTNAME": self.name,
            "LANG": os.environ.get("LANG", "C.UTF-8"),
        }
        env.update(self.k.service_env)
        for src in c.spec.get("envFrom") or []:
            prefix = src.get("prefix") or ""
            for plural, kind, ref in (("configmaps", "ConfigMap", src.get("configMapRef")),
                                      ("secrets", "Secret", src.get("secretRef"))):
                if ref:
                    data = self._lookup(plural, kind, ref.get("name", ""), None, bool(ref.get("optional")))
                    for k, v in (data or {}).items():
                        env[prefix + k] = v
        for item in c.spec.get("env") or []:
            name = item.get("name")
            if "value" in item or "valueFrom" not in item:
                env[name] = expand(str(item.get("value") or ""), env)
                continue
            vf = item["valueFrom"]
            if "fieldRef" in vf:
                env[name] = self._field(vf["fieldRef"].get("fieldPath", ""))
            elif "resourceFieldRef" in vf:
                env[name] = self._resource_field(c, vf["resourceFieldRef"])
            elif "configMapKeyRef" in vf or "secretKeyRef" in vf:
                plural, kind, ref = (("configmaps", "ConfigMap", vf["configMapKeyRef"]) if "configMapKeyRef" in vf
                                     else ("secrets", "Secret", vf["secretKeyRef"]))
                v = self._lookup(plural, kind, ref.get("name", ""), ref.get("key"), bool(ref.get("optional")))
                if v is not None:
                    env[name] = v
        env.update(dra_env.merge_env(
            dev.device_env(self.per_container.get(c.name, {}), self.k.ledger.node_devices(self.node)),
            dra_env.container_env(self.k.store, self.pod, c.spec)))
        if self.ip:
            env = {k: v.replace("0.0.0.0", self.ip) for k, v in env.items()}
        return env

    def _resource_field(self, c: Container, ref: dict) -> str:
        resource = ref.get("resource", "")
        kind, _, name = resource.partition(".")
        raw = ((c.spec.get("resources") or {}).get(kind) or {}).get(name)
        if raw is None:
            return "0"
        divisor = rules.parse_quantity(ref.get("divisor") or "1")
        value = rules.parse_quantity(raw)
        return str(math.ceil(value / divisor))

    def _argv(self, c: Container, env: dict[str, str]) -> list[str] | None:
        command = [expand(str(x), env) for x in c.spec.get("command") or []]
        args = [expand(str(x), env) for x in c.spec.get("args") or []]
        argv = command + args
        if not argv:
            return None
        if self.ip:
            argv = [a.replace("0.0.0.0", self.ip) for a in argv]
        return argv

    # -- stopping ---------------------------------------------------------

    async def _stop(self, c: Container, grace: float) -> None:
        c.stopping = True
        c.stopped.set()
        if c.stand_in is not None:
            with contextlib.suppress(Exception):
                await c.stand_in.cleanup()
            c.stand_in = None
        proc = c.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 10)
        # the session may hold grandchildren that ignored SIGTERM
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    async def _kill_all(self, grace: float) -> None:
        running = [c for c in self.containers if c.proc is not None or c.stand_in is not None
                   or ("running" in c.state)]
        for c in running:
            if "running" in c.state:
                self.event("Normal", "Killing", f"Stopping container {c.name}", c)
        # apps first, then sidecars in reverse order (KEP-753)
        apps = [c for c in running if c.kind == "app"]
        await asyncio.gather(*(self._stop(c, grace) for c in apps))
        for c in reversed([c for c in running if c.kind != "app"]):
            await self._stop(c, grace)
        for c in running:
            if "running" in c.state:
                c.ready = False
                c.state = {"terminated": {"exitCode": 137 if grace == 0 else 143, "reason": "Error",
                                          "startedAt": c.state["running"].get("startedAt"),
                                          "finishedAt": now_rfc3339(), "containerID": c.container_id}}

    def grace(self) -> float:
        meta = self.pod.get("metadata") or {}
        g = meta.get("deletionGracePeriodSeconds")
        if g is None:
            g = (self.pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        return max(float(g), 0.0)

    async def _terminate(self) -> None:
        await self._kill_all(self.grace())
        await self._finalize()

    async def _finalize(self) -> None:
        for t in self._probes:
            t.cancel()
        self._release()
        try:
            self.k.store.finalize_delete("pods", self.name, namespace=self.ns)
        except Exception as e:
            if getattr(e, "code", None) != 404:
                log.warning("finalize %s: %s", self.key, e)

    def _release(self) -> None:
        self.k.ledger.release(self.key)
        self.k.ips.release(self.ip)

    def _cleanup(self) -> None:
        for t in self._probes:
            t.cancel()
        self._release()
        shutil.rmtree(self.dir, ignore_errors=True)
        self.k.workers.pop(self.key, None)


def _asks_for_devices(pod: dict) -> bool:
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for section in ("limits", "requests"):
            if any(dev.is_device_resource(r) for r in res.get(section) or {}):
                return True
    return False


class Kubelet:
    """The kubelet of every simulated node."""

    def __init__(self, store, *, ledger: dev.DeviceLedger | None = None, run_pods: bool = True,
                 stand_in: bool = False, api_url: str | None = None, bin_dir: str | None = None,
                 restart_backoff: tuple[float, float] = (10.0, 300.0), workdir: str | None = None,
                 pod_subnet: str | None = None):
        self.store = store
        self.ledger = ledger or dev.DeviceLedger()
        self.run_pods = run_pods
        self.stand_in = stand_in
        self.bin_dir = bin_dir or os.path.dirname(sys.executable)
        self.restart_backoff = restart_backoff
        self.recorder = EventRecorder(store, "kubelet")
        # a /16 of its own inside 127/8 (random unless given), so that two
        # simulated clusters on one machine (parallel test runs, a demo
        # beside the tests) never give their pods the same address
        if pod_subnet is None:
            pod_subnet = f"127.{random.randint(1, 254)}.0.0/16"
        net = ipaddress.IPv4Network(pod_subnet)
        if not net.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")) or net.num_addresses < 4:
            raise ValueError(f"pod_subnet {pod_subnet!r} must be a loopback network inside 127.0.0.0/8, "
                             "e.g. 127.42.0.0/16")
        first = net.network_address + (2 if net.network_address == ipaddress.IPv4Address("127.0.0.0") else 1)
        self.ips = IPAllocator(str(first), str(net.broadcast_address - 1))
        self.workers: dict[str, PodWorker] = {}
        self.static: dict[str, dict] = {}  # pods loaded already bound: never run
        self.node_objs: dict[str, dict] = {}
        self.pulled: set[tuple[str, str]] = set()
        self.procs: set[asyncio.subprocess.Process] = set()
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="gpuspawner-sim-")
        self.service_env: dict[str, str] = {}
        if api_url:
            from urllib.parse import urlsplit
            u = urlsplit(api_url)
            self.service_env = {"KUBERNETES_SERVICE_HOST": u.hostname or "127.0.0.1",
                                "KUBERNETES_SERVICE_PORT": str(u.port or 80)}
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self._started = False
        self.synced = asyncio.Event()

    # -- logs -------------------------------------------------------------

    def logs(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> str:
        """The pod's log, as ``GET pods/{name}/log`` returns it (KeyError if unknown)."""
        w = self.workers.get(f"{namespace}/{name}")
        if w is None:
            raise KeyError(f"{namespace}/{name}")
        cs = [c for c in w.containers if container is None or c.name == container]
        if not cs:
            raise KeyError(container)
        if container is None and len(w.containers) > 1:
            cs = [c for c in w.containers if c.kind == "app"][:1]
        c = cs[0]
        lines = c.previous_log if previous else c.log
        return "".join(line + "\n" for line in (lines or []))

    def qos_class(self, pod: dict) -> str:
        cs = (pod.get("spec") or {}).get("containers") or []
        reqs = [rules.container_requests(c) for c in cs]
        lims = [rules.resource_list(((c.get("resources") or {}).get("limits"))) for c in cs]
        if not any(r.get("cpu") or r.get("memory") for r in reqs) and not any(
                lm.get("cpu") or lm.get("memory") for lm in lims):
            return "BestEffort"
        if all(lm.get("cpu") and lm.get("memory") and lm.get("cpu") == r.get("cpu")
               and lm.get("memory") == r.get("memory") for r, lm in zip(reqs, lims)):
            return "Guaranteed"
        return "Burstable"

    # -- stand-in ---------------------------------------------------------

    async def start_stand_in(self, worker: PodWorker, c: Container):
        from aiohttp import web

        async def answer(request: web.Request) -> web.Response:
            return web.json_response({"stand_in": True, "pod": worker.name, "container": c.name,
                                      "path": request.path})
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        ports = [p.get("containerPort") for p in c.spec.get("ports") or [] if p.get("containerPort")]
        try:
            for port in ports:
                await web.TCPSite(runner, worker.ip, int(port)).start()
        except Exception:
            await runner.cleanup()
            raise
        c.log.append(f"stand-in answering on {', '.join(f'{worker.ip}:{p}' for p in ports) or 'no port'}")
        return runner

    # -- cache and dispatch -----------------------------------------------

    def _node_list(self, items: list[dict]) -> None:
        self.node_objs = {n["metadata"]["name"]: n for n in items}
        for n in items:
            self._declare(n)

    def _declare(self, node: dict) -> None:
        try:
            cap = rules.resource_list((node.get("status") or {}).get("allocatable")
                                      or (node.get("status") or {}).get("capacity"))
        except rules.QuantityError:
            cap = {}
        self.ledger.set_node(node["metadata"]["name"], cap)

    def _node_event(self, kind: str, node: dict) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self.node_objs.pop(name, None)
        else:
            self.node_objs[name] = node
            self._declare(node)

    def _pod_list(self, items: list[dict]) -> None:
        if not self._started:
            # pods already bound when the cluster starts were loaded from a
            # file: they keep their state, never run, and take their devices first
            self._started = True
            short: list[str] = []
            for p in items:
                node = (p.get("spec") or {}).get("nodeName")
                if not node:
                    continue
                key = pod_key(p)
                self.static[key] = p
                if (p.get("status") or {}).get("phase") not in TERMINAL and _asks_for_devices(p):
                    try:
                        want = {r: n for r, n in rules.pod_requests(p).items() if dev.is_device_resource(r)}
                        self.ledger.allocate(key, node, dra_env.device_plugin_requests(p, want))
                    except (dev.AllocationError, rules.QuantityError) as e:
                        short.append(f"{key} on {node}: {e}")
            if short:
                log.warning("%d loaded pods got no devices (their node has fewer than its pods ask for), "
                            "e.g. %s", len(short), "; ".join(short[:3]))
            return
        for p in items:
            self._pod_event("MODIFIED", p)

    def _pod_event(self, kind: str, pod: dict) -> None:
        key = pod_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if key in self.static:
            if kind == "DELETED":
                self.static.pop(key, None)
                self.ledger.release(key)
            elif (pod.get("metadata") or {}).get("deletionTimestamp"):
                self.static.pop(key, None)
                self.ledger.release(key)
                with contextlib.suppress(Exception):
                    self.store.finalize_delete("pods", pod["metadata"]["name"],
                                               namespace=pod["metadata"].get("namespace"))
            else:
                self.static[key] = pod
                if (pod.get("status") or {}).get("phase") in TERMINAL:
                    self.ledger.release(key)
            return
        w = self.workers.get(key)
        if kind == "DELETED":
            if w is not None:
                # force-deleted (grace 0) or deleted under us: kill at once
                w.pod = dict(w.pod, metadata=dict(w.pod["metadata"], deletionGracePeriodSeconds=0))
                w.deleting.set()
            return
        if w is not None:
            if w.pod["metadata"].get("uid") != pod["metadata"].get("uid"):
                return  # an old incarnation is still terminating
            w.pod = pod
            if pod["metadata"].get("deletionTimestamp"):
                w.deleting.set()
            return
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL:
            return
        if pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(Exception):
                self.store.finalize_delete("pods", pod["metadata"]["name"], namespace=pod["metadata"].get("namespace"))
            return
        w = PodWorker(self, pod)
        self.workers[key] = w
        w.task = asyncio.create_task(w.run(), name=f"pod-{key}")

    async def start(self) -> None:
        nodes_synced = asyncio.Event()
        self._tasks.start(informer(self.store, "nodes", self._node_list, self._node_event, self._stopping,
                                   nodes_synced), "kubelet-nodes")
        await asyncio.wait_for(nodes_synced.wait(), 60)
        self._tasks.start(informer(self.store, "pods", self._pod_list, self._pod_event, self._stopping,
                                   self.synced), "kubelet-pods")
        await asyncio.wait_for(self.synced.wait(), 60)

    async def stop(self) -> None:
        """Kill every process this kubelet started; pods are left as they are in the store."""
        self._stopping.set()
        await self._tasks.stop()
        workers = list(self.workers.values())
        for w in workers:
            if w.task:
                w.task.cancel()
        for w in workers:
            if w.task:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await w.task
        for proc in list(self.procs):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(proc.wait(), 5)
        self.procs.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
