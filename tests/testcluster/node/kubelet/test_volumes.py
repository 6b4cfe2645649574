"""Volume plugins: payloads, the atomic writer, a pod's volumes and its containers' mounts."""

import base64
import json
import os
import stat

import pytest

from testcluster.node.kubelet.volumes import PodVolumes, VolumeError, atomic_write, configmap_payload, container_mounts, secret_payload, service_account_token
from testcluster.node.kubelet.env import ConfigError

CM = {"data": {"a.conf": "A", "b": "B"}, "binaryData": {"bin": base64.b64encode(b"\x00\x01").decode()}}
SECRET = {"data": {"token": base64.b64encode(b"t0k").decode()}}


@pytest.mark.parametrize("source,obj,payload", [
    ({"name": "c"}, CM, {"a.conf": (b"A", 0o644), "b": (b"B", 0o644), "bin": (b"\x00\x01", 0o644)}),
    ({"name": "c", "items": [{"key": "b", "path": "sub/b.txt", "mode": 0o600}]}, CM, {"sub/b.txt": (b"B", 0o600)}),
    ({"name": "c", "optional": True}, None, {}),
    ({"name": "c", "optional": True, "items": [{"key": "zz", "path": "zz"}]}, CM, {}),
])
def test_configmap_payloads(source, obj, payload):
    assert configmap_payload(source, obj, 0o644) == payload


@pytest.mark.parametrize("make,message", [
    (lambda: configmap_payload({"name": "c"}, None, 0o644), 'configmap "c" not found'),
    (lambda: configmap_payload({"name": "c", "items": [{"key": "x", "path": "x"}]}, CM, 0o644),
     "configmap references non-existent config key: x"),
    (lambda: secret_payload({"secretName": "s"}, None, 0o644), 'secret "s" not found'),
    (lambda: secret_payload({"secretName": "s", "items": [{"key": "x", "path": "x"}]}, SECRET, 0o644),
     "references non-existent secret key: x"),
])
def test_payload_errors_are_the_plugins_words(make, message):
    with pytest.raises(VolumeError) as e:
        make()
    assert str(e.value) == message


def test_atomic_writer_layout_and_update(tmp_path):
    target = str(tmp_path / "v")
    atomic_write(target, {"a": (b"1", 0o644), "dir/b": (b"2", 0o600)})
    first = os.readlink(os.path.join(target, "..data"))
    assert first.startswith("..") and os.readlink(os.path.join(target, "a")) == "..data/a"
    assert os.readlink(os.path.join(target, "dir")) == "..data/dir"
    assert open(os.path.join(target, "dir", "b")).read() == "2"
    assert stat.S_IMODE(os.stat(os.path.join(target, "dir", "b")).st_mode) == 0o600
    atomic_write(target, {"a": (b"new", 0o644)})
    assert open(os.path.join(target, "a")).read() == "new"
    assert not os.path.lexists(os.path.join(target, "dir"))  # a stale entry goes
    assert not os.path.exists(os.path.join(target, first))    # so does the old timestamped dir
    with pytest.raises(VolumeError):
        atomic_write(target, {"../escape": (b"", 0o644)})


def test_service_account_token_is_a_jwt_with_the_bound_claims():
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pu"}}
    sa = {"metadata": {"name": "default", "uid": "su"}}
    token = service_account_token(pod, sa, "node-1", None, 600, now=1000)
    header, claims, sig = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(claims + "=="))
    assert body["sub"] == "system:serviceaccount:ns:default" and body["exp"] == 1600
    assert body["kubernetes.io"]["pod"] == {"name": "p", "uid": "pu"}
    assert json.loads(base64.urlsafe_b64decode(header + "=="))["alg"] == "RS256" and len(sig) > 300


def _pod_volumes(tmp_path, volumes, objects):
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"volumes": volumes, "containers": [{"name": "c", "resources": {"limits": {"cpu": "2"}}}]}}
    return PodVolumes(pod, str(tmp_path / "vols"), lambda plural, name: objects.get((plural, name)),
                          node="n", node_allocatable={"cpu": "8"}, disk_dir=str(tmp_path / "disks"))


def test_pod_volumes_set_up_and_report_failures(tmp_path):
    objects = {("configmaps", "cm"): CM, ("persistentvolumeclaims", "pending"): {"status": {"phase": "Pending"}},
               ("persistentvolumeclaims", "home"): {"spec": {"volumeName": "pv-1"}, "status": {"phase": "Bound"}},
               ("persistentvolumes", "pv-1"): {"spec": {"csi": {"driver": "x"}}}}
    pv = _pod_volumes(tmp_path, [
        {"name": "scratch", "emptyDir": {}}, {"name": "cfg", "configMap": {"name": "cm"}},
        {"name": "missing", "secret": {"secretName": "nope"}},
        {"name": "meta", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"containerName": "c",
                                                                                          "resource": "limits.cpu"}}]}},
        {"name": "wait", "persistentVolumeClaim": {"claimName": "pending"}},
        {"name": "home", "persistentVolumeClaim": {"claimName": "home"}},
        {"name": "nfs", "nfs": {"server": "x", "path": "/"}},
        {"name": "hp", "hostPath": {"path": str(tmp_path / "nope"), "type": "Directory"}},
    ], objects)
    failed, unprocessed = pv.set_up()
    assert failed == {"missing": 'secret "nope" not found',
                      "hp": f"hostPath type check failed: {tmp_path / 'nope'} is not a directory"}
    assert unprocessed == {"wait": "error processing PVC ns/pending: PVC is not bound",
                           "nfs": 'failed to get Plugin from volumeSpec for volume "nfs" err=no volume plugin matched'}
    assert sorted(pv.pending) == ["hp", "missing", "nfs", "wait"]
    assert stat.S_IMODE(os.stat(pv.volumes["scratch"].path).st_mode) == 0o777
    assert open(os.path.join(pv.volumes["meta"].path, "cpu")).read() == "2"
    assert pv.volumes["cfg"].read_only and not pv.volumes["scratch"].read_only
    assert pv.volumes["home"].path == str(tmp_path / "disks" / "pv-1")


def test_container_mounts_with_sub_paths(tmp_path):
    pv = _pod_volumes(tmp_path, [{"name": "cfg", "configMap": {"name": "cm"}}, {"name": "data", "emptyDir": {}}],
                      {("configmaps", "cm"): CM})
    assert pv.set_up() == ({}, {})
    spec = {"volumeMounts": [{"name": "cfg", "mountPath": "/etc/a.conf", "subPath": "a.conf"},
                             {"name": "data", "mountPath": "/home/u", "subPathExpr": "users/$(USER)", "readOnly": True}]}
    mounts = container_mounts(spec, pv.volumes, {"USER": "ada"})
    assert mounts[0].target == "/etc/a.conf" and mounts[0].read_only
    assert open(mounts[0].source).read() == "A" and "..data" not in mounts[0].source  # the file itself
    assert mounts[1].source == os.path.realpath(os.path.join(pv.volumes["data"].path, "users", "ada"))
    assert mounts[1].read_only and os.path.isdir(mounts[1].source)
    with pytest.raises(ConfigError, match="must not contain '..'"):
        container_mounts({"volumeMounts": [{"name": "data", "mountPath": "/x", "subPath": "../up"}]},
                             pv.volumes, {})
