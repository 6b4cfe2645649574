"""End to end: a GPU server whose home volume lives in a zone where its GPU pool has no nodes
fails early, with the reason and the fix, on ``gpuspawner demo --cluster
tests/fixtures/clusters/home-volume-other-zone.yaml``.

The hub mounts each user's claim ``claim-{username}`` at the home directory, as KubeSpawner's
storage settings do (``storage_pvc_ensure``, ``pvc_name_template``, ``volumes`` /
``volume_mounts``); alice's claim is bound to a volume in ``us-central1-a`` while the A100 pool
runs in ``us-central1-b`` only.  The scheduler answers ``node(s) had volume node affinity
conflict`` for the pool's node (and a node affinity mismatch for the CPU node): no node can ever
take the pod, and the pool declares no scale-up, so the spawn must fail at once rather than
after the demo's 180 s ``start_timeout``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from .harness import DemoHub, wait_for
from .test_metrics_e2e import QUICKLY, START_TIMEOUT, progress_events

pytestmark = [pytest.mark.integration, pytest.mark.hub]

if not shutil.which("configurable-http-proxy"):
    pytest.skip(
        "configurable-http-proxy is not installed: run scripts/setup.sh (scripts/test.sh does)",
        allow_module_level=True,
    )

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "clusters" / "home-volume-other-zone.yaml"

STORAGE_CONFIG = """
c = get_config()  # noqa: F821
c.GPUSpawner.storage_pvc_ensure = True
c.GPUSpawner.pvc_name_template = "claim-{username}"
c.GPUSpawner.storage_capacity = "10Gi"
c.GPUSpawner.storage_class = "standard"
c.GPUSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}]
c.GPUSpawner.volume_mounts = [{"name": "home", "mountPath": "/home/jovyan"}]
"""


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    config = tmp_path_factory.mktemp("volume-zone-e2e") / "storage_config.py"
    config.write_text(STORAGE_CONFIG)
    h = DemoHub(cluster_file=str(FIXTURE), extra_config=str(config)).start()
    try:
        yield h
    finally:
        h.stop()


def test_a_home_volume_in_another_zone_fails_early_with_the_fix(hub):
    (a100,) = [p for p in hub.gpus()["pools"] if p["nodes"] and "A100" in (p["product"] or "")]
    hub.create_user("alice")
    began = time.monotonic()
    answer = hub.api("POST", "/users/alice/server", json={"profile": "gpu", "gpu_pool": a100["id"], "gpus": 1})
    assert answer.status_code in (202, 500), answer.text
    events = progress_events(hub, "alice", timeout=START_TIMEOUT + 30)
    seconds = time.monotonic() - began
    assert seconds < QUICKLY, (seconds, events, hub.log())
    last = events[-1]
    assert last.get("failed") is True, events
    for phrase in ("storage volume is bound to a zone where pool", "has no node",
                   "choose a GPU pool with nodes in that zone", "move the volume", "WaitForFirstConsumer"):
        assert phrase in last["message"], last
    assert "SpawnException" not in last["message"]
    if answer.status_code == 500:
        assert "storage volume is bound to a zone" in answer.json()["message"], answer.text
    # the claim the pod mounted is alice's statically bound home volume, kept; her pod is gone
    claim = hub.kube("/api/v1/namespaces/jupyterhub/persistentvolumeclaims/claim-alice")
    assert claim["spec"]["volumeName"] == "home-alice" and claim["status"]["phase"] == "Bound"
    wait_for(lambda: not hub.pods("jupyterhub", labelSelector="hub.jupyter.org/username=alice"), 60,
             "alice's pod to be deleted")
    assert not hub.server("alice")
