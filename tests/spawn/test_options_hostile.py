"""What a hostile tester sent as user options, refused with a 400 that says why.

Pure: ``gpuspawner.spawn.options`` against offers built from a fixed snapshot.
"""

from __future__ import annotations

import json

import pytest

from gpuspawner.capacity.model import CapacitySnapshot, PoolView, Taint, pool_id
from gpuspawner.spawn.options import MAX_OPTIONS_BYTES, OptionError, options_size, validate_user_options
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers, merge_profiles

GKE = "cloud.google.com/gke-nodepool"
A100 = PoolView(
    id=pool_id("a100", "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu"), resource="nvidia.com/gpu",
    product="NVIDIA-A100-SXM4-80GB", memory_mib=None, node_group_label=GKE, node_group="a100", nodes=2,
    total=16, free=8, max_free_per_node=4, driver_version=None, cuda_version=None, scale_up=None,
    defining_labels=((GKE, "a100"),), taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
)
STATIC = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "Small", "slug": "small",
     "profile_options": {"size": {"display_name": "Size", "choices": {"s": {"display_name": "S"}}}}},
]
SPECS = [GPUProfileSpec.from_config({"slug": "gpu"})]


def check(options):
    snapshot = CapacitySnapshot(pools=(A100,), synced=True, age_seconds=1.0, generation=1)
    offers = build_offers(SPECS, snapshot, ())
    profiles, _ = merge_profiles(STATIC, offers)
    for p in profiles:
        p.setdefault("profile_options", {})
    return validate_user_options(options, profiles, offers, trait_names=("image", "cpu_limit"))


def refusal(options) -> OptionError:
    with pytest.raises(OptionError) as e:
        check(options)
    assert e.value.status == 400
    return e.value


# --- counts: positive integers, or strings of ASCII decimal digits, and nothing else -------------

@pytest.mark.parametrize(
    "raw",
    ["", None, 1.0, 2.0, "2e0", "\t1", " 1", "1 ", "+1", "1.0", "٣", "²", True, False,
     json.loads("0.99999999999999999"), [1], {"n": 1}, "0x1", "1_000"],
    ids=["empty-string", "null", "float-one", "float-two", "exponent", "tab", "leading-space", "trailing-space",
         "plus", "decimal-string", "arabic-indic-digit", "superscript", "true", "false", "rounds-to-one",
         "list", "object", "hex", "underscore"],
)
def test_lenient_counts_are_refused(raw):
    e = refusal({"profile": "gpu", "gpus": raw})
    assert e.reason == "bad_count"
    assert str(e).startswith("`gpus` must be a whole number of GPUs written as digits, such as 1 or \"2\"")
    assert "leave `gpus` out to get 1" in str(e)


@pytest.mark.parametrize("raw, n", [(1, 1), (3, 3), ("2", 2), ("0003", 3)])
def test_counts_that_are_accepted(raw, n):
    assert check({"profile": "gpu", "gpus": raw}).gpus == n


def test_no_count_is_one_gpu():
    assert check({"profile": "gpu"}).gpus == 1


@pytest.mark.parametrize("raw", [0, -1, "0", "000"])
def test_counts_below_one_are_refused(raw):
    assert "`gpus` must be at least 1" in str(refusal({"profile": "gpu", "gpus": raw}))


def test_a_count_with_more_digits_than_any_gpu_count():
    e = refusal({"profile": "gpu", "gpus": "1" + "0" * 30})
    assert e.reason == "bad_count" and "is far more GPUs than any server can have" in str(e)


@pytest.mark.parametrize("raw", [None, "", 7, ["a100"]])
def test_a_pool_that_is_not_a_pool_id_is_refused(raw):
    e = refusal({"profile": "gpu", "gpu_pool": raw})
    assert str(e).startswith("`gpu_pool` must be a pool id string")
    assert "leave it out to get the pool with the most room" in str(e)


# --- unknown keys: refused on every profile, named in the message ---------------------------------

@pytest.mark.parametrize(
    "options, names",
    [
        ({"profile": "cpu", "colour": "blue"}, "`colour` for profile 'cpu'"),
        ({"profile": "cpu", "securityContext": {"privileged": True}}, "`securityContext` for profile 'cpu'"),
        ({"colour": "blue"}, "`colour` for profile 'cpu'"),  # the default profile
        ({"profile": "small", "size": "s", "huge": "x"}, "`huge` for profile 'small'; it accepts: profile, size"),
        ({"profile": "gpu", "gpus": 1, "node_selectorx": "a"}, "`node_selectorx` for profile 'gpu'"),
    ],
    ids=["static", "security-context", "default-profile", "static-with-options", "gpu"],
)
def test_unknown_keys_are_refused_naming_them(options, names):
    e = refusal(options)
    assert e.reason == "forbidden_option"
    assert str(e).startswith("unknown option(s) ") and names in str(e), str(e)


def test_many_unknown_keys_are_named_briefly():
    options = {"profile": "cpu", **{f"k{i:03d}": i for i in range(200)}, "z" * 500: 1}
    text = str(refusal(options))
    assert "`k000`, `k001`, `k002`, `k003`, `k004` and 196 more" in text
    assert len(text) < 300


# --- the size limit ----------------------------------------------------------------------------------

def test_user_options_have_a_size_limit_that_the_message_states():
    big = {"profile": "cpu", "note": "x" * (1024 * 1024)}
    e = refusal(big)
    assert str(e).startswith(f"user options may be at most {MAX_OPTIONS_BYTES:,} bytes as JSON; "
                             f"these are {options_size(big):,} bytes")
    assert len(str(e)) < 300


def test_the_size_limit_is_checked_before_anything_else():
    """A megabyte-long key is refused for its size, not echoed back in an 'unknown option' message."""
    e = refusal({"x" * (MAX_OPTIONS_BYTES + 1): 1})
    assert "bytes as JSON" in str(e) and "xxxxxxxxxx" not in str(e)


def test_options_just_under_the_limit_are_read():
    pad = MAX_OPTIONS_BYTES - options_size({"profile": "cpu", "colour": ""})
    e = refusal({"profile": "cpu", "colour": "x" * pad})
    assert str(e).startswith("unknown option(s) `colour`")
