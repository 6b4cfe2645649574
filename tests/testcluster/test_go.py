"""The test cluster's Go code passes ``go vet`` and its own ``go test``: the test cluster's module
(testcluster/) and Kueue's (testcluster/kueue/, whose test checks that the docs and gpuspawner's
Python side name the pinned Kueue's version, API groups and labels)."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

MODULE = pathlib.Path(__file__).resolve().parents[2] / "testcluster"
MODULES = {"testcluster": MODULE, "kueue": MODULE / "kueue"}


@pytest.mark.parametrize("module", MODULES)
@pytest.mark.parametrize("command", [["go", "vet", "./..."], ["go", "test", "./..."]], ids=["vet", "test"])
def test_go(command, module):
    assert shutil.which("go"), "Go >= 1.26 is needed (scripts/setup.sh says so too)"
    # the flags of testcluster/build.sh, so that the packages scripts/setup.sh compiled are reused
    env = dict(os.environ, GOFLAGS="-trimpath -buildvcs=false")
    r = subprocess.run(command, cwd=MODULES[module], capture_output=True, text=True, timeout=1800, env=env)
    assert r.returncode == 0, f"{' '.join(command)} in {module} failed:\n{r.stdout}\n{r.stderr}"
