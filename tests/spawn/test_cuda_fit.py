"""gpuspawner.spawn.cuda_fit: image declarations on profiles, one image on a pool's
nodes per driver group (remembered), steering by driver labels. Pure."""

from __future__ import annotations

import dataclasses

import pytest

from gpuspawner.cuda import NodeCuda, Verdict, decide, image_cuda
from gpuspawner.spawn.cuda_fit import PROFILE_IMAGE, VerdictMemo, pool_fit, profile_images, steering_expressions
from tests.builders import node_view, pool_view

IMG = image_cuda("12.4", name="pytorch:24.05")
CPU = image_cuda(None, name="scipy-notebook")
FULL = "nvidia.com/cuda.driver-version.full"
MAJOR = "nvidia.com/cuda.driver.major"


def nv(name, driver, cuda, cc="8.0", hostname=None, gfd=None):
    """A node; ``gfd``: the GFD driver labels it carries ("full": both, "old": the deprecated major only)."""
    return node_view(name, 8, 8, driver, cuda, cc, hostname=hostname or f"{name}.internal", gfd=gfd)


NEW = nv("new", "550.54.15", "12.4")
OLD = nv("old", "470.82.01", "11.4")
MID = nv("mid", "535.183.01", "12.2")
UNKNOWN = nv("unk", None, None, None)


def pool(*nodes, driver=None, cuda=None):
    return pool_view(node_views=nodes, nodes=len(nodes), total=8 * len(nodes), free=8 * len(nodes),
                     per_node=8 if nodes else 0, driver=driver, cuda=cuda)


def excluded_drivers(fit):
    return tuple(sorted(g.driver for g in fit.excluded))


# ---------------------------------------------------------------------------
# one image on one pool


@pytest.mark.parametrize(
    "nodes, policy, declared, level, excluded, summary",
    [
        ((NEW,), "minor", None, "ok", (), "fits"),
        ((NEW, OLD), "minor", None, "ok", ("470.82.01",),
         "fits (1 of 2 nodes of this pool do not fit (driver 470.82.01); the server is kept off them)"),
        ((OLD,), "minor", None, "fail", (), "does not fit: The image is built with CUDA 12.4 but the node has"),
        ((MID,), "minor", None, "warn", (), "fits with a caveat: The image is built with CUDA 12.4 but the node"),
        ((MID,), "strict", None, "fail", (), "does not fit:"),
        ((MID, NEW), "minor", None, "ok", (), "fits (with a caveat on the nodes with driver 535.183.01"),
        ((OLD, UNKNOWN), "minor", None, "skip", ("470.82.01",), "driver unknown (1 of 2 nodes"),
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
    assert excluded_drivers(fit) == excluded
    assert fit.summary.startswith(summary), fit.summary


def per_node_level(image, nodes, policy):
    """The reference: the pool's level from one verdict per node, as gpuspawner judged it before grouping."""
    order = {"ok": 0, "warn": 1, "skip": 2, "fail": 3}
    verdicts = [decide(image, NodeCuda(None, n.driver_version, n.cuda_version, n.compute_capability,
                                       product="NVIDIA-A100-SXM4-80GB"), policy) for n in nodes]
    return min((v.level for v in verdicts), key=order.get), verdicts


DRIVERS = [("470.82.01", "11.4"), ("535.183.01", "12.2"), ("550.54.15", "12.4"), ("570.172.08", "12.8"),
           (None, None)]


@pytest.mark.parametrize("policy", ["strict", "minor", "forward"])
@pytest.mark.parametrize(
    "cluster",
    [
        [0, 0, 0], [1, 1, 2], [0, 1, 2, 3, 4], [4, 4], [0, 4], [3, 3, 3, 3, 0], [1], [2, 0, 0, 0, 1, 1],
    ],
    ids=lambda c: "-".join(map(str, c)),
)
@pytest.mark.parametrize("image", [IMG, image_cuda("11.8"), image_cuda("12.8"), image_cuda("13.0")],
                         ids=["cu124", "cu118", "cu128", "cu130"])
def test_grouped_fit_gives_every_node_its_own_verdict(cluster, policy, image):
    # the same drivers on several nodes (and on nodes named differently) make one group each
    nodes = [nv(f"n{i}", *DRIVERS[d], gfd="full") for i, d in enumerate(cluster)]
    level, verdicts = per_node_level(image, nodes, policy)
    fit = pool_fit(image, pool(*nodes), policy, decide)
    assert fit.level == level
    by_driver = {g.group.driver_version: g.verdict for g in fit.groups}
    assert [by_driver[n.driver_version] for n in nodes] == verdicts
    assert sum(g.nodes for g in fit.groups) == len(nodes)
    assert len(fit.groups) == len(set(cluster))
    # the nodes kept off are exactly the failing ones, unless all fail (refused)
    failing = {n.name for n, v in zip(nodes, verdicts) if v.level == "fail"}
    kept_off = set() if level == "fail" else failing
    assert sum(g.nodes for g in fit.excluded) == len(kept_off)


def test_the_check_runs_once_per_driver_group_whatever_the_number_of_nodes():
    calls = []

    def check(image, node, policy):
        calls.append(node)
        return decide(image, node, policy)

    big = pool(*[nv(f"n{i}", *DRIVERS[i % 2], gfd="full") for i in range(3000)])
    memo = VerdictMemo()
    first = pool_fit(IMG, big, "minor", check, memo)
    assert len(calls) == 2 and all(node.name is None for node in calls)
    for _ in range(20):
        again = pool_fit(IMG, big, "minor", check, memo)
    assert len(calls) == 2 and memo.misses == 2
    assert again == first
    assert pool_fit(IMG, big, "strict", check, memo).level == "fail"  # another policy: judged anew
    assert len(calls) == 4


def test_memo_judges_a_driver_again_only_when_it_changes():
    from gpuspawner.capacity.plugin_accounts import PluginAccounts
    from tests.builders import GFD_A100, node
    from gpuspawner.capacity.config import CapacityConfig
    from gpuspawner.capacity.labels import node_record

    def a100(name, driver, cuda):
        labels = {**GFD_A100, "cloud.google.com/gke-nodepool": "a100", FULL: driver,
                  "nvidia.com/cuda.runtime-version.full": cuda}
        return node_record(node(name, {"nvidia.com/gpu": "8"}, labels), CapacityConfig())

    led, memo = PluginAccounts(), VerdictMemo()
    for i in range(50):
        led.upsert_node(a100(f"n{i}", "470.82.01", "11.4"))
    (view,) = led.ledger.pools()
    assert pool_fit(IMG, view, "minor", decide, memo).refused and memo.misses == 1
    led.upsert_node(a100("n7", "470.82.01", "11.4"))  # same labels: nothing to judge
    led.remove_node("n8")
    (view,) = led.ledger.pools()
    assert pool_fit(IMG, view, "minor", decide, memo).refused and memo.misses == 1
    led.upsert_node(a100("n9", "550.54.15", "12.4"))  # GFD relabels n9 after a driver upgrade
    (view,) = led.ledger.pools()
    fit = pool_fit(IMG, view, "minor", decide, memo)
    assert (fit.level, memo.misses, excluded_drivers(fit)) == ("ok", 2, ("470.82.01",))
    assert fit.note.startswith("48 of 49 nodes of this pool do not fit (driver 470.82.01)")


def test_memo_is_bounded_and_keys_checks_by_identity():
    memo = VerdictMemo(size=2)
    for d, c in DRIVERS[:3]:
        memo.verdict(decide, IMG, NodeCuda(None, d, c), "minor")
    assert len(memo) == 2 and memo.misses == 3
    memo.verdict(lambda i, n, p: Verdict("ok", "site", "Fine."), IMG, NodeCuda(None, *DRIVERS[2]), "minor")
    assert memo.misses == 4  # another check, same facts: judged by that check
    with pytest.raises(ValueError):
        VerdictMemo(size=0)


def test_cpu_image_is_not_checked_and_shows_nothing():
    calls = []
    fit = pool_fit(CPU, pool(OLD), "minor", lambda *a: calls.append(a))
    assert fit.level == "skip" and not fit.refused and fit.summary == "" and fit.warning() is None
    assert calls == []


def test_refusal_names_image_cuda_drivers_and_fix_not_the_rule():
    fit = pool_fit(IMG, pool(OLD, nv("old2", "470.57.02", "11.4")), "minor", decide)
    text = fit.refusal("A100 80 GB")
    for part in ("pytorch:24.05 (CUDA 12.4)", "GPU pool A100 80 GB", "driver 470.57.02, CUDA up to 11.4",
                 "driver 470.82.01, CUDA up to 11.4",
                 "ask the admin to install driver 550.54.14 or newer", "Use an image built with CUDA 11.4 or older"):
        assert part in text, (part, text)
    # the rule's name and the policy are the admin's words (the hub's log, doctor), not the user's
    for internal in ("rule:", "driver-too-old", "policy", "()"):
        assert internal not in text, (internal, text)


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
    assert some_mid.warning().startswith("CUDA check: if the server lands on a node with driver 535.183.01:")
    assert pool_fit(IMG, pool(NEW), "minor", decide).warning() is None
    assert pool_fit(IMG, pool(OLD), "minor", decide).warning() is None  # refused, not warned


def test_admin_check_gets_each_driver_and_the_policy():
    seen = []

    def check(image, node, policy):
        seen.append((image.name, node, policy))
        return Verdict("fail" if node.driver.startswith("470.") else "ok", "site", "site rule.", "Ask us.")

    fit = pool_fit(IMG, pool(NEW, OLD), "forward", check)
    assert excluded_drivers(fit) == ("470.82.01",)
    assert seen[0] == ("pytorch:24.05",
                       NodeCuda(name=None, driver="470.82.01", driver_cuda="11.4", arch="8.0",
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
    assert fit.groups[0].verdict.rule == "check-error"
    assert reason in fit.groups[0].verdict.reason


# ---------------------------------------------------------------------------
# steering


@pytest.mark.parametrize(
    "nodes, expected",
    [
        # GFD >= 0.15: one value per failing driver, however many nodes run it
        ([nv("new", "550.54.15", "12.4", gfd="full")] + [nv(f"o{i}", "470.82.01", "11.4", gfd="full")
                                                         for i in range(500)]
         + [nv("o-b", "470.57.02", "11.4", gfd="full")],
         [{"key": FULL, "operator": "NotIn", "values": ["470.57.02", "470.82.01"]}]),
        # an older GFD: the deprecated major version, as no fitting node shares it
        ([nv("new", "550.54.15", "12.4", gfd="full"), nv("old", "470.82.01", "11.4", gfd="old")],
         [{"key": MAJOR, "operator": "NotIn", "values": ["470"]}]),
        # the deprecated major is shared with a fitting node (525.147.05 runs CUDA 12.4 through
        # minor-version compatibility, which needs 525.60.13 or newer): the failing one by name
        ([nv("fits", "525.147.05", "12.0", gfd="full"), nv("old", "525.53.01", "12.0", gfd="old")],
         [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["old.internal"]}]),
        # no driver labels at all (hand-labelled nodes): their hostnames
        ([NEW, OLD, nv("old-b", "470.82.01", "11.4", hostname="ip-10-0-0-7")],
         [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["ip-10-0-0-7", "old.internal"]}]),
        ([nv("new", "550.54.15", "12.4", gfd="full")], []),  # nothing fails
        ([nv("old", "470.82.01", "11.4", gfd="full")], []),  # everything fails: refused, not steered
    ],
    ids=["full-label", "deprecated-major", "shared-major-falls-back-to-names", "no-labels", "all-fit", "all-fail"],
)
def test_steering_by_driver_labels(nodes, expected):
    the_pool = pool(*nodes)
    fit = pool_fit(IMG, the_pool, "minor", decide)
    steer = steering_expressions(fit, the_pool)
    assert steer == expected
    assert steering_expressions(None, the_pool) == []


def test_steering_never_excludes_a_fitting_node():
    """Whatever the labels, every node the expressions exclude fails and every failing node is excluded."""
    drivers = DRIVERS[:4] + [("525.147.05", "12.0"), ("525.53.01", "12.0")]
    nodes = [nv(f"n{i}", *drivers[i % 6], cc=("8.0" if i % 4 else "7.5"), gfd=("full", "old", None)[i % 3])
             for i in range(72)]
    the_pool = pool(*nodes)
    for policy in ("strict", "minor", "forward"):
        fit = pool_fit(IMG, the_pool, policy, decide)
        steer = steering_expressions(fit, the_pool)
        assert len(steer) <= 3 and steer[-1]["key"] == "kubernetes.io/hostname"  # the by-name fallback is used
        for n in nodes:
            labels = dict(n.labels)
            kept_off = any(labels.get(e["key"]) in e["values"] for e in steer)
            fails = decide(IMG, NodeCuda(None, n.driver_version, n.cuda_version, n.compute_capability,
                                         product=the_pool.product), policy).level == "fail"
            assert kept_off is (fails and not fit.refused), (policy, n)


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
    assert not fit.excluded
    # a CPU image is never judged
    assert pool_fit(CPU, amd, "minor", decide).level == "skip"
