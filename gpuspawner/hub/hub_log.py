"""gpuspawner's loggers (``gpuspawner.*``: the capacity cache, the reaper) written through the
hub's logger: its format (time, level), its level (INFO kept), its handlers and filters."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["adopt"]

PACKAGE = "gpuspawner"


class _ThroughHub(logging.Handler):
    """Hands each record of gpuspawner's loggers to the hub's logger, as if logged there."""

    def __init__(self, hub: logging.Logger) -> None:
        super().__init__()
        self.hub = hub

    def emit(self, record: logging.LogRecord) -> None:
        self.hub.handle(record)


def adopt(hub_log: Any) -> bool:
    """Route ``gpuspawner.*`` records through ``hub_log`` (a Logger or a LoggerAdapter: a spawner's
    or a handler's ``log``), once per process. Left alone when the package's logger has handlers
    already (an admin's ``logging`` configuration wins) or the hub's logger has none to write to.
    True when routed by this call."""
    hub = getattr(hub_log, "logger", hub_log)
    package = logging.getLogger(PACKAGE)
    if not isinstance(hub, logging.Logger) or hub.name.startswith(PACKAGE) or package.handlers:
        return False
    if not any(not isinstance(h, logging.NullHandler) for h in hub.handlers):
        return False  # not an application's logger (JupyterHub's has its own handler): left alone
    package.addHandler(_ThroughHub(hub))
    package.setLevel(hub.getEffectiveLevel())
    package.propagate = False  # the hub writes them once; the root logger would write them again
    return True
