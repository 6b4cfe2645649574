"""The simulated cluster end to end: scheduler, node lifecycle, kubelet, devices, HTTP."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import urllib.request

import pytest

from gpuspawner.sim.cluster import SimCluster
from testcluster.node.devices import NVIDIA_ENV
from tests.builders.kubelet import marker, pids_with_marker

pytestmark = pytest.mark.integration


GPU_TAINT = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
TOLERATE = [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]


def _node(name, gpus=0, taints=()):
    alloc = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": list(taints)}, "status": {"allocatable": alloc}}


MANIFESTS = [_node("gpu-a", 2, [GPU_TAINT]), _node("cpu-a")]

# a tiny "notebook": prints its GPUs, writes its pid, serves HTTP on the pod IP
SERVER = (
    "import os, sys, http.server, socketserver\n"
    "print('gpus=' + os.environ.get('NVIDIA_VISIBLE_DEVICES', ''), flush=True)\n"
    "print('pid=' + str(os.getpid()), flush=True)\n"
    "host, port = sys.argv[1], int(sys.argv[2])\n"
    "http.server.ThreadingHTTPServer((host, port), http.server.SimpleHTTPRequestHandler).serve_forever()\n"
)


def pod(name, *, gpus=0, command=None, args=None, tolerations=TOLERATE, restart="Always", **container):
    c = {"name": "main", "image": "python:3.11", "ports": [{"containerPort": 8888}], **container}
    if command is not None:
        c["command"] = command
    if args is not None:
        c["args"] = args
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {"metadata": {"name": name}, "spec": {"containers": [c], "tolerations": tolerations,
                                                 "restartPolicy": restart,
                                                 "terminationGracePeriodSeconds": 5}}


@pytest.fixture
async def cluster():
    c = SimCluster(manifests=MANIFESTS, restart_backoff=(0.2, 1.0))
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def _cond(p, type_):
    for c in (p or {}).get("status", {}).get("conditions") or []:
        if c["type"] == type_:
            return c
    return None


def _ready(c, name):
    def check():
        p = c.pod("default", name)
        cond = _cond(p, "Ready")
        return p if cond and cond["status"] == "True" else None
    return check


def _get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status


def _events(c, name, reason=None):
    return [e for e in c.store.list("events", namespace="default")["items"]
            if e["involvedObject"]["name"] == name and (reason is None or e["reason"] == reason)]


async def test_gpu_pod_runs_its_command_on_its_own_ip(cluster):
    # KubeSpawner sets only args; 0.0.0.0 means the pod's own address
    probe = {"httpGet": {"path": "/", "port": 8888}, "periodSeconds": 1}
    mark = marker()
    cluster.store.create("pods", pod("nb", gpus=1, args=[sys.executable, "-c", SERVER, "0.0.0.0", "8888"],
                                     readinessProbe=probe, env=[{"name": "SIM_TEST_MARKER", "value": mark}]),
                         namespace="default")
    p = await cluster.wait_for(_ready(cluster, "nb"), 30, what="pod nb Ready")
    assert p["spec"]["nodeName"] == "gpu-a"
    assert p["status"]["phase"] == "Running"
    ip = p["status"]["podIP"]
    assert ip.startswith("127.") and ip != "127.0.0.1"
    assert p["status"]["podIPs"] == [{"ip": ip}]
    assert p["status"]["startTime"]
    state = p["status"]["containerStatuses"][0]
    assert state["ready"] and "running" in state["state"]
    assert await asyncio.to_thread(_get, f"http://{ip}:8888/") == 200
    held = cluster.ledger.allocation("default/nb")["nvidia.com/gpu"]
    log = await cluster.wait_for(lambda: "pid=" in cluster.logs("default", "nb") and cluster.logs("default", "nb"),
                                 10, what="log")
    assert f"gpus={held[0]}" in log and held[0].startswith("GPU-")
    reasons = [e["reason"] for e in _events(cluster, "nb")]
    for r in ("Scheduled", "Pulling", "Pulled", "Created", "Started"):
        assert r in reasons
    sched = _events(cluster, "nb", "Scheduled")[0]
    assert sched["message"] == "Successfully assigned default/nb to gpu-a"
    assert sched["source"]["component"] == "default-scheduler"

    # deleting kills the process, frees the GPU and removes the pod
    assert pids_with_marker(mark)
    cluster.store.delete("pods", "nb", namespace="default")
    await cluster.wait_for(lambda: cluster.pod("default", "nb") is None, 30, what="pod nb gone")
    assert cluster.ledger.allocation("default/nb") is None
    assert len(cluster.ledger.free("gpu-a", "nvidia.com/gpu")) == 2
    assert pids_with_marker(mark) == []  # killed and reaped before the pod went away
    assert any(e["reason"] == "Killing" for e in _events(cluster, "nb"))


async def test_unschedulable_gpu_pod_gets_the_real_message_and_is_retried(cluster):
    cluster.store.create("pods", pod("big", gpus=4, command=["sleep", "60"]), namespace="default")
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "big")) and _cond(x, "PodScheduled") and x,
                               10, what="PodScheduled condition")
    cond = _cond(p, "PodScheduled")
    msg = ("0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are available: "
           "2 No preemption victims found for incoming pod.")
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "Unschedulable", msg)
    ev = _events(cluster, "big", "FailedScheduling")
    assert len(ev) == 1
    assert ev[0]["type"] == "Warning" and ev[0]["message"] == msg
    assert ev[0]["source"]["component"] == "default-scheduler"
    assert ev[0]["reportingComponent"] == "default-scheduler"
    assert ev[0]["involvedObject"]["kind"] == "Pod" and ev[0]["involvedObject"]["name"] == "big"

    # a cluster event (a node changing) moves the pod back: same message, same Event, count grows
    cluster.store.patch("nodes", "cpu-a", {"metadata": {"labels": {"touched": "yes"}}},
                        "application/merge-patch+json")
    await cluster.wait_for(lambda: _events(cluster, "big", "FailedScheduling")[0]["count"] >= 2, 15,
                           what="aggregated FailedScheduling")
    assert len(_events(cluster, "big", "FailedScheduling")) == 1

    # a node that fits arrives: the pod is bound there
    cluster.add_node(_node("gpu-big", 8, [GPU_TAINT]))
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "big")) and x["spec"].get("nodeName") and x,
                               15, what="binding to gpu-big")
    assert p["spec"]["nodeName"] == "gpu-big"
    assert _cond(cluster.pod("default", "big"), "PodScheduled")["status"] == "True"


async def test_taints_not_ready_and_cordon(cluster):
    cluster.set_node_ready("gpu-a", False)
    cluster.cordon("cpu-a")
    node = await cluster.wait_for(
        lambda: (n := cluster.store.get("nodes", "gpu-a")) and len(n["spec"].get("taints") or []) == 3 and n,
        10, what="not-ready taints")
    assert [(t["key"], t["effect"]) for t in node["spec"]["taints"]] == [
        ("sku", "NoSchedule"), ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute")]
    cluster.store.create("pods", pod("waits", gpus=1, command=["sleep", "60"]), namespace="default")
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "waits")) and _cond(x, "PodScheduled") and x,
                               10, what="PodScheduled condition")
    assert _cond(p, "PodScheduled")["message"] == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, "
        "1 node(s) were unschedulable. preemption: 0/2 nodes are available: "
        "2 Preemption is not helpful for scheduling.")
    cluster.set_node_ready("gpu-a", True)
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "waits")) and x["spec"].get("nodeName") and x,
                               15, what="binding after the node recovered")
    assert p["spec"]["nodeName"] == "gpu-a"
    node = cluster.store.get("nodes", "gpu-a")
    assert [t["key"] for t in node["spec"]["taints"]] == ["sku"]


async def test_no_gpu_is_handed_to_two_pods(cluster):
    for name in ("g1", "g2", "g3"):
        cluster.store.create("pods", pod(name, gpus=1, command=["sleep", "60"]), namespace="default")
    await cluster.wait_for(lambda: all(cluster.ledger.allocation(f"default/{n}") for n in ("g1", "g2")), 15,
                           what="two GPU pods admitted")
    a = cluster.ledger.allocation("default/g1")["nvidia.com/gpu"]
    b = cluster.ledger.allocation("default/g2")["nvidia.com/gpu"]
    assert set(a).isdisjoint(b)
    p3 = await cluster.wait_for(lambda: (x := cluster.pod("default", "g3")) and _cond(x, "PodScheduled") and x,
                                10, what="g3 condition")
    assert _cond(p3, "PodScheduled")["message"].startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    # g1 ends: its GPU goes to g3
    cluster.store.delete("pods", "g1", namespace="default", grace_period_seconds=0)
    await cluster.wait_for(lambda: cluster.ledger.allocation("default/g3"), 20, what="g3 admitted")
    assert cluster.ledger.allocation("default/g3")["nvidia.com/gpu"] == a


async def test_failed_container_reports_exit_code_and_log_tail(cluster):
    script = "import sys; print('loading model'); print('CUDA error: no kernel image'); sys.exit(3)"
    cluster.store.create("pods", pod("crash", command=[sys.executable, "-c", script], restart="Never",
                                     tolerations=[], terminationMessagePolicy="FallbackToLogsOnError"),
                         namespace="default")
    p = await cluster.wait_for(lambda: (x := cluster.pod("default", "crash")) and
                               x["status"].get("phase") == "Failed" and x, 20, what="phase Failed")
    term = p["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["message"] == "loading model\nCUDA error: no kernel image"
    assert p["spec"]["nodeName"] == "cpu-a"


async def test_termination_message_file_and_init_containers(cluster):
    init = {"name": "probe", "image": "python:3.11",
            "command": [sys.executable, "-c", "print('probe ok')"]}
    script = "import os; open(os.environ['GPUSPAWNER_SIM_TERMINATION_LOG'], 'w').write('all done')"
    p = pod("job", command=[sys.executable, "-c", script], restart="OnFailure", tolerations=[])
    p["spec"]["initContainers"] = [init]
    cluster.store.create("pods", p, namespace="default")
    done = await cluster.wait_for(lambda: (x := cluster.pod("default", "job")) and
                                  x["status"].get("phase") == "Succeeded" and x, 20, what="phase Succeeded")
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"], term["message"]) == (0, "Completed", "all done")
    init_state = done["status"]["initContainerStatuses"][0]["state"]["terminated"]
    assert init_state["exitCode"] == 0
    assert _cond(done, "Initialized")["status"] == "True"


async def test_missing_command_is_a_container_error(cluster):
    cluster.store.create("pods", pod("nocmd", tolerations=[]), namespace="default")
    p = await cluster.wait_for(
        lambda: (x := cluster.pod("default", "nocmd")) and (x["status"].get("containerStatuses") or [{}])[0]
        .get("state", {}).get("waiting", {}).get("reason") == "CreateContainerError" and x, 10,
        what="CreateContainerError")
    assert "no command specified" in p["status"]["containerStatuses"][0]["state"]["waiting"]["message"]


async def test_stand_in_answers_http_on_the_pod_ip():
    async with SimCluster(manifests=MANIFESTS, stand_in=True) as c:
        c.store.create("pods", pod("many", args=["jupyterhub-singleuser"], tolerations=[]), namespace="default")
        p = await c.wait_for(_ready(c, "many"), 15, what="stand-in Ready")
        assert await asyncio.to_thread(_get, f"http://{p['status']['podIP']}:8888/user/x/api") == 200


async def test_kubernetes_client_sees_the_cluster(cluster, tmp_path):
    from kubernetes_asyncio import client, config

    path = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    api_client = await config.new_client_from_config(config_file=str(path))
    async with api_client:
        v1 = client.CoreV1Api(api_client)
        nodes = await v1.list_node()
        assert sorted(n.metadata.name for n in nodes.items) == ["cpu-a", "gpu-a"]
        await v1.create_namespaced_pod("default", pod("via-http", gpus=3, command=["sleep", "5"]))
        await cluster.wait_for(lambda: _events(cluster, "via-http", "FailedScheduling"), 10, what="event")
        events = await v1.list_namespaced_event("default", field_selector="involvedObject.name=via-http")
        assert events.items[0].reason == "FailedScheduling"
        assert events.items[0].message.startswith("0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")


async def test_environment_follows_kubernetes_and_rewrites_0000(cluster):
    script = ("import os; print('|'.join(os.environ.get(k, '-') for k in "
              "('JUPYTERHUB_SERVICE_URL', 'MY_IP', 'MY_NAME', 'GREETING', 'HOSTNAME')))")
    p = pod("envy", args=[sys.executable, "-c", script], restart="Never", tolerations=[],
            env=[{"name": "JUPYTERHUB_SERVICE_URL", "value": "http://0.0.0.0:8888/user/ada/"},
                 {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                 {"name": "MY_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                 {"name": "GREETING", "value": "hi $(MY_NAME) $$(MY_NAME)"}])
    cluster.store.create("pods", p, namespace="default")
    done = await cluster.wait_for(lambda: (x := cluster.pod("default", "envy")) and
                                  x["status"].get("phase") == "Succeeded" and x, 20, what="phase Succeeded")
    ip = done["status"]["podIP"]
    line = cluster.logs("default", "envy").strip()
    assert line == f"http://{ip}:8888/user/ada/|{ip}|envy|hi envy $(MY_NAME)|envy"
    assert NVIDIA_ENV not in cluster.logs("default", "envy")


async def test_missing_secret_waits_then_starts_when_it_appears(cluster):
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hub-token", "key": "token"}}}]
    script = "import os; print('token=' + os.environ['TOKEN'])"
    cluster.store.create("pods", pod("needs-secret", command=[sys.executable, "-c", script], restart="Never",
                                     tolerations=[], env=env), namespace="default")

    def waiting_reason():
        x = cluster.pod("default", "needs-secret")
        st = (x["status"].get("containerStatuses") or [{}])[0].get("state", {})
        return st.get("waiting", {}).get("reason") == "CreateContainerConfigError" and x
    p = await cluster.wait_for(waiting_reason, 10, what="CreateContainerConfigError")
    assert p["status"]["phase"] == "Pending"
    assert p["status"]["containerStatuses"][0]["state"]["waiting"]["message"] == 'secret "hub-token" not found'
    cluster.store.create("secrets", {"metadata": {"name": "hub-token"}, "stringData": {"token": "s3cret"}},
                         namespace="default")
    await cluster.wait_for(lambda: cluster.pod("default", "needs-secret")["status"]["phase"] == "Succeeded", 20,
                           what="phase Succeeded")
    assert cluster.logs("default", "needs-secret") == "token=s3cret\n"


def test_pod_ips_are_never_those_of_live_pods():
    from testcluster.node.kubelet import IPAllocator, Kubelet

    ips = IPAllocator("127.9.0.1", "127.9.0.4")
    a, b, c = ips.take(), ips.take(), ips.take()
    assert (a, b, c) == ("127.9.0.1", "127.9.0.2", "127.9.0.3")
    ips.release(b)
    assert ips.take() == "127.9.0.4"
    assert ips.take() == "127.9.0.2"  # wrapped around, skipping the live 127.9.0.1
    with pytest.raises(RuntimeError, match="no free loopback address"):
        ips.take()
    with pytest.raises(ValueError, match="inside 127.0.0.0/8"):
        Kubelet(None, pod_subnet="10.0.0.0/16")


async def test_pod_log_is_served_like_kubectl_logs_reads_it(cluster):
    script = "print('hello from the pod'); print('second line')"
    cluster.store.create("pods", pod("talker", args=[sys.executable, "-c", script], restart="Never", tolerations=[]),
                         namespace="default")
    await cluster.wait_for(lambda: (x := cluster.pod("default", "talker")) and
                           x["status"].get("phase") == "Succeeded", 20, what="phase Succeeded")
    url = f"{cluster.url}/api/v1/namespaces/default/pods/talker/log"
    assert await asyncio.to_thread(_text, url) == (200, "hello from the pod\nsecond line\n")
    assert await asyncio.to_thread(_text, url + "?tailLines=1") == (200, "second line\n")
    status, body = await asyncio.to_thread(_text, url + "?container=nope")
    assert status == 400 and "container nope is not valid" in body
    if shutil.which("kubectl"):
        out = await asyncio.to_thread(
            subprocess.run, ["kubectl", "--server", cluster.url, "logs", "-n", "default", "talker"],
            capture_output=True, text=True, timeout=30)
        assert out.stdout == "hello from the pod\nsecond line\n", out.stderr


def _text(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
