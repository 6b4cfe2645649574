"""The user and groups a container's process runs as: the pod's and the container's securityContext
(runAsUser, runAsGroup, fsGroup, supplementalGroups, runAsNonRoot) over the image's user, as a
kubelet and runc give them; without root, another user is refused with a clear message."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from testcluster.node.kubelet.run_as import RunAs, RunAsError, for_process, image_user, resolve
from testcluster.nodeagent import NodeAgent
from testcluster.nodeagent.client import KNOWN
from tests.builders.kubelet import node_manifest
from tests.builders.nodeagent import TOLERATE_ALL, pod_where, write_cluster

JOVYAN = (1000, 100)  # jupyter/docker-stacks' NB_UID and NB_GID
IDS = "import json, os; print(json.dumps([os.getuid(), os.getgid(), sorted(os.getgroups())]))"
# writes its ids where the kubelet reads the termination message
IDS_TO_TERMINATION_LOG = ("import json, os; open('/dev/termination-log', 'w').write(json.dumps("
                          "[os.getuid(), os.getgid(), sorted(os.getgroups())]))")


def pod(pod_sc: dict | None = None, container_sc: dict | None = None, image: str = "python:3.12") -> dict:
    c = {"name": "main", "image": image, "command": [sys.executable, "-c", IDS_TO_TERMINATION_LOG]}
    if container_sc is not None:
        c["securityContext"] = container_sc
    spec = {"restartPolicy": "Never", "tolerations": TOLERATE_ALL, "containers": [c]}
    if pod_sc is not None:
        spec["securityContext"] = pod_sc
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}


@pytest.mark.parametrize("p, expected", [
    (pod(), RunAs(0, 0)),
    (pod(image="quay.io/jupyterhub/singleuser:5.3"), RunAs(*JOVYAN)),
    (pod(image="quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"), RunAs(*JOVYAN)),
    (pod({"runAsUser": 1234}), RunAs(1234, 0, (), True)),
    (pod({"runAsUser": 1000}, image="jupyter/base-notebook"), RunAs(1000, 100, (), True)),
    (pod({"runAsUser": 1234, "runAsGroup": 2345, "fsGroup": 3456, "supplementalGroups": [4567, 3456]}),
     RunAs(1234, 2345, (3456, 4567), True)),
    (pod({"runAsUser": 1234, "runAsGroup": 2345}, {"runAsUser": 1500}), RunAs(1500, 2345, (), True)),
    (pod({"fsGroup": 100}, image="quay.io/jupyterhub/singleuser"), RunAs(1000, 100, (100,), True)),
    (pod({"runAsNonRoot": True, "runAsUser": 1000}), RunAs(1000, 0, (), True)),
], ids=["root-image", "jupyterhub-singleuser", "docker-stacks", "run-as-user", "image-user-named",
        "user-group-fs-supplemental", "container-over-pod", "fs-group-only", "non-root-satisfied"])
def test_the_process_runs_as_the_security_context_over_the_image_s_user(p, expected):
    assert resolve(p, p["spec"]["containers"][0]) == expected


@pytest.mark.parametrize("p, words", [
    (pod({"runAsNonRoot": True}), "container has runAsNonRoot and image will run as root"),
    (pod({"runAsNonRoot": True, "runAsUser": 0}), "container's runAsUser breaks non-root policy"),
    (pod({"runAsUser": 0}, {"runAsNonRoot": True}), "container's runAsUser breaks non-root policy"),
], ids=["root-image", "root-user", "container-non-root"])
def test_run_as_non_root_refuses_root_as_the_kubelet_does(p, words):
    with pytest.raises(RunAsError, match=words) as e:
        resolve(p, p["spec"]["containers"][0])
    assert e.value.reason == "CreateContainerConfigError"
    assert 'pod: "p_ns(u)", container: main' in str(e.value)


def test_image_users_ignore_tags_and_digests():
    assert image_user("quay.io/jupyter/base-notebook@sha256:abc") == JOVYAN
    assert image_user("quay.io/jupyterhub/singleuser:latest") == JOVYAN
    assert image_user("pytorch/pytorch:2.3.1-cuda11.8-cudnn8-runtime") == (0, 0)
    assert image_user("") == (0, 0)


def _dir(mode: int, uid: int = 0, gid: int = 0) -> os.stat_result:
    return os.stat_result((stat.S_IFDIR | mode, 0, 0, 0, uid, gid, 0, 0, 0, 0))


@pytest.mark.parametrize("run_as, euid, expected", [
    (RunAs(0, 0), 0, None),
    (RunAs(1234, 2345, (3456,), True), 0, RunAs(1234, 2345, (3456,), True)),
    (RunAs(*JOVYAN), 0, RunAs(*JOVYAN)),
    (RunAs(*JOVYAN), 4321, None),  # rootless: the image's user is one's own
    (RunAs(4321, 4321, (), True), 4321, None),
], ids=["root-as-root", "root-switches", "root-image-user", "rootless-image-user", "rootless-own-ids"])
def test_what_the_shim_switches_to(run_as, euid, expected):
    assert for_process(run_as, ["/"], euid=euid, egid=euid, stat_fn=lambda p: _dir(0o755)) == expected


def test_without_root_another_user_is_refused_with_what_to_do():
    with pytest.raises(RunAsError) as e:
        for_process(RunAs(1234, 2345, (), True), [], euid=4321, egid=4321)
    assert e.value.reason == "CreateContainerError"
    assert "not root, and cannot start a process as uid 1234 gid 2345" in str(e.value)
    assert "run the node agent as root, or drop runAsUser" in str(e.value)


CLOSED = "/home-of-root"  # a made-up directory that the fake stat_fn says only its owner may enter


def test_an_image_user_who_cannot_reach_the_stand_in_image_leaves_the_process_root():
    """The stand-in image is this machine's Python environment: under a directory only root may
    enter (``CLOSED``, as a checkout in root's home), jovyan could not run it, so the container runs as root
    as before."""
    def stat_fn(p: str) -> os.stat_result:
        return _dir(0o700) if p == CLOSED else _dir(0o755)
    assert for_process(RunAs(*JOVYAN), [f"{CLOSED}/venv"], euid=0, egid=0, stat_fn=stat_fn) is None
    assert for_process(RunAs(*JOVYAN), ["/opt/venv"], euid=0, egid=0, stat_fn=stat_fn) == RunAs(*JOVYAN)
    # asked for by the pod, the user is taken all the same (the exec then fails as runc's would)
    assert for_process(RunAs(1000, 100, (), True), [f"{CLOSED}/venv"], euid=0, egid=0, stat_fn=stat_fn) \
        == RunAs(1000, 100, (), True)


CASES = [
    ("sc", {"runAsUser": 1234, "runAsGroup": 2345, "fsGroup": 3456, "supplementalGroups": [4567]}, None,
     "python:3.12", [1234, 2345, [3456, 4567]]),
    ("image", None, None, "quay.io/jupyterhub/singleuser:5.3", [1000, 100, []]),
    ("container", {"runAsUser": 1234, "runAsGroup": 2345}, {"runAsUser": 1500}, "python:3.12",
     [1500, 2345, []]),
]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
async def test_containers_run_as_their_user_and_groups_and_exec_too(api, tmp_path):
    """On the cluster: each pod's process reports its ids through its termination message (a file
    the kubelet made writable to it); ``runAsNonRoot`` with a root image waits with the kubelet's
    reason; an exec into a container runs as its user."""
    cluster = write_cluster(tmp_path / "cluster.yaml", [node_manifest(api.name("users"))])
    pods = KNOWN["Pod"]
    async with NodeAgent(api.kubeconfig, cluster) as agent:
        for case, pod_sc, container_sc, image, _ in CASES:
            p = pod(pod_sc, container_sc, image)
            p["metadata"] = {"name": api.name(case)}
            await api.client.create(pods, p, namespace="default")
        refused = pod({"runAsNonRoot": True})
        refused["metadata"] = {"name": api.name("nonroot")}
        await api.client.create(pods, refused, namespace="default")
        for case, *_, expected in CASES:
            got = await pod_where(api.client, api.name(case), lambda p: p["status"].get("phase") in (
                "Succeeded", "Failed"), "finished", timeout=60)
            term = got["status"]["containerStatuses"][0]["state"]["terminated"]
            assert (term["exitCode"], json.loads(term.get("message") or "null")) == (0, expected), (case, term)

        def waiting(p: dict) -> bool:
            return bool((p["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {})
                        .get("message"))
        got = await pod_where(api.client, api.name("nonroot"), waiting, "waiting with a reason")
        state = got["status"]["containerStatuses"][0]["state"]["waiting"]
        assert state["reason"] == "CreateContainerConfigError"
        assert "container has runAsNonRoot and image will run as root" in state["message"]
        # an exec into a running container runs as the container's user
        server = pod({"runAsUser": 1234, "runAsGroup": 2345})
        server["metadata"] = {"name": api.name("server")}
        server["spec"]["containers"][0]["command"] = [sys.executable, "-c", "import time; time.sleep(600)"]
        await api.client.create(pods, server, namespace="default")
        await pod_where(api.client, api.name("server"), lambda p: p["status"].get("phase") == "Running", "Running")
        worker = agent.kubelet.workers[f"default/{api.name('server')}"]
        out: list[bytes] = []
        proc = await worker.exec("main", [sys.executable, "-c", IDS], tty=False, stdin=False,
                                 on_stdout=out.append, on_stderr=out.append)
        assert await proc.wait() == 0
        assert json.loads(b"".join(out)) == [1234, 2345, []]
