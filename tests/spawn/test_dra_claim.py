"""The claim a DRA spawn gets: CEL selectors for the pool's product and drivers, the template, its
name, the pod's fields, the probe and which templates are left unused."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.capacity.dra_objects import class_record, dra_node, slice_record
from gpuspawner.capacity.dra_accounts import DraAccounts
from gpuspawner.cuda import decide
from gpuspawner.cuda.image import image_cuda
from gpuspawner.spawn import dra_claim
from gpuspawner.spawn.cuda_fit import pool_fit
from gpuspawner.spawn.probe_container import probe_container
from tests.builders.dra import device_class, gpu_device, group_node, mig_device, resource_slice

CFG = CapacityConfig()
Q = "device.attributes['gpu.nvidia.com']"


def dra_versions() -> list[str]:
    """The Kubernetes versions kubernetes-validate bundles that serve resource.k8s.io/v1 (1.34+)."""
    schema_dir = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    found = {d.name.split("-")[0].lstrip("v") for d in schema_dir.iterdir() if d.name.endswith("-local-strict")}
    ordered = sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))
    return [v for v in ordered if tuple(int(x) for x in v.split(".")[:2]) >= (1, 34)]


DRA_VERSIONS = dra_versions()


def pool_of(*nodes: tuple[str, list[dict]]):
    """The one DRA pool of ``nodes`` ((name, devices) in group dra-a100), through the real ledger."""
    ledger = DraAccounts()
    for c in (device_class("gpu.nvidia.com", device_type="gpu"), device_class("mig.nvidia.com", device_type="mig")):
        ledger.upsert_class(class_record(c))
    for name, devices in nodes:
        ledger.upsert_node(dra_node(group_node(name, "dra-a100"), CFG.node_group_labels, CFG.is_gpu_resource))
        ledger.upsert_slice(slice_record(resource_slice(f"{name}-s", name, devices), CFG.dra_drivers))
    (pool,) = ledger.ledger.pools()
    return pool


def gpus(n=2, **kw):
    return [gpu_device(f"gpu-{i}", **kw) for i in range(n)]


def fit_of(pool, cuda="12.4", policy="minor"):
    return pool_fit(image_cuda({"cuda": cuda}, name="pytorch"), pool, policy, decide)


def test_product_selectors_full_gpu_and_mig():
    full = pool_of(("g1", gpus()))
    assert dra_claim.product_selectors(full) == [f"{Q}.type == 'gpu'", f"{Q}.productName == 'NVIDIA A100-SXM4-80GB'"]
    mig = pool_of(("m1", [mig_device("gpu-0-mig-0", "2g.20gb")]))
    assert dra_claim.product_selectors(mig) == [f"{Q}.type == 'mig'", f"{Q}.productName == 'NVIDIA A100-SXM4-80GB'",
                                          f"{Q}.profile == '2g.20gb'"]


def test_cel_strings_are_escaped():
    assert dra_claim.cel_string("O'Brien\\GPU") == "'O\\'Brien\\\\GPU'"


def floor(attr, version):
    return f"!('{attr}' in {Q}) || {Q}.{attr}.compareTo(semver('{version}')) >= 0"


@pytest.mark.parametrize(
    "nodes, cuda, policy, expected",
    [
        # every node fits: still a floor at the lowest known-good driver, for devices not seen yet
        ([("a", "570.172.08", "12.8.0"), ("b", "550.54.15", "12.4.0")], "12.4", "strict",
         floor("cudaDriverVersion", "12.4.0")),
        # the 12.2 node fails under strict: the floor keeps the claim on the 12.8 node
        ([("a", "570.172.08", "12.8.0"), ("b", "535.183.01", "12.2.0")], "12.4", "strict",
         floor("cudaDriverVersion", "12.8.0")),
        # minor-version compatibility lets 12.2 run a 12.4 image (with a caveat): both fit
        ([("a", "570.172.08", "12.8.0"), ("b", "535.183.01", "12.2.0")], "12.4", "minor",
         floor("cudaDriverVersion", "12.2.0")),
        # an 11.4 driver is below the 12.x family floor: excluded, the 12.2 one kept
        ([("a", "470.82.01", "11.4.0"), ("b", "535.183.01", "12.2.0")], "12.4", "minor",
         floor("cudaDriverVersion", "12.2.0")),
    ],
    ids=["all-fit", "strict-excludes-old", "minor-keeps-old", "below-family-floor"],
)
def test_cuda_selector_floor(nodes, cuda, policy, expected):
    pool = pool_of(*((n, gpus(driver=d, cuda=c)) for n, d, c in nodes))
    assert dra_claim.cuda_selector(pool, fit_of(pool, cuda, policy)) == expected


def test_cuda_selector_when_no_floor_separates_them():
    """An admin's check that fails one driver in the middle: that driver is excluded by name."""
    pool = pool_of(("a", gpus(driver="535.183.01", cuda="12.2.0")), ("b", gpus(driver="550.54.15", cuda="12.4.0")),
                   ("c", gpus(driver="570.172.08", cuda="12.8.0")))
    image = image_cuda({"cuda": "12.0"}, name="x")

    def check(img, node, policy):
        v = decide(img, node, policy)
        return v if node.driver != "550.54.15" else type(v)("fail", "site", "blocked here", "", None, node.driver)

    fit = pool_fit(image, pool, "minor", check)
    assert dra_claim.cuda_selector(pool, fit) == (
        f"!('driverVersion' in {Q}) || ({Q}.driverVersion.compareTo(semver('550.54.15')) != 0)")


def test_no_cuda_selector_without_a_declaration_or_when_refused():
    pool = pool_of(("a", gpus(driver="470.82.01", cuda="11.4.0")))
    assert dra_claim.cuda_selector(pool, None) is None
    assert dra_claim.cuda_selector(pool, pool_fit(image_cuda(None), pool, "minor", decide)) is None
    assert fit_of(pool, "12.4").refused and dra_claim.cuda_selector(pool, fit_of(pool, "12.4")) is None


def test_template_for_a_pool_count_and_driver_requirement():
    pool = pool_of(("g1", gpus(4)), ("g2", gpus(4)))
    t = dra_claim.claim_template(pool, 2, "jhub", fit_of(pool))
    assert (t["apiVersion"], t["kind"], t["metadata"]["namespace"]) == ("resource.k8s.io/v1", "ResourceClaimTemplate", "jhub")
    assert t["metadata"]["labels"] == dra_claim.TEMPLATE_LABELS == t["spec"]["metadata"]["labels"]
    assert t["metadata"]["annotations"] == {"gpuspawner.io/pool": pool.id, "gpuspawner.io/gpus": "2"}
    (request,) = t["spec"]["spec"]["devices"]["requests"]
    exprs = [s["cel"]["expression"] for s in request["exactly"]["selectors"]]
    assert request["name"] == "gpus"
    assert {k: v for k, v in request["exactly"].items() if k != "selectors"} == {
        "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
    assert exprs == dra_claim.product_selectors(pool) + [floor("cudaDriverVersion", "12.4.0")]
    assert "extendedResourceName" not in str(t)


def test_template_names_are_deterministic_dns_labels():
    pool = pool_of(("g1", gpus(8)))
    a = dra_claim.claim_template(pool, 2, "jhub")["metadata"]["name"]
    assert a == dra_claim.claim_template(pool, 2, "other")["metadata"]["name"]  # same pool, count, selectors
    b = dra_claim.claim_template(pool, 4, "jhub")["metadata"]["name"]
    c = dra_claim.claim_template(pool, 2, "jhub", fit_of(pool))["metadata"]["name"]  # + a CUDA selector
    assert len({a, b, c}) == 3
    for name in (a, b, c):
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name
    assert a.startswith("gpuspawner-dra-a100-nvidia-a100-sxm4-80gb-2-")


@pytest.mark.parametrize("version", DRA_VERSIONS)
def test_templates_validate_strictly(version):
    full = pool_of(("g1", gpus(4, driver="535.183.01", cuda="12.2.0")), ("g2", gpus(4)))
    mig = pool_of(("m1", [mig_device(f"gpu-0-mig-{i}") for i in range(7)]))
    for pool, fit in ((full, fit_of(full, "12.4", "strict")), (mig, fit_of(mig)), (full, None)):
        kubernetes_validate.validate(dra_claim.claim_template(pool, 2, "jhub", fit), version, strict=True)


def test_versions_serving_dra_are_checked():
    assert DRA_VERSIONS and DRA_VERSIONS[0] == "1.34.0"


def test_requested_count_must_be_positive():
    with pytest.raises(ValueError):
        dra_claim.device_request(pool_of(("g1", gpus())), 0)


def test_merge_named_keeps_the_admins_claims():
    admin = [{"name": "nic", "resourceClaimTemplateName": "rdma"}, {"name": dra_claim.CLAIM_NAME, "resourceClaimTemplateName": "old"}]
    ours = dra_claim.pod_resource_claim("gpuspawner-x-2-abc")
    assert dra_claim.merge_named(admin, ours) == [admin[0], ours]
    assert dra_claim.merge_named(None, dra_claim.container_claim()) == [{"name": dra_claim.CLAIM_NAME}]


@pytest.mark.parametrize("devices, expect", [(gpus(4), "3"), ([mig_device("m0"), mig_device("m1")], "1")],
                         ids=["whole-gpus", "mig"])
def test_probe_uses_the_claim(devices, expect):
    pool = pool_of(("g1", devices))
    probe = probe_container(image_cuda({"cuda": "12.4"}), 3, pool.resource, "minor", "img", product=pool.product)
    out = dra_claim.probe_with_claim(probe, pool, 3)
    assert out["resources"] == {"claims": [{"name": dra_claim.CLAIM_NAME}]}
    assert out["args"][out["args"].index("--expect-gpus") + 1] == expect
    assert out["name"] == probe["name"] and out["command"] == probe["command"]


def tmpl(name, created="2026-01-01T00:00:00Z", labels=None):
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "labels": dra_claim.TEMPLATE_LABELS if labels is None else labels}}


def pod_using(template):
    return {"spec": {"resourceClaims": [dra_claim.pod_resource_claim(template)]}}


def test_unused_templates():
    now = 1767225600.0 + 3600  # 2026-01-01T01:00:00Z
    templates = [tmpl("used-by-pod"), tmpl("spawning"), tmpl("young", "2026-01-01T00:59:30Z"), tmpl("stale"),
                 tmpl("not-ours", labels={"app": "x"})]
    pods = [pod_using("used-by-pod"), {"spec": {}}]
    assert dra_claim.unused_templates(templates, pods, {"spawning"}, now, grace=120) == ["stale"]


# --- the selectors as kube-scheduler's DRA allocator evaluates them (the session's control plane):
# each device alone on a node of its own, a claim with the selectors, pinned to that node


async def selected(kubeconfig, expressions, devices):
    """For each device: does kube-scheduler allocate it to a claim with ``expressions``?"""
    from tests.builders.dra import claim_template, device_class, request
    from tests.builders.scheduling import on_node, real_scheduler
    from tests.testcluster.scheduler_agrees import SERVERS_NS

    names = [f"cel-{i}" for i in range(len(devices))]
    any_nvidia = device_class("any.gpu.nvidia.com")  # the driver only: the selectors alone decide
    slices = [resource_slice(f"{n}-slice", n, [d]) for n, d in zip(names, devices)]
    out = []
    async with real_scheduler(kubeconfig, [group_node(n) for n in names], slices, [any_nvidia]) as scheduler:
        for i, n in enumerate(names):
            template = claim_template(f"cel-{i}", request(cls="any.gpu.nvidia.com", selectors=expressions),
                                      namespace=SERVERS_NS)
            spec = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"cel-{i}"}]}
            pod = on_node(n, spec, resources={"claims": [{"name": "gpu"}]})
            out.append(await scheduler.binds(pod, template))
            await scheduler.h.res.delete_namespaced_resource_claim_template(f"cel-{i}", SERVERS_NS)
    return out


async def test_product_selectors_take_the_pools_devices_only(real_cluster):
    a100, h100 = gpu_device("gpu-0"), gpu_device("gpu-1", "NVIDIA H100 80GB HBM3")
    mig, other_mig = mig_device("gpu-2-mig-0", "1g.10gb"), mig_device("gpu-2-mig-1", "3g.40gb")
    full = dra_claim.product_selectors(pool_of(("g1", gpus())))
    one_g = dra_claim.product_selectors(pool_of(("m1", [mig_device("gpu-0-mig-0", "1g.10gb")])))
    assert await selected(real_cluster, full, [a100, h100, mig]) == [True, False, False]
    assert await selected(real_cluster, one_g, [a100, mig, other_mig]) == [False, True, False]


async def test_cuda_floor_takes_fitting_drivers_and_devices_without_the_attribute(real_cluster):
    pool = pool_of(("a", gpus(driver="570.172.08", cuda="12.8.0")), ("b", gpus(driver="535.183.01", cuda="12.2.0")))
    (floor_expr,) = [dra_claim.cuda_selector(pool, fit_of(pool, "12.4", "strict"))]
    new, old = gpu_device("gpu-0", driver="570.172.08", cuda="12.8.0"), gpu_device("gpu-0", cuda="12.2.0")
    newer = gpu_device("gpu-0", driver="580.65.06", cuda="13.0.0")
    unknown = gpu_device("gpu-0")
    del unknown["attributes"]["cudaDriverVersion"]
    assert await selected(real_cluster, [floor_expr], [new, old, newer, unknown]) == [True, False, True, True]


async def test_excluded_drivers_are_left_out_one_by_one(real_cluster):
    expr = f"!('driverVersion' in {Q}) || ({Q}.driverVersion.compareTo(semver('550.54.15')) != 0)"
    got = await selected(real_cluster, [expr], [gpu_device("gpu-0", driver="550.54.15"),
                                                gpu_device("gpu-0", driver="570.172.8")])
    assert got == [False, True]
