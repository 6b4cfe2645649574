"""The pod worker with real processes (the node agent's kubelet on the test cluster): volumes, probes,
restarts, and processes that end with their pod."""

from __future__ import annotations

import asyncio
import base64
import os
import sys

import pytest

from tests.builders.kubelet import container, marker, pod_manifest, pids_with_marker

pytestmark = pytest.mark.integration

PY = sys.executable


def _events(cluster, name, reason=None):
    return [e for e in cluster.store.list("events", namespace="default")["items"]
            if e["involvedObject"]["name"] == name and (reason is None or e["reason"] == reason)]


def _cond(pod, type_):
    return next((c for c in (pod or {}).get("status", {}).get("conditions") or [] if c["type"] == type_), None)


def _state(pod, i=0):
    return ((pod or {}).get("status", {}).get("containerStatuses") or [{}] * (i + 1))[i]


async def _phase(cluster, name, phase, timeout=20):
    return await cluster.wait_for(lambda: (p := cluster.pod("default", name)) and p["status"].get("phase") == phase
                                  and p, timeout, what=f"{name} {phase}")


def _log(cluster, name, container=None):
    try:
        return cluster.kubelet.logs("default", name, container)
    except KeyError:  # not on the kubelet yet
        return ""


def _create(cluster, manifest):
    cluster.store.create("pods", manifest, namespace="default")


# -- volumes -------------------------------------------------------------------------------

async def test_configmap_secret_and_projected_volumes_are_read_at_their_mount_paths(cluster):
    cluster.store.create("configmaps", {"metadata": {"name": "app"}, "data": {"app.yaml": "port: 8080\n",
                                                                          "other": "x"}}, namespace="default")
    cluster.store.create("secrets", {"metadata": {"name": "creds"},
                                     "data": {"token": base64.b64encode(b"s3cret").decode()}}, namespace="default")
    script = ("cat /etc/app/app.yaml; ls /etc/app; cat /var/run/creds/auth/token; echo; "
              "stat -c %a /var/run/creds/auth/token; cat /etc/one.yaml; cat /etc/all/app.yaml; "
              "cat /etc/all/name; echo; cat /etc/all/token | cut -c1-3; ls /etc/all; "
              "touch /etc/app/new 2>/dev/null || echo read-only")
    volumes = [
        {"name": "cfg", "configMap": {"name": "app"}},
        {"name": "sec", "secret": {"secretName": "creds", "items": [{"key": "token", "path": "auth/token"}],
                                   "defaultMode": 0o400}},
        {"name": "proj", "projected": {"sources": [
            {"configMap": {"name": "app", "items": [{"key": "app.yaml", "path": "app.yaml"}]}},
            {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}},
    ]
    mounts = [{"name": "cfg", "mountPath": "/etc/app"}, {"name": "sec", "mountPath": "/var/run/creds"},
              {"name": "cfg", "mountPath": "/etc/one.yaml", "subPath": "app.yaml"},
              {"name": "proj", "mountPath": "/etc/all"}]
    _create(cluster, pod_manifest("vols", container(command=["sh", "-c", script], volumeMounts=mounts),
                                  restartPolicy="Never", volumes=volumes))
    await _phase(cluster, "vols", "Succeeded")
    lines = cluster.logs("default", "vols").splitlines()
    assert lines == ["port: 8080", "app.yaml", "other", "s3cret", "400", "port: 8080", "port: 8080", "vols",
                     "eyJ", "app.yaml", "name", "token", "read-only"]
    # the machine's own tree is unchanged: the mount points existed only for the pod
    assert not os.path.exists("/etc/app") and not os.path.exists("/var/run/creds")


@pytest.mark.parametrize(
    "spec",
    [{}, {"hostAliases": [{"ip": "10.1.2.3", "hostnames": ["db", "db.example"]}]}],
    ids=["pod-hostname", "host-aliases"],
)
async def test_the_pod_resolves_its_own_hostname_through_the_kubelet_managed_hosts_file(cluster, spec):
    """As the kubelet writes it (managedHostsFileContent): a server that names itself by its
    hostname (JupyterHub's proxy check, ``socket.gethostname()``) finds its pod's address."""
    name = f"hosts-{len(spec)}"
    script = f"{PY} -c \"import socket; print(socket.gethostbyname(socket.gethostname()))\"; cat /etc/hosts"
    _create(cluster, pod_manifest(name, container(command=["sh", "-c", script]), restartPolicy="Never", **spec))
    pod = await _phase(cluster, name, "Succeeded")
    lines = cluster.logs("default", name).splitlines()
    assert lines[0] == pod["status"]["podIP"], lines
    assert lines[1] == "# Kubernetes-managed hosts file." and f"{pod['status']['podIP']}\t{name}" in lines
    if spec:
        assert "10.1.2.3\tdb\tdb.example" in lines
    # the machine's own file is unchanged
    assert "Kubernetes-managed" not in open("/etc/hosts").read()


async def test_missing_configmap_is_failed_mount_until_it_appears(cluster):
    cluster.kubelet.mount_timeout = 1.0  # podAttachAndMountTimeout, 2 min 3 s on a real node
    volumes = [{"name": "config", "configMap": {"name": "late"}}]
    _create(cluster, pod_manifest("waits", container(command=["cat", "/cfg/k"],
                                                     volumeMounts=[{"name": "config", "mountPath": "/cfg"}]),
                                  restartPolicy="Never", volumes=volumes))
    ev = await cluster.wait_for(lambda: _events(cluster, "waits", "FailedMount"), 15, what="FailedMount")
    assert ev[0]["type"] == "Warning" and ev[0]["source"]["component"] == "kubelet"
    assert ev[0]["message"] == 'MountVolume.SetUp failed for volume "config" : configmap "late" not found'
    p = cluster.pod("default", "waits")
    assert p["status"]["phase"] == "Pending" and "podIP" not in p["status"]
    assert _state(p)["state"] == {"waiting": {"reason": "ContainerCreating"}}
    timeout = await cluster.wait_for(lambda: [e for e in _events(cluster, "waits", "FailedMount")
                                              if e["message"].startswith("Unable")], 10, what="the timeout event")
    assert timeout[0]["message"] == ("Unable to attach or mount volumes: unmounted volumes=[config], unattached "
                                     "volumes=[], failed to process volumes=[]: timed out waiting for the condition")
    cluster.store.create("configmaps", {"metadata": {"name": "late"}, "data": {"k": "arrived"}}, namespace="default")
    await _phase(cluster, "waits", "Succeeded", 30)
    assert cluster.logs("default", "waits") == "arrived"


async def test_a_claim_that_does_not_exist_is_a_volume_that_cannot_be_processed(cluster):
    manifest = pod_manifest("claims", container(command=["true"], volumeMounts=[{"name": "home", "mountPath": "/h"}]),
                            volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "nope"}}],
                            nodeName=cluster.node_name)  # bound by hand: the kubelet alone decides
    _create(cluster, manifest)
    ev = await cluster.wait_for(lambda: _events(cluster, "claims", "FailedMount"), 15, what="FailedMount")
    assert ev[0]["message"] == ("Unable to attach or mount volumes: unmounted volumes=[home], unattached volumes=[], "
                                "failed to process volumes=[home]: error processing PVC default/nope: failed to "
                                'fetch PVC from API server: persistentvolumeclaims "nope" not found')


async def test_configmap_key_missing_and_optional_volumes(cluster):
    cluster.store.create("configmaps", {"metadata": {"name": "app"}, "data": {"a": "1"}}, namespace="default")
    volumes = [{"name": "cfg", "configMap": {"name": "app", "items": [{"key": "nope", "path": "n"}]}}]
    _create(cluster, pod_manifest("nokey", container(command=["true"], volumeMounts=[{"name": "cfg", "mountPath": "/c"}]),
                                  volumes=volumes))
    ev = await cluster.wait_for(lambda: _events(cluster, "nokey", "FailedMount"), 15, what="FailedMount")
    assert ev[0]["message"] == ('MountVolume.SetUp failed for volume "cfg" : '
                                "configmap references non-existent config key: nope")
    optional = [{"name": "cfg", "configMap": {"name": "absent", "optional": True}},
                {"name": "sec", "secret": {"secretName": "absent", "optional": True}}]
    _create(cluster, pod_manifest("opt", container(command=["sh", "-c", "ls -A /c /s | wc -l"],
                                                   volumeMounts=[{"name": "cfg", "mountPath": "/c"},
                                                                 {"name": "sec", "mountPath": "/s"}]),
                                  restartPolicy="Never", volumes=optional))
    await _phase(cluster, "opt", "Succeeded")
    assert _events(cluster, "opt", "FailedMount") == []


async def test_empty_dir_is_shared_by_the_pods_containers_and_configmap_updates_reach_the_volume(cluster):
    cluster.kubelet.volume_resync = 0.3
    cluster.store.create("configmaps", {"metadata": {"name": "live"}, "data": {"v": "one"}}, namespace="default")
    writer = container("writer", ["sh", "-c", "echo hi > /shared/f; sleep 60"],
                       volumeMounts=[{"name": "scratch", "mountPath": "/shared"}])
    reader = container("reader", ["sh", "-c", "while [ ! -f /data/f ]; do sleep 0.1; done; cat /data/f; "
                                              "while [ \"$(cat /cfg/v)\" != two ]; do sleep 0.1; done; echo updated; "
                                              "sleep 60"],
                       volumeMounts=[{"name": "scratch", "mountPath": "/data"}, {"name": "cfg", "mountPath": "/cfg"}])
    _create(cluster, pod_manifest("share", writer, reader, volumes=[{"name": "scratch", "emptyDir": {}},
                                                                    {"name": "cfg", "configMap": {"name": "live"}}]))
    await cluster.wait_for(lambda: _log(cluster, "share", "reader") == "hi\n", 15, what="hi")
    cluster.store.patch("configmaps", "live", {"data": {"v": "two"}}, "application/merge-patch+json", "default")
    await cluster.wait_for(lambda: "updated" in _log(cluster, "share", "reader"), 15,
                           what="the update seen in the volume")


async def test_without_mount_namespaces_a_pod_with_volumes_fails_to_mount(cluster, monkeypatch):
    monkeypatch.setattr(cluster.kubelet, "_isolation", "processes")
    _create(cluster, pod_manifest("nomnt", container(command=["true"], volumeMounts=[{"name": "v", "mountPath": "/v"}]),
                                  volumes=[{"name": "v", "emptyDir": {}}]))
    ev = await cluster.wait_for(lambda: _events(cluster, "nomnt", "FailedMount"), 15, what="FailedMount")
    assert ev[0]["message"].startswith('MountVolume.SetUp failed for volume "v" : mount failed: exit status 32\n'
                                       "Mounting command: mount\nMounting arguments: -o bind ")
    assert cluster.pod("default", "nomnt")["status"]["phase"] == "Pending"
    # a pod without volumes still runs
    _create(cluster, pod_manifest("plain", container(command=["echo", "ok"]), restartPolicy="Never"))
    await _phase(cluster, "plain", "Succeeded")


# -- probes --------------------------------------------------------------------------------

async def test_failing_readiness_probe_keeps_the_pod_not_ready(cluster):
    probe = {"exec": {"command": ["sh", "-c", "echo not yet; exit 1"]}, "periodSeconds": 1}
    _create(cluster, pod_manifest("unready", container(command=["sleep", "60"], readinessProbe=probe)))
    ev = await cluster.wait_for(lambda: _events(cluster, "unready", "Unhealthy"), 15, what="Unhealthy")
    assert ev[0]["type"] == "Warning" and ev[0]["message"] == "Readiness probe failed: not yet\n"
    p = cluster.pod("default", "unready")
    assert p["status"]["phase"] == "Running"
    assert _cond(p, "Ready")["status"] == "False" and _cond(p, "Ready")["reason"] == "ContainersNotReady"
    assert _state(p)["ready"] is False and _state(p)["restartCount"] == 0


async def test_readiness_turns_true_once_the_port_opens(cluster):
    script = "import socket,time; time.sleep(1.5); s=socket.socket(); s.bind(('{ip}', 7000)); s.listen(); time.sleep(60)"
    probe = {"tcpSocket": {"port": "svc"}, "periodSeconds": 1}
    c = container(command=[PY, "-c", script.replace("{ip}", "0.0.0.0")], readinessProbe=probe,
                  ports=[{"name": "svc", "containerPort": 7000}])
    _create(cluster, pod_manifest("late-port", c))
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "late-port")) and _cond(x, "Ready")
                               and _cond(x, "Ready")["status"] == "True" and x, 20, what="Ready")
    msgs = [e["message"] for e in _events(cluster, "late-port", "Unhealthy")]
    assert msgs and msgs[0] == (f"Readiness probe failed: dial tcp {p['status']['podIP']}:7000: "
                                "connect: connection refused")


async def test_failing_liveness_probe_restarts_the_container(cluster):
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2}
    server = ("import http.server as h\n"
              "class H(h.BaseHTTPRequestHandler):\n"
              "    def do_GET(self): self.send_response(500); self.end_headers()\n"
              "h.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n")
    _create(cluster, pod_manifest("sick", container(command=[PY, "-c", server], livenessProbe=probe)))
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "sick")) and _state(x).get("restartCount", 0) >= 1
                               and x, 30, what="a restart")
    killing = [e["message"] for e in _events(cluster, "sick", "Killing")]
    assert "Container main failed liveness probe, will be restarted" in killing
    unhealthy = [e["message"] for e in _events(cluster, "sick", "Unhealthy")]
    assert "Liveness probe failed: HTTP probe failed with statuscode: 500" in unhealthy
    assert _state(p)["lastState"]["terminated"]["exitCode"] in (137, 143)


async def test_startup_probe_gates_readiness_and_liveness(cluster):
    startup = {"exec": {"command": ["test", "-f", "/tmp/started"]}, "periodSeconds": 1, "failureThreshold": 30}
    liveness = {"exec": {"command": ["sh", "-c", "exit 1"]}, "periodSeconds": 1, "failureThreshold": 1}
    script = "sleep 2.5; touch /tmp/started; sleep 60"
    _create(cluster, pod_manifest("slow", container(command=["sh", "-c", script], startupProbe=startup,
                                                    livenessProbe=liveness)))
    await asyncio.sleep(1.5)
    p = cluster.pod("default", "slow")
    assert _state(p)["started"] is False and _state(p)["ready"] is False
    assert _events(cluster, "slow", "Killing") == []  # liveness waits for the startup probe
    await cluster.wait_for(lambda: _events(cluster, "slow", "Killing"), 20, what="liveness kill after startup")
    messages = [e["message"] for e in _events(cluster, "slow", "Unhealthy")]
    assert "Liveness probe failed: " in messages


# -- processes live and die with their pod --------------------------------------------------

DAEMON = ("import os, sys, time\n"
          "if os.fork() == 0:\n"
          "    os.setsid()\n"
          "    if os.fork() == 0:\n"
          "        time.sleep(600)\n"
          "    os._exit(0)\n"
          "print('daemon started', flush=True)\n"
          "time.sleep(600)\n")


@pytest.mark.parametrize("isolation", ["namespaces", "processes"])
async def test_a_daemonizing_grandchild_dies_with_its_pod(cluster, monkeypatch, isolation):
    monkeypatch.setattr(cluster.kubelet, "_isolation", isolation)
    mark = marker()
    _create(cluster, pod_manifest("daemon", container(command=[PY, "-c", DAEMON],
                                                      env=[{"name": "SIM_TEST_MARKER", "value": mark}])))
    await cluster.wait_for(lambda: "daemon started" in _log(cluster, "daemon"), 15, what="daemon")
    await cluster.wait_for(lambda: len(pids_with_marker(mark)) >= 2, 5, what="the grandchild")
    (root,) = cluster.kubelet.pod_pids("default", "daemon")  # the container's shim: its tree's root
    assert os.path.exists(f"/proc/{root}")
    cluster.store.delete("pods", "daemon", namespace="default")
    await cluster.wait_for(lambda: cluster.pod("default", "daemon") is None, 30, what="pod gone")
    assert pids_with_marker(mark) == [] and cluster.kubelet.pod_pids("default", "daemon") == []


async def test_deleting_the_namespace_ends_its_pods_processes(cluster):
    mark = marker()
    cluster.store.create("namespaces", {"metadata": {"name": "team"}})
    manifest = pod_manifest("daemon", container(command=[PY, "-c", DAEMON],
                                                env=[{"name": "SIM_TEST_MARKER", "value": mark}]))
    cluster.store.create("pods", manifest, namespace="team")
    await cluster.wait_for(lambda: len(pids_with_marker(mark)) >= 2, 15, what="the pod and its daemon")
    cluster.store.delete("namespaces", "team")
    await cluster.wait_for(lambda: not pids_with_marker(mark), 30, what="every process of the namespace's pod gone")


async def test_exec_sessions_and_containers_end_with_the_cluster(cluster):
    mark = marker()
    _create(cluster, pod_manifest("lives", container(command=[PY, "-c", DAEMON],
                                                     env=[{"name": "SIM_TEST_MARKER", "value": mark}])))
    await cluster.wait_for(lambda: "daemon started" in _log(cluster, "lives"), 15, what="daemon")
    pod = cluster.pod("default", "lives")
    await cluster.kubelet.exec(pod, "main", ["sh", "-c", "setsid sleep 600 & sleep 600"], tty=False, stdin=False,
                               on_stdout=lambda d: None, on_stderr=lambda d: None)
    await cluster.wait_for(lambda: len(pids_with_marker(mark)) >= 4, 5, what="the exec'd processes")
    await cluster.stop()
    assert pids_with_marker(mark) == []
