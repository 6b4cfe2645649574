"""A cold node's image pull in words (gpuspawner.spawn.pulltime)."""

from __future__ import annotations

import pytest

from gpuspawner.spawn.pulltime import pull_estimate, same_image, size_words


@pytest.mark.parametrize(
    "size, rate, words",
    [
        (15_032_385_536, 60.0, "15 GB image, about 4 min"),
        (15_032_385_536, 600.0, "15 GB image, under a minute"),
        (2_500_000_000, 10.0, "2.5 GB image, about 4 min"),
        (1_000_000_000, 1.0, "1 GB image, about 17 min"),
        (320_368, 60.0, "1 MB image, under a minute"),
        (None, 60.0, None),
        (0, 60.0, None),
        (15_000_000_000, None, None),
    ],
    ids=["cuda-image", "fast-network", "decimal-gb", "whole-gb", "tiny", "size-unknown", "size-zero", "rate-unknown"],
)
def test_pull_estimate(size, rate, words):
    assert pull_estimate(size, rate) == words


@pytest.mark.parametrize(
    "a, b, same",
    [("pt:1", "docker.io/library/pt:1", True), ("pt", "pt:latest", True), ("pt:1", "pt:2", False),
     ("pt:1", None, False), (None, None, False)],
    ids=["qualified", "default-tag", "other-tag", "one-unknown", "both-unknown"],
)
def test_same_image_however_spelled(a, b, same):
    assert same_image(a, b) is same


def test_size_words():
    assert [size_words(n) for n in (15_400_000_000, 9_950_000_000, 400_000_000)] == ["15 GB", "9.9 GB", "400 MB"]
