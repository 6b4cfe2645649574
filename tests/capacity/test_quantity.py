from fractions import Fraction

import pytest

from gpuspawner.capacity.quantity import QuantityError, parse_count, parse_quantity


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("8", 8),
        (8, 8),
        ("0", 0),
        ("500m", Fraction(1, 2)),
        ("100n", Fraction(1, 10**7)),
        ("2k", 2000),
        ("1M", 10**6),
        ("1E", 10**18),  # the Exa suffix, not an exponent
        ("16Gi", 16 * 2**30),
        ("1Ki", 1024),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("+2", 2),
        ("-1", -1),
        ("12e-1", Fraction(6, 5)),
    ],
    ids=lambda v: repr(v),
)
def test_parse_quantity(raw, expected):
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize("raw", ["", "abc", "8 GPUs", "1.2.3", "Gi", "1Kb", "1ee3", None, True, [], "1e99"])
def test_parse_quantity_rejects_garbage_with_a_clear_message(raw):
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(raw)


@pytest.mark.parametrize(
    "raw, round_up, expected",
    [
        ("8", False, 8),
        ("1500m", False, 1),  # allocatable: never promise a device that is not there
        ("1500m", True, 2),  # requests: never under-count what a pod holds
        ("-3", False, 0),
        ("1e1", True, 10),
    ],
)
def test_parse_count(raw, round_up, expected):
    assert parse_count(raw, round_up=round_up) == expected
