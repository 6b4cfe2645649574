import pytest

from gpuspawner.cuda.versions import (
    VersionError,
    compare,
    cuda_from_int,
    fmt,
    parse_arch,
    parse_cuda,
    parse_driver,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("535.183.01", (535, 183, 1)),
        ("535.183", (535, 183)),
        ("535", (535,)),
        ("570.26", (570, 26)),
        (" 550.54.15 ", (550, 54, 15)),
    ],
    ids=lambda v: repr(v),
)
def test_driver_versions_accepted(text, expected):
    assert parse_driver(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "R535",
        "v535",
        "535.",
        ".535",
        "535..1",
        "-535",
        "",
        "   ",
        "535.x",
        "535 183",
        "５３５",
        None,
        535,
        "1.2.3.4.5",
        "1" * 12,
    ],
    ids=repr,
)
def test_driver_versions_rejected_with_a_reason(text):
    with pytest.raises(VersionError, match="driver version"):
        parse_driver(text)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12.2", (12, 2)),
        ("12", (12, 0)),
        ("12.2.1", (12, 2)),
        (" 12.2", (12, 2)),
        ("12.10", (12, 10)),
    ],
    ids=repr,
)
def test_cuda_versions_accepted(text, expected):
    assert parse_cuda(text) == expected


@pytest.mark.parametrize("text", ["v12", "12.x", "-1", "", "12.2.1.0", "12,2", "cuda12"], ids=repr)
def test_cuda_versions_rejected(text):
    with pytest.raises(VersionError, match="CUDA version"):
        parse_cuda(text)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((535, 183, 1), (535,), 1),
        ((535, 0), (535,), 0),
        ((12, 10), (12, 9), 1),  # numeric, not lexical
        ((12, 2), (12, 8), -1),
        ((535, 183, 1), (536,), -1),
    ],
)
def test_compare_is_numeric_with_zero_padding(a, b, expected):
    assert compare(a, b) == expected


def test_arch_and_cuda_int():
    assert parse_arch("8.0") == (8, 0)
    assert parse_arch("9") == (9, 0)
    assert cuda_from_int(12020) == (12, 2)
    assert cuda_from_int(13000) == (13, 0)
    with pytest.raises(VersionError):
        cuda_from_int(0)


def test_fmt_writes_driver_and_cuda_versions_as_nvidia_does():
    assert fmt((535, 183, 1)) == "535.183.01"
    assert fmt((570, 26)) == "570.26"
    assert fmt((12, 2)) == "12.2"
