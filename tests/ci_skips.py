"""A pytest plugin: in CI (``CI=true``), every skipped test fails the run, whatever its file or marker.

Outside CI a test may skip where Chromium, configurable-http-proxy, kubectl or PostgreSQL is missing;
``scripts/setup.sh`` installs them all, so in CI a skip can only mean that a shipped feature went
untested. It applies whether the skip comes from the test, its fixtures, a ``skipif`` mark, the module
(``allow_module_level``) or ``pytest.importorskip``. Loaded by ``tests/conftest.py``;
``tests/test_ci_skips.py`` runs it against throwaway tests.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kubectl: runs the real kubectl (never skipped in CI)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that skips itself (``pytest.skip(..., allow_module_level=True)``, ``importorskip``); first, so that the
    terminal summary and the session's failure count see the failure."""
    if report.skipped and in_ci():
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every test must run: {reason}"
