"""The real control plane (kube-apiserver, kube-controller-manager and kube-scheduler of
Kubernetes v1.37.2, embedded etcd) answers the real kubectl of the same version."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from testcluster import ControlPlane

ROOT = pathlib.Path(__file__).resolve().parents[2]
HUB = "system:serviceaccount:jhub:hub"


def test_ready_within_20_seconds(control_plane):
    print(f"ready in {control_plane.ready_seconds:.1f}s")
    assert control_plane.ready_seconds <= 20, f"ready after {control_plane.ready_seconds:.1f}s, over 20s"


def test_writes_kubeconfig_and_cluster_info(control_plane):
    info = control_plane.cluster_info
    assert info["server"] == control_plane.server
    for key in ("ca_file", "kubelet_client_cert_file", "kubelet_client_key_file", "kubelet_ca_file", "front_proxy_ca_file"):
        assert pathlib.Path(info[key]).is_file(), key
    assert control_plane.kubeconfig.is_file()


def test_kubectl_on_path_is_the_same_version(local_kubectl):
    version = json.loads(local_kubectl("version", "-o", "json").stdout)
    assert version["clientVersion"]["gitVersion"] == "v1.37.2"
    assert version["serverVersion"]["gitVersion"] == "v1.37.2"


def test_default_namespace_is_ready_for_workloads(local_kubectl):
    kubectl = local_kubectl
    kubectl("get", "serviceaccount", "default", "-n", "default")
    ca = json.loads(kubectl("get", "configmap", "kube-root-ca.crt", "-n", "default", "-o", "json").stdout)
    assert ca["data"]["ca.crt"].startswith("-----BEGIN CERTIFICATE-----")


@pytest.fixture(scope="module")
def hub_rbac(kubectl):
    """deploy/rbac.yaml applied as an admin would, for the hub's service account jhub/hub."""
    # test_hub_rbac.py (the hub run as this service account) may have made them already
    for args in (("create", "namespace", "jhub"), ("create", "serviceaccount", "hub", "-n", "jhub"),
                 ("create", "namespace", "other")):
        r = kubectl(*args, check=False)
        assert r.returncode == 0 or "already exists" in r.stderr.lower(), r.stderr
    return kubectl("apply", "-f", str(ROOT / "deploy" / "rbac.yaml")).stdout


def test_rbac_yaml_applies(hub_rbac):
    for line in (
        "clusterrole.rbac.authorization.k8s.io/gpuspawner-capacity-reader created",
        "clusterrolebinding.rbac.authorization.k8s.io/gpuspawner-capacity-reader created",
        "role.rbac.authorization.k8s.io/gpuspawner-claim-templates created",
        "rolebinding.rbac.authorization.k8s.io/gpuspawner-claim-templates created",
        "role.rbac.authorization.k8s.io/gpuspawner-servers created",
        "rolebinding.rbac.authorization.k8s.io/gpuspawner-servers created",
    ):
        # "created", or "unchanged" where the same file was applied before in this session
        assert line in hub_rbac or line.replace(" created", " unchanged") in hub_rbac, hub_rbac


# What deploy/rbac.yaml grants the hub's service account, and what it does not.
CAN_I = [
    ("list", "nodes", "jhub", True),
    ("watch", "nodes", "jhub", True),
    ("get", "nodes", "jhub", True),
    ("list", "pods", "other", True),
    ("watch", "pods", "other", True),
    ("list", "resourceslices.resource.k8s.io", "jhub", True),
    ("watch", "deviceclasses.resource.k8s.io", "jhub", True),
    ("list", "resourceclaims.resource.k8s.io", "other", True),
    ("create", "resourceclaimtemplates.resource.k8s.io", "jhub", True),
    ("delete", "resourceclaimtemplates.resource.k8s.io", "jhub", True),
    ("create", "resourceclaimtemplates.resource.k8s.io", "other", False),
    ("update", "resourceclaimtemplates.resource.k8s.io", "jhub", False),
    ("delete", "nodes", "jhub", False),
    ("patch", "nodes", "jhub", False),
    ("create", "pods", "other", False),
    ("delete", "pods", "other", False),
    # KubeSpawner's own, in the servers' namespace only
    ("create", "pods", "jhub", True),
    ("watch", "events", "jhub", True),
    ("create", "persistentvolumeclaims", "jhub", True),
    ("list", "secrets", "other", False),
    ("patch", "pods", "jhub", False),
]


@pytest.mark.parametrize(
    "verb,resource,namespace,allowed", CAN_I, ids=[f"{v}-{r}-{n}" for v, r, n, _ in CAN_I]
)
def test_hub_service_account_can_do_what_rbac_yaml_grants(hub_rbac, kubectl, verb, resource, namespace, allowed):
    r = kubectl("auth", "can-i", verb, resource, "-n", namespace, f"--as={HUB}", check=False)
    assert r.stdout.strip() == ("yes" if allowed else "no"), r.stdout + r.stderr
    assert r.returncode == (0 if allowed else 1)


def test_explain_reads_the_servers_openapi(kubectl):
    out = kubectl("explain", "pod.spec").stdout
    assert "KIND:       Pod" in out
    assert "containers\t<[]Container> -required-" in out


def test_resourceslices_are_served_in_resource_k8s_io_v1(kubectl):
    out = kubectl("api-resources", "--api-group=resource.k8s.io", "--no-headers").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines()}
    assert "resourceslices" in rows, out
    assert "resource.k8s.io/v1" in rows["resourceslices"], out


def test_server_side_apply_records_the_field_manager(kubectl):
    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: default\ndata:\n  a: '1'\n"
    kubectl("apply", "--server-side", "--field-manager=gpuspawner-test", "-f", "-", input=manifest)
    cm = json.loads(kubectl("get", "configmap", "ssa", "-n", "default", "-o", "json", "--show-managed-fields").stdout)
    managers = {(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]}
    assert ("gpuspawner-test", "Apply") in managers


def test_auth_whoami_is_the_admin(local_kubectl):
    who = json.loads(local_kubectl("auth", "whoami", "-o", "json").stdout)
    assert who["status"]["userInfo"]["username"] == "gpuspawner-admin"
    assert "system:masters" in who["status"]["userInfo"]["groups"]


def test_quantities_come_back_as_strings(kubectl):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "quantities", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    # numbers as a client may send them
                    "resources": {"requests": {"cpu": 0.5, "memory": 1073741824}, "limits": {"nvidia.com/gpu": 2}},
                }
            ]
        },
    }
    kubectl("create", "-f", "-", input=json.dumps(pod))
    raw = json.loads(kubectl("get", "--raw", "/api/v1/namespaces/default/pods/quantities").stdout)
    resources = raw["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "500m", "memory": "1073741824", "nvidia.com/gpu": "2"}
    assert resources["limits"] == {"nvidia.com/gpu": "2"}


def test_memory_limit_and_niceness_reach_the_control_plane_process(tmp_path):
    """What the benchmarks start their big cluster with: Go's soft memory limit (GOMEMLIMIT), as the
    API server's own metrics read it, and a lower CPU priority for the process and its session's
    scheduling group."""
    limit = 3 * 2**30
    with ControlPlane(tmp_path / "cp", memory_limit=limit, niceness=4) as cp:
        metrics = subprocess.run(["kubectl", f"--kubeconfig={cp.kubeconfig}", "get", "--raw", "/metrics"],
                                 capture_output=True, text=True, check=True, timeout=60).stdout
        seen = [float(line.split()[1]) for line in metrics.splitlines() if line.startswith("go_gc_gomemlimit_bytes ")]
        assert seen == [limit]
        assert os.getpriority(os.PRIO_PROCESS, cp.pid) == min(os.getpriority(os.PRIO_PROCESS, 0) + 4, 19)
        autogroup = pathlib.Path(f"/proc/{cp.pid}/autogroup")
        if autogroup.exists():  # a kernel with autogroups
            assert autogroup.read_text().split()[-1] == "4"


@pytest.mark.parametrize("limit", [0, -1], ids=["zero", "negative"])
def test_a_memory_limit_that_is_no_size_is_refused(tmp_path, limit):
    with pytest.raises(ValueError, match="positive number of bytes"):
        ControlPlane(tmp_path, memory_limit=limit)
