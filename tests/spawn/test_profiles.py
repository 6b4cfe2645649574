"""Profiles offered for capacity snapshots x admin config (gpuspawner.spawn.profiles): pure."""

from __future__ import annotations

import dataclasses
from functools import partial

import pytest

from gpuspawner.capacity.model import ScaleUp, Taint
from gpuspawner.spawn.profiles import (
    GPUProfileSpec,
    PoolRule,
    build_offers,
    capacity_problem,
    describe_pool,
    gpu_profile_entry,
    merge_profiles,
    present_pools,
)
from gpuspawner.spawn.options import OptionError, validate_user_options
from tests.builders import STEERED_PROFILE, gpu_offers, node_view, pool_view, snapshot, steered_pool
from tests.builders import STEERED_POOL_ID as POOL_ID
from tests.builders import new_driver_node as new
from tests.builders import old_driver_node as old
from tests.builders import steered_offers as offers_for

GKE = "cloud.google.com/gke-nodepool"


# the pools of these tests: 80 GB cards, driver 535 (CUDA 12.2), the usual GPU taint
pool = partial(pool_view, memory_mib=81920, driver="535.183.01", cuda="12.2",
               taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))


A100 = pool("a100", "NVIDIA-A100-SXM4-80GB", nodes=2, total=16, free=5, per_node=3)
T4 = pool("t4", "Tesla-T4", nodes=4, total=4, free=2, per_node=1)
FULL = pool("h100", "NVIDIA-H100-80GB-HBM3", nodes=1, total=8, free=0)
MIG = pool("a100", "NVIDIA-A100-SXM4-80GB", resource="nvidia.com/mig-1g.10gb", total=7, free=7, per_node=7)
SCALE_FROM_ZERO = pool("h200", "NVIDIA-H200", nodes=0, total=0, free=0, scale_up=ScaleUp(max_nodes=2, gpus_per_node=8, minutes=7))
SCALE_MAXED = pool("l4", "NVIDIA-L4", nodes=2, total=2, free=0, scale_up=ScaleUp(max_nodes=2, gpus_per_node=1, minutes=4))
SCALE_PARTIAL = pool("l40", "NVIDIA-L40S", nodes=1, total=4, free=1, per_node=1, scale_up=ScaleUp(max_nodes=3, gpus_per_node=4, minutes=5))
UNLABELLED = pool("x", "X", defining=())


snap = partial(snapshot, age_seconds=0.5)


def spec(**kw):
    return GPUProfileSpec.from_config({"slug": "gpu", **kw})


def summary(offer):
    """(pool id, max per server, available now, reason?) per pool offered."""
    return [(p.pool.id, p.max_gpus, p.now, bool(p.reason)) for p in offer.pools]


@pytest.mark.parametrize(
    "snapshot, config, rules, expected",
    [
        (snap(T4, A100), {}, (), [(A100.id, 3, 3, False), (T4.id, 1, 1, False)]),
        (snap(T4, A100), {"max_gpus": 2}, (), [(A100.id, 2, 2, False), (T4.id, 1, 1, False)]),
        (snap(T4, A100, MIG), {"pools": {"include": ["a100:*"]}}, (), [(A100.id, 3, 3, False), (MIG.id, 7, 7, False)]),
        (snap(T4, A100, MIG), {"pools": {"exclude": ["*:nvidia.com/mig-*"]}}, (), [(A100.id, 3, 3, False), (T4.id, 1, 1, False)]),
        (snap(FULL), {}, (), [(FULL.id, 0, 0, True)]),
        (snap(SCALE_FROM_ZERO), {}, (), [(SCALE_FROM_ZERO.id, 8, 0, False)]),
        (snap(SCALE_FROM_ZERO), {"max_gpus": 4}, (), [(SCALE_FROM_ZERO.id, 4, 0, False)]),
        (snap(SCALE_MAXED), {}, (), [(SCALE_MAXED.id, 0, 0, True)]),
        (snap(SCALE_PARTIAL), {}, (), [(SCALE_PARTIAL.id, 4, 1, False)]),
        (snap(UNLABELLED), {}, (), [(UNLABELLED.id, 0, 0, True)]),
        (
            snap(T4, A100, FULL),
            {},
            (PoolRule("t4:*"), PoolRule("h100:*", hide=True)),
            [(T4.id, 1, 1, False), (A100.id, 3, 3, False)],
        ),
        (snap(), {}, (), []),
    ],
    ids=[
        "two-pools-id-order",
        "max-gpus-caps",
        "include-glob",
        "exclude-mig",
        "full-pool-shown-unavailable",
        "scale-from-zero",
        "scale-from-zero-capped",
        "scale-up-at-max-nodes",
        "scale-up-beyond-free",
        "unpinnable-pool",
        "rules-order-and-hide",
        "no-pools",
    ],
)
def test_offers(snapshot, config, rules, expected):
    offer = build_offers([spec(**config)], snapshot, rules)["gpu"]
    assert offer.problem is None
    assert summary(offer) == expected


@pytest.mark.parametrize(
    "snapshot, problem_text",
    [
        (None, "could not start"),
        (snap(A100, synced=False), "not finished"),
        (snap(error="forbidden: list nodes at the cluster scope (ClusterRole rules nodes: list, watch)", healthy=False), "forbidden"),
        (snap(A100, healthy=False), "lost its watch"),
    ],
    ids=["no-cache", "not-synced", "forbidden", "unhealthy"],
)
def test_capacity_unknown_offers_nothing_unless_admin_admits(snapshot, problem_text):
    refused = build_offers([spec()], snapshot)["gpu"]
    assert problem_text in refused.problem
    assert refused.pools == ()
    admitted = build_offers([spec(max_gpus=2)], snapshot, admit_without_capacity=True)["gpu"]
    assert problem_text in admitted.problem
    # only pools the last snapshot still lists, unchecked, capped by max_gpus
    listed = snapshot.pools if snapshot else ()
    assert [(p.pool.id, p.max_gpus, p.checked) for p in admitted.pools] == [(p.id, 2, False) for p in listed]


def test_unchecked_pool_bounded_by_biggest_node():
    p = dataclasses.replace(A100, node_views=(node_view("n1", 4, 0), node_view("n2", 8, 0)))
    offer = build_offers([spec()], snap(p, synced=False), admit_without_capacity=True)["gpu"]
    assert offer.pools[0].max_gpus == 8


def test_capacity_problem_none_when_healthy():
    assert capacity_problem(snap(A100)) is None


@pytest.mark.parametrize(
    "pools, rules, expected",
    [
        ((T4, A100), (), [(A100.id, "NVIDIA A100 80GB"), (T4.id, "NVIDIA T4")]),
        ((T4, A100), (PoolRule("a100:*", display_name="A100 80 GB"),), [(A100.id, "A100 80 GB"), (T4.id, "NVIDIA T4")]),
        ((T4, A100, MIG), (PoolRule("*:nvidia.com/mig-*", hide=True), PoolRule("t4:*")), [(T4.id, "NVIDIA T4"), (A100.id, "NVIDIA A100 80GB")]),
        ((MIG,), (), [(MIG.id, "NVIDIA A100 80GB MIG 1g.10gb")]),
        # the first matching rule wins: a later rename does not un-hide
        ((A100,), (PoolRule("a100:*", hide=True), PoolRule("*", display_name="x")), []),
    ],
    ids=["default-names", "rename", "hide-and-order", "mig-named", "first-rule-wins"],
)
def test_present_pools(pools, rules, expected):
    assert [(p.id, name) for p, name in present_pools(pools, rules)] == expected


def test_default_pool_prefers_one_that_needs_no_scale_up():
    offer = build_offers([spec()], snap(SCALE_FROM_ZERO, A100), (PoolRule("h200:*"),))["gpu"]
    assert offer.default_pool(1).pool.id == A100.id
    assert offer.default_pool(8).pool.id == SCALE_FROM_ZERO.id
    assert offer.default_pool(9) is None


def test_entry_is_kubespawner_schema_with_only_usable_pools():
    offers = build_offers([spec(display_name="GPU server", max_gpus=4)], snap(A100, FULL, SCALE_FROM_ZERO))
    entry = gpu_profile_entry(offers["gpu"])
    assert entry["slug"] == "gpu" and entry["display_name"] == "GPU server"
    pools = entry["profile_options"]["gpu_pool"]["choices"]
    assert list(pools) == [A100.id, SCALE_FROM_ZERO.id]  # the full H100 pool is not a choice
    assert pools[A100.id]["default"] is True
    assert "5 of 16 GPUs free, up to 3 per server" in pools[A100.id]["display_name"]
    assert "after a scale-up, ~7 min" in pools[SCALE_FROM_ZERO.id]["display_name"]
    assert list(entry["profile_options"]["gpus"]["choices"]) == ["1", "2", "3", "4"]


def test_entry_when_capacity_unknown_says_so():
    entry = gpu_profile_entry(build_offers([spec(description="Big GPUs")], None)["gpu"])
    assert entry["description"].startswith("Big GPUs (GPU capacity is unknown")
    assert entry["profile_options"]["gpu_pool"]["choices"] == {}
    assert entry["profile_options"]["gpus"]["choices"] == {}


def test_merge_keeps_static_profiles_first_and_reports_shadowed():
    static = [
        {"display_name": "CPU", "slug": "cpu", "default": True, "kubespawner_override": {"cpu_limit": 2}},
        {"display_name": "Old GPU", "slug": "gpu"},
    ]
    offers = build_offers([spec(profile_options={"image": {"display_name": "Image", "choices": {"torch": {"display_name": "PyTorch"}}}})], snap(A100))
    merged, shadowed = merge_profiles(static, offers)
    assert [p["slug"] for p in merged] == ["cpu", "gpu"]
    assert merged[0] == static[0]
    assert shadowed == ["gpu"]
    assert list(merged[1]["profile_options"]) == ["gpu_pool", "gpus", "image"]


@pytest.mark.parametrize(
    "config, message",
    [
        ({}, "'slug' is required"),
        ({"slug": "a b"}, "'slug' is required"),
        ({"slug": "gpu", "colour": "red"}, "unknown key(s) 'colour'"),
        ({"slug": "gpu", "max_gpus": 0}, "'max_gpus' must be a positive integer"),
        ({"slug": "gpu", "max_gpus": "8"}, "'max_gpus' must be a positive integer"),
        ({"slug": "gpu", "max_gpus": True}, "'max_gpus' must be a positive integer"),
        ({"slug": "gpu", "pools": ["a100:*"]}, "'pools' must be a dict"),
        ({"slug": "gpu", "pools": {"only": ["x"]}}, "'pools' must be a dict"),
        ({"slug": "gpu", "pools": {"include": [1]}}, "'pools.include' must be a list"),
        ({"slug": "gpu", "profile_options": {"gpus": {"choices": {"1": {}}}}}, "'gpus' is reserved"),
        ({"slug": "gpu", "profile_options": {"image": {"display_name": "Image"}}}, "needs 'choices'"),
        ({"slug": "gpu", "kubespawner_override": "image=x"}, "'kubespawner_override' must be a dict"),
        ({"slug": "gpu", "default": "yes"}, "'default' must be True or False"),
        ("gpu", "must be a dict"),
        ({"slug": "gpu", "cuda": "twelve"}, "'cuda': the image's CUDA declaration"),
        ({"slug": "gpu", "profile_options": {"size": {"choices": {"s": {"cuda": "12.4"}}}}},
         "choice 's' of option 'size' has 'cuda' but sets no image"),
    ],
    ids=["no-slug", "bad-slug", "unknown-key", "zero-max", "str-max", "bool-max", "pools-list", "pools-bad-key", "include-not-str", "reserved-option", "option-without-choices", "override-not-dict", "default-not-bool", "not-a-dict", "bad-cuda", "cuda-on-non-image-choice"],
)
def test_spec_config_errors(config, message):
    with pytest.raises(ValueError) as e:
        GPUProfileSpec.from_config(config, where="gpu_profiles[0]")
    assert message in str(e.value)
    assert str(e.value).startswith("gpu_profiles[0]")


@pytest.mark.parametrize(
    "config, message",
    [
        ({}, "'match' is required"),
        ({"match": "a:*", "hide": "true"}, "'hide' must be True or False"),
        ({"match": "a:*", "name": "A"}, "unknown key(s) 'name'"),
        ({"match": "a:*", "display_name": 3}, "'display_name' must be a string"),
    ],
    ids=["no-match", "hide-not-bool", "unknown-key", "name-not-str"],
)
def test_rule_config_errors(config, message):
    with pytest.raises(ValueError) as e:
        PoolRule.from_config(config)
    assert message in str(e.value)


# --- the CUDA check's part of an offer

def test_offers_carry_each_images_fit_and_the_stock_form_line_says_it():
    from gpuspawner.cuda import decide
    from gpuspawner.spawn.cuda_fit import pool_fit
    from gpuspawner.spawn.profiles import describe_pool

    declared = spec(cuda="12.4", kubespawner_override={"image": "pt:cu124"})
    undeclared = GPUProfileSpec.from_config({"slug": "cpu-image"})
    offers = build_offers([declared, undeclared], snap(A100), fit=lambda img, p: pool_fit(img, p, "strict", decide))
    (a100,) = offers["gpu"].pools
    fit = a100.fit("")
    assert fit.level == "fail" and fit.image.name == "pt:cu124"  # 535/12.2 under strict
    assert a100.fit(None) is None
    assert "; CUDA: does not fit: The image is built with CUDA 12.4" in describe_pool(a100)
    assert offers["cpu-image"].pools[0].cuda == {}  # nothing declared: nothing checked


def test_preferred_pool_takes_the_best_fitting_pool_with_room():
    from gpuspawner.cuda import decide
    from gpuspawner.spawn.cuda_fit import pool_fit

    offers = build_offers([spec(cuda="12.4")], snap(A100, T4), fit=lambda img, p: pool_fit(img, p, "minor", decide))
    offer = offers["gpu"]
    assert offer.preferred_pool(1, "").pool.id == A100.id  # both warn: the admin's order
    strict = build_offers([spec(cuda="12.4")], snap(A100, T4), fit=lambda img, p: pool_fit(img, p, "strict", decide))
    # every pool refused: still the first with room, so the spawn is refused with the CUDA reason
    assert strict["gpu"].preferred_pool(1, "").pool.id == A100.id
    assert strict["gpu"].preferred_pool(3, "").pool.id == A100.id
    assert strict["gpu"].preferred_pool(4, "") is None  # no pool has room for 4


# ---------------------------------------------------------------------------
# counts on the nodes an image may land on (a pool mid driver upgrade)
#
# The pod of an image whose CUDA fails some nodes is kept off them (a driver-label or hostname
# NotIn``), so what is offered counts only the other nodes.



def counts(offer):
    return offer.max_gpus, offer.now, offer.cuda_free, offer.scale_up_minutes, offer.reason


@pytest.mark.parametrize(
    "the_pool, profile, image_key, expected",
    [
        # 4 free on the old node, 1 on the new: the 12.4 image may get 1
        (steered_pool(old(), new()), {}, "cu124", (1, 1, 1, None, None)),
        # the 11.4 image fits both nodes: counted as today
        (steered_pool(old(), new()), {}, "cu114", (4, 4, None, None, None)),
        # every fitting GPU in use: nothing now, and the reason says why (not "all in use")
        (steered_pool(old(), new(free=0)), {}, "cu124",
         (0, 0, 0, None, "no GPU is free on the nodes whose driver fits this image")),
        # a new node from a scale-up is not excluded, so it still counts
        (steered_pool(old(), new(), scale_up=ScaleUp(max_nodes=3, gpus_per_node=8, minutes=6)), {}, "cu124",
         (8, 1, 1, 6, None)),
        # the profile's max_gpus still caps
        (steered_pool(old(), new(free=3)), {"max_gpus": 2}, "cu124", (2, 2, 3, None, None)),
        # no failing node: the offer is the very same
        (steered_pool(new(free=5)), {}, "cu124", (5, 5, None, None, None)),
        # every node fails: refused elsewhere, counts untouched
        (steered_pool(old()), {}, "cu124", (4, 4, None, None, None)),
    ],
    ids=["narrowed", "image-fits-all", "fitting-full", "scale-up-counts", "cap", "no-failing-node", "all-fail"],
)
def test_pool_offer_counts_only_nodes_the_image_may_land_on(the_pool, profile, image_key, expected):
    offer = offers_for(the_pool, **profile)["gpu"].pools[0]
    narrowed = offer.for_image(image_key)
    assert counts(narrowed) == expected
    assert narrowed.narrowed is (expected[2] is not None)
    if not narrowed.narrowed:
        assert narrowed is offer
    assert narrowed.fit(image_key) is offer.fit(image_key)  # the CUDA verdicts stay
    assert narrowed.for_image(image_key) is narrowed  # counting twice changes nothing


def test_offer_without_free_counts_is_not_narrowed():
    offer = gpu_offers([STEERED_PROFILE], steered_pool(old(), new()), synced=False, admit_without_capacity=True)["gpu"]
    assert offer.for_image("cu124") is offer


def test_stock_profile_entry_counts_for_the_default_image():
    offer = offers_for(steered_pool(old(), new()))["gpu"]
    entry = gpu_profile_entry(offer)
    assert list(entry["profile_options"]["gpus"]["choices"]) == ["1"]
    line = entry["profile_options"]["gpu_pool"]["choices"][POOL_ID]["display_name"]
    assert "5 of 16 GPUs free (1 on nodes whose driver fits this image), up to 1 per server" in line
    assert "(1 on nodes" not in describe_pool(offer.pools[0])  # the raw offer is not narrowed


# --- the bound on GPUs per server, whatever a node reports ------------------------------

HUGE = pool("bogus", "NVIDIA-A100-SXM4-80GB", total=400_000, free=400_000,
            scale_up=ScaleUp(max_nodes=4, gpus_per_node=400_000, minutes=5))


@pytest.mark.parametrize(
    "max_gpus, count_limit, capacity_known, expected",
    [
        (None, 16, True, 16),
        (4, 16, True, 4),  # a profile's max_gpus can only lower it
        (64, 16, True, 16),
        (None, 16, False, 16),  # admitted without a free count: bounded the same
        (None, None, True, 400_000),  # no bound given: the pure layer leaves it to the caller
    ],
    ids=["hub-bound", "profile-lower", "profile-higher", "unchecked", "unbounded"],
)
def test_gpu_count_is_bounded_whatever_a_node_reports(max_gpus, count_limit, capacity_known, expected):
    offers = build_offers([spec(max_gpus=max_gpus)], snap(HUGE, synced=capacity_known),
                          admit_without_capacity=True, count_limit=count_limit)
    (offer,) = offers["gpu"].pools
    assert offer.max_gpus == expected and offer.now <= expected
    assert offers["gpu"].cap == (None if max_gpus is None and count_limit is None else min(
        c for c in (max_gpus, count_limit) if c is not None))
    if count_limit is not None:
        entry = gpu_profile_entry(offers["gpu"])
        assert list(entry["profile_options"]["gpus"]["choices"]) == [str(n) for n in range(1, expected + 1)]


def test_bounded_count_is_what_validation_admits():
    offers = build_offers([spec()], snap(HUGE), count_limit=16)
    profiles, _ = merge_profiles([], offers)
    assert validate_user_options({"profile": "gpu", "gpus": 16}, profiles, offers).gpus == 16
    with pytest.raises(OptionError, match="choose between 1 and 16 GPUs"):
        validate_user_options({"profile": "gpu", "gpus": 17}, profiles, offers)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "16"], ids=repr)
def test_count_limit_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="count_limit must be a positive integer"):
        build_offers([spec()], snap(A100), count_limit=bad)


# the AKS T4 pool whose nodes all carry sku=gpu:NoSchedule, on a hub whose servers may not tolerate it
REFUSED_T4 = pool_view("t4", "Tesla-T4", nodes=0, total=0, free=0, taints=(Taint("sku", "gpu", "NoSchedule"),))
NOT_SKU = ("nvidia.com/gpu", "amd.com/gpu")


@pytest.mark.parametrize("requests", [None, {"gpu": {None: (2000, 16 << 30, 0, 1)}}], ids=["no-request", "request"])
def test_a_pool_refused_by_a_taint_is_offered_with_the_taint_and_the_fix(requests):
    offer = build_offers([spec()], snap(REFUSED_T4, A100), tolerated_taint_keys=NOT_SKU, requests=requests)["gpu"]
    t4 = offer.pool(REFUSED_T4.id)
    assert (t4.max_gpus, t4.now) == (0, 0)
    assert t4.reason.startswith("its nodes carry the taint sku=gpu:NoSchedule, which this server does not tolerate")
    assert "gpu_tolerated_taint_keys (add 'sku')" in t4.reason
    assert t4.for_image(None).reason == t4.reason  # a recount for another image keeps it
    # the stock form's line and the REST refusal say the same, with a reason label of its own
    assert describe_pool(t4).endswith(f"unavailable: {t4.reason}")
    offers = {"gpu": offer}
    profiles, _ = merge_profiles([], offers)
    with pytest.raises(OptionError) as e:
        validate_user_options({"profile": "gpu", "gpu_pool": REFUSED_T4.id, "gpus": 1}, profiles, offers)
    assert t4.reason in str(e.value) and e.value.reason == "untolerated_taint"
    # with the key allowed the empty pool says only that it is empty
    plain = build_offers([spec()], snap(REFUSED_T4), requests=requests)["gpu"].pool(REFUSED_T4.id)
    assert plain.reason == "no GPUs are allocatable in this pool now" and plain.taint_refusal is None
