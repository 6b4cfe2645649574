"""Storage API rules: defaulting, validation, admission and claim-to-volume matching."""

from __future__ import annotations

import pytest

from gpuspawner.sim import storage_api
from gpuspawner.sim.errors import ApiError
from gpuspawner.sim.store import Store
from tests.builders.sim import claim, storage_class, volume


def test_default_class_is_the_newest_marked_one_then_by_name():
    a = dict(storage_class("a", default=True), metadata=dict(storage_class("a", default=True)["metadata"],
                                                               creationTimestamp="2025-01-01T00:00:00Z"))
    b = dict(storage_class("b", default=True), metadata=dict(storage_class("b", default=True)["metadata"],
                                                               creationTimestamp="2025-02-01T00:00:00Z"))
    c = dict(storage_class("c", default=True), metadata=dict(storage_class("c", default=True)["metadata"],
                                                               creationTimestamp="2025-02-01T00:00:00Z"))
    assert storage_api.default_class([a, c, b])["metadata"]["name"] == "b"
    assert storage_api.default_class([storage_class("x")]) is None


def test_claims_get_the_default_class_and_the_protection_finalizer():
    store = Store()
    store.create("storageclasses", storage_class("standard", default=True))
    pvc = store.create("persistentvolumeclaims", claim("home"))
    assert pvc["spec"]["storageClassName"] == "standard"
    assert pvc["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    assert pvc["status"] == {"phase": "Pending"} and pvc["spec"]["volumeMode"] == "Filesystem"
    # "" asks for no class at all: the admission plugin leaves it
    assert store.create("persistentvolumeclaims", claim("raw", storage_class_name=""))["spec"]["storageClassName"] == ""
    pv = store.create("persistentvolumes", volume("v1"))
    assert pv["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["status"]["phase"] == "Pending" and pv["status"]["lastPhaseTransitionTime"]
    sc = store.get("storageclasses", "standard")
    assert (sc["reclaimPolicy"], sc["volumeBindingMode"]) == ("Delete", "WaitForFirstConsumer")


@pytest.mark.parametrize("plural, obj, message", [
    ("persistentvolumeclaims", {"metadata": {"name": "c"}, "spec": {}},
     'PersistentVolumeClaim "c" is invalid: [spec.accessModes: Required value: at least 1 access mode is required, '
     "spec.resources[storage]: Required value]"),
    ("persistentvolumes", {"metadata": {"name": "v"}, "spec": {"capacity": {"storage": "1Gi"},
                                                               "accessModes": ["ReadWriteSometimes"]}},
     'PersistentVolume "v" is invalid: [spec.accessModes: Unsupported value: "ReadWriteSometimes": supported values: '
     '"ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod", spec: Required value: must specify a '
     "volume type]"),
    ("storageclasses", {"metadata": {"name": "s"}, "provisioner": "x", "volumeBindingMode": "Lazy"},
     'StorageClass.storage.k8s.io "s" is invalid: volumeBindingMode: Unsupported value: "Lazy": supported values: '
     '"Immediate", "WaitForFirstConsumer"'),
    ("storageclasses", {"metadata": {"name": "s"}},
     'StorageClass.storage.k8s.io "s" is invalid: provisioner: Required value'),
], ids=["claim", "volume", "binding-mode", "no-provisioner"])
def test_invalid_storage_objects_are_422(plural, obj, message):
    with pytest.raises(ApiError) as e:
        Store().create(plural, obj)
    assert (e.value.code, e.value.message) == (422, message)


def test_storage_class_fields_are_immutable():
    store = Store()
    store.create("storageclasses", storage_class("s"))
    with pytest.raises(ApiError) as e:
        store.patch("storageclasses", "s", {"provisioner": "other", "volumeBindingMode": "Immediate"},
                    "application/merge-patch+json")
    assert e.value.message == ('StorageClass.storage.k8s.io "s" is invalid: [provisioner: Forbidden: updates to '
                               'provisioner are forbidden., volumeBindingMode: Invalid value: "Immediate": field is '
                               'immutable]')


def test_access_modes_print_short_and_in_order():
    assert storage_api.access_modes_string(["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]) == "RWO,RWX,RWOP"


def _available(pv):
    return dict(pv, metadata=dict(pv["metadata"], uid="pv-" + pv["metadata"]["name"]), status={"phase": "Available"})


def _pvc(name="c", **kw):
    c = claim(name, namespace="hub", **kw)
    c["metadata"]["uid"] = "uid-" + name
    return c


@pytest.mark.parametrize("volumes, pvc, labels, delay, want", [
    ([volume("big", size="100Gi", storage_class_name="s"), volume("small", size="5Gi", storage_class_name="s")],
     _pvc(size="2Gi", storage_class_name="s"), None, False, "small"),
    ([volume("tiny", size="1Gi", storage_class_name="s")], _pvc(size="2Gi", storage_class_name="s"), None, False,
     None),
    ([volume("other-class", storage_class_name="t")], _pvc(storage_class_name="s"), None, False, None),
    ([volume("rwo", storage_class_name="s")], _pvc(storage_class_name="s", modes=("ReadWriteMany",)), None, False,
     None),
    ([volume("zonal", storage_class_name="s", zone="a")], _pvc(storage_class_name="s"),
     {"topology.kubernetes.io/zone": "b"}, True, None),
    ([volume("zonal", storage_class_name="s", zone="a")], _pvc(storage_class_name="s"),
     {"topology.kubernetes.io/zone": "a"}, True, "zonal"),
    ([volume("wffc", storage_class_name="s")], _pvc(storage_class_name="s"), None, True, None),
    ([volume("mine", storage_class_name="other", claim_ref=("hub", "c"))], _pvc(storage_class_name="s"), None, True,
     "mine"),
    ([volume("theirs", storage_class_name="s", claim_ref=("hub", "d"))], _pvc(storage_class_name="s"), None, False,
     None),
], ids=["smallest-that-fits", "too-small", "class", "access-modes", "zone-conflict", "zone-fits",
        "controller-leaves-wffc-to-scheduler", "pre-bound-wins", "pre-bound-to-another"])
def test_find_matching_volume(volumes, pvc, labels, delay, want):
    got = storage_api.find_matching_volume(pvc, [_available(v) for v in volumes], labels, delay)
    assert (got["metadata"]["name"] if got else None) == want
