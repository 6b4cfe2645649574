"""JupyterHub's own ERROR lines and tracebacks about a refused spawn are kept out of the hub's log:
records on a real ``logging.Logger``, worded as JupyterHub 6.1 words them."""

from __future__ import annotations

import logging

import pytest
from tornado import web

from gpuspawner.hub import log_filter
from gpuspawner.hub.errors import Refusal, refusal


@pytest.fixture
def hub_log():
    logger = logging.getLogger("test-jupyterhub-app")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    log_filter.install(logger)
    log_filter.install(logger)  # idempotent
    yield logger, records
    logger.removeHandler(handler)
    logger.filters.clear()


def test_install_adds_one_filter(hub_log):
    logger, _ = hub_log
    assert sum(isinstance(f, log_filter.RefusalLogFilter) for f in logger.filters) == 1


def test_a_refusal_with_a_traceback_is_dropped(hub_log):
    logger, records = hub_log
    try:
        raise refusal(400, "`gpus` must be a whole number", reason="bad_count")
    except Refusal:
        logger.error("Failed to spawn single-user server with form", exc_info=True)
    assert records == []


def test_the_lines_announced_for_a_refusal_are_dropped_once(hub_log):
    logger, records = hub_log
    error = refusal(503, "GPU capacity is unknown", reason="capacity_unknown")
    log_filter.expect("ada", "", "ada", error)
    logger.error(f"Not starting ada's server : {error}")  # jupyterhub/user.py, a SpawnException
    logger.error(f"Error starting server ada: {error}")  # jupyterhub/handlers/pages.py
    assert records == []
    logger.error(f"Error starting server ada: {error}")  # the same words again are not announced again
    assert [r.getMessage() for r in records] == [f"Error starting server ada: {error}"]


def _tornado_logs(error: web.HTTPError) -> None:
    """What the installed tornado logs for ``error`` raised by a handler (``log_exception``)."""
    from unittest import mock

    from tornado.httputil import HTTPHeaders, HTTPServerRequest, RequestStartLine

    start = RequestStartLine("POST", "/hub/api/users/ada/server", "HTTP/1.1")
    request = HTTPServerRequest(start_line=start, headers=HTTPHeaders({"Host": "hub"}), connection=mock.Mock())
    handler = web.RequestHandler(web.Application(), request)
    handler.log_exception(type(error), error, None)


@pytest.fixture
def tornado_log():
    from tornado.log import gen_log

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep()
    gen_log.addHandler(handler)
    log_filter.install(gen_log)
    yield records
    gen_log.removeHandler(handler)


def test_tornados_line_for_the_http_error_is_dropped(tornado_log):
    """The spawner's INFO line is the refusal's one line: tornado's WARNING about the same
    error (``RequestHandler.log_exception``) is dropped."""
    error = refusal(400, "unknown option(s) `colour` for profile 'cpu'; it accepts: profile", reason="x")
    log_filter.expect("ada", "", "ada", error)
    _tornado_logs(error)
    assert tornado_log == []
    _tornado_logs(error)  # announced once, dropped once
    assert len(tornado_log) == 1


def test_a_percent_sign_in_a_refusal_does_not_break_tornados_log_line(tornado_log):
    error = refusal(400, "`gpus` must be a whole number, not '%s%d'", reason="bad_count")
    assert error.jupyterhub_message == "`gpus` must be a whole number, not '%s%d'"  # what the user reads
    _tornado_logs(error)  # not announced: logged
    line = tornado_log[0].getMessage()
    assert line.startswith("400 POST /hub/api/users/ada/server (")
    assert line.endswith("): `gpus` must be a whole number, not '%s%d'")


@pytest.mark.parametrize("body", ["not json", "[" * 5000 + "]" * 5000])
def test_a_body_that_is_not_json_is_one_info_line(hub_log, body):
    """jupyterhub/apihandlers/base.py logs the parser's traceback at ERROR for every such body."""
    import json

    logger, records = hub_log
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        logger.error("Couldn't parse JSON", exc_info=True)
    assert len(records) == 1
    r = records[0]
    assert (r.levelno, r.exc_info) == (logging.INFO, None)
    assert r.getMessage().startswith("Couldn't parse JSON in a request body: ")


def test_the_snippet_installs_the_filter_on_jupyterhubs_loggers():
    from tornado.log import app_log, gen_log

    log_filter.install_for_hub()
    for logger in (logging.getLogger("JupyterHub"), app_log, gen_log):
        assert any(isinstance(f, log_filter.RefusalLogFilter) for f in logger.filters)


def test_other_errors_pass(hub_log):
    logger, records = hub_log
    try:
        raise web.HTTPError(500, "boom")
    except web.HTTPError:
        logger.error("Failed to spawn single-user server with form", exc_info=True)
    logger.error("Error starting server bob: something else")
    logger.info("Refused spawn of ada (bad_count): `gpus` must be a whole number")
    assert len(records) == 3 and records[0].exc_info is not None


def test_announced_lines_are_bounded():
    f = log_filter.RefusalLogFilter()
    f.expect(*(f"line {i}" for i in range(2000)))
    assert len(f._expected) == log_filter._MAX_EXPECTED
