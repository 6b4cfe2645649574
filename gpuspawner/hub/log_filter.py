"""Keep JupyterHub's own log lines about a refused spawn out of the hub's log."""

from __future__ import annotations

import logging
from collections import OrderedDict

from gpuspawner.hub.errors import Refusal

__all__ = ["RefusalLogFilter", "install", "install_for_hub", "expect"]

_MAX_EXPECTED = 512  # announced lines kept; the oldest go first (a line never logged)
_BAD_JSON = "Couldn't parse JSON"  # jupyterhub/apihandlers/base.py get_json_body
_TORNADO_LINE = "%d %s: %s"  # tornado 6.6's RequestHandler.log_exception for an HTTPError
_TORNADO_KEY = "\0tornado\0"  # announced messages of that line are kept under this prefix


def _one_info_line(record: logging.LogRecord, text: str) -> None:
    record.msg, record.args = "%s", (text[:300],)
    record.exc_info = record.exc_text = None
    record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)


class RefusalLogFilter(logging.Filter):
    """Drops JupyterHub's repeats of a refusal the spawner already logged."""

    def __init__(self) -> None:
        super().__init__()
        # formatted lines, and unformatted ones (``record.msg``, as tornado logs an HTTPError)
        self._expected: OrderedDict[str, None] = OrderedDict()

    def expect(self, *lines: str) -> None:
        for line in lines:
            self._expected[line] = None
            self._expected.move_to_end(line)
        while len(self._expected) > _MAX_EXPECTED:
            self._expected.popitem(last=False)

    def _take(self, line: object) -> bool:
        if isinstance(line, str) and line in self._expected:
            del self._expected[line]
            return True
        return False

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, Refusal):
            return False
        if record.msg == _BAD_JSON and isinstance(exc, (ValueError, RecursionError)):
            _one_info_line(record, f"{_BAD_JSON} in a request body: {exc}")
            return True
        if not self._expected or record.levelno < logging.WARNING:
            return True
        if record.args and self._take(record.msg):
            return False
        args = record.args
        if record.msg == _TORNADO_LINE and isinstance(args, tuple) and len(args) == 3:
            if isinstance(args[2], str) and self._take(_TORNADO_KEY + args[2]):
                return False
        try:
            line = record.getMessage()
        except Exception:  # a record that cannot be formatted is not ours to judge
            return True
        return not self._take(line)


_filter = RefusalLogFilter()


def install(logger: logging.Logger) -> RefusalLogFilter:
    """Attach the process's filter to ``logger`` (JupyterHub's application logger); idempotent."""
    if _filter not in logger.filters:
        logger.addFilter(_filter)
    return _filter


def install_for_hub() -> None:
    """Attach the filter to the loggers a JupyterHub process writes spawn failures to: its
    application's (``JupyterHub``) and tornado's (JupyterHub renames them, the objects stay).
    Called by the config snippet, so it holds from the first request on."""
    from tornado.log import app_log, gen_log

    for logger in (logging.getLogger("JupyterHub"), app_log, gen_log):
        install(logger)


def expect(user: str, server: str, log_name: str, error: Refusal) -> None:
    """Announce the lines JupyterHub 6.1 (and tornado) write for ``error``, about to be raised
    from a spawn of ``user``'s server ``server`` (``log_name``: the spawner's ``_log_name``)."""
    _filter.expect(
        f"Not starting {user}'s server {server}: {error}",
        f"Error starting {user}'s server: {error}",
        f"Error starting server {log_name}: {error}",
        "%d %s: " + error.log_message,  # tornado/web.py RequestHandler.log_exception, unformatted
        _TORNADO_KEY + (error.get_message() or ""),  # the same, as tornado 6.6 logs it
    )
