"""The simulated ``dcgm-exporter``: the process each exporter pod runs.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("dcgm-exporter")

# (field, Prometheus type, HELP, integer?) in the order of default-counters.csv
FIELDS = (
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", True),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", True),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", True),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", False),
)


def _escape(value: Any) -> str:
    # the text format's label value escapes: backslash, double quote, line feed
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: list[tuple[str, Any]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _pod_attributes(holders: list[Mapping[str, Any]], kubernetes: bool, virtual_gpus: bool,
                    shared: bool) -> list[list[tuple[str, Any]]]:
    """One attribute list per series of the entity: no pod, the last holder, or every holder."""
    if not kubernetes or not holders:
        return [[]]
    chosen = list(enumerate(holders)) if virtual_gpus else [(len(holders) - 1, holders[-1])]
    out = []
    for n, h in chosen:
        attrs = [("container", h.get("container", "")), ("namespace", h.get("namespace", "")),
                 ("pod", h.get("pod", ""))]
        if virtual_gpus and shared:
            attrs.append(("vgpu", str(n)))
        out.append(attrs)
    return out


def _entities(report: Mapping[str, Any]):
    """(base labels, fields, holders, shared) per watched entity: a GPU, or each GPU instance of a MIG GPU."""
    for g in report.get("gpus") or []:
        base = [("gpu", g["index"]), ("UUID", g["uuid"]), ("pci_bus_id", g.get("pciBusId", "")),
                ("device", g["device"]), ("modelName", g["modelName"])]
        if g.get("instances"):
            for gi in g["instances"]:
                yield (base + [("GPU_I_PROFILE", gi["profile"]), ("GPU_I_ID", gi["gpuInstanceId"])],
                       gi.get("fields") or {}, gi.get("holders") or [], False)
        else:
            holders = g.get("holders") or []
            yield base, g.get("fields") or {}, holders, len(holders) > 1


def render(report: Mapping[str, Any], hostname: str, *, kubernetes: bool = True,
           virtual_gpus: bool = False) -> str:
    """The exporter's ``/metrics`` text for one host engine answer.  Pure."""
    driver = report.get("driverVersion") or ""
    entities = list(_entities(report))
    lines: list[str] = []
    for field, kind, help_text, integer in FIELDS:
        series = []
        for base, fields, holders, shared in entities:
            if field not in fields:
                continue
            value = fields[field]
            text = f"{int(value)}" if integer else f"{float(value):f}"
            for attrs in _pod_attributes(holders, kubernetes, virtual_gpus, shared):
                pairs = base + [("Hostname", hostname), ("DCGM_FI_DRIVER_VERSION", driver)] + attrs
                series.append(f"{field}{_labels(pairs)} {text}")
        if series:
            lines += [f"# HELP {field} {help_text}", f"# TYPE {field} {kind}", *series]
    return "\n".join(lines) + "\n" if lines else ""


def _split_hostport(value: str, default_host: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or default_host
    return host, int(port)


class Exporter:
    """Collects from the host engine every interval; serves the last rendering."""

    def __init__(self, env: Mapping[str, str]):
        self.node = env.get("NODE_NAME", "")
        self.listen = _split_hostport(env.get("DCGM_EXPORTER_LISTEN") or ":9400", "0.0.0.0")
        self.interval = int(env.get("DCGM_EXPORTER_INTERVAL") or 30000) / 1000.0
        self.engine = env.get("DCGM_REMOTE_HOSTENGINE_INFO") or "localhost:5555"
        self.kubernetes = (env.get("DCGM_EXPORTER_KUBERNETES") or "").lower() == "true"
        self.virtual_gpus = (env.get("KUBERNETES_VIRTUAL_GPUS") or "").lower() == "true"
        self.text = ""
        self.fresh_at = 0.0

    def fresh(self) -> bool:
        return time.monotonic() - self.fresh_at <= 3 * self.interval

    async def collect(self, session) -> None:
        import aiohttp

        url = f"http://{self.engine}/v1/nodes/{self.node}/devices"
        try:
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=max(self.interval, 2))) as r:
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {(await r.text())[:200]}")
                report = await r.json()
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError, ValueError) as e:
            log.warning("cannot read DCGM at %s: %s", self.engine, e or type(e).__name__)
            return
        self.text = render(report, self.node, kubernetes=self.kubernetes, virtual_gpus=self.virtual_gpus)
        self.fresh_at = time.monotonic()

    async def run(self, stop: asyncio.Event) -> None:
        import aiohttp
        from aiohttp import web

        async def metrics(_request: web.Request) -> web.Response:
            if not self.fresh():
                return web.Response(status=503, text=f"no answer from DCGM at {self.engine}\n")
            return web.Response(text=self.text, content_type="text/plain", charset="utf-8",
                                headers={"X-Content-Type-Options": "nosniff"})

        async def health(_request: web.Request) -> web.Response:
            return web.Response(status=200 if self.fresh() else 503, text="OK" if self.fresh() else "KO")
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/health", health)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        async with aiohttp.ClientSession() as session:
            await self.collect(session)
            await web.TCPSite(runner, *self.listen).start()
            log.info("Starting webserver on %s:%d for node %s", *self.listen, self.node)
            try:
                while not stop.is_set():
                    try:
                        await asyncio.wait_for(stop.wait(), self.interval)
                    except asyncio.TimeoutError:
                        await self.collect(session)
            finally:
                await runner.cleanup()


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    if not env.get("NODE_NAME"):
        log.error("NODE_NAME is not set: give the exporter its node (fieldRef spec.nodeName)")
        return 1
    try:
        exporter = Exporter(env)
    except ValueError as e:
        log.error("bad DCGM_EXPORTER_LISTEN or DCGM_EXPORTER_INTERVAL: %s", e)
        return 1

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await exporter.run(stop)
    try:
        asyncio.run(serve())
    except OSError as e:
        log.error("cannot listen on %s:%d: %s", *exporter.listen, e.strerror or e)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - the pod's command
    sys.exit(main())
