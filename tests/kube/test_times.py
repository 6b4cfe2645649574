"""Times as the API writes them, durations as admins type them (gpuspawner.kube.times)."""

from __future__ import annotations

import pytest

from gpuspawner.kube.times import parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [("300", 300), ("300s", 300), ("5m", 300), ("1h30m", 5400), ("0", 0), ("2.5m", 150)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-5m", "m", "5d", "h"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
