"""Which credentials ``gpuspawner doctor`` uses, and what it says when they fail: ``$KUBECONFIG`` outside
a cluster (``KUBERNETES_SERVICE_HOST`` alone, without a mounted token, is no cluster), the in-cluster
service account inside one, ``~/.kube/config`` last; a failure names only what was tried. And the demo's
``jupyterhub_config.py`` loads with ``--config``, without the demo's variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuspawner.commands.demo import DEMO_CONFIG
from gpuspawner.doctor import gather
from tests.builders.nodeagent import loaded
from tests.commands.test_doctor import CLUSTERS, run_doctor


@pytest.fixture
def outside_a_cluster(monkeypatch, tmp_path):
    """A shell in a container that Kubernetes' variables leak into, with no service account token
    (as a dev container or CI runner on a cluster may be), and a home without ~/.kube."""
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setattr(gather, "SERVICE_ACCOUNT_TOKEN", str(tmp_path / "no-token"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    for name in ("GPUSPAWNER_DEMO_SNIPPET", "GPUSPAWNER_DEMO_DIR", "GPUSPAWNER_DEMO_PORT", "GPUSPAWNER_DEMO_CULLER"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


async def test_the_kubeconfig_and_the_demos_config_are_used_outside_a_cluster(outside_a_cluster, monkeypatch,
                                                                             control_plane):
    async with loaded(control_plane.kubeconfig, CLUSTERS / "doctor-healthy.yaml"):
        monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
        rc, out, err = await run_doctor("--config", str(DEMO_CONFIG))
    assert rc in (0, 1) and err == "", err
    assert out.startswith(f"gpuspawner doctor: {control_plane.server} ") and f"hub config: {DEMO_CONFIG}" in out
    assert ".kube/config" not in out


CASES = {
    # (KUBECONFIG, token mounted, words of the one-line error)
    "kubeconfig-missing": ("{tmp}/nope.yaml", False, "cannot load Kubernetes credentials from {tmp}/nope.yaml"),
    "in-cluster-broken": (None, True, "cannot load Kubernetes credentials from the pod's service account (in-cluster)"),
    "nothing-at-all": (None, False, "cannot load Kubernetes credentials from {tmp}/home/.kube/config: "
                                    "{tmp}/home/.kube/config does not exist"),
}


@pytest.mark.parametrize("env_kubeconfig,token,words", CASES.values(), ids=CASES)
async def test_a_failure_names_only_what_was_tried(outside_a_cluster, monkeypatch, env_kubeconfig, token, words):
    tmp = outside_a_cluster
    if env_kubeconfig:
        monkeypatch.setenv("KUBECONFIG", env_kubeconfig.format(tmp=tmp))
    if token:  # a pod's token, without the CA and the API server that go with it
        Path(gather.SERVICE_ACCOUNT_TOKEN).write_text("t0ken")
    rc, out, err = await run_doctor("--timeout", "5")
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert words.format(tmp=tmp) in err
    if env_kubeconfig or token:  # ~/.kube/config was not tried: it is not named
        assert ".kube/config" not in err
