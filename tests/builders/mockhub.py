"""A JupyterHub MockHub made by pytest-jupyterhub's ``configured_mockhub_instance``, initialized (database,
users, tokens, the tornado application) but not started (no proxy), and served on a loopback port."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets


@dataclass
class ServedHub:
    app: Any  # the MockHub
    server: HTTPServer
    api: str  # the base URL of the hub's REST API (ends in /hub/api/)
    token: str  # an API token of the plain user "user"
    closed: bool = False

    @property
    def hub_url(self) -> str:
        """The base URL of the hub's pages (ends in /hub/)."""
        return self.api[: -len("api/")]

    async def close(self) -> None:
        """Stop serving, forget the process's shared capacity cache, close the database (once)."""
        from jupyterhub.tests.mocking import MockHub

        from gpuspawner.capacity.cache import CapacityCache

        if self.closed:
            return
        self.closed = True
        self.server.stop()
        await CapacityCache.reset_shared()
        self.app.db.close()
        MockHub.clear_instance()


async def serve(make: Callable[[Any], Any], c: Any) -> ServedHub:
    """``make`` (pytest-jupyterhub's factory) builds the MockHub of config ``c``; GPUSpawner is its spawner
    ("gpu" resolves through the installed entry point, which the test tree may not have)."""
    from gpuspawner.hub.spawner import GPUSpawner

    c.JupyterHub.spawner_class = GPUSpawner
    app = make(c)
    await app.initialize([])
    token = app.users["user"].new_api_token()
    sockets = bind_sockets(0, "127.0.0.1")
    server = HTTPServer(app.tornado_application)
    server.add_sockets(sockets)
    return ServedHub(app, server, f"http://127.0.0.1:{sockets[0].getsockname()[1]}{app.hub_prefix}api/", token)
