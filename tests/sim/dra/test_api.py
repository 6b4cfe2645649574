"""resource.k8s.io/v1 through the store: defaulting, validation messages, immutability, status rules."""

import pytest

from gpuspawner.sim.errors import ApiError
from gpuspawner.sim.store import Store
from tests.builders.dra import claim, claim_template, device_classes, gpu_slice, request


@pytest.fixture
def store():
    s = Store()
    for c in device_classes().values():
        s.create("deviceclasses", c)
    return s


def invalid(store, plural, obj, ns=None):
    with pytest.raises(ApiError) as e:
        store.create(plural, obj, namespace=ns)
    assert e.value.code == 422
    return e.value


def test_claim_defaults_mode_and_count_and_drops_status(store):
    c = claim("c", {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}})
    c["status"] = {"reservedFor": [{"resource": "pods", "name": "x", "uid": "1"}]}
    out = store.create("resourceclaims", c, "default")
    assert out["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    assert out["status"] == {}
    assert out["apiVersion"] == "resource.k8s.io/v1"


CLAIM_ERRORS = [
    ({"name": "gpu"}, "spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` is required"),
    ({"name": "gpu", "exactly": {}}, "spec.devices.requests[0].exactly.deviceClassName: Required value"),
    ({"name": "gpu", "exactly": {"deviceClassName": "c", "count": -1}},
     "spec.devices.requests[0].exactly.count: Invalid value: -1: must be greater than zero"),
    ({"name": "gpu", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}},
     'spec.devices.requests[0].exactly.allocationMode: Unsupported value: "Some": supported values: "All", "ExactCount"'),
    ({"name": "gpu", "exactly": {"deviceClassName": "c", "allocationMode": "All", "count": 2}},
     "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'"),
    ({"name": "GPU", "exactly": {"deviceClassName": "c"}}, 'spec.devices.requests[0].name: Invalid value: "GPU": a lowercase RFC 1123 label'),
    ({"name": "gpu", "exactly": {"deviceClassName": "c", "selectors": [{"cel": {"expression": "device.driver"}}]}},
     "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value"),
    ({"name": "gpu", "exactly": {"deviceClassName": "c", "selectors": [{"cel": {"expression": "nosuch()"}}]}},
     "undeclared reference to 'nosuch'"),
]


@pytest.mark.parametrize("req,message", CLAIM_ERRORS, ids=[m[:50] for _, m in CLAIM_ERRORS])
def test_claim_validation_messages(store, req, message):
    err = invalid(store, "resourceclaims", claim("c", req), "default")
    assert err.message.startswith('ResourceClaim.resource.k8s.io "c" is invalid: ')
    assert message in err.message
    assert err.details["group"] == "resource.k8s.io"


def test_duplicate_request_names(store):
    err = invalid(store, "resourceclaims", claim("c", request("gpu"), request("gpu")), "default")
    assert 'spec.devices.requests[1]: Duplicate value: "gpu"' in err.message


def test_claim_spec_is_immutable_and_template_too(store):
    c = store.create("resourceclaims", claim("c"), "default")
    c["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    with pytest.raises(ApiError, match="spec: Invalid value: null: field is immutable"):
        store.replace("resourceclaims", "c", c, "default")
    t = store.create("resourceclaimtemplates", claim_template("t"), "default")
    t["spec"]["spec"]["devices"]["requests"][0]["name"] = "other"
    with pytest.raises(ApiError, match="field is immutable"):
        store.replace("resourceclaimtemplates", "t", t, "default")


def test_reserved_for_needs_an_allocation_and_an_allocation_cannot_be_rewritten(store):
    c = store.create("resourceclaims", claim("c"), "default")
    c["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    with pytest.raises(ApiError, match="status.reservedFor: Forbidden: may not be specified when `allocated` is not set"):
        store.replace("resourceclaims", "c", c, "default", subresource="status")
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
    c["status"] = {"allocation": {"devices": {"results": [result]}}}
    c = store.replace("resourceclaims", "c", c, "default", subresource="status")
    c["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    with pytest.raises(ApiError, match="status.allocation: Invalid value: null: field is immutable"):
        store.replace("resourceclaims", "c", c, "default", subresource="status")
    c["status"] = {}  # deallocation is allowed
    assert store.replace("resourceclaims", "c", c, "default", subresource="status")["status"] == {}


SLICE_ERRORS = [
    (lambda s: s["spec"].pop("nodeName"),
     "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"),
    (lambda s: s["spec"].update(allNodes=True),
     "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set"),
    (lambda s: s["spec"].pop("driver"), "spec.driver: Required value"),
    (lambda s: s["spec"]["pool"].update(resourceSliceCount=0),
     "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero"),
    (lambda s: s["spec"]["devices"][0]["attributes"].update(cudaDriverVersion={"version": "12.8"}),
     'spec.devices[0].attributes[cudaDriverVersion].version: Invalid value: "12.8": must be a string compatible with semver.org spec 2.0.0'),
    (lambda s: s["spec"]["devices"][0]["attributes"].update(type={"string": "gpu", "int": 1}),
     "spec.devices[0].attributes[type]: Invalid value"),
    (lambda s: s["spec"]["devices"][1].update(name="gpu-0"), 'spec.devices[1]: Duplicate value: "gpu-0"'),
]


@pytest.mark.parametrize("mutate,message", SLICE_ERRORS, ids=[m[:50] for _, m in SLICE_ERRORS])
def test_slice_validation_messages(store, mutate, message):
    rs = gpu_slice("n1")
    mutate(rs)
    assert message in invalid(store, "resourceslices", rs).message


def test_slice_pool_name_and_driver_are_immutable(store):
    rs = store.create("resourceslices", gpu_slice("n1"))
    rs["spec"]["pool"]["name"] = "other"
    with pytest.raises(ApiError, match="spec.pool.name: Invalid value: \"other\": field is immutable"):
        store.replace("resourceslices", rs["metadata"]["name"], rs)


def test_device_class_validation(store):
    bad = {"metadata": {"name": "x"}, "spec": {"extendedResourceName": "kubernetes.io/gpu",
                                               "selectors": [{"cel": {"expression": "1"}}]}}
    msg = invalid(store, "deviceclasses", bad).message
    assert "must evaluate to bool or the unknown type, not int" in msg
    assert 'spec.extendedResourceName: Invalid value: "kubernetes.io/gpu": must be a valid extended resource name' in msg


def test_not_found_names_the_group(store):
    with pytest.raises(ApiError, match='resourceclaims.resource.k8s.io "nope" not found'):
        store.get("resourceclaims", "nope", "default")


def test_slices_select_by_node_name_and_driver(store):
    store.create("resourceslices", gpu_slice("n1"))
    store.create("resourceslices", gpu_slice("n2"))
    items = store.list("resourceslices", field_selector="spec.nodeName=n2,spec.driver=gpu.nvidia.com")["items"]
    assert [i["spec"]["nodeName"] for i in items] == ["n2"]
