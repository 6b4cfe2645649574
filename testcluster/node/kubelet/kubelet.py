"""The kubelet of every simulated node: watches pods and nodes, runs one ``PodWorker`` per pod.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import secrets
import shutil
import sys
import tempfile
from typing import Any, AsyncIterator, Callable
from urllib.parse import urlsplit

from ..devices import AllocationError, DeviceLedger, is_device_resource
from .. import pod_resources
from ..controller import TERMINAL, EventRecorder, Tasks, informer, pod_key
from ..dra import kubelet_env
from . import logs, volumes
from . import runtime
from .network import IPAllocator, pod_subnet_allocator
from .standin import start_stand_in
from .status import Container, container_status
from .worker import ExecError, PodWorker

__all__ = ["Kubelet", "IPAllocator", "ExecError"]

log = logging.getLogger(__name__)


def _asks_for_devices(pod: dict) -> bool:
    spec = pod.get("spec") or {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        res = c.get("resources") or {}
        for section in ("limits", "requests"):
            if any(is_device_resource(r) for r in res.get(section) or {}):
                return True
    return False


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


class Kubelet:
    """The kubelet of every simulated node."""

    def __init__(self, store, *, ledger: DeviceLedger | None = None, run_pods: bool = True,
                 stand_in: bool = False, api_url: str | None = None, bin_dir: str | None = None,
                 restart_backoff: tuple[float, float] = (10.0, 300.0), workdir: str | None = None,
                 pod_subnet: str | None = None, isolation: str | None = None,
                 mount_timeout: float = 123.0, volume_resync: float = 60.0,
                 image_sizes: dict[str, int] | None = None, pull_bytes_per_second: float | None = None):
        self.store = store
        # what a first pull of an image takes: its size (bytes, 0 when not listed) over the rate;
        # no rate: pulls are instant
        self.image_sizes = dict(image_sizes or {})
        self.pull_bytes_per_second = pull_bytes_per_second
        self.ledger = ledger or DeviceLedger()
        self.run_pods = run_pods
        self.stand_in = stand_in
        self.bin_dir = bin_dir or os.path.dirname(sys.executable)
        self.restart_backoff = restart_backoff
        self.mount_timeout = mount_timeout      # podAttachAndMountTimeout (2 min 3 s)
        self.volume_resync = volume_resync      # how often volumes get new ConfigMap/Secret content
        self.recorder = EventRecorder(store, "kubelet")
        self.ips = pod_subnet_allocator(pod_subnet)
        if isolation is not None and isolation not in runtime.ISOLATIONS:
            raise ValueError(f"isolation {isolation!r}: use one of {', '.join(runtime.ISOLATIONS)}")
        self._isolation = isolation
        self.workers: dict[str, PodWorker] = {}
        self.static: dict[str, dict] = {}  # pods loaded already bound: never run
        self.node_objs: dict[str, dict] = {}
        self.pulled: set[tuple[str, str]] = set()
        self.procs: set[runtime.Process] = set()
        self._own_workdir = workdir is None
        self.workdir = os.path.realpath(workdir or tempfile.mkdtemp(prefix="gpuspawner-sim-"))
        self.pods_dir = os.path.join(self.workdir, "pods")
        self.disks_dir = os.path.join(self.workdir, "disks")
        self.api_url = api_url
        self.service_env: dict[str, str] = {}
        if api_url:
            u = urlsplit(api_url)
            self.service_env = {"KUBERNETES_SERVICE_HOST": u.hostname or "127.0.0.1",
                                "KUBERNETES_SERVICE_PORT": str(u.port or 80)}
        self._stopping = asyncio.Event()
        self._tasks = Tasks()
        self._started = False
        self.synced = asyncio.Event()

    def image_size(self, image: str) -> int:
        """The size the node reports for ``image`` once pulled (0: not listed)."""
        return int(self.image_sizes.get(image, 0))

    def pull_seconds(self, image: str) -> float:
        """How long a first pull of ``image`` takes on a node: its size over the pull rate."""
        rate = self.pull_bytes_per_second
        return self.image_size(image) / rate if rate else 0.0

    @property
    def isolation(self) -> str:
        """How containers are isolated here (``runtime.isolation()``, found on first use)."""
        if self._isolation is None:
            self._isolation = runtime.isolation()
        return self._isolation

    # -- what the workers read --------------------------------------------------------

    def get_object_for(self, namespace: str) -> Callable[[str, str], dict | None]:
        """(plural, name) -> the stored object of ``namespace`` (cluster-scoped for PVs), or None."""
        def get(plural: str, name: str) -> dict | None:
            try:
                return self.store.get(plural, name, namespace=None if plural == "persistentvolumes" else namespace)
            except Exception as e:
                if getattr(e, "code", None) == 404:
                    return None
                raise
        return get

    def lookup_for(self, namespace: str) -> Callable[[str, str], dict[str, str] | None]:
        """(plural, name) -> a ConfigMap's or Secret's data as text (Secrets decoded), or None."""
        get = self.get_object_for(namespace)

        def lookup(plural: str, name: str) -> dict[str, str] | None:
            obj = get(plural, name)
            if obj is None:
                return None
            data = dict(obj.get("data") or {})
            if plural == "secrets":
                data = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
                data.update(obj.get("stringData") or {})
            return data
        return lookup

    def allocatable(self, node: str) -> dict[str, Any]:
        st = (self.node_objs.get(node) or {}).get("status") or {}
        return dict(st.get("allocatable") or st.get("capacity") or {})

    def admitted_pods(self, node: str, but: str) -> list[dict]:
        """The pods ``node`` holds room for, but the one keyed ``but``: those its workers admitted
        and the ones loaded already bound, until they end."""
        pods = [w.pod for key, w in self.workers.items()
                if key != but and w.node == node and w.admitted and w.phase not in TERMINAL]
        pods += [p for key, p in self.static.items()
                 if key != but and (p.get("spec") or {}).get("nodeName") == node
                 and (p.get("status") or {}).get("phase") not in TERMINAL]
        return pods

    def pod_pids(self, namespace: str, name: str) -> list[int]:
        """The host pids of the pod's running containers' shims: each the root of one container's
        whole process tree (what the simulated DCGM reads a pod's CPU use from)."""
        w = self.workers.get(f"{namespace}/{name}")
        if w is None:
            return []
        return [c.process.pid for c in w.containers
                if c.process is not None and c.process.proc.returncode is None]

    def qos_class(self, pod: dict) -> str:
        cs = (pod.get("spec") or {}).get("containers") or []
        reqs = [pod_resources.container_requests(c) for c in cs]
        lims = [pod_resources.resource_list(((c.get("resources") or {}).get("limits"))) for c in cs]
        if not any(r.get("cpu") or r.get("memory") for r in reqs) and not any(
                lm.get("cpu") or lm.get("memory") for lm in lims):
            return "BestEffort"
        if all(lm.get("cpu") and lm.get("memory") and lm.get("cpu") == r.get("cpu")
               and lm.get("memory") == r.get("memory") for r, lm in zip(reqs, lims)):
            return "Guaranteed"
        return "Burstable"

    async def start_stand_in(self, worker: PodWorker, c: Container) -> Any:
        return await start_stand_in(worker.name, worker.ip or "127.0.0.1", c.spec, c.log)

    # -- the streaming subresources -------------------------------------------------------

    def _worker(self, pod: dict) -> PodWorker | None:
        w = self.workers.get(pod_key(pod))
        if w is None or w.pod["metadata"].get("uid") != (pod.get("metadata") or {}).get("uid"):
            return None
        return w

    def log_stream(self, pod: dict, container: str, **options: Any) -> AsyncIterator[bytes]:
        """``GET containerLogs/...``: the bytes to send.  ``options``: ``logs.LogOptions``'
        fields.  Raises ``logs.LogError`` (the 400 BadRequest the API server relays) when there is no such log."""
        opts = logs.LogOptions(**options)
        w = self._worker(pod)
        if w is not None:
            statuses = [container_status(c) for c in w.containers]
            pod = dict(pod, status={"containerStatuses": statuses})
        which = logs.validate_status(pod, container, opts.previous)
        c = w.container(container) if w is not None else None
        if c is None:
            return _nothing()  # loaded from a file: this kubelet never ran it, it has no log
        source = c.log if which == "current" else c.previous_log
        if source is None:
            return _nothing()
        return logs.stream_log(source, opts, lambda: self.workers.get(w.key) is w)

    def logs(self, namespace: str, name: str, container: str | None = None, previous: bool = False) -> str:
        """A container's log as text (the first app container by default); KeyError if unknown."""
        w = self.workers.get(f"{namespace}/{name}")
        if w is None:
            raise KeyError(f"{namespace}/{name}")
        c = w.container(container) if container else next((c for c in w.containers if c.kind == "app"), None)
        if c is None:
            raise KeyError(container)
        source = c.previous_log if previous else c.log
        return source.text() if source is not None else ""

    def running_container(self, pod: dict, container: str) -> Container:
        """The running container exec and attach reach; ``ExecError`` as the kubelet words it."""
        w = self._worker(pod)
        c = w.container(container) if w is not None else None
        if c is None or not c.running:
            raise ExecError(f'container not found ("{container}")')
        return c

    @staticmethod
    def new_exec_id() -> str:
        return secrets.token_hex(32)

    async def exec(self, pod: dict, container: str, argv: list[str], *, tty: bool, stdin: bool,
                   on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]) -> runtime.Process:
        w = self._worker(pod)
        if w is None:
            raise ExecError(f'container not found ("{container}")')
        return await w.exec(container, argv, tty=tty, stdin=stdin, on_stdout=on_stdout, on_stderr=on_stderr)

    # -- fed from outside: a node agent's informers over HTTP (testcluster.nodeagent) ----

    def set_nodes(self, items: list[dict]) -> None:
        """The nodes this kubelet runs pods for, with their allocatable (declared to the ledger)."""
        self._node_list(items)

    def node_event(self, kind: str, node: dict) -> None:
        self._node_event(kind, node)

    def pod_event(self, kind: str, pod: dict) -> None:
        self._pod_event(kind, pod)

    def keep_loaded(self, pods: list[dict]) -> None:
        """Pods loaded already bound: they keep their state, never run, and take their devices."""
        self._started = True
        self._load_static(pods)

    def service_account_token(self, pod: dict, sa: dict, node: str, audience: str | None, expiration: int) -> str:
        """The token a projected ``serviceAccountToken`` volume source holds."""
        return volumes.service_account_token(pod, sa, node, audience, expiration)

    def runs_processes(self, pod: dict) -> bool:
        """Whether the pod's containers run as processes (else Running with nothing behind them)."""
        return self.run_pods

    # -- cache and dispatch -----------------------------------------------------------

    def _node_list(self, items: list[dict]) -> None:
        self.node_objs = {n["metadata"]["name"]: n for n in items}
        for n in items:
            self._declare(n)

    def _declare(self, node: dict) -> None:
        try:
            cap = pod_resources.resource_list((node.get("status") or {}).get("allocatable")
                                      or (node.get("status") or {}).get("capacity"))
        except pod_resources.QuantityError:
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
            self._load_static(items)
            return
        for p in items:
            self._pod_event("MODIFIED", p)

    def _load_static(self, items: list[dict]) -> None:
        short: list[str] = []
        for p in items:
            node = (p.get("spec") or {}).get("nodeName")
            if not node:
                continue
            key = pod_key(p)
            self.static[key] = p
            if (p.get("status") or {}).get("phase") not in TERMINAL and _asks_for_devices(p):
                try:
                    want = {r: n for r, n in pod_resources.pod_requests(p).items() if is_device_resource(r)}
                    self.ledger.allocate(key, node, kubelet_env.device_plugin_requests(p, want))
                except (AllocationError, pod_resources.QuantityError) as e:
                    short.append(f"{key} on {node}: {e}")
        if short:
            log.warning("%d loaded pods got no devices (their node has fewer than its pods ask for), "
                        "e.g. %s", len(short), "; ".join(short[:3]))

    def _static_event(self, kind: str, key: str, pod: dict) -> None:
        if kind == "DELETED":
            self.static.pop(key, None)
            self.ledger.release(key)
        elif (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.static.pop(key, None)
            self.ledger.release(key)
            with contextlib.suppress(Exception):
                self.store.finalize_delete("pods", pod["metadata"]["name"], namespace=pod["metadata"].get("namespace"))
        else:
            self.static[key] = pod
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                self.ledger.release(key)

    def _pod_event(self, kind: str, pod: dict) -> None:
        key = pod_key(pod)
        if key in self.static:
            self._static_event(kind, key, pod)
            return
        w = self.workers.get(key)
        if kind == "DELETED":
            if w is not None:
                # force-deleted (grace 0) or deleted under us: kill at once; the kubelet's pod
                # manager forgets the pod now, so it no longer counts at admission
                w.admitted = False
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
        if not (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase") in TERMINAL:
            return
        if pod["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(Exception):
                self.store.finalize_delete("pods", pod["metadata"]["name"], namespace=pod["metadata"].get("namespace"))
            return
        os.makedirs(self.pods_dir, exist_ok=True)
        w = PodWorker(self, pod)
        self.workers[key] = w
        w.task = asyncio.create_task(w.run(), name=f"pod-{key}")

    async def start(self) -> None:
        if self.run_pods and not self.stand_in:
            await asyncio.to_thread(lambda: self.isolation)  # the check runs processes: not on the loop
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
        for p in list(self.procs):  # execs, and anything a cancelled worker left
            p.kill()
        for p in list(self.procs):
            try:
                await asyncio.wait_for(p.wait(), 10)
            except (asyncio.TimeoutError, Exception):
                with contextlib.suppress(ProcessLookupError):
                    p.proc.kill()
        self.procs.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
