"""gpuspawner.spawn.cudafit: image declarations on profiles, one image on a pool's
nodes, steering. Pure."""

from __future__ import annotations

import dataclasses

import pytest

from gpuspawner.cuda import NodeCuda, Verdict, decide, image_cuda
from gpuspawner.spawn.cudafit import PROFILE_IMAGE, pool_fit, profile_images, steering_expression
from tests.builders import node_view, pool_view

IMG = image_cuda("12.4", name="pytorch:24.05")
CPU = image_cuda(None, name="scipy-notebook")


def nv(name, driver, cuda, cc="8.0", hostname=None):
    return node_view(name, 8, 8, driver, cuda, cc, hostname=hostname or f"{name}.internal")


NEW = nv("new", "550.54.15", "12.4")
OLD = nv("old", "470.82.01", "11.4")
MID = nv("mid", "535.183.01", "12.2")
UNKNOWN = nv("unk", None, None, None)


def pool(*nodes, driver=None, cuda=None):
    return pool_view(node_views=nodes, nodes=len(nodes), total=8 * len(nodes), free=8 * len(nodes),
                     per_node=8 if nodes else 0, driver=driver, cuda=cuda)


# ---------------------------------------------------------------------------
# one image on one pool


@pytest.mark.parametrize(
    "nodes, policy, declared, level, excluded, summary",
    [
        ((NEW,), "minor", None, "ok", (), "fits"),
        ((NEW, OLD), "minor", None, "ok", ("old.internal",), "fits (1 of 2 nodes of this pool do not fit (old)"),
        ((OLD,), "minor", None, "fail", (), "does not fit: The image is built with CUDA 12.4 but node old"),
        ((MID,), "minor", None, "warn", (), "fits with a caveat: The image is built with CUDA 12.4 but node mid"),
        ((MID,), "strict", None, "fail", (), "does not fit:"),
        ((MID, NEW), "minor", None, "ok", (), "fits (with a caveat on mid"),
        ((OLD, UNKNOWN), "minor", None, "skip", ("old.internal",), "driver unknown (1 of 2 nodes"),
        ((UNKNOWN,), "minor", None, "skip", (), "driver unknown"),
        ((), "minor", None, "skip", (), "driver unknown"),
        ((), "minor", ("470.82.01", "11.4"), "fail", (), "does not fit: The image is built with CUDA 12.4 but the node"),
        ((), "minor", ("550.54.15", "12.4"), "ok", (), "fits"),
    ],
    ids=["fits", "mixed-upgrade", "none-fits", "minor-version-warns", "strict-refuses-mvc", "ok-and-warn-nodes",
         "fail-and-unknown-never-refused", "unlabelled", "empty-pool", "declared-old-driver", "declared-new-driver"],
)
def test_pool_fit(nodes, policy, declared, level, excluded, summary):
    driver, cuda = declared or (None, None)
    fit = pool_fit(IMG, pool(*nodes, driver=driver, cuda=cuda), policy, decide)
    assert fit.level == level
    assert fit.refused is (level == "fail")
    assert fit.exclude_hostnames == excluded
    assert fit.summary.startswith(summary), fit.summary


def test_cpu_image_is_not_checked_and_shows_nothing():
    calls = []
    fit = pool_fit(CPU, pool(OLD), "minor", lambda *a: calls.append(a))
    assert fit.level == "skip" and not fit.refused and fit.summary == "" and fit.warning() is None
    assert calls == []


def test_refusal_names_image_cuda_drivers_rule_and_fix():
    fit = pool_fit(IMG, pool(OLD, nv("old2", "470.57.02", "11.4")), "minor", decide)
    text = fit.refusal("A100 80 GB")
    for part in ("pytorch:24.05 (CUDA 12.4)", "GPU pool A100 80 GB", "driver 470.57.02, CUDA up to 11.4",
                 "driver 470.82.01, CUDA up to 11.4", "rule: driver-too-old", "policy: minor",
                 "ask the admin to install driver 550.54.14 or newer", "Use an image built with CUDA 11.4 or older"):
        assert part in text, (part, text)


def test_refusal_of_an_image_declared_only_by_its_requirement():
    img = image_cuda({"require": "cuda>=12.4 brand=tesla,driver>=470,driver<471"}, name="req-only")
    fit = pool_fit(img, pool(OLD), "minor", decide)
    assert fit.refused
    assert "req-only (CUDA 12.4)" in fit.refusal()


def test_warning_for_progress_names_the_caveat():
    only_mid = pool_fit(IMG, pool(MID), "minor", decide)
    assert only_mid.warning().startswith("CUDA check: The image is built with CUDA 12.4")
    assert "minor-version compatibility" in only_mid.warning()
    some_mid = pool_fit(IMG, pool(MID, NEW), "minor", decide)
    assert some_mid.warning().startswith("CUDA check: if the server lands on mid:")
    assert pool_fit(IMG, pool(NEW), "minor", decide).warning() is None
    assert pool_fit(IMG, pool(OLD), "minor", decide).warning() is None  # refused, not warned


def test_admin_check_gets_each_node_and_the_policy():
    seen = []

    def check(image, node, policy):
        seen.append((image.name, node, policy))
        return Verdict("fail" if node.name == "old" else "ok", "site", f"site rule on {node.name}.", "Ask us.")

    fit = pool_fit(IMG, pool(NEW, OLD), "forward", check)
    assert fit.exclude_hostnames == ("old.internal",)
    assert seen[0] == ("pytorch:24.05",
                       NodeCuda(name="new", driver="550.54.15", driver_cuda="12.4", arch="8.0",
                                product="NVIDIA-A100-SXM4-80GB"), "forward")


@pytest.mark.parametrize(
    "check, reason",
    [
        (lambda i, n, p: 1 / 0, "The CUDA check raised ZeroDivisionError"),
        (lambda i, n, p: "ok", "returned str, not a Verdict"),
        (lambda i, n, p: Verdict("maybe", "x", "x"), "returned Verdict, not a Verdict with level"),
    ],
    ids=["raises", "wrong-type", "wrong-level"],
)
def test_broken_admin_check_never_refuses(check, reason):
    fit = pool_fit(IMG, pool(OLD), "minor", check)
    assert fit.level == "skip" and not fit.refused
    assert fit.nodes[0].verdict.rule == "check-error"
    assert reason in fit.nodes[0].verdict.reason


# ---------------------------------------------------------------------------
# steering


def test_steering_expression_is_hostname_not_in_the_failing_nodes():
    fit = pool_fit(IMG, pool(NEW, OLD, nv("old-b", "470.82.01", "11.4", hostname="ip-10-0-0-7")), "minor", decide)
    assert steering_expression(fit) == {
        "key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["ip-10-0-0-7", "old.internal"],
    }
    assert steering_expression(pool_fit(IMG, pool(NEW), "minor", decide)) is None
    assert steering_expression(None) is None


# ---------------------------------------------------------------------------
# declarations on a profile


def choices_option(**choices):
    return {"image": {"display_name": "Image", "choices": choices}}


def test_profile_level_declaration():
    images = profile_images({"cuda": "12.4", "compat": True}, "pytorch:24.05", {})
    assert images.option is None and images.declared
    assert images.key_for({}) == PROFILE_IMAGE
    assert images.image(PROFILE_IMAGE).cuda == (12, 4) and images.image(PROFILE_IMAGE).compat == (12, 4)
    assert images.image(PROFILE_IMAGE).name == "pytorch:24.05"


def test_no_declaration_is_not_checked():
    assert not profile_images(None, "img", {}).declared


def test_image_choices_each_carry_their_cuda():
    options = {
        **choices_option(
            cu118={"display_name": "PyTorch CUDA 11.8", "kubespawner_override": {"image": "pt:cu118"}, "cuda": "11.8"},
            cu124={"display_name": "PyTorch CUDA 12.4", "kubespawner_override": {"image": "pt:cu124"}, "cuda": "12.4",
                   "default": True},
            cpu={"display_name": "SciPy (no GPU code)", "kubespawner_override": {"image": "scipy"}},
            same={"display_name": "Profile's image"},
        ),
        "size": {"choices": {"s": {"kubespawner_override": {"cpu_limit": 1}}}},
    }
    images = profile_images("12.2", "base:12.2", options)
    assert images.option == "image"
    assert images.image("cu118").cuda == (11, 8) and images.image("cu118").name == "pt:cu118"
    assert not images.image("cpu").has_cuda  # an image nobody described is not checked
    assert images.image("same").cuda == (12, 2)  # no image of its own: the profile's
    assert images.labels["cu124"] == "PyTorch CUDA 12.4"
    assert images.key_for({}) == "cu124"  # the default choice
    assert images.key_for({"image": "cu118"}) == "cu118"
    assert images.key_for({"image": "unlisted-choice", "image--unlisted-choice": "my/img"}) is None
    assert not images.image(None).has_cuda


@pytest.mark.parametrize(
    "declaration, options, message",
    [
        (12.4, {}, "'cuda': image 'img': cuda must be a quoted string like \"12.4\""),
        ({"cuda": "12.4", "bogus": 1}, {}, "unknown key(s) bogus"),
        ({"require": "cuda>=12.x"}, {}, "invalid expression 'cuda>=12.x'"),
        (None, choices_option(a={"cuda": "12.4"}), "choice 'a' of option 'image' has 'cuda' but sets no image"),
        (None, choices_option(a={"kubespawner_override": {"image": "x"}, "cuda": "twelve"}),
         "'cuda' of choice 'a' of option 'image'"),
        (None, {**choices_option(a={"kubespawner_override": {"image": "x"}}),
                "other": {"choices": {"b": {"kubespawner_override": {"image": "y"}}}}},
         "options 'image', 'other' all choose the image"),
    ],
    ids=["float", "unknown-key", "bad-require", "cuda-without-image", "bad-choice-cuda", "two-image-options"],
)
def test_bad_declarations_name_the_place_and_the_fix(declaration, options, message):
    with pytest.raises(ValueError) as e:
        profile_images(declaration, "img", options, where="gpu_profiles[0] (slug 'gpu')")
    assert str(e.value).startswith("gpu_profiles[0] (slug 'gpu')")
    assert message in str(e.value)


@pytest.mark.parametrize(
    "resource, product, level",
    [
        ("amd.com/gpu", "AMD-Instinct-MI300X-OAM", "fail"),
        ("example.com/npu", None, "skip"),
    ],
    ids=["amd-pool-refuses-a-cuda-image", "other-vendor-is-not-judged"],
)
def test_cuda_image_on_a_non_nvidia_pool(resource, product, level):
    # an AMD node reports its own driver (e.g. amd.com/gpu.driver-version 6.10.5): never read it as NVIDIA's
    amd = dataclasses.replace(
        pool(nv("mi300", "6.10.5", None)), id=f"g:{product}:{resource}", resource=resource, product=product
    )
    fit = pool_fit(IMG, amd, "minor", decide)
    assert fit.level == level
    assert fit.verdict.rule == "gpu-vendor"
    assert "NVIDIA GPUs only" in fit.verdict.reason and "NVIDIA driver" not in fit.summary
    assert not fit.exclude_hostnames
    # a CPU image is never judged
    assert pool_fit(CPU, amd, "minor", decide).level == "skip"
