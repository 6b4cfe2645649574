"""Validation verdicts for crafted REST bodies and form posts (gpuspawner.spawn.options): pure."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from gpuspawner.capacity.model import CapacitySnapshot, Taint
from gpuspawner.spawn.options import TOO_MANY_GPUS, OptionError, parse_gpu_count, validate_user_options
from gpuspawner.spawn.profiles import GPUProfileSpec, PoolRule, build_offers, merge_profiles
from tests.builders import pool_view, steered_pool
from tests.builders import STEERED_POOL_ID as POOL_ID
from tests.builders import new_driver_node as new
from tests.builders import old_driver_node as old
from tests.builders import steered_offers as offers_for

GKE = "cloud.google.com/gke-nodepool"


# two-node pools with the usual GPU taint; no driver known
pool = partial(pool_view, nodes=2, taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),))


A100 = pool("a100", "NVIDIA-A100-SXM4-80GB", total=16, free=5, per_node=3)
T4 = pool("t4", "Tesla-T4", total=4, free=2, per_node=1)
FULL = pool("v100", "Tesla-V100", total=8, free=0, per_node=0)
H100 = pool("h100", "NVIDIA-H100-80GB-HBM3", total=8, free=8, per_node=8)
HIDDEN = pool("secret", "NVIDIA-B200", total=8, free=8, per_node=8)

IMAGE_OPTION = {
    "display_name": "Image",
    "choices": {
        "torch": {"display_name": "PyTorch", "kubespawner_override": {"image": "pytorch"}},
        "tf": {"display_name": "TensorFlow", "kubespawner_override": {"image": "tensorflow"}},
    },
    "unlisted_choice": {
        "enabled": True,
        "validation_regex": r"^quay\.io/jupyter/.+$",
        "validation_message": "use an image from quay.io/jupyter",
        "kubespawner_override": {"image": "{value}"},
    },
}
SPECS = [
    GPUProfileSpec.from_config({"slug": "gpu", "pools": {"exclude": ["h100:*"]}, "profile_options": {"image": IMAGE_OPTION}}),
    GPUProfileSpec.from_config({"slug": "big", "pools": {"include": ["h100:*"]}, "max_gpus": 4}),
]
STATIC = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "CPU with image", "slug": "cpu-image", "profile_options": {"image": IMAGE_OPTION}},
]
TRAITS = ("image", "node_selector", "tolerations", "cpu_limit", "extra_resource_limits", "start_timeout")


def setup(snapshot=None, admit=False):
    snapshot = snapshot or CapacitySnapshot(pools=(A100, T4, FULL, H100, HIDDEN), synced=True, age_seconds=1.0, generation=3)
    offers = build_offers(SPECS, snapshot, (PoolRule("secret:*", hide=True),), admit_without_capacity=admit)
    profiles, _ = merge_profiles(STATIC, offers)
    return profiles, offers


def verdict(options, **kw):
    profiles, offers = setup(**kw)
    try:
        sel = validate_user_options(options, profiles, offers, trait_names=TRAITS)
    except OptionError as e:
        return e.status, str(e)
    return "ok", (sel.profile, sel.pool.pool.id if sel.pool else None, sel.gpus)


OK_CASES = [
    ({}, ("cpu", None, None)),
    ({"profile": "cpu"}, ("cpu", None, None)),
    ({"profile": "gpu"}, ("gpu", A100.id, 1)),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 2}, ("gpu", A100.id, 2)),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": "2"}, ("gpu", A100.id, 2)),
    ({"profile": "gpu", "gpu_pool": T4.id, "gpus": 1}, ("gpu", T4.id, 1)),
    ({"profile": "gpu", "gpus": 3}, ("gpu", A100.id, 3)),
    ({"profile": "big", "gpus": 4}, ("big", H100.id, 4)),
    # the form's posts: strings, empty free-text field
    ({"profile": "gpu", "gpu_pool": T4.id, "gpus": "1", "image": "tf", "image--unlisted-choice": ""}, ("gpu", T4.id, 1)),
    ({"profile": "gpu", "image": "unlisted-choice", "image--unlisted-choice": "quay.io/jupyter/scipy-notebook"}, ("gpu", A100.id, 1)),
    ({"profile": "cpu-image", "image": "torch"}, ("cpu-image", None, None)),
]


@pytest.mark.parametrize(
    "options, expected",
    OK_CASES,
    ids=[
        "empty-default-profile",
        "static",
        "gpu-defaults",
        "int",
        "numeric-string",
        "other-pool",
        "no-pool-picks-one-that-fits",
        "second-gpu-profile",
        "form-post",
        "unlisted-image",
        "static-option-named-like-trait",
    ],
)
def test_accepted(options, expected):
    assert verdict(options) == ("ok", expected)


BAD_CASES = [
    ({"profile": "gpu", "gpus": "2.5"}, "must be a whole number"),
    ({"profile": "gpu", "gpus": 2.5}, "must be a whole number"),
    ({"profile": "gpu", "gpus": 0}, "must be at least 1"),
    ({"profile": "gpu", "gpus": -1}, "must be at least 1"),
    ({"profile": "gpu", "gpus": "-1"}, "must be a whole number"),
    ({"profile": "gpu", "gpus": True}, "must be a whole number"),
    ({"profile": "gpu", "gpus": "1e3"}, "must be a whole number"),
    ({"profile": "gpu", "gpus": float("nan")}, "must be a whole number"),
    ({"profile": "gpu", "gpus": 10**30}, "choose between 1 and 3 GPUs in NVIDIA A100 80GB (asked for"),
    ({"profile": "gpu", "gpus": "9" * 40}, "is far more GPUs than any server can have"),
    ({"profile": "gpu", "gpus": [2]}, "must be a whole number"),
    ({"profile": "gpu", "gpus": {"n": 2}}, "must be a whole number"),
    ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 4},
     "choose between 1 and 3 GPUs in NVIDIA A100 80GB (asked for 4); pools that would work for this image: "
     "NVIDIA T4 (up to 1)"),
    ({"profile": "gpu", "gpu_pool": T4.id, "gpus": 2}, "choose between 1 and 1 GPUs in NVIDIA T4 (asked for 2)"),
    ({"profile": "big", "gpus": 5},
     "choose between 1 and 4 GPUs in NVIDIA H100 80GB (asked for 5); no other pool of profile 'big' can give GPUs"),
    ({"profile": "gpu", "gpu_pool": "nope:x:nvidia.com/gpu"},
     "unknown pool 'nope:x:nvidia.com/gpu'; pools that would work for this image: NVIDIA A100 80GB (up to 3), "
     "NVIDIA T4 (up to 1)"),
    ({"profile": "gpu", "gpu_pool": HIDDEN.id}, "unknown pool"),
    ({"profile": "gpu", "gpu_pool": H100.id}, "is not offered by profile 'gpu' (it is in profile 'big')"),
    ({"profile": "gpu", "gpu_pool": FULL.id}, "cannot give any GPU now: all 8 GPUs are in use"),
    ({"profile": "gpu", "gpu_pool": [A100.id]}, "`gpu_pool` must be a pool id string"),
    ({"profile": "gpu", "node_selector": {"a": "b"}}, "user options may not set `node_selector`; choose a profile"),
    ({"profile": "gpu", "image": "evil/image"}, "unknown choice 'evil/image' for option `image`"),
    ({"profile": "gpu", "tolerations": [{"operator": "Exists"}]}, "may not set `tolerations`"),
    ({"profile": "gpu", "extra_resource_limits": {"nvidia.com/gpu": "8"}}, "may not set `extra_resource_limits`"),
    ({"profile": "gpu", "resources": {"limits": {}}}, "may not set `resources`"),
    ({"profile": "cpu", "image": "evil/image"}, "may not set `image`"),
    ({"profile": "cpu", "cpu_limit": 64}, "may not set `cpu_limit`"),
    ({"node_selector": {"a": "b"}}, "may not set `node_selector`"),
    ({"profile": "gpu", "colour": "blue"}, "unknown option(s) `colour` for profile 'gpu'; it accepts: gpu_pool, gpus, image"),
    ({"profile": "cpu", "gpus": 1}, "profile 'cpu' has no GPUs, so `gpus` cannot be set; for GPUs choose a GPU profile: gpu, big"),
    ({"profile": "cpu", "gpu_pool": A100.id}, "profile 'cpu' has no GPUs"),
    ({"profile": "nope"}, "unknown profile 'nope'; profiles you can use: cpu, cpu-image, gpu, big"),
    ({"profile": ["gpu"]}, "`profile` must be a profile slug string"),
    ({"profile": "gpu", "image": "unlisted-choice", "image--unlisted-choice": "docker.io/evil"}, "use an image from quay.io/jupyter"),
    ({"profile": "gpu", "image": "unlisted-choice"}, "type a value for option `image`"),
    ({"profile": "cpu-image", "image": "pytorch"}, "unknown choice 'pytorch' for option `image` of profile 'cpu-image'"),
    (["profile", "gpu"], "must be a JSON object"),
]


@pytest.mark.parametrize(
    "options, message",
    BAD_CASES,
    ids=[
        "string-fraction",
        "float-fraction",
        "zero",
        "negative",
        "negative-string",
        "bool",
        "exponent-string",
        "nan",
        "huge-int",
        "huge-string",
        "list",
        "object",
        "more-than-per-node",
        "more-than-per-node-t4",
        "more-than-max-gpus",
        "unknown-pool",
        "hidden-pool",
        "pool-of-another-profile",
        "full-pool",
        "pool-not-string",
        "node-selector",
        "image-not-a-choice",
        "tolerations",
        "resource-limits",
        "resources",
        "static-image",
        "static-cpu-limit",
        "default-profile-node-selector",
        "unknown-key-gpu-profile",
        "gpus-on-static-profile",
        "pool-on-static-profile",
        "unknown-profile",
        "profile-not-string",
        "unlisted-fails-regex",
        "unlisted-without-value",
        "static-unknown-choice",
        "not-an-object",
    ],
)
def test_refused_with_400(options, message):
    status, text = verdict(options)
    assert status == 400
    assert message in text


def reason_of(options, **kw):
    profiles, offers = setup(**kw)
    with pytest.raises(OptionError) as e:
        validate_user_options(options, profiles, offers, trait_names=TRAITS)
    return e.value.reason


@pytest.mark.parametrize(
    "options, reason",
    [
        ({"profile": "gpu", "gpus": "2.5"}, "bad_count"),
        ({"profile": "gpu", "gpus": 0}, "bad_count"),
        ({"profile": "gpu", "gpu_pool": A100.id, "gpus": 4}, "too_many_gpus"),
        ({"profile": "big", "gpus": 5}, "too_many_gpus"),
        ({"profile": "gpu", "gpu_pool": FULL.id}, "too_many_gpus"),
        ({"profile": "gpu", "gpu_pool": "nope:x:nvidia.com/gpu"}, "unknown_pool"),
        ({"profile": "gpu", "gpu_pool": HIDDEN.id}, "unknown_pool"),
        ({"profile": "gpu", "gpu_pool": [A100.id]}, "unknown_pool"),
        ({"profile": "gpu", "gpu_pool": H100.id}, "not_allowed"),
        ({"profile": "nope"}, "not_allowed"),
        ({"profile": "gpu", "node_selector": {"a": "b"}}, "forbidden_option"),
        ({"profile": "gpu", "colour": "blue"}, "forbidden_option"),
        ({"profile": "cpu", "gpus": 1}, "forbidden_option"),
        ({"profile": "gpu", "image": "evil/image"}, "forbidden_option"),
        ({"profile": "gpu", "image": "unlisted-choice"}, "forbidden_option"),
        ({"profile": "gpu", "image": "unlisted-choice", "image--unlisted-choice": "docker.io/evil"}, "forbidden_option"),
        (["profile", "gpu"], "other"),
        ({"profile": ["gpu"]}, "other"),
        ({1: "x"}, "other"),
    ],
    ids=["fraction", "zero", "more-than-per-node", "more-than-max-gpus", "full-pool", "unknown-pool",
         "hidden-pool", "pool-not-string", "pool-of-another-profile", "unknown-profile", "trait", "unknown-key",
         "gpus-on-static-profile", "not-a-choice", "unlisted-without-value", "unlisted-fails-regex",
         "not-an-object", "profile-not-string", "key-not-string"],
)
def test_refusals_say_why_in_one_word(options, reason):
    """The ``reason`` the spawner counts refused spawns by (docs/metrics.md)."""
    assert reason_of(options) == reason


def test_every_refusal_reason_is_a_metrics_label():
    from gpuspawner.hub.gpu_metrics import REFUSAL_REASONS

    unknown = CapacitySnapshot(pools=(), synced=False, age_seconds=0.0, generation=0, healthy=False, error="x")
    reasons = {reason_of(options) for options, _ in BAD_CASES}
    reasons.add(reason_of({"profile": "gpu"}, snapshot=unknown))
    assert reason_of({"profile": "gpu"}, snapshot=unknown) == "capacity_unknown"
    assert reasons <= REFUSAL_REASONS, reasons - REFUSAL_REASONS


def test_capacity_unknown_refuses_gpu_spawn_with_503_but_not_cpu():
    unknown = CapacitySnapshot(pools=(), synced=False, age_seconds=0.0, generation=0, healthy=False,
                               error="forbidden: cannot list nodes at the cluster scope")
    status, text = verdict({"profile": "gpu", "gpus": 1}, snapshot=unknown)
    assert status == 503
    assert "forbidden" in text and "choose a profile without GPUs" in text
    assert verdict({"profile": "cpu"}, snapshot=unknown) == ("ok", ("cpu", None, None))


def test_capacity_unknown_admitted_when_admin_opts_in():
    stale = CapacitySnapshot(pools=(A100,), synced=True, age_seconds=120.0, generation=3, healthy=False)
    profiles, offers = setup(snapshot=stale, admit=True)
    sel = validate_user_options({"profile": "gpu", "gpus": 2}, profiles, offers)
    assert (sel.pool.pool.id, sel.gpus, sel.pool.checked) == (A100.id, 2, False)


def test_all_pools_full():
    full = CapacitySnapshot(pools=(FULL,), synced=True, age_seconds=1.0, generation=1)
    status, text = verdict({"profile": "gpu"}, snapshot=full)
    assert status == 400
    assert "no GPUs can be had in profile 'gpu' right now" in text


@pytest.mark.parametrize(
    "value, expected",
    [(1, 1), ("7", 7), ("0042", 42)],
    ids=["int", "str", "leading-zeros"],
)
def test_parse_gpu_count(value, expected):
    assert parse_gpu_count(value) == expected


def test_messages_are_short_for_huge_values():
    status, text = verdict({"profile": "gpu", "gpus": "x" * 10_000})
    assert status == 400 and len(text) < 300


@pytest.mark.parametrize("profile", ["gpu", "cpu"])
def test_keys_the_admin_maps_with_apply_user_options_are_allowed(profile):
    profiles, offers = setup()
    options = {"profile": profile, "image_input": "x", "mem_limit": "4G"}
    sel = validate_user_options(options, profiles, offers, trait_names=TRAITS + ("mem_limit",), admin_keys=("image_input", "mem_limit"))
    assert sel.profile == profile
    with pytest.raises(OptionError, match="may not set `mem_limit`"):
        validate_user_options(options, profiles, offers, trait_names=TRAITS + ("mem_limit",))


# --- the CUDA check

def _cuda_offers(policy="minor"):
    from gpuspawner.cuda import decide
    from gpuspawner.spawn.cuda_fit import pool_fit

    old = replace(T4, driver_version="470.82.01", cuda_version="11.4")
    new = replace(A100, driver_version="550.54.15", cuda_version="12.4")
    specs = [GPUProfileSpec.from_config({
        "slug": "gpu", "cuda": "12.4", "kubespawner_override": {"image": "pt:cu124"},
        "profile_options": {"image": {"choices": {
            "cu124": {"display_name": "CUDA 12.4"},
            "cu118": {"kubespawner_override": {"image": "pt:cu118"}, "cuda": "11.8"},
        }}},
    })]
    snapshot = CapacitySnapshot(pools=(old, new), synced=True, age_seconds=0.1, generation=1)
    offers = build_offers(specs, snapshot, fit=lambda img, p: pool_fit(img, p, policy, decide))
    profiles, _ = merge_profiles([], offers)
    return old, new, profiles, offers


@pytest.mark.parametrize(
    "options, pool, image_key, level",
    [
        ({"profile": "gpu"}, "new", "cu124", "ok"),  # not the first pool (t4 sorts first): its driver is too old
        ({"profile": "gpu", "image": "cu118"}, "new", "cu118", "ok"),  # fits fully beats fits with a caveat
        ({"profile": "gpu", "image": "cu118", "gpu_pool": "old"}, "old", "cu118", "warn"),
        ({"profile": "gpu", "gpu_pool": "new"}, "new", "cu124", "ok"),
    ],
    ids=["default-pool-skips-refused", "default-pool-best-fit", "older-image-on-old-driver", "explicit-pool"],
)
def test_selection_carries_the_fit(options, pool, image_key, level):
    old, new, profiles, offers = _cuda_offers()
    ids = {"old": old.id, "new": new.id}
    if "gpu_pool" in options:
        options = {**options, "gpu_pool": ids[options["gpu_pool"]]}
    sel = validate_user_options(options, profiles, offers)
    assert sel.pool.pool.id == ids[pool] and sel.image_key == image_key and sel.cuda.level == level


def test_pool_whose_drivers_do_not_fit_is_refused_with_the_reason():
    from gpuspawner.spawn.options import CudaRefusal

    old, new, profiles, offers = _cuda_offers()
    with pytest.raises(CudaRefusal) as e:
        validate_user_options({"profile": "gpu", "gpu_pool": old.id}, profiles, offers)
    assert e.value.status == 400 and e.value.reason == "cuda_mismatch"
    assert str(e.value).startswith("The image pt:cu124 (CUDA 12.4) does not fit any node of GPU pool")
    assert str(e.value).endswith("GPU pools whose drivers fit this image: NVIDIA A100 80GB (up to 3).")


# --- counts on the nodes an image may land on (a pool mid driver upgrade)
#
# validation admits only what a node the chosen image may land on holds



def validate(options, the_pool):
    offers = offers_for(the_pool)
    profiles, _ = merge_profiles([], offers)
    return validate_user_options({"profile": "gpu", **options}, profiles, offers)


@pytest.mark.parametrize(
    "options, gpus",
    [
        ({"gpus": "1"}, 1),
        ({"gpus": "4", "image": "cu114"}, 4),  # the chosen image fits the old node too
        ({"gpus": "1", "gpu_pool": POOL_ID}, 1),
    ],
    ids=["fits-on-new", "other-image-fits-old", "pool-named"],
)
def test_validation_admits_what_a_fitting_node_holds(options, gpus):
    sel = validate(options, steered_pool(old(), new()))
    assert sel.gpus == gpus and sel.pool.pool.id == POOL_ID


@pytest.mark.parametrize(
    "options, the_pool, message",
    [
        ({"gpus": "4"}, steered_pool(old(), new()),
         "choose between 1 and 1 GPUs in NVIDIA A100 80GB on the nodes whose driver fits this image (asked for 4)"),
        ({"gpus": "2", "image": "cu124", "gpu_pool": POOL_ID}, steered_pool(old(), new()), "on the nodes whose driver fits"),
        ({"gpus": "1", "gpu_pool": POOL_ID}, steered_pool(old(), new(free=0)),
         "cannot give any GPU now: no GPU is free on the nodes whose driver fits this image"),
    ],
    ids=["default-image", "chosen-image", "fitting-nodes-full"],
)
def test_validation_refuses_counts_only_an_excluded_node_holds(options, the_pool, message):
    with pytest.raises(OptionError) as e:
        validate(options, the_pool)
    assert message in str(e.value)
    assert e.value.reason == TOO_MANY_GPUS
