"""Waiting, inside ``start``, until a server whose pod runs accepts connections
(``gpu_listen_check_interval``), and JupyterHub's own wait cut to what is left of ``http_timeout``."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any
from urllib.parse import urlsplit

from traitlets import Float, TraitError, validate
from traitlets.config import Configurable

#: seconds of ``start_timeout`` the wait leaves, so that JupyterHub takes the server before it gives up
START_MARGIN = 2.0
#: the longest one connection attempt may take
CONNECT_TIMEOUT = 1.0
#: the least JupyterHub's own wait gets after this one gave up (it tries once at least)
LEAST_HTTP_TIMEOUT = 1
_clock = time.monotonic


class ListenWaitSettings(Configurable):
    """How often ``start`` checks that the server it started accepts connections."""

    gpu_listen_check_interval = Float(
        0.1,
        config=True,
        help="""
        Seconds between GPUSpawner's checks, once a server's pod runs, that the server accepts
        connections at its address; ``start`` returns as soon as it does. JupyterHub checks the
        server only after ``start`` returns, and between tries it waits a random time whose bound
        doubles each try, up to 5 s (``exponential_backoff`` in ``jupyterhub/utils.py``): a server
        that listens 3 s after its container starts (JupyterLab's imports) is found up to seconds
        later. A check is a TCP connection, no request; this wait and JupyterHub's together last at
        most ``http_timeout``, and the wait leaves JupyterHub time before ``start_timeout``. 0 leaves
        the wait to JupyterHub alone.

            c.GPUSpawner.gpu_listen_check_interval = 0.25
        """,
    )

    @validate("gpu_listen_check_interval")
    def _validate_listen_check_interval(self, proposal):
        value = proposal.value
        if not (value == 0 or 0.01 <= value <= 5):  # NaN fails both
            raise TraitError(f"c.GPUSpawner.gpu_listen_check_interval: {value!r} must be 0 (JupyterHub's own "
                             "wait only) or seconds from 0.01 to 5")
        return value


def address(url: Any) -> tuple[str, int] | None:
    """The host and port of a started server: KubeSpawner's ``_start`` returns ``http://<pod IP>:<port>``
    (an ``(ip, port)`` pair from an older spawner); None for anything else."""
    if isinstance(url, tuple):
        if len(url) == 2 and isinstance(url[0], str) and isinstance(url[1], int):
            return url[0], url[1]
        return None
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # a port that is no number
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def budget(http_timeout: float, start_timeout: float, elapsed: float) -> float:
    """Seconds the check may last: ``http_timeout``, and never into the last ``START_MARGIN`` seconds
    of ``start_timeout`` (``elapsed`` of it gone), when JupyterHub would cancel ``start``."""
    left = min(http_timeout, start_timeout - elapsed - START_MARGIN)
    return left if left > 0 and math.isfinite(left) else 0.0


async def accepts(host: str, port: int, timeout: float = CONNECT_TIMEOUT) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` seconds (closed at once)."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def until_listening(where: tuple[str, int], interval: float, seconds: float) -> bool:
    """Whether ``where`` accepted a connection within ``seconds``, tried every ``interval`` seconds."""
    deadline = _clock() + seconds
    while True:
        left = deadline - _clock()
        if left <= 0:
            return False
        if await accepts(*where, timeout=min(CONNECT_TIMEOUT, left)):
            return True
        left = deadline - _clock()
        if left <= 0:
            return False
        await asyncio.sleep(min(interval, left))


def reset(spawner: Any) -> None:
    """A new spawn: the admin's ``http_timeout`` again (a wait that gave up cut it for one spawn)."""
    if spawner._admin_http_timeout is None:
        spawner._admin_http_timeout = spawner.http_timeout
    spawner.http_timeout = spawner._admin_http_timeout


async def wait(spawner: Any, url: Any, elapsed: float) -> None:
    """Once ``spawner``'s pod runs (``elapsed`` seconds into ``start``), until its server at ``url``
    accepts connections. If it does not in time, JupyterHub's own wait, which follows, gets what is
    left of ``http_timeout``: the server has the admin's time, not twice it."""
    interval = spawner.gpu_listen_check_interval
    where = address(url)
    seconds = budget(spawner.http_timeout, spawner.start_timeout, elapsed)
    if interval <= 0 or where is None or seconds <= 0:
        return
    began = _clock()
    if await until_listening(where, interval, seconds):
        return
    spent = _clock() - began
    # JupyterHub's http_timeout is an Integer trait
    spawner.http_timeout = max(LEAST_HTTP_TIMEOUT, math.ceil(spawner.http_timeout - spent))
    spawner.log.info("%s's server did not accept connections at %s:%d within %.0f s of its pod running; "
                     "JupyterHub waits %.0f s more", spawner._log_name, where[0], where[1], spent,
                     spawner.http_timeout)
