"""A pytest plugin: in CI (``CI=true``), a skipped browser, hub or kubectl test fails the run.

Those tests skip on a machine without Chromium, configurable-http-proxy or kubectl so that a
developer can run the rest; ``scripts/setup.sh`` installs all three, so in CI a skip can only mean
that a shipped feature went untested.  Guarded: tests marked ``browser``, ``hub`` or ``kubectl``,
and every test under ``tests/browser/`` and ``tests/e2e/`` and in ``test_kubectl.py``, whether the
skip comes from the test, its fixtures, a ``skipif`` mark or the module (``allow_module_level``).

Loaded by ``tests/conftest.py``; ``tests/test_ci_skips.py`` runs it against throwaway tests.
"""

from __future__ import annotations

import os
from pathlib import PurePath

import pytest

GUARDED_MARKERS = ("browser", "hub", "kubectl")
GUARDED_DIRS = ("browser", "e2e")
GUARDED_FILES = ("test_kubectl.py",)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def guarded_path(path: str | os.PathLike) -> bool:
    p = PurePath(path)
    parts = p.parts
    return p.name in GUARDED_FILES or any(
        parts[i] == "tests" and parts[i + 1] in GUARDED_DIRS for i in range(len(parts) - 1)
    )


def guarded(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in GUARDED_MARKERS) or guarded_path(item.path)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kubectl: runs the real kubectl (never skipped in CI)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci() and guarded(item) and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where browser, hub and kubectl tests must run: {reason}"


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that skips itself (``pytest.skip(..., allow_module_level=True)``); first, so that the
    terminal summary and the session's failure count see the failure."""
    if report.skipped and in_ci() and guarded_path(report.nodeid.split("::")[0]):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where browser, hub and kubectl tests must run: {reason}"
