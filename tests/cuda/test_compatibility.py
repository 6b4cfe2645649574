"""The compatibility decision (gpuspawner.cuda.compatibility.decide) and image declarations."""

import dataclasses

import pytest

from gpuspawner.cuda import (
    DEFAULT_FACTS,
    ImageCuda,
    ImageDeclarationError,
    NodeCuda,
    PolicyError,
    decide,
    image_cuda,
)
from gpuspawner.cuda.compatibility import datacenter_from_node, worst

from tests.builders import require_samples

SAMPLES = {row["cuda_version"]: row["nvidia_require_cuda"] for row in require_samples()}

# The two GPU Feature Discovery label sets of the reference (section 4.1, examples A and B),
# reduced to the labels the rules read; the real reader is gpuspawner.capacity.labels.
EXAMPLE_A = {  # bare-metal 8x A100-SXM4-80GB, GPU Operator, driver 570.172.08, MIG mixed
    "nvidia.com/cuda.driver-version.full": "570.172.08",
    "nvidia.com/cuda.driver.major": "570",
    "nvidia.com/cuda.driver.minor": "172",
    "nvidia.com/cuda.driver.rev": "08",
    "nvidia.com/cuda.runtime-version.full": "12.8",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "8",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
}
EXAMPLE_B = {  # AWS g4dn.xlarge (1x T4), EKS, driver 535.183.01, time-slicing
    "nvidia.com/cuda.driver-version.full": "535.183.01",
    "nvidia.com/cuda.runtime-version.full": "12.2",
    "nvidia.com/gpu.compute.major": "7",
    "nvidia.com/gpu.compute.minor": "5",
    "nvidia.com/gpu.product": "Tesla-T4-SHARED",
}
# only the deprecated names (GFD before v0.15.0)
EXAMPLE_A_DEPRECATED = {k: v for k, v in EXAMPLE_A.items() if "-version" not in k}


def node_from_labels(name, labels):
    driver = labels.get("nvidia.com/cuda.driver-version.full")
    if driver is None and "nvidia.com/cuda.driver.major" in labels:
        driver = ".".join(labels[f"nvidia.com/cuda.driver.{p}"] for p in ("major", "minor", "rev"))
    cuda = labels.get("nvidia.com/cuda.runtime-version.full")
    if cuda is None and "nvidia.com/cuda.runtime.major" in labels:
        cuda = (
            f"{labels['nvidia.com/cuda.runtime.major']}.{labels['nvidia.com/cuda.runtime.minor']}"
        )
    arch = None
    if "nvidia.com/gpu.compute.major" in labels:
        arch = f"{labels['nvidia.com/gpu.compute.major']}.{labels['nvidia.com/gpu.compute.minor']}"
    return NodeCuda(
        name=name,
        driver=driver,
        driver_cuda=cuda,
        arch=arch,
        product=labels.get("nvidia.com/gpu.product"),
    )


A100 = node_from_labels("a100-1", EXAMPLE_A)
A100_OLD_LABELS = node_from_labels("a100-2", EXAMPLE_A_DEPRECATED)
T4 = node_from_labels("t4-1", EXAMPLE_B)
GEFORCE_535 = NodeCuda(
    name="ws-1",
    driver="535.183.01",
    driver_cuda="12.2",
    arch="8.9",
    product="NVIDIA-GeForce-RTX-4090",
)
H100_550 = NodeCuda(
    name="h100-1",
    driver="550.107.02",
    driver_cuda="12.4",
    arch="9.0",
    product="NVIDIA-H100-80GB-HBM3",
)
H100_545 = NodeCuda(
    name="h100-2",
    driver="545.23.08",
    driver_cuda="12.3",
    arch="9.0",
    product="NVIDIA-H100-80GB-HBM3",
)
V100_580 = NodeCuda(
    name="v100-1",
    driver="580.95.05",
    driver_cuda="13.0",
    arch="7.0",
    product="Tesla-V100-SXM2-16GB",
)
K80_470 = NodeCuda(
    name="k80-1", driver="470.82.01", driver_cuda="11.4", arch="3.7", product="Tesla-K80"
)
MYSTERY_535 = NodeCuda(name="x-1", driver="535.183.01", driver_cuda="12.2")


def img(cuda=None, compat=False, require=None):
    decl = {}
    if cuda:
        decl["cuda"] = cuda
    if compat:
        decl["compat"] = compat
    if require:
        decl["require"] = require
    return image_cuda(decl or None)


CASES = [
    # (id, image, node, policy, level, rule)
    ("cpu-image", img(), A100, "minor", "skip", "no-cuda"),
    ("no-labels", img("12.2"), NodeCuda(name="n"), "minor", "skip", "no-driver-info"),
    (
        "bad-label",
        img("12.2"),
        NodeCuda(name="n", driver="R535"),
        "minor",
        "skip",
        "bad-node-labels",
    ),
    ("A-12.8", img("12.8"), A100, "strict", "ok", "backward"),
    ("A-11.8", img("11.8.0"), A100, "strict", "ok", "backward"),
    ("A-12.9-minor", img("12.9"), A100, "minor", "warn", "minor-version"),
    ("A-12.9-strict", img("12.9"), A100, "strict", "fail", "driver-too-old"),
    ("A-13.0-minor", img("13.0", compat=True), A100, "minor", "fail", "driver-too-old"),
    ("A-13.0-forward", img("13.0", compat=True), A100, "forward", "warn", "forward"),
    ("A-13.2-forward", img("13.2", compat=True), A100, "forward", "warn", "forward"),
    ("A-13.3-forward", img("13.3", compat=True), A100, "forward", "warn", "forward"),
    ("A-13.0-forward-no-compat", img("13.0"), A100, "forward", "fail", "driver-too-old"),
    ("A-deprecated-labels", img("12.9"), A100_OLD_LABELS, "minor", "warn", "minor-version"),
    ("B-12.2", img("12.2.2"), T4, "minor", "ok", "backward"),
    ("B-12.4", img("12.4"), T4, "minor", "warn", "minor-version"),
    ("B-12.4-forward", img("12.4", compat=True), T4, "forward", "warn", "forward"),
    ("B-13.0-forward", img("13.0", compat=True), T4, "forward", "warn", "forward"),
    ("B-13.0-minor", img("13.0", compat=True), T4, "minor", "fail", "driver-too-old"),
    (
        "geforce-12.5-forward-falls-back-to-mvc",
        img("12.5", compat=True),
        GEFORCE_535,
        "forward",
        "warn",
        "minor-version",
    ),
    (
        "geforce-13.0-forward",
        img("13.0", compat=True),
        GEFORCE_535,
        "forward",
        "fail",
        "driver-too-old",
    ),
    (
        "eol-branch-550-forward",
        img("13.0", compat=True),
        H100_550,
        "forward",
        "fail",
        "driver-too-old",
    ),
    (
        "unknown-gpu-kind-forward",
        img("13.0", compat=True),
        MYSTERY_535,
        "forward",
        "fail",
        "driver-too-old",
    ),
    ("old-compat-package", img("13.1", compat="13.0"), A100, "forward", "fail", "driver-too-old"),
    ("v100-cuda13-arch", img("13.0"), V100_580, "minor", "fail", "arch-floor"),
    ("v100-cuda12", img("12.8"), V100_580, "strict", "ok", "backward"),
    ("k80-cuda12-arch", img("12.0"), K80_470, "forward", "fail", "arch-floor"),
    ("k80-cuda11", img("11.4"), K80_470, "strict", "ok", "backward"),
    (
        "derived-cuda-only-driver",
        img("12.2"),
        NodeCuda(driver="535.54.03"),
        "strict",
        "ok",
        "backward",
    ),
    (
        "driver-cuda-only",
        img("12.4"),
        NodeCuda(driver_cuda="12.2"),
        "minor",
        "warn",
        "minor-version",
    ),
    (
        "driver-cuda-only-11.0-floor-unknown",
        img("11.4"),
        NodeCuda(driver_cuda="11.0"),
        "minor",
        "fail",
        "driver-too-old",
    ),
    # the image only declares NVIDIA_REQUIRE_CUDA: its cuda>=X.Y term gives the CUDA
    ("A-require-13.0", img(require=SAMPLES["13.0.0"]), A100, "minor", "fail", "driver-too-old"),
    ("A-require-12.9", img(require=SAMPLES["12.9.1"]), A100, "minor", "warn", "minor-version"),
    ("require-no-cuda-term-ok", img(require="driver>=535"), T4, "minor", "ok", "nvidia-require"),
    (
        "require-no-cuda-term-fail",
        img(require="driver>=550"),
        T4,
        "minor",
        "fail",
        "nvidia-require",
    ),
    # 12.5 image on a R545 driver: rules say MVC, the image's own list has no 545 term
    (
        "require-unsatisfied-warns",
        img("12.5", require=SAMPLES["12.5.1"]),
        H100_545,
        "minor",
        "warn",
        "nvidia-require",
    ),
    (
        "require-satisfied",
        img("12.4", require=SAMPLES["12.4.1"]),
        T4,
        "minor",
        "warn",
        "minor-version",
    ),
]


@pytest.mark.parametrize(
    "image, node, policy, level, rule", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_decide(image, node, policy, level, rule):
    v = decide(image, node, policy)
    assert (v.level, v.rule) == (level, rule), v.message
    assert v.reason.endswith(".") and v.policy == policy
    if level == "fail":
        assert v.fix and not v.ok
    else:
        assert v.ok


def test_sentences_name_the_image_cuda_the_driver_its_cuda_the_rule_and_the_fix():
    v = decide(img("12.4"), T4, "minor")
    for words in (
        "CUDA 12.4",
        "node t4-1",
        "535.183.01",
        "CUDA up to 12.2",
        "minor-version compatibility",
    ):
        assert words in v.reason
    assert "cudaErrorCallRequiresNewerDriver" in v.reason and "PTX" in v.reason
    assert "image built with CUDA 12.2 or older" in v.fix and "550.54.14" in v.fix
    assert (v.image_cuda, v.driver, v.driver_cuda) == ("12.4", "535.183.01", "12.2")

    v = decide(img("13.0"), A100, "minor")
    assert "needs driver 580.65.06 or newer" in v.reason
    assert "install driver 580.65.06 or newer on node a100-1" in v.fix
    assert "choose a GPU pool whose driver supports CUDA 13.0" in v.fix


def test_forward_failures_say_why():
    assert "data-center" in decide(img("13.0", compat=True), GEFORCE_535, "forward").reason
    assert "R535, R570" in decide(img("13.0", compat=True), H100_550, "forward").reason
    assert "cannot be told" in decide(img("13.0", compat=True), MYSTERY_535, "forward").reason
    assert "forward policy" in decide(img("13.0", compat=True), A100, "minor").reason


def test_enforce_require_turns_the_legacy_runtime_refusal_into_a_failure():
    image = img("12.5", require=SAMPLES["12.5.1"])
    facts = dataclasses.replace(DEFAULT_FACTS, enforce_require=True)
    v = decide(image, H100_545, "minor", facts)
    assert (v.level, v.rule) == ("fail", "nvidia-require")
    assert "unsatisfied condition: cuda>=12.5" in v.reason


def test_an_invalid_requirement_fails_the_spawn_with_a_clear_reason():
    image = ImageCuda(cuda=(12, 2), requirements=("cuda==12.2",))
    v = decide(image, T4)
    assert (v.level, v.rule) == ("fail", "nvidia-require-invalid")
    assert "invalid expression" in v.reason


@pytest.mark.parametrize(
    "override, node, image, level",
    [
        ({"arch_floors": {}}, V100_580, img("13.0"), "ok"),  # admin disagrees with the [S] floor
        ({"arch_floors": {13: (7, 0)}}, V100_580, img("13.0"), "ok"),
        (
            {"mvc_floors": {12: (535, 0)}},
            NodeCuda(driver="530.30.02", driver_cuda="12.1"),
            img("12.2"),
            "fail",
        ),
        ({"forward_matrix": {}}, A100, img("13.0", compat=True), "fail"),
        ({"is_datacenter": lambda node: True}, MYSTERY_535, img("13.0", compat=True), "warn"),
    ],
    ids=[
        "no-arch-floor",
        "lower-arch-floor",
        "higher-mvc-floor",
        "no-forward-matrix",
        "datacenter-hook",
    ],
)
def test_secondary_facts_are_overridable(override, node, image, level):
    facts = dataclasses.replace(DEFAULT_FACTS, **override)
    assert decide(image, node, "forward", facts).level == level


def test_a_custom_check_replaces_the_default():
    def never_on_fridays(image, node, policy="minor"):
        v = decide(image, node, policy)
        return (
            dataclasses.replace(v, level="fail", rule="site-policy") if node.name == "t4-1" else v
        )

    assert never_on_fridays(img("12.2"), T4).level == "fail"
    assert never_on_fridays(img("12.2"), A100).level == "ok"


def test_unknown_policy():
    with pytest.raises(PolicyError, match="strict, minor, forward"):
        decide(img("12.2"), T4, "lenient")


@pytest.mark.parametrize(
    "node, expected",
    [
        (NodeCuda(product="NVIDIA-A100-SXM4-80GB"), True),
        (NodeCuda(product="Tesla-T4-SHARED"), True),
        (NodeCuda(product="NVIDIA-L40S"), True),
        (NodeCuda(product="NVIDIA-A10G"), True),
        (NodeCuda(product="NVIDIA-GeForce-RTX-4090"), False),
        (NodeCuda(product="NVIDIA-RTX-A6000"), False),
        (NodeCuda(product="Quadro-RTX-8000"), False),
        (NodeCuda(product="Some-Future-GPU"), None),
        (NodeCuda(brand="geforce", product="NVIDIA-A100"), False),
        (NodeCuda(brand="nvidia"), True),
        (NodeCuda(datacenter=False, product="NVIDIA-H100"), False),
    ],
)
def test_datacenter_approximation(node, expected):
    assert datacenter_from_node(node) is expected


def test_worst_of_a_pool():
    vs = [decide(img("12.4"), n) for n in (A100, T4)]
    assert worst(vs).rule == "minor-version"


# ---- image declarations (gpuspawner.cuda.image)


@pytest.mark.parametrize(
    "decl, cuda, reqs, compat",
    [
        (None, None, (), None),
        ({}, None, (), None),
        ("12.4", (12, 4), (), None),
        (12, (12, 0), (), None),
        ({"cuda": "12.4.1", "compat": True}, (12, 4), (), (12, 4)),
        ({"cuda": "12.4", "compat": "12.8"}, (12, 4), (), (12, 8)),
        ({"require": "cuda>=12.2"}, None, ("cuda>=12.2",), None),
        ({"require": ["cuda>=12.2", "arch>=8.0"]}, None, ("cuda>=12.2", "arch>=8.0"), None),
        ({"require": "cuda>=12.2", "disable_require": True}, None, (), None),
        (
            {
                "env": {
                    "CUDA_VERSION": "12.8.1",
                    "NVIDIA_REQUIRE_CUDA": "cuda>=12.8",
                    "NV_CUDA_COMPAT_PACKAGE": "cuda-compat-12-8",
                }
            },
            (12, 8),
            ("cuda>=12.8",),
            (12, 8),
        ),
        ({"env": {"CUDA_VERSION": "11.4.3"}}, (11, 4), ("cuda>=11.4",), None),
        (
            {"env": {"NVIDIA_REQUIRE_CUDA": "cuda>=12.8", "NVIDIA_DISABLE_REQUIRE": "true"}},
            None,
            (),
            None,
        ),
    ],
    ids=repr,
)
def test_image_declarations(decl, cuda, reqs, compat):
    image = image_cuda(decl, name="img")
    assert (image.cuda, image.requirements, image.compat) == (cuda, reqs, compat)


def test_the_cuda_of_an_image_declared_by_its_requirement():
    assert image_cuda({"require": SAMPLES["12.8.1"]}).effective_cuda == (12, 8)
    assert image_cuda({"require": "driver>=535"}).effective_cuda is None


@pytest.mark.parametrize(
    "decl, words",
    [
        ({"cuda": 12.1}, "quoted string"),
        ({"cuda": "v12"}, "not a version"),
        ({"cuda": "12.4", "typo": 1}, "unknown key(s) typo"),
        ({"require": "cuda==12.2"}, "invalid expression"),
        ({"require": "cuda>=12.0 foo=bar"}, "foo=bar"),
        ({"require": 12}, "require must be"),
        ({"compat": True}, "compat: true needs"),
        ({"disable_require": "yes"}, "true or false"),
        ({"env": {"CUDA_VERSION": 12}}, "env must map"),
        (["12.4"], "declare a CUDA version"),
    ],
    ids=repr,
)
def test_bad_declarations_say_what_to_fix(decl, words):
    with pytest.raises(ImageDeclarationError) as e:
        image_cuda(decl, name="pytorch:24.05")
    assert words in str(e.value) and "pytorch:24.05" in str(e.value)
