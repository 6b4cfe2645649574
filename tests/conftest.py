"""Shared test setup.

The end-to-end tests run JupyterHub with a real configurable-http-proxy; make the copy that
scripts/setup.sh installs (node_modules/.bin) findable when pytest is started by hand.
In CI (``CI=true``) a skipped browser, hub or kubectl test fails the run (``tests/ci_skips.py``).
"""

import os
import pathlib

from tests.ci_skips import pytest_collectreport, pytest_configure, pytest_runtest_makereport  # noqa: F401 (hooks)

ROOT = pathlib.Path(__file__).resolve().parent.parent
_node_bin = ROOT / "node_modules" / ".bin"
if _node_bin.is_dir() and str(_node_bin) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{_node_bin}{os.pathsep}{os.environ.get('PATH', '')}"
