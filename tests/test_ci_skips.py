"""In CI every skipped test fails the run, whatever its file, marker or way of skipping; elsewhere it
stays a skip.  Each case runs pytest on throwaway tests in a subprocess with the plugin loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "marked": ("test_x.py", "import pytest\n\n@pytest.mark.hub\ndef test_it():\n    pytest.skip('no proxy')\n"),
    "skipif": ("test_x.py", "import pytest\n\n@pytest.mark.browser\n@pytest.mark.skipif(True, reason='no chromium')\n"
                            "def test_it():\n    pass\n"),
    "kubectl-file": ("test_kubectl.py", "import pytest\n\ndef test_it():\n    pytest.skip('no kubectl')\n"),
    "module-level": ("tests/e2e/test_x.py", "import pytest\npytest.skip('no proxy', allow_module_level=True)\n\n"
                                           "def test_it():\n    pass\n"),
    "fixture": ("tests/browser/test_x.py", "import pytest\n\n@pytest.fixture\ndef chromium():\n"
                                           "    pytest.skip('no chromium')\n\ndef test_it(chromium):\n    pass\n"),
    "plain": ("test_y.py", "import pytest\n\ndef test_it():\n    pytest.skip('not this platform')\n"),
    "importorskip": ("tests/usage/test_x.py", "import pytest\npytest.importorskip('no_such_module_here')\n\n"
                                               "def test_it():\n    pass\n"),
}


def run(tmp_path: Path, name: str, ci: str | None) -> subprocess.CompletedProcess:
    rel, text = CASES[name]
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.ci_skips", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_skip_fails_in_ci(tmp_path, name):
    r = run(tmp_path, name, "true")
    assert r.returncode != 0, r.stdout
    assert "skipped in CI, where every test must run" in r.stdout, r.stdout


@pytest.mark.parametrize("name", ["marked", "module-level", "plain", "importorskip"])
def test_outside_ci_it_stays_a_skip(tmp_path, name):
    r = run(tmp_path, name, None)
    # 5: pytest's "no tests collected", when the only module skipped itself
    assert r.returncode in (0, 5) and "1 skipped" in r.stdout and "failed" not in r.stdout, r.stdout
