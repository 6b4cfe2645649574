"""``gpuspawner doctor`` against the test cluster, one problem per cluster file.

Each cluster file is loaded by the node agent into a control plane of this module's own (Kubernetes'
API server, scheduler and controllers; each case's objects are the whole cluster, deleted after it);
most cases run the command in-process (``commands.doctor.run``), two run the real command line as a
subprocess.  Missing RBAC is served by a tiny API stand-in that forbids what a namespaced Role forbids.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gpuspawner.commands import doctor
from testcluster import ControlPlane
from testcluster.nodeagent.client import KNOWN, Client
from tests.builders.nodeagent import loaded, wait_for, write_cluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = ROOT / "tests" / "fixtures" / "clusters"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuspawner doctor")
    doctor.add_arguments(parser)
    return parser.parse_args(list(argv))


async def run_doctor(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = await doctor.run(parse(*argv), out, err)
    return rc, out.getvalue(), err.getvalue()


async def run_json(*argv: str) -> tuple[int, dict]:
    rc, out, err = await run_doctor(*argv, "--json")
    return rc, json.loads(out)


def found(doc: dict) -> dict[str, set[str]]:
    """finding id -> names of the objects it concerns"""
    out: dict[str, set[str]] = {}
    for f in doc["findings"]:
        out.setdefault(f["id"], set()).update(o["name"] for o in f["objects"])
    return out


@dataclass
class Loaded:
    """A cluster file on the module's control plane: the admin kubeconfig and the API server's URL."""

    kubeconfig: str
    server: str
    agent: Any


@pytest.fixture(scope="module")
def doctor_plane(tmp_path_factory):
    """A control plane of this module's own: the doctor reads the whole cluster."""
    with ControlPlane(tmp_path_factory.mktemp("doctor-plane")) as cp:
        yield cp


@pytest.fixture
async def cluster(request, doctor_plane):
    async with loaded(doctor_plane.kubeconfig, CLUSTERS / f"doctor-{request.param}.yaml") as agent:
        yield Loaded(str(doctor_plane.kubeconfig), doctor_plane.server, agent)


HUB_CONFIG = """
c = get_config()
c.GPUSpawner.gpu_profiles = [
    {{
        "slug": "gpu",
        "display_name": "GPU server",
        "cuda": {cuda!r},
        "kubespawner_override": {{"image": "quay.io/jupyter/pytorch-notebook:cuda12-2025-01-06"}},
    }},
]
c.GPUSpawner.gpu_tolerated_taint_keys.append("dedicated")
"""


def write_config(tmp_path: Path, cuda: str = "12.4") -> str:
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(textwrap.dedent(HUB_CONFIG.format(cuda=cuda)))
    return str(path)


# ---------------------------------------------------------------------------
# one cluster per problem


CASES = [
    # cluster file, expected {finding id: objects}, ids that must not appear
    ("healthy", {}, set()),
    ("no-allocatable", {"gpu-node-no-allocatable": {"gpu-broken-0", "amd-0"}}, {"no-gpu-nodes", "gfd-labels-missing"}),
    ("gfd-missing", {"gfd-labels-missing": {"ip-10-0-1-17.ec2.internal", "ip-10-0-1-18.ec2.internal"}}, set()),
    ("untolerated-taint", {"untolerated-gpu-taint": {"gpu-l4-0", "gpu-l4-1"}}, set()),
    ("node-state", {"gpu-node-not-ready": {"gpu-0"}, "gpu-node-cordoned": {"gpu-1"}}, {"untolerated-gpu-taint"}),
]


@pytest.mark.parametrize(
    "cluster, expected, absent", [pytest.param(c, e, a, id=c) for c, e, a in CASES], indirect=["cluster"]
)
async def test_each_problem_is_found(cluster, expected, absent):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig)
    got = found(doc)
    problems = {k: v for k, v in got.items() if k not in ("profile-checks-skipped",)}
    assert problems == expected
    assert not absent & set(got)
    assert rc == (1 if expected else 0)
    assert doc["summary"]["exit_code"] == rc
    assert doc["summary"]["ok"] is (rc == 0)
    # without --config the profile checks are skipped, and said so
    assert "profile-checks-skipped" in got


@pytest.mark.parametrize("cluster", ["dra"], indirect=True)
async def test_dra_problems_are_found(cluster):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--pending-after", "0")
    got = found(doc)
    assert rc == 1
    assert got["dra-no-deviceclass"] == {"dra-0"}
    assert got["dra-gpus-published-twice"] == {"both-0"}
    assert got["dra-claim-unallocated"] == {"forgotten"}
    (incomplete,) = [f for f in doc["findings"] if f["id"] == "dra-slices-incomplete"]
    assert incomplete["details"]["pools"] == ["gpu.nvidia.com/dra-1"]
    # DRA GPU nodes publish no extended resource: that is no device-plugin problem
    assert not {"gpu-node-no-allocatable", "no-gpu-nodes"} & set(got)
    assert doc["summary"]["dra"] == {"classes": 1, "slices": 3, "claims": 1}
    assert doc["summary"]["gpu_nodes"] == 3
    rc, out, _ = await run_doctor("--kubeconfig", cluster.kubeconfig)
    assert "Dynamic Resource Allocation (resource.k8s.io/v1): 1 DeviceClasses, 3 ResourceSlices, 1 ResourceClaims" in out
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig)
    assert "dra-claim-unallocated" not in found(doc)  # younger than the default 5m


@pytest.mark.parametrize("cluster", ["healthy"], indirect=True)
async def test_healthy_cluster_json_shape(cluster):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig)
    assert rc == 0
    assert set(doc) == {"findings", "summary"}
    s = doc["summary"]
    assert (s["errors"], s["warnings"], s["server"], s["nodes"], s["gpu_nodes"], s["pods"]) == (
        0, 0, cluster.server, 3, 2, 1)
    for f in doc["findings"]:
        assert set(f) == {"id", "severity", "summary", "fix", "objects", "details"}
        assert f["severity"] == "info"


@pytest.mark.parametrize("cluster", ["healthy"], indirect=True)
async def test_healthy_cluster_with_hub_config_has_no_finding_at_all(cluster, tmp_path):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--config", write_config(tmp_path, "12.4"))
    assert (rc, doc["findings"]) == (0, [])
    assert doc["summary"]["config"].endswith("jupyterhub_config.py")


@pytest.mark.parametrize("cluster", ["healthy"], indirect=True)
async def test_policy_and_check_come_from_the_hub_config(cluster, tmp_path):
    # CUDA 12.9 on driver 570 (CUDA 12.8) needs minor-version compatibility:
    # refused under the hub's strict policy, accepted when --cuda-policy overrides it
    path = write_config(tmp_path, "12.9")
    with open(path, "a") as f:
        f.write('c.GPUSpawner.cuda_policy = "strict"\nc.GPUSpawner.cuda_check = "gpuspawner.cuda:decide"\n')
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--config", path)
    assert rc == 1 and set(found(doc)) == {"image-driver-mismatch"}
    assert doc["summary"]["cuda_policy"] == "strict"
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--config", path, "--cuda-policy", "minor")
    assert (rc, doc["findings"]) == (0, [])


@pytest.mark.parametrize("cluster", ["pending"], indirect=True)
async def test_pending_gpu_pod(cluster):
    client = await Client(cluster.kubeconfig).open()

    async def unschedulable():
        p = await client.get(KNOWN["Pod"], "jupyter-bob", namespace="jhub")
        conds = p.get("status", {}).get("conditions") or []
        return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conds)

    try:
        await wait_for(unschedulable, "the scheduler to give up on jupyter-bob")
    finally:
        await client.close()
    # younger than the default threshold (5m): not reported yet
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig)
    assert "pod-pending-on-gpu" not in found(doc)
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--pending-after", "0")
    assert rc == 1
    (f,) = [f for f in doc["findings"] if f["id"] == "pod-pending-on-gpu"]
    assert f["objects"] == [{"kind": "Pod", "name": "jupyter-bob", "namespace": "jhub"}]
    assert f["details"]["requests"] == {"nvidia.com/gpu": 4}
    assert "Insufficient nvidia.com/gpu" in f["summary"]  # the scheduler's own message
    assert "No node has 4 x nvidia.com/gpu free" in f["fix"]


@pytest.mark.parametrize("cluster", ["old-driver"], indirect=True)
async def test_profile_image_fits_no_driver(cluster, tmp_path):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--config", write_config(tmp_path, "12.4"))
    assert rc == 1
    got = found(doc)
    assert got == {"image-driver-mismatch": {"gpu", "aks-t4-0", "aks-t4-1"}}
    (f,) = doc["findings"]
    assert f["severity"] == "error" and f["details"]["image_cuda"] == "12.4"
    assert "470.256.02" in f["summary"]
    # an image built for the node's CUDA fits
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--config", write_config(tmp_path, "11.4"))
    assert (rc, doc["findings"]) == (0, [])


@pytest.mark.parametrize("cluster", ["untolerated-taint"], indirect=True)
async def test_config_tolerated_keys_are_used(cluster, tmp_path):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--config", write_config(tmp_path))
    assert "untolerated-gpu-taint" not in found(doc)
    assert rc == 0


@pytest.mark.parametrize("cluster", ["healthy"], indirect=True)
async def test_pages_through_lists(cluster):
    rc, doc = await run_json("--kubeconfig", cluster.kubeconfig, "--page-size", "1")
    assert (rc, doc["summary"]["nodes"], doc["summary"]["pods"]) == (0, 3, 1)


@pytest.mark.parametrize("cluster", ["node-state"], indirect=True)
async def test_text_output_groups_by_severity(cluster):
    rc, out, err = await run_doctor("--kubeconfig", cluster.kubeconfig)
    assert rc == 1 and err == ""
    assert out.index("ERRORS (1)") < out.index("WARNINGS (1)") < out.index("INFO (1)")
    assert "  [gpu-node-not-ready] GPU node gpu-0 is not Ready" in out
    # fixes stay on one line, so their commands can be copied
    assert "    fix: kubectl uncordon gpu-1 (once its maintenance is over)\n" in out


# ---------------------------------------------------------------------------
# RBAC: a stand-in API that forbids what a namespaced hub Role forbids


def forbidden(what: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": f'{what} is forbidden: User "system:serviceaccount:jhub:hub" cannot list resource '
                       f'"{what}" in API group "" at the cluster scope'}
    return web.json_response(body, status=403)


@pytest.fixture
async def namespaced_api(request):
    """403 on cluster-wide lists; with ``request.param`` True it also answers
    SelfSubjectAccessReviews (denying everything), else 404 there."""
    reviews: list[dict] = []

    async def nodes(req):
        return forbidden("nodes")

    async def pods(req):
        return forbidden("pods")

    async def ssar(req):
        if not request.param:
            return web.json_response({"kind": "Status", "code": 404, "message": "not found"}, status=404)
        body = await req.json()
        reviews.append(body["spec"]["resourceAttributes"])
        return web.json_response({**body, "status": {"allowed": False, "reason": "no RBAC policy matched"}},
                                 status=201)

    async def sar(req):
        # the hub's Role: everything in its namespace, nothing at the cluster scope
        body = await req.json()
        reviews.append(body["spec"])
        allowed = "namespace" in body["spec"]["resourceAttributes"]
        return web.json_response({**body, "status": {"allowed": allowed}}, status=201)

    app = web.Application()
    app.router.add_get("/api/v1/nodes", nodes)
    app.router.add_get("/api/v1/pods", pods)
    app.router.add_post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", ssar)
    app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", reviews
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("namespaced_api", [True, False], ids=["access-review", "list-calls"], indirect=True)
async def test_rbac_missing(namespaced_api):
    url, reviews = namespaced_api
    rc, doc = await run_json("--server", url)
    assert rc == 1
    (f,) = [f for f in doc["findings"] if f["id"] == "rbac-missing"]
    assert f["severity"] == "error"
    denied = {(d["verb"], d["resource"]) for d in f["details"]["denied"]}
    assert {("list", "nodes"), ("list", "pods")} <= denied
    assert "deploy/rbac.yaml" in f["fix"]
    assert "checks-skipped" in found(doc)
    if reviews:
        assert {(r["verb"], r["resource"]) for r in reviews} == {
            ("get", "nodes"), ("list", "nodes"), ("watch", "nodes"), ("list", "pods"), ("watch", "pods")}
        assert all("namespace" not in r for r in reviews)


@pytest.mark.parametrize("namespaced_api", [True], indirect=True)
async def test_rbac_of_the_hub_service_account(namespaced_api):
    url, reviews = namespaced_api
    rc, doc = await run_json("--server", url, "--hub-service-account", "jhub/hub")
    assert rc == 1
    (f,) = [f for f in doc["findings"] if f["id"] == "rbac-missing"]
    assert f["details"]["subject"] == "the hub's service account system:serviceaccount:jhub:hub"
    assert {(d["verb"], d["resource"], d["namespace"]) for d in f["details"]["denied"]} == {
        ("get", "nodes", None), ("list", "nodes", None), ("watch", "nodes", None),
        ("list", "pods", None), ("watch", "pods", None)}
    assert {r["user"] for r in reviews} == {"system:serviceaccount:jhub:hub"}
    assert "system:serviceaccounts:jhub" in reviews[0]["groups"]
    # KubeSpawner's own rights in the hub's namespace are asked about too (and granted here)
    assert {(r["resourceAttributes"]["verb"], r["resourceAttributes"].get("namespace")) for r in reviews} >= {
        ("create", "jhub"), ("delete", "jhub")}


# ---------------------------------------------------------------------------
# cannot run: exit 2 with one line


def closed_port_url() -> str:
    """A loopback URL nothing listens on (a port just bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_unreachable_api_is_exit_2_with_one_line():
    url = closed_port_url()
    rc, out, err = await run_doctor("--server", url, "--timeout", "5")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and f"cannot reach the Kubernetes API at {url}" in err
    rc, out, err = await run_doctor("--server", url, "--timeout", "5", "--json")
    assert rc == 2 and json.loads(out)["summary"]["exit_code"] == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--pending-after", "soon"], "not a duration"),
        (["--hub-service-account", "hub"], "NAMESPACE/NAME"),
        (["--page-size", "0"], "--page-size"),
        (["--config", "/nonexistent/jupyterhub_config.py"], "no such file"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load Kubernetes credentials"),
    ],
    ids=["duration", "service-account", "page-size", "config-missing", "kubeconfig-missing"],
)
async def test_bad_input_is_exit_2(argv, message):
    rc, out, err = await run_doctor(*argv)
    assert rc == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


async def test_broken_hub_config_is_exit_2(tmp_path):
    path = tmp_path / "jupyterhub_config.py"
    path.write_text('c = get_config()\nc.GPUSpawner.gpu_profiles = [{"slug": "gpu", "cuda": 12.4}]\n')
    rc, out, err = await run_doctor("--server", closed_port_url(), "--config", str(path))
    assert rc == 2 and "quoted string" in err and "gpu_profiles[0]" in err
    path.write_text("c = get_config()\nraise RuntimeError('boom')\n")
    rc, out, err = await run_doctor("--server", closed_port_url(), "--config", str(path))
    assert rc == 2 and "RuntimeError: boom" in err


# ---------------------------------------------------------------------------
# the real command line


async def _cli(*argv: str, timeout: float = 120) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuspawner", "doctor", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(ROOT), env=env,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("cluster", ["no-allocatable"], indirect=True)
async def test_command_line(cluster, tmp_path):
    rc, out, err = await _cli("--kubeconfig", cluster.kubeconfig, "--json")
    assert rc == 1, err
    doc = json.loads(out)
    assert "gpu-node-no-allocatable" in found(doc)
    rc, out, err = await _cli("--pending-after", "later")
    assert rc == 2 and "not a duration" in err


def test_the_settings_former_section_name_is_read(tmp_path):
    """``c.GPUCapacitySettings.*`` (the settings class's former name) still configures the hub,
    so doctor reads it as the spawner does."""
    path = tmp_path / "jupyterhub_config.py"
    path.write_text(textwrap.dedent("""
        c = get_config()
        c.GPUCapacitySettings.gpu_profiles = [{"slug": "legacy", "cuda": "12.4"}]
        c.GPUCapacitySettings.gpu_resources = ["example.com/gpu"]
    """))
    hub, capacity = doctor.load_hub_config(str(path), None)
    assert hub.profiles == ("legacy",)
    assert capacity.gpu_resources == ("example.com/gpu",)


# -- culling configured: every NVIDIA GPU node's activity must reach the culler -----------------

CULL_NODES = [
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "labels": {"nvidia.com/gpu.product": "Tesla-T4"}},
     "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "2"}}},
    {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-a"},
     "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}},
]


async def _exporter_ready(kubeconfig: str) -> list[dict]:
    client = await Client(kubeconfig).open()
    try:
        _, pods = await client.list(KNOWN["Pod"], namespace="gpu-operator")
    finally:
        await client.close()
    return [p for p in pods
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]


async def fake_prometheus(hostnames: list[str]) -> tuple[web.AppRunner, str]:
    """Answers /api/v1/query as Prometheus does for doctor's ``count by (Hostname)`` query."""
    async def query(request: web.Request) -> web.Response:
        assert request.query["query"].startswith("count by (Hostname)")
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {"Hostname": h}, "value": [0, "1"]} for h in hostnames]}})
    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_cull_finds_gpu_nodes_without_a_dcgm_exporter(doctor_plane, tmp_path):
    kubeconfig = str(doctor_plane.kubeconfig)
    async with loaded(kubeconfig, write_cluster(tmp_path / "cull.yaml", CULL_NODES)):
        rc, doc = await run_json("--kubeconfig", kubeconfig, "--cull")
        assert found(doc)["cull-no-gpu-metrics"] == {"gpu-a"}  # the CPU node needs none
        (f,) = [f for f in doc["findings"] if f["id"] == "cull-no-gpu-metrics"]
        assert f["details"]["missing"] == "exporter" and rc == 1
        rc, doc = await run_json("--kubeconfig", kubeconfig)
        assert "cull-no-gpu-metrics" not in found(doc)  # culling not configured: not asked


async def test_cull_with_exporters_finds_nothing_and_prometheus_is_asked(doctor_plane, tmp_path):
    kubeconfig = str(doctor_plane.kubeconfig)
    async with loaded(kubeconfig, write_cluster(tmp_path / "cull.yaml", CULL_NODES), run_pods=True,
                      dcgm_exporter=True, workdir=str(tmp_path / "agent")):
        await wait_for(lambda: _exporter_ready(kubeconfig), "the exporter pod to be ready", timeout=60)
        rc, doc = await run_json("--kubeconfig", kubeconfig, "--cull")
        assert "cull-no-gpu-metrics" not in found(doc)
        runner, url = await fake_prometheus([])
        try:
            rc, doc = await run_json("--kubeconfig", kubeconfig, "--prometheus-url", url)
        finally:
            await runner.cleanup()
        (f,) = [f for f in doc["findings"] if f["id"] == "cull-no-gpu-metrics"]
        assert f["details"]["missing"] == "series" and f["objects"][0]["name"] == "gpu-a" and rc == 1
        runner, url = await fake_prometheus(["gpu-a"])
        try:
            rc, doc = await run_json("--kubeconfig", kubeconfig, "--prometheus-url", url)
        finally:
            await runner.cleanup()
        assert "cull-no-gpu-metrics" not in found(doc)
        rc, out, err = await run_doctor("--kubeconfig", kubeconfig, "--prometheus-url", closed_port_url())
        assert rc == 2 and "cannot query Prometheus at" in err and "Traceback" not in err
