"""Where user options arrive (a REST body in either of JupyterHub's shapes, a form post, a query
string), read by one set of rules: what cannot be read is refused by name, never dropped; and the
refusals' messages stay short and printable.  Pure: ``spawn.option_sources`` and ``spawn.options``."""

from __future__ import annotations

import pytest

from gpuspawner.capacity.model import CapacitySnapshot
from gpuspawner.spawn.options import OptionError, names, validate_user_options
from gpuspawner.spawn.option_sources import check_patch_body, options_from_form, server_body_options
from gpuspawner.spawn.profiles import GPUProfileSpec, build_offers, merge_profiles
from tests.builders import pool_view

A100 = "a100:nvidia-a100-sxm4-80gb:nvidia.com/gpu"

# --- REST bodies: JupyterHub 6 reads a body with `display_name` or `user_options` as its newer shape ------------


@pytest.mark.parametrize(
    "body, options",
    [
        ({"profile": "gpu", "gpu_pool": A100, "gpus": 2}, {"profile": "gpu", "gpu_pool": A100, "gpus": 2}),
        ({"user_options": {"profile": "gpu", "gpus": 2}}, {"profile": "gpu", "gpus": 2}),
        ({"display_name": "Train", "user_options": {"profile": "gpu", "gpus": 2}}, {"profile": "gpu", "gpus": 2}),
        ({"display_name": "Train"}, None),
        ({"user_options": None}, None),
        ({}, None),
        (None, None),
        ([1, 2], [1, 2]),  # not an object: left to JupyterHub's own 400
    ],
    ids=["legacy-shape", "newer-shape", "newer-shape-with-name", "name-only-reuses-saved",
         "null-options-reuse-saved", "empty", "no-body", "not-an-object"],
)
def test_both_rest_shapes_give_the_options_jupyterhub_will_use(body, options):
    assert server_body_options(body) == options


@pytest.mark.parametrize(
    "body, words",
    [
        ({"profile": "gpu", "gpus": 2, "display_name": "Train"},
         "the body has `display_name` at the top level, so JupyterHub reads its options from `user_options` "
         "alone and would ignore `profile`, `gpus`"),
        ({"profile": "gpu", "gpus": 2, "user_options": None},
         "the body has `user_options` at the top level, so JupyterHub reads its options from `user_options` "
         "alone and would ignore `profile`, `gpus`"),
        ({"user_options": {"profile": "gpu"}, "gpus": 2}, "would ignore `gpus`"),
        ({"display_name": "x", "user_options": {}, "a\x00b": 1, "c\nd": 2}, "would ignore `a\\x00b`, `c\\nd`"),
    ],
    ids=["options-beside-display-name", "options-beside-null-user-options", "count-beside-user-options",
         "names-escaped"],
)
def test_a_body_mixing_the_shapes_is_refused_naming_what_would_be_dropped(body, words):
    with pytest.raises(OptionError) as e:
        server_body_options(body)
    assert e.value.status == 400 and words in str(e.value)


@pytest.mark.parametrize(
    "body, words",
    [
        ({"foo": 1}, "a server can be changed in `name`, `display_name`, `user_options` only, not `foo`"),
        ({"user_options": [1]}, "`user_options` must be a JSON object"),
        ([1], "the body must be a JSON object"),
    ],
    ids=["unknown-key", "options-not-an-object", "not-an-object"],
)
def test_a_patch_body_jupyterhub_would_answer_with_a_500_is_refused(body, words):
    with pytest.raises(OptionError) as e:
        check_patch_body(body)
    assert words in str(e.value)


def test_a_patch_body_of_known_keys_passes():
    check_patch_body({"name": "n", "display_name": "N", "user_options": {"profile": "gpu"}})


# --- form posts: every profile's fields are posted; the chosen profile's and the REST names are read ----------

PAGE = {"cpu": (), "gpu": ("gpu_pool", "gpus", "image"), "small": ("size",)}


def form(**fields):
    return {k.replace("__", "-"): v if isinstance(v, list) else [v] for k, v in fields.items()}


@pytest.mark.parametrize(
    "data, options",
    [
        # the page's own post: the chosen profile's fields; the others' fields are the page's
        ({"profile": ["gpu"], "profile-option-gpu--gpu_pool": [A100], "profile-option-gpu--gpus": ["2"],
          "profile-option-gpu--image": ["cuda11"], "profile-option-small--size": ["s"]},
         {"profile": "gpu", "gpu_pool": A100, "gpus": "2", "image": "cuda11"}),
        ({"profile": ["cpu"], "profile-option-gpu--gpu_pool": [A100], "profile-option-gpu--gpus": ["1"],
          "profile-option-gpu--image--unlisted-choice": ["x"]}, {"profile": "cpu"}),
        # the REST names mean what they mean in REST
        ({"profile": ["gpu"], "gpu_pool": [A100], "gpus": ["2"]}, {"profile": "gpu", "gpu_pool": A100, "gpus": "2"}),
        # unknown and steering names are kept, for validation to refuse by name
        ({"profile": ["gpu"], "node_selector": ["x"], "colour": ["blue"]},
         {"profile": "gpu", "node_selector": "x", "colour": "blue"}),
        # no profile field: the default profile's fields are read
        ({"profile-option-gpu--gpus": ["2"]}, {"gpus": "2"}),
        ({"profile": ["cpu"], "_xsrf": ["token"]}, {"profile": "cpu"}),
    ],
    ids=["page-post-gpu", "page-post-cpu", "rest-names", "unknown-and-steering-kept", "default-profile", "xsrf"],
)
def test_a_form_post_is_read_like_rest(data, options):
    assert options_from_form(data, PAGE, "gpu") == options


@pytest.mark.parametrize(
    "data, words",
    [
        ({"profile": ["gpu"], "gpus": ["1", "2"]}, "give each option once in the form; given more than once: `gpus`"),
        ({"profile": ["gpu", "cpu"]}, "given more than once: `profile`"),
        ({"profile": ["gpu"], "gpus": ["2"], "profile-option-gpu--gpus": ["1"]},
         "option `gpus` is given twice in the form (as `gpus`, `profile-option-gpu--gpus`)"),
        ({"profile": ["cpu"], "profile-option-gpu--node_selector": ["x"]},
         "`profile-option-gpu--node_selector` is an option of profile 'gpu', but the form chooses profile 'cpu'"),
        ({"profile": ["cpu"], "profile-option-nope--gpus": ["2"]}, "is an option of profile 'nope'"),
        ({"profile": ["gpu"], "profile-option-gpu": ["2"]}, "`profile-option-gpu` is not an option name"),
        ({"profile": ["gpu"], "upload_file": [{"body": b"x"}]}, "`upload_file` is not (a file upload?)"),
    ],
    ids=["repeated", "two-profiles", "both-spellings", "other-profiles-unknown-field", "unknown-profiles-field",
         "not-a-form-name", "file-upload"],
)
def test_what_a_form_cannot_mean_is_refused_not_dropped(data, words):
    with pytest.raises(OptionError) as e:
        options_from_form(data, PAGE, "gpu")
    assert e.value.status == 400 and words in str(e.value)


def test_an_oversized_form_is_refused_when_read():
    with pytest.raises(OptionError) as e:
        options_from_form({"profile": ["cpu"], "note": ["x" * 10_000]}, PAGE, "cpu")
    assert "user options may be at most 8,192 bytes" in str(e.value)


# --- messages: short, printable ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "keys, shown",
    [
        (["a\x00b"], "`a\\x00b`"),
        (["line\nbreak"], "`line\\nbreak`"),
        (["\x1b[31mred"], "`\\x1b[31mred`"),
        (["\u202eevil"], "`\\u202eevil`"),
        ([f"k{i}" for i in range(9)], "`k0`, `k1`, `k2`, `k3`, `k4` and 4 more"),
        (["x" * 100], "`" + "x" * 37 + "...`"),
    ],
    ids=["nul", "newline", "terminal-escape", "bidi-override", "many", "long"],
)
def test_names_in_messages_are_escaped_and_bounded(keys, shown):
    assert names(keys) == shown


# seven models (as GPU Feature Discovery writes them): seven names users read
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4", "NVIDIA-L4", "NVIDIA-A10",
            "Tesla-V100-SXM2-16GB", "NVIDIA-A100-SXM4-40GB")


def _many_pools(n):
    pools = tuple(pool_view(f"g{i:03d}", PRODUCTS[i % len(PRODUCTS)], free=1 + i % 8, per_node=1 + i % 8)
                  for i in range(n))
    offers = build_offers([GPUProfileSpec.from_config({"slug": "gpu"})],
                          CapacitySnapshot(pools=pools, synced=True, age_seconds=1.0, generation=1), ())
    profiles, _ = merge_profiles([], offers)
    return profiles, offers


@pytest.mark.parametrize(
    "options",
    [{"profile": "gpu", "gpu_pool": "no-such:pool:nvidia.com/gpu"}, {"profile": "gpu", "gpus": 9},
     {"profile": "gpu", "gpu_pool": 7}],
    ids=["unknown-pool", "too-many", "pool-not-a-string"],
)
def test_a_refusal_names_a_few_pools_by_the_names_users_read(options):
    profiles, offers = _many_pools(414)
    with pytest.raises(OptionError) as e:
        validate_user_options(options, profiles, offers)
    message = str(e.value)
    # three names (one per model, however many node groups hold it), the most room first, the rest counted
    assert message.count("(up to ") == 3 and "and 4 more (the spawn page and GET /hub/api/gpus list them)" in message
    assert message.count("(up to 8)") == 3
    assert "pools that would work for this image: NVIDIA " in message
    # no pool id, rule name or empty brackets: only what the user sent is quoted back
    assert "g0" not in message and "()" not in message and "[" not in message
    assert len(message) < 400
