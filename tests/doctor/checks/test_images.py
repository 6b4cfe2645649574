"""Profile images whose CUDA fits no (or not every) node's driver (doctor.checks.images)."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.config import CapacityConfig
from gpuspawner.cuda.image import image_cuda
from gpuspawner.doctor import checks
from gpuspawner.doctor.facts import HubFacts
from gpuspawner.doctor.facts import ProfileImage
from gpuspawner.spawn.tolerations import DEFAULT_TOLERATED_TAINT_KEYS
from tests.builders import GFD_A100_40GB
from tests.builders import GFD_T4_470, finding_ids, gpu_node

CONFIG = CapacityConfig()


def hub_with(*images, policy="minor"):
    return HubFacts(tolerated_taint_keys=DEFAULT_TOLERATED_TAINT_KEYS, images=tuple(images),
                    cuda_policy=policy, source="jupyterhub_config.py")


def img(cuda, profile="gpu", image="img:1"):
    return ProfileImage(profile, image, image_cuda(cuda, name=image))


@pytest.mark.parametrize(
    "nodes, image, policy, expected",
    [
        pytest.param([gpu_node()], img("12.4"), "minor", [], id="backward-ok"),
        pytest.param([gpu_node(labels=GFD_T4_470)], img("12.4"), "minor", ["image-driver-mismatch"],
                     id="driver-470-cuda-12"),
        pytest.param([gpu_node("new"), gpu_node("old", labels=GFD_T4_470)], img("12.4"), "minor",
                     ["image-driver-partial"], id="one-node-too-old"),
        pytest.param([gpu_node()], img("12.9"), "minor", [], id="minor-version-is-not-a-mismatch"),
        pytest.param([gpu_node()], img("12.9"), "strict", ["image-driver-mismatch"], id="strict-refuses-mvc"),
        pytest.param([gpu_node()], img(None), "minor", [], id="cpu-image-skipped"),
        pytest.param([gpu_node(labels={})], img("12.4"), "minor", [], id="no-driver-labels-skipped"),
        pytest.param([gpu_node(labels=GFD_T4_470, ready="False")], img("12.4"), "minor", [],
                     id="not-ready-node-not-judged"),
        pytest.param([gpu_node(labels=GFD_T4_470, unschedulable=True)], img("12.4"), "minor", [],
                     id="cordoned-node-not-judged"),
        pytest.param([gpu_node(labels={**GFD_A100_40GB, "nvidia.com/gpu.compute.major": "3",
                                       "nvidia.com/gpu.compute.minor": "7"})],
                     img("13.0"), "minor", ["image-driver-mismatch"], id="arch-floor"),
    ],
)
def test_check_images(nodes, image, policy, expected):
    assert finding_ids(checks.check_images(nodes, hub_with(image, policy=policy), CONFIG)) == expected


def test_mismatch_names_profile_image_and_driver_fix():
    (f,) = checks.check_images([gpu_node("t4", labels=GFD_T4_470)], hub_with(img("12.4", "torch", "pt:12")), CONFIG)
    assert f.severity == "error"
    assert str(f.objects[0]) == "profile/torch" and str(f.objects[1]) == "node/t4"
    assert "pt:12" in f.summary and "CUDA 12.4" in f.summary and "470.256.02" in f.summary
    assert f.details["verdicts"]["t4"]["level"] == "fail"
    assert f.fix  # the rules' own fix sentence


def test_partial_fit_names_the_pools_to_exclude():
    nodes = [gpu_node("a", labels={**GFD_A100_40GB, "cloud.google.com/gke-nodepool": "a100"}),
             gpu_node("t", labels={**GFD_T4_470, "cloud.google.com/gke-nodepool": "t4"})]
    (f,) = checks.check_images(nodes, hub_with(img("12.4")), CONFIG)
    assert (f.id, f.severity) == ("image-driver-partial", "info")  # the spawner steers off node t
    assert [str(o) for o in f.objects] == ["profile/gpu", "node/t"]
    assert f.details["pools_failing"] == ["t4:tesla-t4:nvidia.com/gpu"]
    assert '"pools": {"exclude": ["t4:tesla-t4:nvidia.com/gpu"]}' in f.fix


@pytest.mark.parametrize(
    "check",
    [
        pytest.param(lambda image, node, policy: 1 / 0, id="raises"),
        pytest.param(lambda image, node, policy: "ok", id="returns-a-string"),
    ],
)
def test_broken_cuda_check_is_reported(check):
    hub = HubFacts(tolerated_taint_keys=(), images=(img("12.4"),), cuda_check=check, source="c.py")
    (f,) = checks.check_images([gpu_node()], hub, CONFIG)
    assert (f.id, f.severity) == ("cuda-check-error", "warning")
    assert "c.GPUSpawner.cuda_check" in f.fix


def test_the_hubs_cuda_check_decides():
    from gpuspawner.cuda.compatibility import Verdict

    calls = []

    def never(image, node, policy):
        calls.append((image.cuda_text, node.name, node.driver, policy))
        return Verdict("fail", "site-rule", "Not on our cluster.", "Ask us.")

    hub = HubFacts(tolerated_taint_keys=(), images=(img("12.4"),), cuda_check=never, cuda_policy="strict",
                   source="c.py")
    (f,) = checks.check_images([gpu_node("g")], hub, CONFIG)
    assert f.id == "image-driver-mismatch" and "Not on our cluster." in f.summary
    assert calls == [("12.4", "g", "570.172.08", "strict")]


def test_image_check_respects_the_profile_pools():
    from gpuspawner.spawn.profiles import GPUProfileSpec

    spec = GPUProfileSpec.from_config({"slug": "a100", "pools": {"include": ["a100:*"]}})
    image = ProfileImage("a100", "pt:12", image_cuda("12.4"), spec=spec)
    nodes = [gpu_node("a", labels={**GFD_A100_40GB, "cloud.google.com/gke-nodepool": "a100"}),
             gpu_node("t", labels={**GFD_T4_470, "cloud.google.com/gke-nodepool": "t4"})]
    assert finding_ids(checks.check_images(nodes, hub_with(image), CONFIG)) == []
