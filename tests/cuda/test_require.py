"""NVIDIA_REQUIRE_* evaluated as libnvidia-container (src/cli/dsl.c, configure.c) does."""

import pytest

from gpuspawner.cuda.require import (
    Properties,
    RequireError,
    brand_key,
    check,
    compare_version,
    evaluate,
    lnc_brand,
    requirements_from_env,
    unsatisfied_message,
    validate,
)

from tests.builders import require_samples

SAMPLES = require_samples()


def _props(driver, cuda, arch=None, brand=None):
    return Properties(
        cuda=cuda, driver=driver, arch=arch, brand=lnc_brand(brand) if brand else None
    )


# One letter per sample row (P: the container starts, F: refused), in file order:
#   0 10.0 (tesla 384/410)  1 9.0  2 10.0  3 10.1  4 10.2  5 11.0  6 11.2  7 11.3 (any brand >= 450)
#   8 11.4 (tesla 418/450)  9 11.4 (no terms)  10 11.7  11 11.8  12 12.0  13 12.1  14 12.2  15 12.4
#   16 12.5  17 12.6  18 12.8  19 12.9  20 13.0
NODES = {
    # data-center GPU on an old driver: NVML brand NVIDIA -> "Unknown", matched by brand=unknown,...
    "h100-nvidia-535": (_props("535.183.01", "12.2", "9.0", "nvidia"), "P" * 21),
    # GeForce lost its forward-compat terms from the 12.5 images on
    "geforce-535": (_props("535.183.01", "12.2", "8.9", "GeForce"), "P" * 16 + "F" * 5),
    # driver exactly at a lower bound (driver>=535) and the 12.2 image needs cuda 12.2
    "geforce-at-535": (_props("535", "12.1", "8.6", "geforce"), "P" * 14 + "F" + "P" + "F" * 5),
    # driver exactly at an upper bound (driver<536 is false at 536)
    "tesla-at-536": (_props("536.0", "12.2", "7.5", "tesla"), "P" * 15 + "F" * 6),
    # Tesla on R525, at the 12.0 driver
    "t4-tesla-525": (_props("525.60.13", "12.0", "7.5", "Tesla"), "P" * 16 + "F" * 5),
    # an old Tesla on R418 (CUDA 10.1)
    "p100-tesla-418": (_props("418.40.04", "10.1", "6.0", "tesla"), "P" * 9 + "F" * 12),
    # no GPU visible: arch and brand factors pass
    "no-device-470": (Properties(cuda="11.4", driver="470.82.01"), "P" * 19 + "F" * 2),
    # TITAN keeps its brand; NVML's TITAN_RTX brand is mapped to Unknown and matches brand=unknown
    "titan-550": (_props("550.54.15", "12.4", "8.6", "titan"), "P" * 16 + "F" * 5),
    "titanrtx-550": (_props("550.54.15", "12.4", "7.5", "titan rtx"), "P" * 21),
}


@pytest.mark.parametrize("node", sorted(NODES))
@pytest.mark.parametrize(
    "i", range(len(SAMPLES)), ids=lambda i: f"{i}-{SAMPLES[i]['cuda_version']}"
)
def test_real_image_requirements_on_kinds_of_nodes(node, i):
    props, expected = NODES[node]
    assert len(expected) == len(SAMPLES)
    assert evaluate(SAMPLES[i]["nvidia_require_cuda"], props) is (expected[i] == "P")


def test_every_real_sample_is_valid():
    for row in SAMPLES:
        validate(row["nvidia_require_cuda"])


@pytest.mark.parametrize(
    "expr, props, expected",
    [
        ("", Properties(cuda="12.2"), True),  # an empty predicate passes
        ("   ", Properties(cuda="12.2"), True),
        ("cuda>=12.2", Properties(cuda="12.2"), True),
        ("cuda>12.2", Properties(cuda="12.2"), False),
        ("cuda=12.2.0", Properties(cuda="12.2"), True),
        ("cuda!=12.2", Properties(cuda="12.2"), False),
        ("cuda!12.2", Properties(cuda="12.2"), False),  # strncmp: "!" matches "!="
        ("cuda<12.10", Properties(cuda="12.9"), True),  # numeric
        ("CUDA>=12.0", Properties(cuda="12.2"), True),  # names are case-insensitive
        ("cuda>=12..2", Properties(cuda="12.2"), True),  # runs of dots are skipped
        ("driver>=535,driver<536", Properties(driver="535.183.01"), True),
        ("driver>=535,driver<536", Properties(driver="536.0"), False),
        ("driver>=535.0.0", Properties(driver="535"), True),
        ("brand=GEFORCE", Properties(brand="GeForce"), True),
        ("brand!=tesla", Properties(brand="Tesla"), False),
        (
            "cuda>=13.0 brand=unknown,driver>=570,driver<571",
            Properties("12.8", "570.172.08", "8.0", "Unknown"),
            True,
        ),
        (
            "cuda>=13.0 brand=nvidia,driver>=570,driver<571",
            Properties("12.8", "570.172.08", "8.0", "Unknown"),
            False,
        ),
        ("cuda>=99.0", Properties(), True),  # unknown values pass
        ("arch>=8.0", Properties(cuda="12.2"), True),
        ("arch>=8.0", Properties(arch="7.5"), False),
        ("brand<geforce", Properties(), True),  # no device: not even looked at
        ("cuda>=12.0  ,, cuda>=12.1", Properties(cuda="12.2"), True),
        ("cuda>=12.0 foo=bar", Properties(cuda="12.2"), True),  # OR stops before the bad factor
        ("cuda>=13.0,foo=bar", Properties(cuda="12.2"), False),  # AND stops before it
        ("cuda>=99 ,", Properties(cuda="12.2"), False),  # an all-empty term keeps the last result
    ],
)
def test_semantics(expr, props, expected):
    assert evaluate(expr, props) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "cuda==12.0",
        "cuda=>12.0",
        "cuda>=",
        ">=12.0",
        "cuda",
        "cuda 12.0",  # "cuda" alone is a factor without an operator
        "foo>=1",
        "gpu>=1",
        "cuda>=12.x",
        "cuda>=v12",
        "cuda>=-1",
        "cuda>=12.0<13",
        "cuda>=.5",
        "cuda>=18446744073709551615",  # strtoumax overflow
        "brand>=tesla",
        "cuda>=13.0 brand=tesla,drivr>=535",  # reached because the first term is false
    ],
    ids=repr,
)
def test_hostile_expressions_are_invalid(expr):
    props = Properties(cuda="12.2", driver="535.183.01", arch="8.0", brand="Tesla")
    with pytest.raises(RequireError, match="invalid expression"):
        evaluate(expr, props)
    with pytest.raises(RequireError):
        validate(expr)


def test_a_long_false_factor_is_invalid_as_in_the_128_byte_buffer():
    value = "99" + ".0" * 59  # 120 characters, no number overflows
    assert len("cuda >= " + value) == 128
    with pytest.raises(RequireError):
        evaluate("cuda>=" + value, Properties(cuda="12.2"))
    # the same length is fine while the factor holds (nothing is formatted)
    assert evaluate("cuda>=1" + ".0" * 60, Properties(cuda="12.2")) is True
    # one character less is formatted into the buffer and reported as unsatisfied
    assert evaluate("cuda>=99" + ".0" * 58 + ".", Properties(cuda="12.2")) is False


def test_validate_looks_past_a_satisfied_term():
    assert evaluate("cuda>=12.0 foo=bar", Properties(cuda="12.2")) is True
    with pytest.raises(RequireError, match="foo=bar"):
        validate("cuda>=12.0 foo=bar")


def test_several_requirements_are_anded_and_checked_per_device():
    devices = [
        Properties("12.2", "535.183.01", "8.0", "Unknown"),
        Properties("12.2", "535.183.01", "7.0", "Tesla"),
    ]
    assert check(["cuda>=12.0", "arch>=7.0"], devices).satisfied
    out = check(["cuda>=12.0", "arch>=7.5"], devices)
    assert not out.satisfied and out.failed == "arch>=7.5"
    assert out.message == "unsatisfied condition: arch>=7.5"
    with pytest.raises(RequireError, match="too many"):
        check(["cuda>=1.0"] * 33, devices)


def test_unsatisfied_message_names_the_first_term_only():
    msg = unsatisfied_message(SAMPLES[-1]["nvidia_require_cuda"])
    assert msg == (
        "unsatisfied condition: cuda>=13.0, please update your driver to a newer version, "
        "or use an earlier cuda container"
    )
    assert unsatisfied_message("driver>=999 cuda>=1.0") == "unsatisfied condition: driver>=999"


@pytest.mark.parametrize(
    "name, lnc",
    [
        ("GeForce", "GeForce"),
        ("geforce", "GeForce"),
        ("TESLA", "Tesla"),
        ("Quadro", "Quadro"),
        ("nvs", "NVS"),
        ("grid", "GRID"),
        ("Titan", "TITAN"),
        ("NVIDIA", "Unknown"),
        ("NVIDIA RTX", "Unknown"),
        ("GeForce RTX", "Unknown"),
        ("Quadro_RTX", "Unknown"),
        ("vapps", "Unknown"),
        ("NVML_BRAND_NVIDIA_CLOUD_GAMING", "Unknown"),
        (5, "GeForce"),
        (14, "Unknown"),
        ("unknown", "Unknown"),
    ],
)
def test_brand_mapping_of_libnvidia_container(name, lnc):
    assert lnc_brand(name) == lnc


@pytest.mark.parametrize("name", ["foo", "", 99, None])
def test_unknown_brands_are_rejected(name):
    with pytest.raises(RequireError, match="brand"):
        brand_key(name)


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2"}, ["cuda>=12.2"]),
        (
            {"NVIDIA_REQUIRE_CUDA": "cuda>=12.2", "NVIDIA_REQUIRE_ARCH": "arch>=8.0"},
            ["cuda>=12.2", "arch>=8.0"],
        ),
        (
            {"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2"},
            ["cuda>=12.2"],
        ),
        ({"CUDA_VERSION": "11.4.3"}, ["cuda>=11.4"]),  # legacy image
        ({"CUDA_VERSION": "11.4.3", "NVIDIA_REQUIRE_CUDA": ""}, ["", "cuda>=11.4"]),
        ({"CUDA_VERSION": "12.2.2", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2"}, ["cuda>=12.2"]),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2", "NVIDIA_DISABLE_REQUIRE": "true"}, []),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2", "NVIDIA_DISABLE_REQUIRE": "1"}, []),
        (
            {"NVIDIA_REQUIRE_CUDA": "cuda>=12.2", "NVIDIA_DISABLE_REQUIRE": "yes"},
            ["cuda>=12.2"],
        ),  # not a Go bool
        ({}, []),
    ],
)
def test_requirements_from_image_env(env, expected):
    assert requirements_from_env(env) == expected


def test_compare_version_matches_dsl_compare_version():
    assert compare_version("535.183.01", ">=", "535") is True
    assert compare_version("535.183.01", "<", "536") is True
    assert compare_version("12.2", ">=", "12.8") is False
    assert compare_version("535.0", "=", "535") is True
    assert compare_version("535.0.1", "=", "535") is False
    with pytest.raises(RequireError):
        compare_version("12.2", ">=", "12.a")
