"""One real control plane (``gpuspawner-cluster controlplane``) for the whole session, and the
real kubectl of the same version pointed at it.

``GPUSPAWNER_TEST_KUBECONFIG=PATH`` points the ``kubectl`` fixture at another cluster (a real one)
instead; the tests of the test cluster itself (``local_kubectl``, ``control_plane``) still start
their own.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from testcluster import ControlPlane, ControlPlaneError, find_binary

KUBECONFIG_ENV = "GPUSPAWNER_TEST_KUBECONFIG"


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    """A started control plane; fails (never skips) when the binary is missing: setup builds it."""
    try:
        find_binary()
    except ControlPlaneError as e:
        pytest.fail(str(e))
    cp = ControlPlane(tmp_path_factory.mktemp("controlplane"))
    cp.start()
    print(f"\ncontrol plane {cp.server} ready in {cp.ready_seconds:.1f}s")
    yield cp
    cp.stop()


def _kubectl_for(kubeconfig, cache_dir):
    """``run(*args, input=None, check=True)``: the kubectl on PATH with this kubeconfig only."""
    env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(cache_dir))

    def run(*args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = ["kubectl", *args]
        r = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=60, env=env)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    return run


@pytest.fixture(scope="session")
def local_kubectl(control_plane, tmp_path_factory):
    """kubectl as the test cluster's admin."""
    return _kubectl_for(control_plane.kubeconfig, tmp_path_factory.mktemp("kubecache"))


@pytest.fixture(scope="session")
def kubectl(request, tmp_path_factory):
    """kubectl as an admin of the cluster under test: ``$GPUSPAWNER_TEST_KUBECONFIG``'s, else the
    test cluster's."""
    other = os.environ.get(KUBECONFIG_ENV)
    if other:
        return _kubectl_for(other, tmp_path_factory.mktemp("kubecache"))
    return request.getfixturevalue("local_kubectl")
