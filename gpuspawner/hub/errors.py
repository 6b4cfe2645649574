"""The errors a GPU spawn ends with, worded the same everywhere a user reads them."""

from __future__ import annotations

from tornado import web

from gpuspawner.spawn.progress import Translation

try:
    # JupyterHub 6+: a refusal JupyterHub logs without a traceback, with a
    # reason label in its spawn metrics (jupyterhub/spawner.py)
    from jupyterhub.spawner import SpawnException
except ImportError:  # JupyterHub 5.x

    class SpawnException(web.HTTPError):  # type: ignore[no-redef]
        def __init__(self, message, *, reason, status_code=400, log_message="", **_):
            super().__init__(status_code, log_message or message)
            self.message = message
            self.reason_label = reason


# tornado 6.6 logs an HTTPError as ``"%d %s: %s"`` with its message as an argument, and doubles
# the ``%`` of ``log_message`` itself; older tornados log ``"%d %s: " + log_message``, which a
# ``%`` in a user's value would break (``RequestHandler.log_exception``)
TORNADO_LOGS_MESSAGE_AS_ARG = web.HTTPError(400, "%").log_message == "%%"


def log_text(message: str) -> str:
    """``message`` as an error's ``log_message``, for the tornado at hand (see above)."""
    return message if TORNADO_LOGS_MESSAGE_AS_ARG else message.replace("%", "%%")


def _with_hub_message(error: web.HTTPError, message: str) -> web.HTTPError:
    # what the progress stream's "Spawn failed: ..." event shows (see above)
    error.jupyterhub_message = message  # type: ignore[attr-defined]
    return error


def http_error(status: int, message: str) -> web.HTTPError:
    """An ``HTTPError`` whose message the REST API answers as it is, and that tornado logs as one
    line (its ``%`` doubled, as in :func:`refusal`)."""
    return _with_hub_message(web.HTTPError(status, log_text(message)), message)


def spawn_error(message: str, *, reason: str, status_code: int) -> SpawnException:
    """A ``SpawnException`` whose message reads the same on the spawn page,
    in the REST API's answer and in the progress stream."""
    return _with_hub_message(SpawnException(message, reason=reason, status_code=status_code), message)


class Refusal(SpawnException):
    """A spawn request refused before anything was created (a user's mistake, a quota, capacity
    unknown).  A ``SpawnException``: JupyterHub counts it as a handled rejection, never toward
    ``consecutive_failure_limit``, whatever its status (503 included).  ``hub.log_filter``
    knows it by its class and keeps JupyterHub's own ERROR lines and tracebacks about it out
    of the log: the spawner logs the refusal once, at INFO."""


def refusal(status: int, message: str, *, reason: str = "refused") -> Refusal:
    """A refused request, with the same message on the page, in the REST answer and in the
    progress stream; ``reason`` is JupyterHub's metrics label.  The log message has its ``%``
    doubled where tornado formats it with ``%`` when it logs the error (:func:`log_text`), so
    a user's value in the message (``"gpus": "%s"``) cannot break that."""
    error = Refusal(message, reason=reason, status_code=status, log_message=log_text(message))
    return _with_hub_message(error, message)


class GPUSpawnFailure(SpawnException):
    """A GPU server that can never start (a fatal ``progress.Translation``):
    raised from ``is_pod_running`` so KubeSpawner's wait for the pod ends at
    once; ``kind`` is the translation's kind (``progress.FATAL_KINDS``), the
    ``reason`` of the failed-spawn metric."""

    def __init__(self, translation: Translation):
        text = (translation.reason or translation.message).rstrip(".")
        message = f"{text[:1].upper()}{text[1:]}."
        super().__init__(message, reason=translation.kind, status_code=500)
        self.kind = translation.kind
        self.jupyterhub_message = message
