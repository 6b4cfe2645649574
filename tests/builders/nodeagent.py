"""Cluster files and pods for the node agent's tests, and waiting on the API server's objects."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import yaml

from testcluster.nodeagent.client import KNOWN, ApiError, Client

# a server that answers GET / with the value of the environment variable named in the path
ENV_SERVER = (
    "import http.server, os, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = os.environ.get(self.path.strip('/'), '').encode()\n"
    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
    "    def log_message(self, *a): pass\n"
    "http.server.HTTPServer((sys.argv[1], int(sys.argv[2])), H).serve_forever()\n"
)
PORT = 8888
TOLERATE_ALL = [{"operator": "Exists"}]


def write_cluster(path: Path, objects: list[dict]) -> Path:
    """A cluster file (a ``kind: List``) of ``objects``."""
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}, sort_keys=False))
    return path


def env_server_pod(name: str, namespace: str = "default", *, marker: str = "", limits: dict | None = None,
                   **spec: Any) -> dict:
    """A pod whose process serves its environment on port ``PORT`` of its pod IP."""
    c: dict[str, Any] = {"name": "main", "image": "python:3.12",
                         "command": [sys.executable, "-c", ENV_SERVER, "$(POD_IP)", str(PORT)],
                         "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                                 {"name": "SIM_TEST_MARKER", "value": marker}]}
    if limits:
        c["resources"] = {"limits": limits}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [c], "tolerations": TOLERATE_ALL, "terminationGracePeriodSeconds": 2, **spec}}


async def wait_for(fn: Callable[[], Awaitable[Any]], what: str, timeout: float = 30.0, every: float = 0.2) -> Any:
    """Call ``fn`` until it returns something truthy (returned); a 404 counts as not yet."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while True:
        try:
            last = await fn()
        except ApiError as e:
            if e.code != 404:
                raise
            last = None
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(every)


async def pod_where(client: Client, name: str, ok: Callable[[dict], bool], what: str, namespace: str = "default",
                    timeout: float = 30.0) -> dict:
    async def get() -> dict | None:
        p = await client.get(KNOWN["Pod"], name, namespace=namespace)
        return p if ok(p) else None
    return await wait_for(get, f"pod {namespace}/{name} {what}", timeout)


def running_with_ip(pod: dict) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and bool(st.get("podIP")) and all(
        c.get("ready") for c in st.get("containerStatuses") or [{}])


class LoopStalls:
    """``async with LoopStalls() as s: ...``; ``s.worst``: the longest time this process kept the
    event loop from running, in seconds.  A gap between two ticks counts for the CPU time the
    process used in it (this thread's work, or another thread holding the GIL), not for the time
    the machine gave the process no CPU (a shared test machine)."""

    TICK = 0.005

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wall, cpu = loop.time(), time.process_time()
            await asyncio.sleep(self.TICK)
            gap = min(loop.time() - wall, time.process_time() - cpu)
            self.worst = max(self.worst, gap - self.TICK)

    async def __aenter__(self) -> "LoopStalls":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()


@contextlib.asynccontextmanager
async def loaded(kubeconfig: Any, cluster_file: Path, **agent: Any) -> AsyncIterator[Any]:
    """A cluster file on a (shared) control plane through the node agent (``run_pods=False`` unless
    given); afterwards every object of the file is deleted again and gone (pods first, nodes and
    namespaces last), so that the next file may reuse its names."""
    from testcluster.nodeagent import NodeAgent

    agent.setdefault("run_pods", False)
    try:
        async with NodeAgent(kubeconfig, cluster_file, **agent) as a:
            yield a
    finally:
        await remove_file_objects(kubeconfig, cluster_file)


async def remove_file_objects(kubeconfig: Any, cluster_file: Path) -> None:
    """Delete every object of a cluster file from a (shared) control plane and wait until it is
    gone (pods first, nodes and namespaces last), so that the next file may reuse its names."""
    from testcluster.node import loader

    m = loader.load_file(cluster_file)
    client = await Client(kubeconfig).open()
    try:
        objects = []
        for obj in m.pods + [o for _, o in m.others] + m.nodes + m.namespaces:
            kind = loader.KINDS[obj["kind"]]
            objects.append((kind.plural, obj, await client.resource(kind.api_version, obj["kind"])))
        for plural, obj, res in objects:
            ns = obj["metadata"].get("namespace") if res.namespaced else None
            try:
                await client.delete(res, obj["metadata"]["name"], namespace=ns,
                                    options={"gracePeriodSeconds": 0} if plural == "pods" else None)
            except ApiError as e:
                if e.code != 404:
                    raise
        for plural, obj, res in objects:
            ns = obj["metadata"].get("namespace") if res.namespaced else None

            async def gone(res=res, name=obj["metadata"]["name"], ns=ns) -> bool:
                try:
                    await client.get(res, name, namespace=ns)
                except ApiError as e:
                    if e.code == 404:
                        return True
                    raise
                return False

            try:
                # the namespace controller empties a namespace, then removes it
                await wait_for(gone, f"{plural} {obj['metadata']['name']} to go", timeout=90)
            except AssertionError as e:
                try:
                    left = await client.get(res, obj["metadata"]["name"], namespace=ns)
                except ApiError as got:
                    left = got
                raise AssertionError(f"{e}; it is still there: {left.get('status') if isinstance(left, dict) else left}"
                                     ) from None
    finally:
        await client.close()
