"""The pod worker: one pod's life on its node, in the order the kubelet's ``SyncPod`` goes.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import devices as dev
from .. import pod_resources
from ..controller import MERGE, now_rfc3339, pod_key
from ..dra import kubelet_env
from .env import ConfigError, container_env, expand
from . import admission, run_as, runtime
from .volumes import (SERVICE_ACCOUNT_DIR, PodVolumes, container_mounts, service_account_kubeconfig,
                      service_account_source, unmountable)
from .logs import STDERR, STDOUT, ContainerLog
from .probes import LIVENESS, READINESS, STARTUP, ProbeConfig, ProbeWorker
from .status import Container, Transitions, container_status, pod_conditions

if TYPE_CHECKING:
    from .kubelet import Kubelet

__all__ = ["PodWorker", "ExecError", "STAND_IN_ANNOTATION", "TERMINATION_LOG_ENV", "node_ip"]

log = logging.getLogger(__name__)

STAND_IN_ANNOTATION = "gpuspawner.dev/sim-stand-in"
TERMINATION_LOG_ENV = "GPUSPAWNER_SIM_TERMINATION_LOG"
FALLBACK_LINES, FALLBACK_BYTES, FILE_MESSAGE_BYTES = 80, 2048, 4096
MOUNT_RETRY = (0.5, 122.0)       # nestedpendingoperations: initial and max durationBeforeRetry
BACKOFF_RESET = 600.0            # a container that ran this long restarts without back-off


class ExecError(Exception):
    """The kubelet cannot exec or attach (the container is not running)."""


def node_ip(node: dict | None) -> str:
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
        self.uid = meta.get("uid") or secrets.token_hex(8)
        self.node = pod["spec"]["nodeName"]
        self.ip: str | None = None
        self.start_time: str | None = None
        self.devices: dict[str, list[str]] = {}
        self.per_container: dict[str, dict[str, list[str]]] = {}
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.ns}.{self.name}.", dir=kubelet.pods_dir))
        spec = pod.get("spec") or {}
        self.containers: list[Container] = [
            Container(c, "sidecar" if c.get("restartPolicy") == "Always" else "init")
            for c in spec.get("initContainers") or []
        ] + [Container(c, "app") for c in spec.get("containers") or []]
        self.initialized = not any(c.kind == "init" for c in self.containers)
        self.phase = "Pending"
        self.admitted = False  # counts on its node from admission until it ends
        self.reason: str | None = None
        self.message: str | None = None
        self.deleting = asyncio.Event()
        self.stand_in = kubelet.stand_in or (meta.get("annotations") or {}).get(STAND_IN_ANNOTATION) == "true"
        self.volumes = PodVolumes(pod, str(self.dir / "volumes"), kubelet.get_object_for(self.ns),
                                      node=self.node, node_allocatable=kubelet.allocatable(self.node),
                                      disk_dir=kubelet.disks_dir, token=kubelet.service_account_token)
        self.task: asyncio.Task | None = None
        self._tasks: list[asyncio.Task] = []  # sidecar supervisors, volume refresh, probe kills
        self._transitions = Transitions(now_rfc3339)
        self._backoff_until: dict[str, float] = {}
        self.users: dict[str, run_as.RunAs | None] = {}  # container -> the user its processes run as

    # -- status and events ------------------------------------------------------------

    def container(self, name: str) -> Container | None:
        return next((c for c in self.containers if c.name == name), None)

    def status(self) -> dict:
        host = node_ip(self.k.node_objs.get(self.node))
        st: dict[str, Any] = {
            "phase": self.phase,
            "conditions": pod_conditions(self.containers, phase=self.phase, initialized=self.initialized,
                                         sandbox=self.ip is not None, transition=self._transitions),
            "hostIP": host,
            "hostIPs": [{"ip": host}],
            # the API server sets qosClass at creation; keep it
            "qosClass": (self.pod.get("status") or {}).get("qosClass") or self.k.qos_class(self.pod),
            "initContainerStatuses": [container_status(c) for c in self.containers if c.kind != "app"],
            "containerStatuses": [container_status(c) for c in self.containers if c.kind == "app"],
        }
        if self.start_time:
            st["startTime"] = self.start_time
        if self.ip:
            st["podIP"] = self.ip
            st["podIPs"] = [{"ip": self.ip}]
        if self.reason:
            st["reason"] = self.reason
        if self.message:
            st["message"] = self.message
        return st

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
            fp = f"spec.{'initContainers' if c.kind != 'app' else 'containers'}{{{c.name}}}"
        try:
            self.k.recorder.emit(self.pod, type_, reason, message, field_path=fp, host=self.node)
        except Exception as e:  # events are best effort, as in the kubelet
            log.debug("event for %s: %s", self.key, e)

    # -- the pod's life ---------------------------------------------------------------

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
            await self._kill_all(0)
        finally:
            self._cleanup()

    async def _run(self) -> None:
        if not self._admit():
            await self.deleting.wait()
            await self._finalize()
            return
        self.start_time = now_rfc3339()
        for c in self.containers:
            c.state = {"waiting": {"reason": "PodInitializing" if not self.initialized or c.kind != "app"
                                   else "ContainerCreating"}}
        self.push_status()
        if not await self._mount_volumes():
            await self._terminate()
            return
        self.ip = self.k.ips.take()
        self.push_status()
        self._tasks.append(asyncio.create_task(self._refresh_volumes()))
        policy = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
        if await self._init_containers(policy):
            await self._run_apps(policy)
        await self._terminate()

    def _admit(self) -> bool:
        """The kubelet's admission: the pod fits its node beside the pods admitted there
        (``OutOf<resource>`` else), then the device manager hands out its devices."""
        try:
            rejection = admission.admit(self.pod, self.k.allocatable(self.node),
                                        self.k.admitted_pods(self.node, self.key))
        except pod_resources.QuantityError as e:
            rejection = admission.Rejection("UnexpectedAdmissionError", str(e))
        if rejection is not None:
            self.phase, self.reason, self.message = "Failed", rejection.reason, admission.REJECTED + rejection.message
            self.event("Warning", rejection.reason, rejection.message)
            self.push_status()
            return False
        try:
            want = {r: n for r, n in pod_resources.pod_requests(self.pod).items() if dev.is_device_resource(r)}
            self.devices = self.k.ledger.allocate(self.key, self.node, kubelet_env.device_plugin_requests(self.pod, want))
        except dev.AllocationError as e:
            self.phase, self.reason, self.message = "Failed", "UnexpectedAdmissionError", str(e)
            self.event("Warning", "UnexpectedAdmissionError", str(e))
            self.push_status()
            return False
        self.per_container = dev.split_for_containers(self.pod, self.devices, pod_resources.container_requests)
        self.admitted = True
        return True

    def _unmountable(self) -> dict[str, str]:
        """Without mount namespaces no volume can appear at its mountPath: each mounted one fails,
        but the service account's, whose files the container finds through ``KUBECONFIG``."""
        if not self._without_mounts():
            return {}
        out = {}
        for c in self.containers:
            for vm in c.spec.get("volumeMounts") or []:
                v = self.volumes.volumes.get(vm.get("name"))
                if v is not None and v.path is not None and not self._service_account_mount(vm):
                    out[v.name] = unmountable(v.path, str(vm.get("mountPath", "")))
        return out

    def _without_mounts(self) -> bool:
        return self.k.isolation == "processes" and not self.stand_in and self.k.runs_processes(self.pod)

    @staticmethod
    def _service_account_mount(vm: dict) -> bool:
        return (str(vm.get("mountPath", "")).rstrip("/") == SERVICE_ACCOUNT_DIR
                and not vm.get("subPath") and not vm.get("subPathExpr"))

    def _service_account_env(self, c: Container) -> dict[str, str]:
        """Without mount namespaces: ``KUBECONFIG``, a kubeconfig that reads the service account's
        files where the volume holds them (Kubernetes clients fall back to it outside a pod)."""
        source = service_account_source(c.spec, self.volumes.volumes) if self._without_mounts() else None
        if source is None or not self.k.api_url:
            return {}
        path = self.dir / "serviceaccount.kubeconfig"
        path.write_text(service_account_kubeconfig(self.k.api_url, source, self.ns))
        path.chmod(0o644)
        return {"KUBECONFIG": str(path)}

    async def _mount_volumes(self) -> bool:
        """``WaitForAttachAndMount``: every volume set up, or FailedMount events and retries until
        it is.  False when the pod is deleted first."""
        loop = asyncio.get_running_loop()
        attempt, since_timeout = 0, loop.time()
        while not self.deleting.is_set():
            failed, unprocessed = self.volumes.set_up()
            failed.update(self._unmountable())
            if not failed and not unprocessed:
                return True
            for name, msg in failed.items():
                self.event("Warning", "FailedMount", f'MountVolume.SetUp failed for volume "{name}" : {msg}')
            unmounted = " ".join(n for n in self.volumes.specs if n in failed or n in unprocessed
                                 or n in self.volumes.pending)
            if unprocessed:
                self.event("Warning", "FailedMount",
                           f"Unable to attach or mount volumes: unmounted volumes=[{unmounted}], unattached "
                           f"volumes=[], failed to process volumes=[{' '.join(unprocessed)}]: "
                           f"{'; '.join(unprocessed.values())}")
            elif loop.time() - since_timeout >= self.k.mount_timeout:
                since_timeout = loop.time()
                self.event("Warning", "FailedMount",
                           f"Unable to attach or mount volumes: unmounted volumes=[{unmounted}], unattached "
                           "volumes=[], failed to process volumes=[]: timed out waiting for the condition")
            delay = min(MOUNT_RETRY[0] * 2 ** attempt, MOUNT_RETRY[1])
            attempt += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.deleting.wait(), delay)
        return False

    async def _refresh_volumes(self) -> None:
        """The kubelet's periodic sync projects new ConfigMap and Secret content into volumes."""
        while True:
            await asyncio.sleep(self.k.volume_resync)
            for name, msg in self.volumes.refresh().items():
                self.event("Warning", "FailedMount", f'MountVolume.SetUp failed for volume "{name}" : {msg}')

    async def _init_containers(self, policy: str) -> bool:
        """Init containers in order; sidecars start and keep running.  False when the pod ends here."""
        for c in self.containers:
            if c.kind == "app" or self.deleting.is_set():
                continue
            if c.kind == "sidecar":
                # the next init container waits until the sidecar has started (KEP-753)
                if await self._start_retrying(c):
                    self._tasks.append(asyncio.create_task(self._supervise(c, "Always", start=False)))
                continue
            while not self.deleting.is_set():
                code = await self._run_to_end(c)
                if code is None or code == 0:
                    break
                if policy == "Never":
                    self.phase = "Failed"
                    self._release()
                    self.push_status()
                    await self.deleting.wait()
                    return False
                if not await self._backoff(c):
                    break
        if self.deleting.is_set():
            return False
        self.initialized = True
        for c in self.containers:
            if c.kind == "app":
                c.state = {"waiting": {"reason": "ContainerCreating"}}
        self.push_status()
        return True

    async def _run_apps(self, policy: str) -> None:
        apps = [c for c in self.containers if c.kind == "app"]
        # the phase turns Running when the first container runs (see _launched)
        done_all = asyncio.ensure_future(asyncio.gather(*(self._supervise(c, policy) for c in apps)))
        deleting = asyncio.ensure_future(self.deleting.wait())
        await asyncio.wait({done_all, deleting}, return_when=asyncio.FIRST_COMPLETED)
        if done_all.done() and done_all.exception() is not None:
            deleting.cancel()
            raise done_all.exception()  # type: ignore[misc]
        if not self.deleting.is_set():
            # every app container ended for good: the pod is terminal
            codes = [c.state.get("terminated", {}).get("exitCode", 1) for c in apps]
            self.phase = "Succeeded" if all(x == 0 for x in codes) else "Failed"
            for c in reversed([c for c in self.containers if c.kind == "sidecar"]):
                await self._stop(c, 2)
            self._release()
            self.push_status()
            await self.deleting.wait()
        deleting.cancel()
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
                if not await self._backoff(c) or not await self._start_retrying(c):
                    return
                self.push_status()
                continue
            return

    async def _start_retrying(self, c: Container) -> bool:
        """Start the container; when creating it fails (a missing Secret, no command), retry with
        the kubelet's backoff until it works or the pod goes.  False when the pod is deleted."""
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
        """CrashLoopBackOff before a restart (``kuberuntime_manager.go`` ``doBackOff``): the first
        restart is immediate; then 10 s doubling to 5 min; reset after 10 min of running."""
        if c.state.get("terminated"):
            # while it waits to restart, the run that ended shows as lastState
            c.last_state = {"terminated": dict(c.state["terminated"])}
        base, cap = self.k.restart_backoff
        step = self._backoff_until.get(c.name)
        if step is None or c.last_run >= BACKOFF_RESET:
            self._backoff_until[c.name] = base
            c.restarts += 1
            return not self.deleting.is_set()
        self._backoff_until[c.name] = min(step * 2, cap)
        msg = (f"back-off {_duration(step)} restarting failed container={c.name} "
               f"pod={self.name}_{self.ns}({self.pod['metadata'].get('uid', '')})")
        c.state = {"waiting": {"reason": "CrashLoopBackOff", "message": msg}}
        self.event("Warning", "BackOff", f"Back-off restarting failed container {c.name} in pod "
                                         f"{self.name}_{self.ns}({self.pod['metadata'].get('uid', '')})", c)
        self.push_status()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.deleting.wait(), step)
        if self.deleting.is_set():
            return False
        c.restarts += 1
        return True

    async def _run_to_end(self, c: Container) -> int | None:
        if not await self._start_retrying(c):
            return None
        self.push_status()
        return await self._wait(c)

    # -- one container ----------------------------------------------------------------

    async def _pull(self, c: Container) -> bool:
        """The kubelet's image pull: only what the node lacks (``IfNotPresent``), taking the image's
        size over the kubelet's pull rate when both are set (``Kubelet.pull_seconds``); False when
        the pod is deleted meanwhile."""
        image = c.spec.get("image", "")
        first_pull = (self.node, image) not in self.k.pulled
        policy = c.spec.get("imagePullPolicy") or ("Always" if image.endswith(":latest") or ":" not in image
                                                   else "IfNotPresent")
        if first_pull or policy == "Always":
            self.event("Normal", "Pulling", f'Pulling image "{image}"', c)
            took = self.k.pull_seconds(image) if first_pull else 0.0
            if took > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.deleting.wait(), took)
                if self.deleting.is_set():
                    return False
            self.k.pulled.add((self.node, image))
            spent = (f"{took:.3f}".rstrip("0").rstrip(".") or "0") + "s"  # as Go prints a duration in seconds
            self.event("Normal", "Pulled", f'Successfully pulled image "{image}" in {spent} ({spent} including '
                                           f"waiting). Image size: {self.k.image_size(image)} bytes.", c)
        else:
            self.event("Normal", "Pulled", f'Container image "{image}" already present on machine', c)
        return True

    def _not_started(self, c: Container, reason: str, message: str, start_error: bool = False) -> bool:
        """The container could not be created or started: it waits with ``reason``."""
        if start_error:
            # a failed start is a terminated instance too (kuberuntime: StartError, exit code 128)
            c.last_state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": message,
                                           "startedAt": None, "finishedAt": now_rfc3339(),
                                           "containerID": c.container_id}}
            reason = "StartError" if c.restarts else "RunContainerError"
        c.state = {"waiting": {"reason": reason, "message": message}}
        self.event("Warning", "Failed", f"Error: {message}", c)
        self.push_status()
        return False

    async def _start(self, c: Container) -> bool:
        if not await self._pull(c):
            return False
        runs = not self.stand_in and self.k.runs_processes(self.pod)
        try:
            env = self._env(c)
            argv = self._argv(c, env)
            mounts = container_mounts(c.spec, self.volumes.volumes, env) if runs else []
            if runs:  # in a mount namespace, the shim makes the stand-in image reachable to the user
                needs = [*run_as.image_dirs(), os.path.dirname(self.k.workdir)] \
                    if self.k.isolation == "processes" else []
                self.users[c.name] = run_as.for_process(run_as.resolve(self.pod, c.spec), needs)
        except (ConfigError, pod_resources.QuantityError, OSError) as e:
            return self._not_started(c, "CreateContainerConfigError", str(e))
        except run_as.RunAsError as e:
            return self._not_started(c, e.reason, str(e))
        if runs and argv is None:
            return self._not_started(c, "CreateContainerError",
                                     "failed to create containerd container: no command specified")
        if c.log.ended:
            c.previous_log, c.log = c.log, ContainerLog()
        c.container_id = f"containerd://{secrets.token_hex(32)}"
        c.term_file = self.dir / f"{c.name}.termination-log"
        c.term_file.write_text("")
        c.stopping, c.probe_kill = False, None
        c.stopped.clear()
        self.event("Normal", "Created", f"Created container: {c.name}", c)
        if not runs:
            if not await self._start_stand_in(c):
                return False
        elif not await self._launch(c, argv or [], env, mounts):
            return False
        self._running(c)
        return True

    async def _start_stand_in(self, c: Container) -> bool:
        if not self.stand_in:
            return True  # no process for this pod: Running without anything behind it
        try:
            c.stand_in = await self.k.start_stand_in(self, c)
        except OSError as e:
            return self._not_started(c, "RunContainerError", str(e))
        if self.deleting.is_set():
            await c.stand_in.cleanup()
            c.stand_in = None
            return False
        return True

    def _hosts_file(self, mounts: list[runtime.Mount]) -> str | None:
        """The kubelet-managed ``/etc/hosts`` of the pod (``managedHostsFileContent``,
        pkg/kubelet/kubelet_pods.go): localhost, the pod's own address under its hostname, then its
        ``hostAliases``; None for a host-network pod or a container that mounts its own."""
        spec = self.pod.get("spec") or {}
        if spec.get("hostNetwork") or not self.ip or any(m.target == "/etc/hosts" for m in mounts):
            return None
        path = self.dir / "etc-hosts"
        if not path.exists():
            lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost",
                     "::1\tlocalhost ip6-localhost ip6-loopback", "fe00::0\tip6-localnet",
                     "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters",
                     f"{self.ip}\t{self.name}"]
            aliases = [a for a in spec.get("hostAliases") or () if isinstance(a, dict) and a.get("ip")]
            if aliases:
                lines.append("\n# Entries added by HostAliases.")
                lines += [f"{a['ip']}\t" + "\t".join(str(h) for h in a.get("hostnames") or ()) for a in aliases]
            path.write_text("\n".join(lines) + "\n")
            path.chmod(0o644)
        return str(path)

    def _process_spec(self, c: Container, argv: list[str], env: dict[str, str], mounts: list[runtime.Mount]) -> runtime.ProcessSpec:
        env[TERMINATION_LOG_ENV] = str(c.term_file)
        tm_path = c.spec.get("terminationMessagePath") or "/dev/termination-log"
        cwd = c.spec.get("workingDir") or str(self.dir)
        if self.k.isolation == "processes":
            # no mount namespace: the termination message path in the command line and env means
            # this container's own file (as 0.0.0.0 means the pod's own address)
            argv = [a.replace(tm_path, str(c.term_file)) for a in argv]
            env = {k: (v.replace(tm_path, str(c.term_file)) if k != TERMINATION_LOG_ENV else v)
                   for k, v in env.items()}
            if not os.path.isdir(cwd):
                cwd = str(self.dir)
        else:
            mounts = [*mounts, runtime.Mount(str(c.term_file), tm_path)]
            hosts = self._hosts_file(mounts)
            if hosts is not None:
                mounts.append(runtime.Mount(hosts, "/etc/hosts"))
        return runtime.ProcessSpec(argv, env, cwd, mounts, shared=[self.k.workdir, *runtime.image_paths()],
                              scratch=str(self.dir / "scratch" / c.name), stdin=bool(c.spec.get("stdin")),
                              tty=bool(c.spec.get("tty")), hostname=self.name, private_tmp=True,
                              user=self._user(c))

    def _user(self, c: Container) -> run_as.RunAs | None:
        """The user and groups of the container's processes (None: the agent's own), its files made
        reachable to it."""
        user = self.users.get(c.name)
        if user is not None:
            run_as.prepare([self.k.workdir, self.k.pods_dir], str(self.dir), [str(c.term_file)])
        return user

    async def _launch(self, c: Container, argv: list[str], env: dict[str, str], mounts: list[runtime.Mount]) -> bool:
        spec = self._process_spec(c, argv, env, mounts)
        out = c.log
        try:
            c.process = await runtime.start(spec, mode="run", isolation_mode=self.k.isolation, config_dir=str(self.dir),
                                       on_stdout=lambda d: out.write(STDOUT, d),
                                       on_stderr=lambda d: out.write(STDERR, d))
        except (runtime.StartError, OSError) as e:
            out.close()
            where = "error during container init: " if getattr(e, "stage", "") == "mount" else ""
            words = str(e) if isinstance(e, runtime.StartError) else (e.strerror or str(e))
            return self._not_started(c, "", "failed to create containerd task: failed to create shim task: OCI "
                                     "runtime create failed: runc create failed: unable to start container "
                                     f"process: {where}{words}: unknown", start_error=True)
        self.k.procs.add(c.process)
        if self.deleting.is_set():
            # deleted while it was being created: the termination already passed it by
            c.process.kill()
            await c.process.wait()
            self.k.procs.discard(c.process)
            c.process = None
            out.close()
            return False
        c.env, c.cwd = spec.env, spec.cwd
        return True

    def _running(self, c: Container) -> None:
        c.state = {"running": {"startedAt": now_rfc3339()}}
        c.started_mono = time.monotonic()
        if c.kind == "app" and self.phase == "Pending":
            self.phase = "Running"
        self.event("Normal", "Started", f"Started container {c.name}", c)
        self._start_probes(c)
        self.push_status()

    # -- probes -----------------------------------------------------------------------

    def _start_probes(self, c: Container) -> None:
        cfgs = {}
        if c.kind != "init":
            for kind, key in ((STARTUP, "startupProbe"), (READINESS, "readinessProbe"), (LIVENESS, "livenessProbe")):
                cfg = ProbeConfig.from_spec(c.spec.get(key) or {})
                if cfg is not None:
                    cfgs[kind] = cfg
        c.started = STARTUP not in cfgs
        c.ready = c.kind != "init" and c.started and READINESS not in cfgs
        ports = {p["name"]: int(p["containerPort"]) for p in c.spec.get("ports") or []
                 if p.get("name") and p.get("containerPort")}
        for kind, cfg in cfgs.items():
            c.probes.append(ProbeWorker(
                kind, cfg, started_at=c.started_mono, pod_ip=self.ip or "127.0.0.1", ports=ports,
                exec_fn=lambda argv, timeout, c=c: self._probe_exec(c, argv, timeout),
                on_result=lambda kind, ok, c=c: self._probe_result(c, kind, ok),
                on_failure=lambda kind, out, c=c: self.event("Warning", "Unhealthy", f"{kind} probe failed: {out}", c),
                may_run=lambda kind, c=c: c.running and not c.probe_kill and (c.started != (kind == STARTUP)),
            ).start())

    def _stop_probes(self, c: Container) -> None:
        for p in c.probes:
            p.stop()
        c.probes = []

    def _probe_result(self, c: Container, kind: str, ok: bool) -> None:
        if kind == READINESS:
            c.ready = ok and c.started and c.running
        elif kind == STARTUP and ok:
            c.started = True
            c.ready = not any(p.kind == READINESS for p in c.probes)
        elif not ok:  # liveness or startup failed: the container is killed
            self._tasks.append(asyncio.create_task(self._probe_kill(c, kind)))
            return
        self.push_status()

    async def _probe_kill(self, c: Container, kind: str) -> None:
        policy = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
        restart = c.kind == "sidecar" or policy != "Never"
        c.probe_kill = kind
        self.event("Normal", "Killing", f"Container {c.name} failed {kind.lower()} probe"
                                        + (", will be restarted" if restart else ""), c)
        cfg = next((p.cfg for p in c.probes if p.kind == kind), None)
        grace = cfg.termination_grace if cfg is not None and cfg.termination_grace is not None else None
        await self._stop(c, self.grace() if grace is None else grace, final=False)

    async def _probe_exec(self, c: Container, argv: list[str], timeout: float) -> tuple[int, str]:
        """``ExecSync`` for an exec probe: combined output (10 KiB at most), exit code."""
        if c.process is None:
            return 0, ""  # a stand-in: nothing to exec into
        buf = bytearray()
        p = await self.exec(c.name, argv, tty=False, stdin=False, on_stdout=buf.extend, on_stderr=buf.extend)
        try:
            code = await asyncio.wait_for(asyncio.shield(p.wait()), timeout)
        except asyncio.TimeoutError:
            p.kill()
            raise
        return code, bytes(buf[:10 * 1024]).decode("utf-8", "replace")

    async def _wait(self, c: Container) -> int:
        """Wait for the container to end; record its terminated state; return the exit code."""
        started = (c.state.get("running") or {}).get("startedAt")
        out = c.log
        if c.process is not None:
            p = c.process
            code = await p.wait()
            self.k.procs.discard(p)
            c.process = None
            for e in list(c.execs):
                e.kill()
        else:
            # no process (stand-in or no process for this pod): runs until stopped
            await c.stopped.wait()
            code = 0 if c.stand_in is None and not self.stand_in else 143
        out.close()
        self._stop_probes(c)
        c.last_run = time.monotonic() - c.started_mono
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started, "finishedAt": now_rfc3339(), "containerID": c.container_id}
        msg = self._termination_message(c, code)
        if msg:
            term["message"] = msg
        c.ready = c.kind == "init" and code == 0
        c.started = False
        c.state = {"terminated": term}
        self.push_status()
        return code

    def _termination_message(self, c: Container, code: int) -> str | None:
        text = ""
        if c.term_file and c.term_file.exists():
            text = c.term_file.read_bytes()[:FILE_MESSAGE_BYTES].decode("utf-8", "replace")
        if not text and code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            tail = "\n".join(line.data.decode("utf-8", "replace") for line in list(c.log.lines)[-FALLBACK_LINES:])
            text = tail.encode()[-FALLBACK_BYTES:].decode("utf-8", "ignore")
        return text or None

    # -- environment ------------------------------------------------------------------

    def _env(self, c: Container) -> dict[str, str]:
        base = {
            "PATH": f"{self.k.bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.dir),
            "HOSTNAME": self.name,
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            **self.k.service_env,
        }
        env = container_env(self.pod, c.spec, base=base, lookup=self.k.lookup_for(self.ns), pod_ip=self.ip,
                                   host_ip=node_ip(self.k.node_objs.get(self.node)),
                                   node_allocatable=self.k.allocatable(self.node))
        env.update(kubelet_env.merge_env(
            dev.device_env(self.per_container.get(c.name, {}), self.k.ledger.node_devices(self.node)),
            kubelet_env.container_env(self.k.store, self.pod, c.spec)))
        if self.ip:
            env = {k: v.replace("0.0.0.0", self.ip) for k, v in env.items()}
        if "KUBECONFIG" not in env:
            env.update(self._service_account_env(c))
        return env

    def _argv(self, c: Container, env: dict[str, str]) -> list[str] | None:
        """``command`` (the image's ENTRYPOINT) + ``args`` (its CMD), ``$(VAR)`` expanded.  There are
        no images: with no command, args is run as the command (the entrypoint execs its arguments,
        as the Jupyter docker-stacks' ``tini -g --`` does)."""
        argv = [expand(str(x), env) for x in (c.spec.get("command") or []) + (c.spec.get("args") or [])]
        if not argv:
            return None
        if self.ip:
            argv = [a.replace("0.0.0.0", self.ip) for a in argv]
        return argv

    # -- exec and attach --------------------------------------------------------------

    async def exec(self, name: str, argv: list[str], *, tty: bool, stdin: bool,
                   on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]) -> runtime.Process:
        """Run ``argv`` in the running container ``name`` (its namespaces, root, env, working dir).
        Raises ``ExecError`` when it is not running, ``runtime.StartError`` when it cannot start."""
        c = self.container(name)
        if c is None or not c.running:
            raise ExecError(f'container not found ("{name}")')
        if c.process is None:
            raise ExecError(f'container "{name}" has no process here (the simulated kubelet runs a stand-in): '
                            "there is nothing to exec into")
        spec = runtime.ProcessSpec(argv, dict(c.env), c.cwd, stdin=stdin, tty=tty, user=self.users.get(name))
        p = await runtime.start(spec, mode="exec", isolation_mode=self.k.isolation, config_dir=str(self.dir),
                           on_stdout=on_stdout, on_stderr=on_stderr, target=c.process.init_pid)
        c.execs.add(p)
        self.k.procs.add(p)
        asyncio.ensure_future(p.proc.wait()).add_done_callback(
            lambda _f: (c.execs.discard(p), self.k.procs.discard(p)))
        return p

    # -- stopping ---------------------------------------------------------------------

    async def _stop(self, c: Container, grace: float, final: bool = True) -> None:
        """SIGTERM to the main process, the whole container killed after ``grace`` seconds."""
        if final:
            c.stopping = True
        c.stopped.set()
        self._stop_probes(c)
        if c.stand_in is not None:
            with contextlib.suppress(Exception):
                await c.stand_in.cleanup()
            c.stand_in = None
        p = c.process
        if p is None or p.proc.returncode is not None:
            return
        p.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(p.proc.wait()), grace)
        except asyncio.TimeoutError:
            p.kill()
            try:
                await asyncio.wait_for(asyncio.shield(p.proc.wait()), 10)
            except asyncio.TimeoutError:
                p.proc.kill()

    async def _kill_all(self, grace: float) -> None:
        running = [c for c in self.containers if c.process is not None or c.stand_in is not None or c.running]
        for c in running:
            if c.running:
                self.event("Normal", "Killing", f"Stopping container {c.name}", c)
        # apps first, then sidecars in reverse order (KEP-753)
        await asyncio.gather(*(self._stop(c, grace) for c in running if c.kind == "app"))
        for c in reversed([c for c in running if c.kind != "app"]):
            await self._stop(c, grace)
        for c in running:
            for e in list(c.execs):
                e.kill()
            if c.process is not None:
                p, c.process = c.process, None
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(p.wait(), 10)
                self.k.procs.discard(p)
            c.log.close()
            if c.running:
                c.ready = c.started = False
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
        self._cancel_tasks()
        await self._kill_all(self.grace())
        await self._finalize()

    def _cancel_tasks(self) -> None:
        for t in self._tasks:
            t.cancel()
        for c in self.containers:
            self._stop_probes(c)

    async def _finalize(self) -> None:
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
        self._cancel_tasks()
        self._release()
        shutil.rmtree(self.dir, ignore_errors=True)
        if self.k.workers.get(self.key) is self:
            del self.k.workers[self.key]


def _duration(seconds: float) -> str:
    """Go's ``time.Duration`` text for whole seconds: ``10s``, ``1m20s``, ``5m0s``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s" if s == seconds else f"{seconds:g}s"
    m, s = divmod(s, 60)
    return f"{m}m{s}s" if m < 60 else f"{m // 60}h{m % 60}m{s}s"
