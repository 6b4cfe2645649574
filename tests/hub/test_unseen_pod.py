"""A pod the spawner asked for that the pod reflector has not shown keeps the server "running" for
JupyterHub while the API server has it, so JupyterHub calls ``stop`` and the pod is deleted."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuspawner.hub.unseen_pod import poll_status

GONE = object()


class _Api:
    def __init__(self, pod):
        self.pod = pod
        self.reads = 0

    async def read_namespaced_pod(self, name, namespace, **kw):
        self.reads += 1
        if self.pod is GONE:
            raise ApiException(status=404, reason="Not Found")
        return self.pod


def spawner(reflected: bool, pod) -> SimpleNamespace:
    return SimpleNamespace(namespace="jhub", pod_name="jupyter-ada", k8s_api_request_timeout=3,
                           pod_reflector=SimpleNamespace(pods={"jhub/jupyter-ada": {}} if reflected else {}),
                           api=_Api(pod), log=logging.getLogger("test-unseen_pod"))


def pod(phase="Pending", deleting=False):
    return SimpleNamespace(metadata=SimpleNamespace(deletion_timestamp="2026-11-27T01:00:00Z" if deleting else None),
                           status=SimpleNamespace(phase=phase))


@pytest.mark.parametrize("status, reflected, api_pod, expected, reads", [
    (None, False, GONE, None, 0),  # running by KubeSpawner's account: nothing asked
    (1, True, GONE, 1, 0),  # the reflector shows it: KubeSpawner's answer stands
    (1, False, pod("Pending"), None, 1),  # unseen but there: running, so JupyterHub stops it
    (1, False, pod("Running"), None, 1),
    (1, False, GONE, 1, 1),  # gone
    (1, False, pod("Running", deleting=True), 1, 1),  # being deleted already
    (0, False, pod("Succeeded"), 0, 1),  # ended: holds nothing
    (1, False, pod("Failed"), 1, 1),
], ids=["running", "reflected", "unseen-pending", "unseen-running", "gone", "deleting", "succeeded", "failed"])
async def test_poll_status(status, reflected, api_pod, expected, reads):
    s = spawner(reflected, api_pod)
    assert await poll_status(s, status) == expected
    assert s.api.reads == reads


@pytest.mark.parametrize("error", [ApiException(status=403, reason="Forbidden"), TimeoutError()],
                         ids=["forbidden", "timeout"])
async def test_when_the_api_server_cannot_say_the_pod_counts_as_running(error, caplog):
    """JupyterHub then calls stop, which deletes the pod (a 404 there is fine): never a pod left behind."""
    s = spawner(False, None)

    async def failing(*a, **kw):
        raise error

    s.api.read_namespaced_pod = failing
    with caplog.at_level(logging.WARNING, logger="test-unseen_pod"):
        assert await poll_status(s, 1) is None
    assert "Could not ask for pod jhub/jupyter-ada" in caplog.text
