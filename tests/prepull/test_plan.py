"""The pre-puller's plan: which images each pool warms, and the DaemonSet that warms them there."""

from __future__ import annotations

import re

import pytest

from gpuspawner.capacity.model import Taint
from gpuspawner.prepull.plan import (
    POOL_ANNOTATION,
    SPEC_ANNOTATION,
    PrepullSettings,
    daemonset,
    daemonset_name,
    plan,
    pool_images,
)
from tests.builders import gpu_offers, pool_view

# a profile whose own image needs CUDA 12.4, with a CUDA 11.8 choice and an undeclared one
PROFILE = {
    "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
    "profile_options": {"image": {"choices": {
        "cu124": {"display_name": "CUDA 12.4", "default": True},
        "cu118": {"kubespawner_override": {"image": "pt:cu118"}, "cuda": "11.8"},
        "plain": {"kubespawner_override": {"image": "jupyter/base:2026"}},
    }}},
}
OLD = pool_view("t4", "Tesla-T4", driver="470.82.01", cuda="11.4")  # too old for both CUDA images
NEW = pool_view("a100", "NVIDIA-A100-SXM4-80GB", driver="550.54.15", cuda="12.4")
MID = pool_view("l4", "NVIDIA-L4", driver="525.60.13", cuda="12.0")  # 11.8 fits, 12.4 needs 12.4's driver
SETTINGS = PrepullSettings(namespace="jhub", allowed_taint_keys=("nvidia.com/gpu",))


@pytest.mark.parametrize(
    "pool, images",
    [
        pytest.param(NEW, ("jupyter/base:2026", "pt:cu118", "pt:cu124"), id="new-driver-warms-every-image"),
        pytest.param(MID, ("jupyter/base:2026", "pt:cu118"), id="cuda-12.4-image-not-on-a-12.0-driver"),
        pytest.param(OLD, ("jupyter/base:2026",), id="only-the-undeclared-image-on-an-old-driver"),
    ],
)
def test_a_pool_warms_only_the_images_the_spawn_page_lets_run_there(pool, images):
    offers = gpu_offers([PROFILE], OLD, MID, NEW, policy="strict")
    assert pool_images(offers)[pool.id] == images


def test_a_pool_no_profile_offers_gets_no_images():
    only_a100 = {**PROFILE, "pools": {"include": ["a100:*"]}}
    offers = gpu_offers([only_a100], OLD, NEW, policy="strict")
    assert set(pool_images(offers)) == {NEW.id}


def test_the_daemonset_stays_inside_its_pool_with_the_pools_tolerations():
    tainted = pool_view("a100", "NVIDIA-A100-SXM4-80GB", taints=[Taint("nvidia.com/gpu", "present", "NoSchedule"),
                                                               Taint("spot", None, "NoSchedule")])
    ds = daemonset(tainted, ("pt:cu124",), SETTINGS)
    spec = ds["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "cloud.google.com/gke-nodepool", "operator": "In",
                                            "values": ["a100"]}]}]
    # the allowed taint is tolerated, the other (spot) is not: the puller goes where a server may go
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present",
                                    "effect": "NoSchedule"}]


def test_each_image_is_an_init_container_that_exits_then_a_pause_container_with_no_requests():
    ds = daemonset(NEW, ("a:1", "b:2"), PrepullSettings(namespace="jhub", priority_class="gpu-prepull"))
    spec = ds["spec"]["template"]["spec"]
    assert [c["image"] for c in spec["initContainers"]] == ["a:1", "b:2"]
    assert all(c["command"] == ["/bin/sh", "-c", "exit 0"] for c in spec["initContainers"])
    assert [c["image"] for c in spec["containers"]] == ["registry.k8s.io/pause:3.10"]
    for c in spec["initContainers"] + spec["containers"]:
        assert c["resources"]["requests"] == {"cpu": "0", "memory": "0"}
        assert c["securityContext"]["runAsNonRoot"] is True
    assert spec["priorityClassName"] == "gpu-prepull"
    assert spec["automountServiceAccountToken"] is False


def test_labels_selector_owner_and_annotations():
    owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hub", "uid": "u-1"}
    ds = daemonset(NEW, ("a:1",), PrepullSettings(namespace="jhub", owner=owner, labels={"app": "jupyterhub"}))
    meta = ds["metadata"]
    assert meta["namespace"] == "jhub"
    assert meta["labels"]["app.kubernetes.io/managed-by"] == "gpuspawner"
    assert meta["labels"]["app.kubernetes.io/component"] == "gpu-image-puller"
    assert meta["labels"]["app"] == "jupyterhub"
    assert meta["annotations"][POOL_ANNOTATION] == NEW.id
    assert meta["ownerReferences"] == [{**owner, "blockOwnerDeletion": False}]
    selector = ds["spec"]["selector"]["matchLabels"]
    assert selector.items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_the_spec_digest_changes_with_the_images_and_not_otherwise():
    a = daemonset(NEW, ("a:1",), SETTINGS)["metadata"]["annotations"][SPEC_ANNOTATION]
    assert daemonset(NEW, ("a:1",), SETTINGS)["metadata"]["annotations"][SPEC_ANNOTATION] == a
    assert daemonset(NEW, ("a:1", "b:1"), SETTINGS)["metadata"]["annotations"][SPEC_ANNOTATION] != a


@pytest.mark.parametrize(
    "pool_id",
    [
        pytest.param("a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu", id="plain"),
        pytest.param("x" * 300 + ":y:nvidia.com/gpu", id="very-long"),
        pytest.param("::", id="nothing-readable"),
        pytest.param("Ünïcode:GPU:amd.com/gpu", id="non-ascii"),
    ],
)
def test_names_are_dns_labels_and_distinct_per_pool(pool_id):
    name = daemonset_name(pool_id)
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63
    assert daemonset_name(pool_id + "2") != name


def test_plan_skips_pools_without_images_and_reports_unpinnable_pools():
    loose = pool_view(None, "NVIDIA-L4", id="default:nvidia-l4:nvidia.com/gpu", defining=())
    offers = gpu_offers([{"slug": "gpu", "kubespawner_override": {"image": "a:1"}}], NEW, loose)
    wanted, problems = plan(offers, (NEW, loose, OLD), SETTINGS)
    assert [p.pool_id for p in wanted.values()] == [NEW.id]
    assert len(problems) == 1 and loose.id in problems[0]
