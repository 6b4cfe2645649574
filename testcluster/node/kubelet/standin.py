"""The stand-in: HTTP answers on a pod's IP and container ports instead of running its command.
Design notes: docs/simulated-nodes.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["start_stand_in"]


async def start_stand_in(pod_name: str, ip: str, container: dict[str, Any], log: Any) -> Any:
    """An aiohttp runner answering ``200 {"stand_in": true, ...}`` on each ``containerPort``."""
    from aiohttp import web

    name = container.get("name", "")

    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"stand_in": True, "pod": pod_name, "container": name, "path": request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ports = [p.get("containerPort") for p in container.get("ports") or [] if p.get("containerPort")]
    try:
        for port in ports:
            await web.TCPSite(runner, ip, int(port)).start()
    except Exception:
        await runner.cleanup()
        raise
    log.write("stdout", f"stand-in answering on {', '.join(f'{ip}:{p}' for p in ports) or 'no port'}\n".encode())
    return runner
