"""The spawn and server-options endpoints, with their request bodies checked before JupyterHub
reads or saves them: a size limit applied before the body is read (413), and the option rules
(``spawn.option_sources``, ``GPUSpawner.check_options_to_save``) before the options are stored."""

from __future__ import annotations

import inspect
import json
import logging
from typing import Any

from jupyterhub import apihandlers, handlers
from jupyterhub.apihandlers.users import UserServerAPIHandler
from jupyterhub.handlers.pages import SpawnHandler
from jupyterhub.scopes import needs_scope
from tornado import httputil, web

from gpuspawner.hub.errors import http_error
from gpuspawner.spawn.options import OptionError
from gpuspawner.spawn.option_sources import check_patch_body, server_body_options

__all__ = ["MAX_BODY_BYTES", "GuardedServerAPIHandler", "GuardedSpawnHandler", "install_for_hub"]

#: the most bytes a spawn or server-options request body may have.  User options are at most
#: ``options.MAX_OPTIONS_BYTES`` (8 KiB) of JSON; a form post carries every profile's fields of
#: the page in multipart parts of ~150 bytes each, so this leaves room for ~400 fields
MAX_BODY_BYTES = 64 * 1024

_log = logging.getLogger("JupyterHub")


class BodyLimit:
    """For a ``@web.stream_request_body`` handler: a body over ``MAX_BODY_BYTES`` is refused with
    413 and a JSON message, and never held in the hub's memory, parsed or stored.  Its size is
    known from ``Content-Length`` before a byte is read (a chunked body's once it passes the
    limit); from then on what arrives is dropped as it comes, 64 KiB at a time.  The answer
    follows the body's end, so that a proxy in front (configurable-http-proxy) still writing the
    body reads it instead of a reset connection; a client that asked ``Expect: 100-continue``
    gets it at once and never sends the body.  Tornado's own limit (``max_body_size``, 100 MiB)
    still ends a longer body with a bare 400.  A body within the limit is handed to the
    handler's methods as tornado would (``request.body``, the form's arguments): the methods in
    ``DRAINED`` call :meth:`take_body` first; any other method is refused at once."""

    max_body_bytes = MAX_BODY_BYTES
    DRAINED: frozenset[str] = frozenset()
    _chunks: list[bytes]
    _size = 0
    _too_big: str | None = None  # the refusal's message, once the body is known to be too big

    async def prepare(self) -> None:
        self._chunks, self._size, self._too_big = [], 0, None
        length = self.request.headers.get("Content-Length")
        if length is not None:
            if not length.strip().isdigit():
                self._refuse_body(400, f"Content-Length {length[:20]!r} is not a number of bytes")
                return
            if int(length) > self.max_body_bytes:
                self._too_big = self._message(int(length))
                if (self.request.method not in self.DRAINED
                        or self.request.headers.get("Expect", "").lower() == "100-continue"):
                    self._refuse_body(413, self._too_big)
                return  # refused without authentication: nothing of the body is read but to drop it
        result = super().prepare()  # JupyterHub's: authentication, XSRF
        if inspect.isawaitable(result):
            await result

    def data_received(self, chunk: bytes) -> None:
        if self._finished or self._too_big is not None:
            return
        self._size += len(chunk)
        if self._size > self.max_body_bytes:
            self._chunks = []
            self._too_big = self._message(None)
            if self.request.method not in self.DRAINED:
                self._refuse_body(413, self._too_big)
            return
        self._chunks.append(chunk)

    def _message(self, size: int | None) -> str:
        told = f"{size:,} bytes" if size is not None else "more"
        return (f"the request body may be at most {self.max_body_bytes:,} bytes; this one is {told}. "
                'Send only the options, e.g. {"profile": "gpu", "gpu_pool": "<pool id>", "gpus": 1}')

    def _refuse_body(self, status: int, message: str) -> None:
        _log.info("Refused the body of %s %s (%d): %s", self.request.method, self.request.path, status, message)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Connection", "close")
        self.finish(json.dumps({"status": status, "message": message}))

    def take_body(self) -> bool:
        """Hand the body over (as tornado does for a handler that does not stream); True when
        the request is answered (refused) and the method has nothing more to do."""
        if self._too_big is not None and not self._finished:
            self._refuse_body(413, self._too_big)
        if self._finished:
            return True
        body = b"".join(self._chunks)
        self._chunks = []
        self.request.body = body
        if body:
            request = self.request
            httputil.parse_body_arguments(request.headers.get("Content-Type", ""), body,
                                          request.body_arguments, request.files, request.headers)
            for key, values in request.body_arguments.items():
                request.arguments.setdefault(key, []).extend(values)
        return False


def _refusal(error: OptionError) -> web.HTTPError:
    # the log line tornado writes for it is the refusal's one line (names in it are escaped)
    return http_error(error.status, str(error))


@web.stream_request_body
class GuardedServerAPIHandler(BodyLimit, UserServerAPIHandler):
    """``/hub/api/users/{name}/server`` and ``/servers/{server}``: JupyterHub's handler behind the
    size limit; a body that mixes JupyterHub's two request shapes is refused (JupyterHub would
    drop the options), and options to be saved (``POST``, ``PUT``, ``PATCH``) are checked first."""

    _parsed: Any = None
    _parsed_from: bytes | None = None

    def get_json_body(self) -> Any:
        # parsed once per body: the shape check and JupyterHub's handler both read it
        if self._parsed_from is not self.request.body:
            self._parsed, self._parsed_from = super().get_json_body(), self.request.body
        return self._parsed

    def _body_options(self) -> Any:
        try:
            return server_body_options(self.get_json_body())
        except OptionError as e:
            raise _refusal(e) from None

    async def _check(self, user_name: str, server_name: str, options: Any, *, spawn: bool) -> None:
        """The owner's spawner's option rules (``GPUSpawner.check_options_to_save``), for a server
        that is not running or starting (those are JupyterHub's to answer)."""
        if not isinstance(options, dict):
            return  # none (the saved ones are used, and checked at the start), or JupyterHub's 400
        user = self.find_user(user_name)
        if user is None:
            return
        if server_name in user.orm_spawners:
            spawner = user.get_spawner(server_name)
            if spawner.active:
                return
        else:
            spawner = user.spawner  # a server not made yet: its owner's rules are the same
        check = getattr(spawner, "check_options_to_save", None)
        if check is not None:
            await check(options, spawn=spawn)

    DRAINED = frozenset({"POST", "PUT", "PATCH"})

    # each method hands the body over, then runs under JupyterHub's scope check (which needs the
    # authentication a refused body never got)
    async def post(self, user_name, server_name=""):
        if not self.take_body():
            await self._post(user_name, server_name)

    async def put(self, user_name, server_name=""):
        if not self.take_body():
            await self._put(user_name, server_name)

    async def patch(self, user_name, server_name=""):
        if not self.take_body():
            await self._patch(user_name, server_name)

    async def delete(self, user_name, server_name=""):
        if not self.take_body():
            await super().delete(user_name, server_name)

    @needs_scope("start:servers")
    async def _post(self, user_name, server_name=""):
        await self._check(user_name, server_name, self._body_options(), spawn=True)
        await super().post(user_name, server_name)

    @needs_scope("start:servers")
    async def _put(self, user_name, server_name=""):
        if not hasattr(UserServerAPIHandler, "put"):  # JupyterHub 5: no PUT of a server
            raise web.HTTPError(405)
        await self._check(user_name, server_name, self._body_options(), spawn=False)
        await super().put(user_name, server_name)

    @needs_scope("start:servers")
    async def _patch(self, user_name, server_name=""):
        if not hasattr(UserServerAPIHandler, "patch"):  # JupyterHub 5: no PATCH of a server
            raise web.HTTPError(405)
        body = self.get_json_body()
        try:
            check_patch_body(body)
        except OptionError as e:
            raise _refusal(e) from None
        if "user_options" in body:
            await self._check(user_name, server_name, body["user_options"], spawn=False)
        await super().patch(user_name, server_name)


@web.stream_request_body
class GuardedSpawnHandler(BodyLimit, SpawnHandler):
    """``/hub/spawn[/{user}[/{server}]]``: JupyterHub's spawn page behind the size limit (a form
    post's fields are read by ``GPUSpawner._options_from_form``).  The form carries its XSRF token
    in the action's query, as JupyterHub's page writes it, or in the ``X-XSRFToken`` header:
    the check runs before the body is read."""

    DRAINED = frozenset({"POST"})

    def post(self, *args, **kwargs):
        if self.take_body():
            return None
        return super().post(*args, **kwargs)


_GUARDED = ((apihandlers, UserServerAPIHandler, GuardedServerAPIHandler),
            (handlers, SpawnHandler, GuardedSpawnHandler))


def install_for_hub() -> None:
    """Serve the spawn and server endpoints with the guarded handlers: JupyterHub's own routes
    come before ``extra_handlers`` (jupyterhub/app.py ``init_handlers``), so their handler
    classes are swapped in JupyterHub's route lists, which it reads when it starts serving.
    Called by the config snippet; idempotent."""
    for module, original, guarded in _GUARDED:
        routes = module.default_handlers
        swapped = 0
        for i, route in enumerate(routes):
            if len(route) > 1 and route[1] is original:
                routes[i] = (route[0], guarded, *route[2:])
                swapped += 1
            elif len(route) > 1 and route[1] is guarded:
                swapped += 1
        if not swapped:
            _log.warning("gpuspawner: no route of %s found in JupyterHub's handlers; request bodies there "
                         "are not size-limited", original.__name__)
